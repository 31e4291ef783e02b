// Token embedding rows read straight from the packed Q8_0 output projection (tied
// embeddings): the same bytes serve the lookup and the lm_head, and the lookup is exact
// (d * code, as llama.cpp dequantises).
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "common.h"

namespace switchyard {
namespace {

at::Tensor embed_q8_0(const at::Tensor& ids, const at::Tensor& packed, int64_t vocab,
                      int64_t hidden) {
  TORCH_CHECK(ids.scalar_type() == at::kLong && ids.dim() == 1 && ids.is_contiguous(),
              "ids must be int64 [T]");
  TORCH_CHECK(hidden % kBlock == 0, "hidden size must be a multiple of 32");
  const int64_t blocks = hidden / kBlock;
  const int64_t tiles = (vocab + kLanes - 1) / kLanes;
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.is_contiguous() &&
                  packed.numel() == tiles * blocks * kQ8TileBlockBytes,
              "packed embedding has the wrong size");
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t t = 0; t < ids.numel(); ++t)
    TORCH_CHECK(id[t] >= 0 && id[t] < vocab, "token id ", id[t], " out of range");
  at::Tensor out = at::empty({ids.numel(), hidden}, at::TensorOptions().dtype(at::kFloat));
  const uint8_t* w = packed.data_ptr<uint8_t>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, ids.numel(), 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t tile = id[t] / kLanes, lane = id[t] % kLanes;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* tb = w + (tile * blocks + b) * kQ8TileBlockBytes;
        const float d = f16_to_f32(reinterpret_cast<const uint16_t*>(tb + 512)[lane]);
        for (int64_t i = 0; i < kBlock; ++i) {
          const int8_t code = static_cast<int8_t>(tb[(i / 4) * 64 + lane * 4 + i % 4]);
          o[t * hidden + b * kBlock + i] = d * static_cast<float>(code);
        }
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(switchyard_cpu, m) {
  m.def("embed_q8_0(Tensor ids, Tensor packed, int vocab, int hidden) -> Tensor", &embed_q8_0);
}

}  // namespace switchyard
