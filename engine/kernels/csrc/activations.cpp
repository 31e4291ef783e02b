// Row-wise activation kernels: RMSNorm, SiLU·up, and the int8 block quantisation that feeds
// qmatmul. Each row is processed on its own (rows are split between threads, never inside a
// row), so a row's result does not depend on the other rows of the call.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "common.h"

namespace switchyard {
namespace {

// exp for any finite argument, clamped to float's range (SiLU's sigmoid).
inline float exp_any(float x) {
  x = std::fmin(std::fmax(x, -87.0f), 88.0f);
  float n = std::nearbyint(x * 1.44269504088896341f);
  float r = std::fma(n, -0.693359375f, x);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p * r, r, r) + 1.0f;
  int32_t bits;
  std::memcpy(&bits, &p, 4);
  bits += static_cast<int32_t>(n) << 23;
  std::memcpy(&p, &bits, 4);
  return p;
}

// One row of `k` floats -> int8 codes, per-block scale d and d * sum(codes).
__attribute__((target_clones("avx512f", "avx2", "default")))
void quantize_row(const float* x, int64_t k, int8_t* q, float* d, float* s) {
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

__attribute__((target_clones("avx512f", "avx2", "default")))
void rmsnorm_row(const float* x, const float* w, int64_t k, float eps, float* y) {
  float partial[kLanes] = {0};
  for (int64_t i = 0; i < k; ++i) partial[i % kLanes] += x[i] * x[i];
  const float mean = tree_sum16(partial) / static_cast<float>(k);
  const float inv = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < k; ++i) y[i] = (x[i] * inv) * w[i];
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void silu_mul_row(const float* gate, const float* up, int64_t k, float* y) {
  for (int64_t i = 0; i < k; ++i) y[i] = gate[i] / (1.0f + exp_any(-gate[i])) * up[i];
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
