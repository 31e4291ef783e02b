// Paged causal attention for the fast CPU mode: RoPE, the K/V write into the pages and the
// attention itself in one call per layer.
//
// Batch invariance: every query is processed on its own against key tiles of 16 positions
// that start at absolute position 0 (tile i = positions 16i..16i+15, masked past the query's
// own position), with the same float operations in the same order whatever else is in the
// step: scores s_j = sum_d q[d]*k_j[d] (sequential fma over d), an online softmax per tile
// (max, exp, a fixed-order lane sum) and o = o*alpha + sum_j p_j*v_j (sequential over j). So a
// token's output is the same in a decode batch of 1 or 32 and in any prefill chunking. Queries
// of one sequence are grouped only to share the loaded tiles.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "common.h"

namespace switchyard {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kTokensPerItem = 16;  // queries of one sequence that share the loaded tiles

struct Geometry {
  int64_t heads, kv_heads, dim, page_size, row;  // row: floats per token in qkv
};

struct Item {
  int64_t first, count, kv_head, cost;
};

// Cache element access for float32 or bfloat16 pages.
template <typename T> inline float load(const T* p);
template <> inline float load<float>(const float* p) { return *p; }
template <> inline float load<uint16_t>(const uint16_t* p) { return bf16_to_f32(*p); }
template <typename T> inline void store(T* p, float v);
template <> inline void store<float>(float* p, float v) { *p = v; }
template <> inline void store<uint16_t>(uint16_t* p, float v) { *p = f32_to_bf16(v); }

void rope(const float* x, const float* cos, const float* sin, int64_t dim, float* out) {
  const int64_t half = dim / 2;
  for (int64_t i = 0; i < half; ++i) out[i] = x[i] * cos[i] + (-x[i + half]) * sin[i];
  for (int64_t i = half; i < dim; ++i) out[i] = x[i] * cos[i] + x[i - half] * sin[i];
}

// Online-softmax state of one query: running max, denominator and unnormalised output.
struct QueryState {
  float m, l;
  alignas(64) float o[kMaxHeadDim];
};

// One tile for one query, portable. kt: [dim][16] keys transposed, vt: [16][dim] values.
void tile_portable(const float* q, const float* kt, const float* vt, int valid, float scale,
                   int64_t dim, QueryState& st) {
  float s[kLanes];
  for (int j = 0; j < kLanes; ++j) s[j] = 0.0f;
  for (int64_t d = 0; d < dim; ++d)
    for (int j = 0; j < kLanes; ++j) s[j] = std::fma(q[d], kt[d * kLanes + j], s[j]);
  float tmax = -INFINITY;
  for (int j = 0; j < valid; ++j) {
    s[j] = s[j] * scale;
    tmax = std::fmax(tmax, s[j]);
  }
  const float m_new = std::fmax(st.m, tmax);
  const float alpha = st.m == -INFINITY ? 0.0f : exp_neg(st.m - m_new);
  float p[kLanes];
  for (int j = 0; j < kLanes; ++j) p[j] = j < valid ? exp_neg(s[j] - m_new) : 0.0f;
  st.l = st.l * alpha + tree_sum16(p);
  st.m = m_new;
  for (int64_t d = 0; d < dim; ++d) {
    float acc = st.o[d] * alpha;
    for (int j = 0; j < valid; ++j) acc = std::fma(p[j], vt[j * dim + d], acc);
    st.o[d] = acc;
  }
}


// The same tile for N queries at once with AVX-512: each query's operations are exactly the
// portable ones (16 keys per vector); the N queries only interleave their independent
// dependency chains.
template <int N>
__attribute__((target("avx512f")))
void tile_avx512(const float* const* q, const float* kt, const float* vt, const int* valid,
                 float scale, int64_t dim, QueryState* const* st) {
  __m512 s[N];
  for (int n = 0; n < N; ++n) s[n] = _mm512_setzero_ps();
  for (int64_t d = 0; d < dim; ++d) {
    const __m512 k = _mm512_loadu_ps(kt + d * kLanes);
    for (int n = 0; n < N; ++n) s[n] = _mm512_fmadd_ps(_mm512_set1_ps(q[n][d]), k, s[n]);
  }
  alignas(64) float p[N][kLanes];
  float alpha[N];
  for (int n = 0; n < N; ++n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << valid[n]) - 1u);
    const __m512 sc = _mm512_mul_ps(s[n], _mm512_set1_ps(scale));
    const float tmax = _mm512_mask_reduce_max_ps(mask, sc);
    const float m_new = std::fmax(st[n]->m, tmax);
    alpha[n] = st[n]->m == -INFINITY ? 0.0f : exp_neg(st[n]->m - m_new);
    const __m512 pn =
        _mm512_maskz_mov_ps(mask, exp_neg_avx512(_mm512_sub_ps(sc, _mm512_set1_ps(m_new))));
    _mm512_store_ps(p[n], pn);
    st[n]->l = st[n]->l * alpha[n] + tree_sum16(p[n]);
    st[n]->m = m_new;
  }
  for (int64_t d0 = 0; d0 < dim; d0 += kLanes) {
    __m512 acc[N];
    for (int n = 0; n < N; ++n)
      acc[n] = _mm512_mul_ps(_mm512_loadu_ps(st[n]->o + d0), _mm512_set1_ps(alpha[n]));
    for (int j = 0; j < kLanes; ++j) {
      const __m512 v = _mm512_loadu_ps(vt + j * dim + d0);
      for (int n = 0; n < N; ++n)
        if (j < valid[n]) acc[n] = _mm512_fmadd_ps(_mm512_set1_ps(p[n][j]), v, acc[n]);
    }
    for (int n = 0; n < N; ++n) _mm512_storeu_ps(st[n]->o + d0, acc[n]);
  }
}

