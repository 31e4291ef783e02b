// Row-wise activation kernels: RMSNorm, SiLU·up, and the int8 block quantisation that feeds
// qmatmul. Each row is processed on its own (rows are split between threads, never inside a
// row), so a row's result does not depend on the other rows of the call.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>

#include "common.h"

namespace switchyard {
namespace {

// exp for any finite argument, clamped to float's range (SiLU's sigmoid); the same
// polynomial as exp_neg and as the AVX-512 version below.
inline float exp_any(float x) { return exp_neg(std::fmin(x, 88.0f)); }

// One row of `k` floats -> int8 codes, per-block scale d and d * sum(codes).
void quantize_row_portable(const float* x, int64_t k, int8_t* q, float* d, float* s) {
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    float amax = 0.0f;
    for (int i = 0; i < kBlock; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float scale = amax / 127.0f;
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < kBlock; ++i) {
      float v = std::nearbyint(xb[i] * inv);
      v = std::fmin(std::fmax(v, -127.0f), 127.0f);
      const int8_t c = static_cast<int8_t>(v);
      q[b * kBlock + i] = c;
      sum += c;
    }
    d[b] = scale;
    s[b] = scale * static_cast<float>(sum);
  }
}

void rmsnorm_row_portable(const float* x, const float* w, int64_t k, float eps, float* y) {
  float partial[kLanes] = {0};
  for (int64_t i = 0; i < k; ++i) partial[i % kLanes] += x[i] * x[i];
  const float mean = tree_sum16(partial) / static_cast<float>(k);
  const float inv = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < k; ++i) y[i] = (x[i] * inv) * w[i];
}

void silu_mul_row_portable(const float* gate, const float* up, int64_t k, float* y) {
  for (int64_t i = 0; i < k; ++i) y[i] = gate[i] / (1.0f + exp_any(-gate[i])) * up[i];
}

// ---- AVX-512: the same operations, 16 elements at a time (k is a multiple of 32) ---------

__attribute__((target("avx512f,avx512bw")))
void quantize_row_avx512(const float* x, int64_t k, int8_t* q, float* d, float* s) {
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * kBlock), x1 = _mm512_loadu_ps(x + b * kBlock + 16);
    const float amax = _mm512_reduce_max_ps(
        _mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float scale = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(scale != 0.0f ? 1.0f / scale : 0.0f);
    const int rounding = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512 r0 = _mm512_min_ps(_mm512_max_ps(
        _mm512_roundscale_ps(_mm512_mul_ps(x0, inv), rounding), lo), hi);
    const __m512 r1 = _mm512_min_ps(_mm512_max_ps(
        _mm512_roundscale_ps(_mm512_mul_ps(x1, inv), rounding), lo), hi);
    const __m512i c0 = _mm512_cvtps_epi32(r0), c1 = _mm512_cvtps_epi32(r1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * kBlock), _mm512_cvtepi32_epi8(c0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * kBlock + 16), _mm512_cvtepi32_epi8(c1));
    d[b] = scale;
    s[b] = scale * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1)));
  }
}

__attribute__((target("avx512f")))
void rmsnorm_row_avx512(const float* x, const float* w, int64_t k, float eps, float* y) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += kLanes) {
    const __m512 v = _mm512_loadu_ps(x + i);
    acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
  }
  alignas(64) float partial[kLanes];
  _mm512_store_ps(partial, acc);
  const float mean = tree_sum16(partial) / static_cast<float>(k);
  const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(mean + eps));
  for (int64_t i = 0; i < k; i += kLanes) {
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), inv),
                                          _mm512_loadu_ps(w + i)));
  }
}

__attribute__((target("avx512f")))
void silu_mul_row_avx512(const float* gate, const float* up, int64_t k, float* y) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += kLanes) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = exp_neg_avx512(_mm512_min_ps(_mm512_sub_ps(zero, g), _mm512_set1_ps(88.0f)));
    const __m512 sig = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_storeu_ps(y + i, _mm512_mul_ps(sig, _mm512_loadu_ps(up + i)));
  }
}

// ---- AVX2: the same operations, 8 elements at a time (k is a multiple of 32) -------------

__attribute__((target("avx2,fma")))
void quantize_row_avx2(const float* x, int64_t k, int8_t* q, float* d, float* s) {
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  // packs interleaves 128-bit lanes; this puts the 32 codes back in order
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < k / kBlock; ++b) {
    __m256 v[4];
    __m256 amax8 = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + b * kBlock + 8 * i);
      amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign_bit, v[i]));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, amax8);
    float amax = 0.0f;
    for (int i = 0; i < 8; ++i) amax = std::fmax(amax, lanes[i]);
    const float scale = amax / 127.0f;
    const __m256 inv = _mm256_set1_ps(scale != 0.0f ? 1.0f / scale : 0.0f);
    __m256i c[4];
    __m256i sum = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
      const __m256 r = _mm256_min_ps(_mm256_max_ps(_mm256_round_ps(
          _mm256_mul_ps(v[i], inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), lo), hi);
      c[i] = _mm256_cvtps_epi32(r);
      sum = _mm256_add_epi32(sum, c[i]);
    }
    const __m256i bytes = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3])),
        order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kBlock), bytes);
    alignas(32) int32_t parts[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(parts), sum);
    int32_t total = 0;
    for (int i = 0; i < 8; ++i) total += parts[i];
    d[b] = scale;
    s[b] = scale * static_cast<float>(total);
  }
}

