// out[m, n] = sum_k x[m, k] * W[n, k] for block-quantised W (Q4_1 or Q8_0, llama.cpp's blocks
// of 32) and int8 block-quantised x, with an optional residual added at the end.
//
// Batch invariance: out[m, n] is `acc = 0; for each block b in order: acc = fma(dw*dx, isum,
// acc) [; acc = fma(mw, sx, acc)]; acc + residual`, where isum is the block's exact integer dot
// product. Nothing in that sequence depends on how many rows the call has or which thread
// computes the element, so a token's result is the same at batch 1, batch 32 or inside a
// 2048-token prefill. The AVX-512 VNNI path computes isum with vpdpbusd (exact), the AVX2 path
// with vpmaddubsw/vpmaddwd (exact: no pair sum can saturate, see tile_avx2), and both perform the
// same float operations lane by lane, so they agree with the portable path bit for bit.
//
// Packed layout, per tile of 16 output columns and per block of 32 inputs ("tile-block"),
// tiles outermost, blocks in order:
//   Q4_1 (320 bytes): 4 planes p of 64 bytes; byte p*64 + j*4 + i holds column j's code for
//     k = 8p + i in its low nibble and for k = 8p + 4 + i in its high nibble; then 16 fp16 d,
//     16 fp16 m (w = d * code + m).
//   Q8_0 (576 bytes): 8 planes g of 64 bytes; byte g*64 + j*4 + i = column j's int8 code for
//     k = 4g + i; then 16 fp16 d, 16 int16 sums of the block's codes (w = d * code).
#include <ATen/Parallel.h>
#include <ATen/ops/bitwise_xor.h>
#include <immintrin.h>
#include <torch/library.h>

#include <atomic>

#include "common.h"

namespace switchyard {

namespace {
std::atomic<int> g_isa{kIsaUndecided};
}

int isa_supported() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vnni"))
    return kIsaAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return kIsaAvx2;
  return kIsaPortable;
}

void force_isa(int level) {
  g_isa.store(level == kIsaUndecided ? kIsaUndecided : std::min(level, isa_supported()));
}

int isa_level() {
  int level = g_isa.load();
  if (level == kIsaUndecided) {
    level = isa_supported();
    g_isa.store(level);
  }
  return level;
}

namespace {

struct Activations {
  const int8_t* q;
  const float* d;
  const float* s;
  int64_t k;
};

// ---- portable path -----------------------------------------------------------------------

void tile_portable(const Activations& x, int64_t row, const uint8_t* tile, int64_t fmt,
                   float* acc) {
  const int64_t blocks = x.k / kBlock;
  const int8_t* xq = x.q + row * x.k;
  for (int j = 0; j < kLanes; ++j) acc[j] = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    const float dx = x.d[row * blocks + b];
    const float sx = x.s[row * blocks + b];
    const int8_t* xb = xq + b * kBlock;
    if (fmt == kQ4_1) {
      const uint8_t* tb = tile + b * kQ4TileBlockBytes;
      const uint16_t* dw = reinterpret_cast<const uint16_t*>(tb + 256);
      const uint16_t* mw = dw + kLanes;
      for (int j = 0; j < kLanes; ++j) {
        int32_t isum = 0;
        for (int p = 0; p < 4; ++p) {
          for (int i = 0; i < 4; ++i) {
            const uint8_t byte = tb[p * 64 + j * 4 + i];
            isum += static_cast<int32_t>(byte & 0x0f) * xb[8 * p + i];
            isum += static_cast<int32_t>(byte >> 4) * xb[8 * p + 4 + i];
          }
        }
        acc[j] = std::fma(f16_to_f32(dw[j]) * dx, static_cast<float>(isum), acc[j]);
        acc[j] = std::fma(f16_to_f32(mw[j]), sx, acc[j]);
      }
    } else {
      const uint8_t* tb = tile + b * kQ8TileBlockBytes;
      const uint16_t* dw = reinterpret_cast<const uint16_t*>(tb + 512);
      for (int j = 0; j < kLanes; ++j) {
        int32_t isum = 0;
        for (int g = 0; g < 8; ++g) {
          for (int i = 0; i < 4; ++i) {
            isum += static_cast<int32_t>(static_cast<int8_t>(tb[g * 64 + j * 4 + i])) *
                    xb[4 * g + i];
          }
        }
        acc[j] = std::fma(f16_to_f32(dw[j]) * dx, static_cast<float>(isum), acc[j]);
      }
    }
  }
}