constexpr int kQueriesPerPass = 6;

void tile_avx512_any(const float* const* q, const float* kt, const float* vt, const int* valid,
                     float scale, int64_t dim, QueryState* const* st, int count) {
  switch (count) {
    case 6: return tile_avx512<6>(q, kt, vt, valid, scale, dim, st);
    case 5: return tile_avx512<5>(q, kt, vt, valid, scale, dim, st);
    case 4: return tile_avx512<4>(q, kt, vt, valid, scale, dim, st);
    case 3: return tile_avx512<3>(q, kt, vt, valid, scale, dim, st);
    case 2: return tile_avx512<2>(q, kt, vt, valid, scale, dim, st);
    default: return tile_avx512<1>(q, kt, vt, valid, scale, dim, st);
  }
}

// The same tile for N queries with AVX2: 16 keys as two vectors of 8 (keys 0-7, 8-15), each
// query's operations again exactly the portable ones.
template <int N>
__attribute__((target("avx2,fma")))
void tile_avx2(const float* const* q, const float* kt, const float* vt, const int* valid,
               float scale, int64_t dim, QueryState* const* st) {
  __m256 s[2 * N];
  for (int n = 0; n < 2 * N; ++n) s[n] = _mm256_setzero_ps();
  for (int64_t d = 0; d < dim; ++d) {
    const __m256 k0 = _mm256_loadu_ps(kt + d * kLanes);
    const __m256 k1 = _mm256_loadu_ps(kt + d * kLanes + 8);
    for (int n = 0; n < N; ++n) {
      const __m256 qd = _mm256_set1_ps(q[n][d]);
      s[2 * n] = _mm256_fmadd_ps(qd, k0, s[2 * n]);
      s[2 * n + 1] = _mm256_fmadd_ps(qd, k1, s[2 * n + 1]);
    }
  }
  const __m256i lane0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lane8 = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
  alignas(32) float p[N][kLanes];
  float alpha[N];
  for (int n = 0; n < N; ++n) {
    const __m256 sc0 = _mm256_mul_ps(s[2 * n], _mm256_set1_ps(scale));
    const __m256 sc1 = _mm256_mul_ps(s[2 * n + 1], _mm256_set1_ps(scale));
    alignas(32) float sc[kLanes];
    _mm256_store_ps(sc, sc0);
    _mm256_store_ps(sc + 8, sc1);
    float tmax = -INFINITY;
    for (int j = 0; j < valid[n]; ++j) tmax = std::fmax(tmax, sc[j]);
    const float m_new = std::fmax(st[n]->m, tmax);
    alpha[n] = st[n]->m == -INFINITY ? 0.0f : exp_neg(st[n]->m - m_new);
    const __m256 m = _mm256_set1_ps(m_new);
    const __m256i count = _mm256_set1_epi32(valid[n]);
    const __m256 keep0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(count, lane0));
    const __m256 keep1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(count, lane8));
    _mm256_store_ps(p[n], _mm256_and_ps(keep0, exp_neg_avx2(_mm256_sub_ps(sc0, m))));
    _mm256_store_ps(p[n] + 8, _mm256_and_ps(keep1, exp_neg_avx2(_mm256_sub_ps(sc1, m))));
    st[n]->l = st[n]->l * alpha[n] + tree_sum16(p[n]);
    st[n]->m = m_new;
  }
  for (int64_t d0 = 0; d0 < dim; d0 += 8) {
    __m256 acc[N];
    for (int n = 0; n < N; ++n)
      acc[n] = _mm256_mul_ps(_mm256_loadu_ps(st[n]->o + d0), _mm256_set1_ps(alpha[n]));
    for (int j = 0; j < kLanes; ++j) {
      const __m256 v = _mm256_loadu_ps(vt + j * dim + d0);
      for (int n = 0; n < N; ++n)
        if (j < valid[n]) acc[n] = _mm256_fmadd_ps(_mm256_set1_ps(p[n][j]), v, acc[n]);
    }
    for (int n = 0; n < N; ++n) _mm256_storeu_ps(st[n]->o + d0, acc[n]);
  }
}