__attribute__((target("avx2,fma")))
void rmsnorm_row_avx2(const float* x, const float* w, int64_t k, float eps, float* y) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();  // lanes 0-7, 8-15
  for (int64_t i = 0; i < k; i += kLanes) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(v0, v0));
    acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(v1, v1));
  }
  alignas(32) float partial[kLanes];
  _mm256_store_ps(partial, acc0);
  _mm256_store_ps(partial + 8, acc1);
  const float mean = tree_sum16(partial) / static_cast<float>(k);
  const __m256 inv = _mm256_set1_ps(1.0f / std::sqrt(mean + eps));
  for (int64_t i = 0; i < k; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv),
                                          _mm256_loadu_ps(w + i)));
  }
}

__attribute__((target("avx2,fma")))
void silu_mul_row_avx2(const float* gate, const float* up, int64_t k, float* y) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t i = 0; i < k; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp_neg_avx2(_mm256_min_ps(_mm256_sub_ps(zero, g), _mm256_set1_ps(88.0f)));
    const __m256 sig = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(sig, _mm256_loadu_ps(up + i)));
  }
}

void quantize_row(const float* x, int64_t k, int8_t* q, float* d, float* s) {
  const int isa = isa_level();
  if (isa == kIsaAvx512) return quantize_row_avx512(x, k, q, d, s);
  if (isa == kIsaAvx2) return quantize_row_avx2(x, k, q, d, s);
  quantize_row_portable(x, k, q, d, s);
}

void rmsnorm_row(const float* x, const float* w, int64_t k, float eps, float* y) {
  const int isa = isa_level();
  if (isa == kIsaAvx512 && k % kLanes == 0) return rmsnorm_row_avx512(x, w, k, eps, y);
  if (isa == kIsaAvx2 && k % kLanes == 0) return rmsnorm_row_avx2(x, w, k, eps, y);
  rmsnorm_row_portable(x, w, k, eps, y);
}

void silu_mul_row(const float* gate, const float* up, int64_t k, float* y) {
  const int isa = isa_level();
  if (isa == kIsaAvx512 && k % kLanes == 0) return silu_mul_row_avx512(gate, up, k, y);
  if (isa == kIsaAvx2 && k % 8 == 0) return silu_mul_row_avx2(gate, up, k, y);
  silu_mul_row_portable(gate, up, k, y);
}

struct Quantized {
  at::Tensor q, d, s;
};

Quantized alloc_quantized(int64_t rows, int64_t k) {
  TORCH_CHECK(k % kBlock == 0, "row length ", k, " is not a multiple of ", kBlock);
  auto f = at::TensorOptions().dtype(at::kFloat);
  return {at::empty({rows, k}, at::TensorOptions().dtype(at::kChar)),
          at::empty({rows, k / kBlock}, f), at::empty({rows, k / kBlock}, f)};
}

void check_rows(const at::Tensor& x, const char* name) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous() &&
                  x.device().is_cpu(),
              name, " must be a contiguous 2-D float32 CPU tensor");
}

template <typename RowFn>
std::tuple<at::Tensor, at::Tensor, at::Tensor> per_row(int64_t rows, int64_t k, RowFn fn) {
  Quantized out = alloc_quantized(rows, k);
  int8_t* q = out.q.data_ptr<int8_t>();
  float* d = out.d.data_ptr<float>();
  float* s = out.s.data_ptr<float>();
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(k);
    for (int64_t r = begin; r < end; ++r) {
      const float* row = fn(r, scratch.data());
      quantize_row(row, k, q + r * k, d + r * (k / kBlock), s + r * (k / kBlock));
    }
  });
  return {out.q, out.d, out.s};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_rows(const at::Tensor& x) {
  check_rows(x, "x");
  const float* xp = x.data_ptr<float>();
  const int64_t k = x.size(1);
  return per_row(x.size(0), k, [&](int64_t r, float*) { return xp + r * k; });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rmsnorm_quantize(const at::Tensor& x,
                                                                const at::Tensor& w,
                                                                double eps) {
  check_rows(x, "x");
  const int64_t k = x.size(1);
  TORCH_CHECK(w.numel() == k && w.scalar_type() == at::kFloat && w.is_contiguous(),
              "norm weight must be float32 [", k, "]");
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  const float e = static_cast<float>(eps);
  return per_row(x.size(0), k, [&](int64_t r, float* y) {
    rmsnorm_row(xp + r * k, wp, k, e, y);
    return static_cast<const float*>(y);
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> silu_mul_quantize(const at::Tensor& gate_up) {
  check_rows(gate_up, "gate_up");
  TORCH_CHECK(gate_up.size(1) % 2 == 0, "gate_up must have an even width");
  const int64_t k = gate_up.size(1) / 2;
  const float* gp = gate_up.data_ptr<float>();
  return per_row(gate_up.size(0), k, [&](int64_t r, float* y) {
    silu_mul_row(gp + r * 2 * k, gp + r * 2 * k + k, k, y);
    return static_cast<const float*>(y);
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(switchyard_cpu, m) {
  m.def("quantize_rows(Tensor x) -> (Tensor, Tensor, Tensor)", &quantize_rows);
  m.def("rmsnorm_quantize(Tensor x, Tensor w, float eps) -> (Tensor, Tensor, Tensor)",
        &rmsnorm_quantize);
  m.def("silu_mul_quantize(Tensor gate_up) -> (Tensor, Tensor, Tensor)", &silu_mul_quantize);
}

}  // namespace switchyard