// ---- AVX-512 VNNI path: R rows x one tile of 16 columns ----------------------------------

template <int R, int64_t fmt>
__attribute__((target("avx512f,avx512bw,avx512vnni,f16c,fma")))
void tile_avx512(const Activations& x, int64_t row, const uint8_t* tile, const uint8_t* next,
                 __m512* acc) {
  constexpr int64_t tb_bytes = fmt == kQ4_1 ? kQ4TileBlockBytes : kQ8TileBlockBytes;
  const int64_t blocks = x.k / kBlock;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    if (next != nullptr) {  // the next tile streams in while this one computes
      for (int64_t line = 0; line < tb_bytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(next + b * tb_bytes + line), _MM_HINT_T0);
    }
    __m512i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm512_setzero_si512();
    __m512 dw, mw = _mm512_setzero_ps();
    if constexpr (fmt == kQ4_1) {
      const uint8_t* tb = tile + b * kQ4TileBlockBytes;
      for (int p = 0; p < 4; ++p) {
        const __m512i w = _mm512_loadu_si512(tb + p * 64);
        const __m512i lo = _mm512_and_si512(w, low4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low4);
        for (int r = 0; r < R; ++r) {
          const int8_t* xb = x.q + (row + r) * x.k + b * kBlock + 8 * p;
          int32_t x0, x1;
          std::memcpy(&x0, xb, 4);
          std::memcpy(&x1, xb + 4, 4);
          isum[r] = _mm512_dpbusd_epi32(isum[r], lo, _mm512_set1_epi32(x0));
          isum[r] = _mm512_dpbusd_epi32(isum[r], hi, _mm512_set1_epi32(x1));
        }
      }
      dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tb + 256)));
      mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tb + 288)));
    } else {
      const uint8_t* tb = tile + b * kQ8TileBlockBytes;
      for (int g = 0; g < 8; ++g) {
        const __m512i w = _mm512_loadu_si512(tb + g * 64);
        for (int r = 0; r < R; ++r) {
          // x.q holds x + 128 as unsigned bytes here (see qmatmul); times the signed codes,
          // minus 128 * sum(codes) below, isum is exactly sum(x * code).
          int32_t x0;
          std::memcpy(&x0, x.q + (row + r) * x.k + b * kBlock + 4 * g, 4);
          isum[r] = _mm512_dpbusd_epi32(isum[r], _mm512_set1_epi32(x0), w);
        }
      }
      dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tb + 512)));
      const __m512i sums = _mm512_cvtepi16_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tb + 544)));
      const __m512i offset = _mm512_slli_epi32(sums, 7);
      for (int r = 0; r < R; ++r) isum[r] = _mm512_sub_epi32(isum[r], offset);
    }
    for (int r = 0; r < R; ++r) {
      const float dx = x.d[(row + r) * blocks + b];
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
      acc[r] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(isum[r]), acc[r]);
      if constexpr (fmt == kQ4_1) {
        acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x.s[(row + r) * blocks + b]), acc[r]);
      }
    }
  }
}

template <int R, int64_t fmt>
__attribute__((target("avx512f,avx512bw,avx512vnni,f16c,fma")))
void rows_avx512(const Activations& x, int64_t row, const uint8_t* tile, const uint8_t* next,
                 int64_t n0, int64_t n, const float* residual, float* out) {
  __m512 acc[R];
  tile_avx512<R, fmt>(x, row, tile, next, acc);
  const int64_t valid = std::min<int64_t>(kLanes, n - n0);
  const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
  for (int r = 0; r < R; ++r) {
    __m512 v = acc[r];
    if (residual != nullptr) {
      v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, residual + (row + r) * n + n0));
    }
    _mm512_mask_storeu_ps(out + (row + r) * n + n0, mask, v);
  }
}