void tile_avx2_any(const float* const* q, const float* kt, const float* vt, const int* valid,
                   float scale, int64_t dim, QueryState* const* st, int count) {
  switch (count) {
    case 6: return tile_avx2<6>(q, kt, vt, valid, scale, dim, st);
    case 5: return tile_avx2<5>(q, kt, vt, valid, scale, dim, st);
    case 4: return tile_avx2<4>(q, kt, vt, valid, scale, dim, st);
    case 3: return tile_avx2<3>(q, kt, vt, valid, scale, dim, st);
    case 2: return tile_avx2<2>(q, kt, vt, valid, scale, dim, st);
    default: return tile_avx2<1>(q, kt, vt, valid, scale, dim, st);
  }
}

// 16 keys (transposed to [dim][16]) and 16 values ([16][dim]) of one tile as float32. A tile
// never crosses a page (page_size is a multiple of 16), so all 16 rows exist; rows past the
// last query's position are loaded but masked. Same floats as the portable loop.
__attribute__((target("avx512f,avx512bw")))
void load_tile_avx512(const uint16_t* k, const uint16_t* v, int64_t stride, int64_t dim,
                      float* kt, float* vt) {
  const __m512i rows = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(static_cast<int32_t>(stride * 2)));
  const __m512i high = _mm512_set1_epi32(static_cast<int32_t>(0xffff0000u));
  for (int64_t d = 0; d < dim; d += 2) {  // one 32-bit gather brings elements d and d + 1
    const __m512i pair = _mm512_i32gather_epi32(rows, k + d, 1);
    _mm512_storeu_si512(kt + d * kLanes, _mm512_slli_epi32(pair, 16));
    _mm512_storeu_si512(kt + (d + 1) * kLanes, _mm512_and_si512(pair, high));
  }
  for (int64_t j = 0; j < kLanes; ++j) {
    for (int64_t d = 0; d < dim; d += kLanes) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j * stride + d));
      _mm512_storeu_si512(vt + j * dim + d, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
}

__attribute__((target("avx512f")))
void load_tile_avx512(const float* k, const float* v, int64_t stride, int64_t dim, float* kt,
                      float* vt) {
  const __m512i rows = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(static_cast<int32_t>(stride)));
  for (int64_t d = 0; d < dim; ++d)
    _mm512_storeu_ps(kt + d * kLanes, _mm512_i32gather_ps(rows, k + d, 4));
  for (int64_t j = 0; j < kLanes; ++j)
    for (int64_t d = 0; d < dim; d += kLanes)
      _mm512_storeu_ps(vt + j * dim + d, _mm512_loadu_ps(v + j * stride + d));
}

void tile_vector(int isa, const float* const* q, const float* kt, const float* vt,
                 const int* valid, float scale, int64_t dim, QueryState* const* st, int count) {
  if (isa == kIsaAvx512) return tile_avx512_any(q, kt, vt, valid, scale, dim, st, count);
  tile_avx2_any(q, kt, vt, valid, scale, dim, st, count);
}