// One row's 16 sums (the columns that exist past n0), plus the residual when there is one.
void store_row(const float* acc, int64_t row, int64_t n0, int64_t n, const float* residual,
               float* out) {
  const int64_t valid = std::min<int64_t>(kLanes, n - n0);
  for (int64_t j = 0; j < valid; ++j) {
    float v = acc[j];
    if (residual != nullptr) v = v + residual[row * n + n0 + j];
    out[row * n + n0 + j] = v;
  }
}

// ---- AVX2 path: R rows x one tile of 16 columns, as two halves of 8 ----------------------
//
// Without VNNI the integer dot product is vpmaddubsw (unsigned x signed bytes, adjacent pairs
// summed into saturating int16) then vpmaddwd against ones (int16 pairs into int32). Exact here:
// x codes are within [-127, 127] (the quantize ops clamp them), so a Q4_1 pair is at most
// 2 * 15 * 127 = 3810 and the four planes' sum 30480; a Q8_0 pair, |w| times sign-adjusted x,
// at most 2 * 128 * 127 = 32512 — all below int16's 32767.

template <int R, int64_t fmt>
__attribute__((target("avx2,fma,f16c")))
void tile_avx2(const Activations& x, int64_t row, const uint8_t* tile, const uint8_t* next,
               __m256* acc) {
  constexpr int64_t tb_bytes = fmt == kQ4_1 ? kQ4TileBlockBytes : kQ8TileBlockBytes;
  const int64_t blocks = x.k / kBlock;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int r = 0; r < 2 * R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    if (next != nullptr) {  // the next tile streams in while this one computes
      for (int64_t line = 0; line < tb_bytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(next + b * tb_bytes + line), _MM_HINT_T0);
    }
    __m256i isum[2 * R];  // [row][half]: columns 0-7, 8-15
    __m256 dw[2], mw[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    if constexpr (fmt == kQ4_1) {
      const uint8_t* tb = tile + b * kQ4TileBlockBytes;
      __m256i pairs[2 * R];
      for (int r = 0; r < 2 * R; ++r) pairs[r] = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) {
        for (int h = 0; h < 2; ++h) {
          const __m256i w =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tb + p * 64 + h * 32));
          const __m256i lo = _mm256_and_si256(w, low4);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
          for (int r = 0; r < R; ++r) {
            const int8_t* xb = x.q + (row + r) * x.k + b * kBlock + 8 * p;
            int32_t x0, x1;
            std::memcpy(&x0, xb, 4);
            std::memcpy(&x1, xb + 4, 4);
            const __m256i both =
                _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(x0)),
                                 _mm256_maddubs_epi16(hi, _mm256_set1_epi32(x1)));
            pairs[2 * r + h] = _mm256_add_epi16(pairs[2 * r + h], both);
          }
        }
      }
      for (int r = 0; r < 2 * R; ++r) isum[r] = _mm256_madd_epi16(pairs[r], ones);
      for (int h = 0; h < 2; ++h) {
        dw[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tb + 256 + 16 * h)));
        mw[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tb + 288 + 16 * h)));
      }
    } else {
      const uint8_t* tb = tile + b * kQ8TileBlockBytes;
      for (int r = 0; r < 2 * R; ++r) isum[r] = _mm256_setzero_si256();
      for (int g = 0; g < 8; ++g) {
        for (int h = 0; h < 2; ++h) {
          const __m256i w =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tb + g * 64 + h * 32));
          const __m256i magnitude = _mm256_sign_epi8(w, w);  // |w| as unsigned (-128 -> 128)
          for (int r = 0; r < R; ++r) {
            int32_t x0;
            std::memcpy(&x0, x.q + (row + r) * x.k + b * kBlock + 4 * g, 4);
            const __m256i signed_x = _mm256_sign_epi8(_mm256_set1_epi32(x0), w);
            const __m256i pair = _mm256_maddubs_epi16(magnitude, signed_x);
            isum[2 * r + h] = _mm256_add_epi32(isum[2 * r + h], _mm256_madd_epi16(pair, ones));
          }
        }
      }
      for (int h = 0; h < 2; ++h)
        dw[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tb + 512 + 16 * h)));
    }
    for (int r = 0; r < R; ++r) {
      const __m256 dx = _mm256_set1_ps(x.d[(row + r) * blocks + b]);
      for (int h = 0; h < 2; ++h) {
        const __m256 scale = _mm256_mul_ps(dw[h], dx);
        acc[2 * r + h] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum[2 * r + h]), acc[2 * r + h]);
        if constexpr (fmt == kQ4_1) {
          acc[2 * r + h] = _mm256_fmadd_ps(
              mw[h], _mm256_set1_ps(x.s[(row + r) * blocks + b]), acc[2 * r + h]);
        }
      }
    }
  }
}