__attribute__((target("avx2")))
void load_tile_avx2(const uint16_t* k, const uint16_t* v, int64_t stride, int64_t dim, float* kt,
                    float* vt) {
  const __m256i step = _mm256_set1_epi32(static_cast<int32_t>(stride * 2));
  const __m256i rows0 = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), step);
  const __m256i rows8 = _mm256_mullo_epi32(_mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15), step);
  const __m256i high = _mm256_set1_epi32(static_cast<int32_t>(0xffff0000u));
  for (int64_t d = 0; d < dim; d += 2) {  // one 32-bit gather brings elements d and d + 1
    const int* at = reinterpret_cast<const int*>(k + d);
    const __m256i pair0 = _mm256_i32gather_epi32(at, rows0, 1);
    const __m256i pair8 = _mm256_i32gather_epi32(at, rows8, 1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(kt + d * kLanes), _mm256_slli_epi32(pair0, 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(kt + d * kLanes + 8),
                        _mm256_slli_epi32(pair8, 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(kt + (d + 1) * kLanes),
                        _mm256_and_si256(pair0, high));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(kt + (d + 1) * kLanes + 8),
                        _mm256_and_si256(pair8, high));
  }
  for (int64_t j = 0; j < kLanes; ++j) {
    for (int64_t d = 0; d < dim; d += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + j * stride + d));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(vt + j * dim + d),
                          _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
}

__attribute__((target("avx2")))
void load_tile_avx2(const float* k, const float* v, int64_t stride, int64_t dim, float* kt,
                    float* vt) {
  const __m256i step = _mm256_set1_epi32(static_cast<int32_t>(stride));
  const __m256i rows0 = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), step);
  const __m256i rows8 = _mm256_mullo_epi32(_mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15), step);
  for (int64_t d = 0; d < dim; ++d) {
    _mm256_storeu_ps(kt + d * kLanes, _mm256_i32gather_ps(k + d, rows0, 4));
    _mm256_storeu_ps(kt + d * kLanes + 8, _mm256_i32gather_ps(k + d, rows8, 4));
  }
  for (int64_t j = 0; j < kLanes; ++j)
    for (int64_t d = 0; d < dim; d += 8)
      _mm256_storeu_ps(vt + j * dim + d, _mm256_loadu_ps(v + j * stride + d));
}

template <typename T>
void run_item(const Item& item, const Geometry& g, const float* q_roped, const int64_t* pos,
              const int32_t* token_seq, const int32_t* table, int64_t table_stride,
              const T* cache, float scale, int isa, float* out) {
  const int64_t group = g.heads / g.kv_heads;
  const int64_t nq = item.count * group;
  std::vector<QueryState> states(nq);
  for (auto& st : states) {
    st.m = -INFINITY;
    st.l = 0.0f;
    std::fill(st.o, st.o + g.dim, 0.0f);
  }
  alignas(64) float kt[kMaxHeadDim * kLanes];
  alignas(64) float vt[kLanes * kMaxHeadDim];
  const int32_t* pages = table + token_seq[item.first] * table_stride;
  const int64_t last_pos = pos[item.first + item.count - 1];
  const int64_t token_stride = g.kv_heads * g.dim;  // elements between tokens in a page
  for (int64_t start = 0; start <= last_pos; start += kLanes) {
    const int64_t page = pages[start / g.page_size];
    const int64_t offset = start % g.page_size;
    const T* kbase = cache + ((page * 2 + 0) * g.page_size + offset) * token_stride +
                     item.kv_head * g.dim;
    const T* vbase = kbase + g.page_size * token_stride;
    if (isa == kIsaAvx512) {
      load_tile_avx512(kbase, vbase, token_stride, g.dim, kt, vt);
    } else if (isa == kIsaAvx2) {
      load_tile_avx2(kbase, vbase, token_stride, g.dim, kt, vt);
    } else {
      for (int64_t j = 0; j < kLanes; ++j) {
        for (int64_t d = 0; d < g.dim; ++d) {
          kt[d * kLanes + j] = load<T>(kbase + j * token_stride + d);
          vt[j * g.dim + d] = load<T>(vbase + j * token_stride + d);
        }
      }
    }
    const float* qs[kQueriesPerPass];
    QueryState* sts[kQueriesPerPass];
    int valids[kQueriesPerPass];
    int pending = 0;
    for (int64_t t = 0; t < item.count; ++t) {
      const int64_t token = item.first + t;
      const int64_t valid = std::min<int64_t>(kLanes, pos[token] + 1 - start);
      if (valid <= 0) continue;
      for (int64_t h = 0; h < group; ++h) {
        const float* q = q_roped + (token * g.heads + item.kv_head * group + h) * g.dim;
        QueryState& st = states[t * group + h];
        if (isa == kIsaPortable) {
          tile_portable(q, kt, vt, static_cast<int>(valid), scale, g.dim, st);
          continue;
        }
        qs[pending] = q;
        sts[pending] = &st;
        valids[pending] = static_cast<int>(valid);
        if (++pending == kQueriesPerPass) {
          tile_vector(isa, qs, kt, vt, valids, scale, g.dim, sts, pending);
          pending = 0;
        }
      }
    }
    if (pending > 0) tile_vector(isa, qs, kt, vt, valids, scale, g.dim, sts, pending);
  }
  for (int64_t t = 0; t < item.count; ++t) {
    for (int64_t h = 0; h < group; ++h) {
      const QueryState& st = states[t * group + h];
      float* dst = out + ((item.first + t) * g.heads + item.kv_head * group + h) * g.dim;
      for (int64_t d = 0; d < g.dim; ++d) dst[d] = st.o[d] / st.l;
    }
  }
}