template <int R, int64_t fmt>
__attribute__((target("avx2,fma,f16c")))
void rows_avx2(const Activations& x, int64_t row, const uint8_t* tile, const uint8_t* next,
               int64_t n0, int64_t n, const float* residual, float* out) {
  __m256 acc[2 * R];
  tile_avx2<R, fmt>(x, row, tile, next, acc);
  for (int r = 0; r < R; ++r) {
    alignas(32) float v[kLanes];
    _mm256_store_ps(v, acc[2 * r]);
    _mm256_store_ps(v + 8, acc[2 * r + 1]);
    store_row(v, row + r, n0, n, residual, out);
  }
}

template <int64_t fmt>
void rows_dispatch_avx2(int64_t rows, const Activations& x, int64_t row, const uint8_t* tile,
                        const uint8_t* next, int64_t n0, int64_t n, const float* residual,
                        float* out) {
  switch (rows) {
    case 4: return rows_avx2<4, fmt>(x, row, tile, next, n0, n, residual, out);
    case 3: return rows_avx2<3, fmt>(x, row, tile, next, n0, n, residual, out);
    case 2: return rows_avx2<2, fmt>(x, row, tile, next, n0, n, residual, out);
    default: return rows_avx2<1, fmt>(x, row, tile, next, n0, n, residual, out);
  }
}

void rows_portable(const Activations& x, int64_t row, const uint8_t* tile, int64_t fmt,
                   int64_t n0, int64_t n, const float* residual, float* out) {
  float acc[kLanes];
  tile_portable(x, row, tile, fmt, acc);
  store_row(acc, row, n0, n, residual, out);
}

template <int64_t fmt>
void rows_dispatch(int64_t rows, const Activations& x, int64_t row, const uint8_t* tile,
                   const uint8_t* next, int64_t n0, int64_t n, const float* residual,
                   float* out) {
  switch (rows) {
    case 4: return rows_avx512<4, fmt>(x, row, tile, next, n0, n, residual, out);
    case 3: return rows_avx512<3, fmt>(x, row, tile, next, n0, n, residual, out);
    case 2: return rows_avx512<2, fmt>(x, row, tile, next, n0, n, residual, out);
    default: return rows_avx512<1, fmt>(x, row, tile, next, n0, n, residual, out);
  }
}

constexpr int64_t kRowBlock = 4;
constexpr int64_t kRowChunk = 32;  // rows whose activations stay in L1 while tiles stream by