std::vector<Item> make_items(const int64_t* pos, const int32_t* token_seq, int64_t tokens,
                             int64_t kv_heads) {
  std::vector<Item> items;
  int64_t i = 0;
  while (i < tokens) {
    int64_t j = i + 1;
    while (j < tokens && j - i < kTokensPerItem && token_seq[j] == token_seq[i] &&
           pos[j] == pos[j - 1] + 1)
      ++j;
    for (int64_t h = 0; h < kv_heads; ++h) items.push_back({i, j - i, h, pos[j - 1] * (j - i)});
    i = j;
  }
  // Most expensive first, so the dynamic hand-out below ends with small items.
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.cost > b.cost; });
  return items;
}

template <typename T>
void attend(const at::Tensor& qkv, const int64_t* pos, const int32_t* token_seq,
            const int32_t* table, int64_t table_stride, const float* cos, const float* sin,
            at::Tensor& cache, const Geometry& g, float scale, at::Tensor& out) {
  const int64_t tokens = qkv.size(0);
  const float* x = qkv.data_ptr<float>();
  T* c = reinterpret_cast<T*>(cache.data_ptr());
  at::Tensor q_roped = at::empty({tokens, g.heads, g.dim}, qkv.options());
  float* qr = q_roped.data_ptr<float>();
  const int64_t token_stride = g.kv_heads * g.dim;
  // 1. RoPE on q and k, K/V into the pages (every key of the step is in place before any
  //    query reads it).
  at::parallel_for(0, tokens, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> k_roped(g.dim);
    for (int64_t t = begin; t < end; ++t) {
      const float* row = x + t * g.row;
      const float* cs = cos + pos[t] * g.dim;
      const float* sn = sin + pos[t] * g.dim;
      for (int64_t h = 0; h < g.heads; ++h)
        rope(row + h * g.dim, cs, sn, g.dim, qr + (t * g.heads + h) * g.dim);
      const int64_t page = table[token_seq[t] * table_stride + pos[t] / g.page_size];
      const int64_t offset = pos[t] % g.page_size;
      T* kdst = c + ((page * 2 + 0) * g.page_size + offset) * token_stride;
      T* vdst = kdst + g.page_size * token_stride;
      for (int64_t h = 0; h < g.kv_heads; ++h) {
        rope(row + (g.heads + h) * g.dim, cs, sn, g.dim, k_roped.data());
        const float* v = row + (g.heads + g.kv_heads + h) * g.dim;
        for (int64_t d = 0; d < g.dim; ++d) {
          store<T>(kdst + h * g.dim + d, k_roped[d]);
          store<T>(vdst + h * g.dim + d, v[d]);
        }
      }
    }
  });
  // 2. Attention, items handed out dynamically (results do not depend on who runs what).
  const std::vector<Item> items = make_items(pos, token_seq, tokens, g.kv_heads);
  std::atomic<int64_t> next{0};
  const int isa = isa_level();
  float* o = out.data_ptr<float>();
  const int64_t workers = std::min<int64_t>(at::get_num_threads(), items.size());
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    for (int64_t i = next.fetch_add(1); i < static_cast<int64_t>(items.size());
         i = next.fetch_add(1)) {
      run_item<T>(items[i], g, qr, pos, token_seq, table, table_stride, c, scale, isa, o);
    }
  });
}

at::Tensor paged_attention(const at::Tensor& qkv, const at::Tensor& positions,
                           const at::Tensor& token_seq, const at::Tensor& page_table,
                           const at::Tensor& cos, const at::Tensor& sin, at::Tensor cache,
                           int64_t heads, int64_t kv_heads, double scale) {
  TORCH_CHECK(qkv.dim() == 2 && qkv.scalar_type() == at::kFloat && qkv.is_contiguous(),
              "qkv must be contiguous float32 [T, (H + 2 KvH) * D]");
  TORCH_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, "bad head counts");
  TORCH_CHECK(cache.dim() == 5 && cache.is_contiguous() && cache.size(1) == 2 &&
                  cache.size(3) == kv_heads,
              "cache must be contiguous [pages, 2, page_size, kv_heads, D]");
  const int64_t dim = cache.size(4);
  const int64_t page_size = cache.size(2);
  TORCH_CHECK(dim <= kMaxHeadDim && dim % kLanes == 0, "head_dim must be a multiple of 16, <= 256");
  TORCH_CHECK(page_size % kLanes == 0, "page_size must be a multiple of 16");
  TORCH_CHECK(qkv.size(1) == (heads + 2 * kv_heads) * dim, "qkv width does not match heads");
  const int64_t tokens = qkv.size(0);
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.numel() == tokens &&
                  positions.is_contiguous(),
              "positions must be int64 [T]");
  TORCH_CHECK(token_seq.scalar_type() == at::kInt && token_seq.numel() == tokens &&
                  token_seq.is_contiguous(),
              "token_seq must be int32 [T]");
  TORCH_CHECK(page_table.scalar_type() == at::kInt && page_table.dim() == 2 &&
                  page_table.is_contiguous(),
              "page_table must be int32 [S, pages]");
  TORCH_CHECK(cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat &&
                  cos.is_contiguous() && sin.is_contiguous() && cos.size(1) == dim,
              "cos/sin must be float32 [positions, D]");
  const int64_t* pos = positions.data_ptr<int64_t>();
  const int32_t* seq = token_seq.data_ptr<int32_t>();
  const int32_t* table = page_table.data_ptr<int32_t>();
  const int64_t table_stride = page_table.size(1);
  for (int64_t t = 0; t < tokens; ++t) {
    TORCH_CHECK(seq[t] >= 0 && seq[t] < page_table.size(0), "token_seq out of range");
    TORCH_CHECK(pos[t] >= 0 && pos[t] < cos.size(0), "position beyond the rope table");
    TORCH_CHECK(pos[t] / page_size < table_stride, "position beyond the page table");
  }
  for (int64_t i = 0; i < page_table.numel(); ++i)
    TORCH_CHECK(table[i] >= 0 && table[i] < cache.size(0), "page id out of range");
  const Geometry g{heads, kv_heads, dim, page_size, qkv.size(1)};
  at::Tensor out = at::empty({tokens, heads * dim}, qkv.options());
  const float s = static_cast<float>(scale);
  if (cache.scalar_type() == at::kFloat) {
    attend<float>(qkv, pos, seq, table, table_stride, cos.data_ptr<float>(),
                  sin.data_ptr<float>(), cache, g, s, out);
  } else {
    TORCH_CHECK(cache.scalar_type() == at::kBFloat16, "cache must be float32 or bfloat16");
    attend<uint16_t>(qkv, pos, seq, table, table_stride, cos.data_ptr<float>(),
                     sin.data_ptr<float>(), cache, g, s, out);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(switchyard_cpu, m) {
  m.def("paged_attention(Tensor qkv, Tensor positions, Tensor token_seq, Tensor page_table, "
        "Tensor cos, Tensor sin, Tensor(a!) cache, int heads, int kv_heads, float scale) "
        "-> Tensor",
        &paged_attention);
}

}  // namespace switchyard