at::Tensor qmatmul(const at::Tensor& xq, const at::Tensor& xd, const at::Tensor& xs,
                   const at::Tensor& packed, int64_t fmt, int64_t n,
                   const std::optional<at::Tensor>& residual) {
  TORCH_CHECK(fmt == kQ4_1 || fmt == kQ8_0, "unknown weight format ", fmt);
  TORCH_CHECK(xq.dim() == 2 && xq.scalar_type() == at::kChar && xq.is_contiguous(),
              "xq must be contiguous int8 [M, K]");
  const int64_t m = xq.size(0), k = xq.size(1);
  TORCH_CHECK(k % kBlock == 0, "K must be a multiple of 32");
  TORCH_CHECK(xd.is_contiguous() && xs.is_contiguous() && xd.numel() == m * (k / kBlock) &&
                  xs.numel() == m * (k / kBlock) && xd.scalar_type() == at::kFloat &&
                  xs.scalar_type() == at::kFloat,
              "xd/xs must be contiguous float32 [M, K/32]");
  const int64_t tiles = (n + kLanes - 1) / kLanes;
  const int64_t tb_bytes = fmt == kQ4_1 ? kQ4TileBlockBytes : kQ8TileBlockBytes;
  const int64_t tile_bytes = (k / kBlock) * tb_bytes;
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.is_contiguous() &&
                  packed.numel() == tiles * tile_bytes,
              "packed weight has ", packed.numel(), " bytes, expected ", tiles * tile_bytes);
  const float* res = nullptr;
  if (residual.has_value()) {
    TORCH_CHECK(residual->scalar_type() == at::kFloat && residual->is_contiguous() &&
                    residual->numel() == m * n,
                "residual must be contiguous float32 [M, N]");
    res = residual->data_ptr<float>();
  }
  at::Tensor out = at::empty({m, n}, at::TensorOptions().dtype(at::kFloat));
  if (m == 0) return out;
  const Activations x{xq.data_ptr<int8_t>(), xd.data_ptr<float>(), xs.data_ptr<float>(), k};
  const uint8_t* w = packed.data_ptr<uint8_t>();
  float* o = out.data_ptr<float>();
  const int isa = isa_level();
  const bool avx512 = isa == kIsaAvx512;
  // The Q8_0 kernel multiplies unsigned bytes: give it x + 128 (x ^ 0x80), once per call.
  at::Tensor shifted;
  Activations xa = x;
  if (avx512 && fmt == kQ8_0) {
    shifted = at::bitwise_xor(xq, -128);
    xa.q = shifted.data_ptr<int8_t>();
  }
  const int64_t chunks = (m + kRowChunk - 1) / kRowChunk;
  // Work units are (chunk of up to 32 rows, tile), chunk-major: the chunk's activations stay
  // in L1 while the tiles stream through, each tile reused for every row of the chunk. Which
  // thread computes a unit never changes its result.
  at::parallel_for(0, chunks * tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t t = unit % tiles;
      const int64_t chunk_end = std::min(m, (unit / tiles + 1) * kRowChunk);
      const uint8_t* tile = w + t * tile_bytes;
      const uint8_t* next = t + 1 < tiles ? tile + tile_bytes : nullptr;
      for (int64_t row = (unit / tiles) * kRowChunk; row < chunk_end; row += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, chunk_end - row);
        if (isa == kIsaPortable) {
          for (int64_t r = 0; r < rows; ++r)
            rows_portable(x, row + r, tile, fmt, t * kLanes, n, res, o);
        } else if (isa == kIsaAvx2) {
          if (fmt == kQ4_1)
            rows_dispatch_avx2<kQ4_1>(rows, x, row, tile, next, t * kLanes, n, res, o);
          else
            rows_dispatch_avx2<kQ8_0>(rows, x, row, tile, next, t * kLanes, n, res, o);
        } else if (fmt == kQ4_1) {
          rows_dispatch<kQ4_1>(rows, xa, row, tile, next, t * kLanes, n, res, o);
        } else {
          rows_dispatch<kQ8_0>(rows, xa, row, tile, next, t * kLanes, n, res, o);
        }
        next = nullptr;  // prefetched during the first row block
      }
    }
  });
  return out;
}

void set_isa(int64_t level) { force_isa(static_cast<int>(level)); }
int64_t isa() { return isa_level(); }
int64_t isa_best() { return isa_supported(); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(switchyard_cpu, m) {
  m.def("qmatmul(Tensor xq, Tensor xd, Tensor xs, Tensor packed, int fmt, int n, "
        "Tensor? residual=None) -> Tensor",
        &qmatmul);
  m.def("set_isa(int level) -> ()", &set_isa);
  m.def("isa() -> int", &isa);
  m.def("isa_best() -> int", &isa_best);
}

}  // namespace switchyard
