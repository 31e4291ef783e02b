"""Build the simulator's Llama-3.1-70B FP8, TP4 on H100 profile from Vidur's H100 measurements.

  python -m switchyard_sim.profiles.build_h100_70b            # writes h100-llama3.1-70b-fp8-tp4.json

What is measured and what is computed (both written into the profile):
- non-attention layers (QKV/O projections, MLP, norms, rope, residual adds) and the embedding:
  Vidur's per-operator medians for Llama-2-70B at TP4 on H100 (llama2_70b_mlp.csv), by tokens
  in the step. Llama-2-70B has Llama-3.1-70B's layer shapes (80 layers, hidden 8192, 64 heads,
  8 KV heads, MLP 28672); only the vocabulary differs (32k vs 128k), which changes the
  embedding (a lookup, measured) and the LM head, added from its bytes. Vidur profiled FP16
  GEMMs; for FP8 the four GEMMs are divided by FP8_GEMM_SPEEDUP (the ideal: half the weight
  bytes, twice the tensor-core peak; an upper bound on FP8's gain);
- tensor-parallel all-reduces: two per layer of tokens x hidden x 2 bytes, Vidur's measured
  4-GPU all-reduce on an H100 DGX (h100_dgx_all_reduce.csv), interpolated by size;
- attention: from FLOPs and bytes against H100 SXM peaks (not measured: Vidur's attention
  profiles are not in the data): prefill 4 x heads x head_dim FLOPs per query-key pair per
  layer at ATTN_FLOP_EFFICIENCY of the BF16 dense peak; K/V reads (prefill context and decodes)
  at KV_READ_EFFICIENCY of HBM3 bandwidth;
- the link between the two engines (one DGX: NVLink): Vidur's 2-GPU send/recv within a node
  (h100_dgx_send_recv.csv) fitted as latency + bytes / bandwidth, times 4 (each of the TP4
  ranks sends its own KV heads to its peer in parallel).
Everything that is not a token count's linear function (GEMM tile steps) is fitted with the
engine's own step-model fit (engine/core/latency_model.fit_nonnegative), and the fit's error is
written next to it.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
from typing import Any

import numpy as np

from engine.core.latency_model import fit_nonnegative
from switchyard_sim.profile import PROFILE_DIR, profile_from_dict

# The checkout's loadtest/data (a build script: run from the checkout, not from the wheel).
DATA_DIR = os.path.join(os.path.dirname(PROFILE_DIR), "..", "loadtest", "data", "vidur_h100")
NAME = "h100-llama3.1-70b-fp8-tp4"
TP = 4
# Llama-3.1-70B
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 80, 8192, 64, 8, 128, 128256
MAX_CONTEXT = 131072
PARAMS = 70.6e9
# H100 SXM5 (NVIDIA datasheet): HBM3 3.35 TB/s, BF16 dense 989.4 TFLOP/s, 80 GiB.
HBM_BYTES_S = 3.35e12
BF16_FLOPS = 989.4e12
HBM_GIB = 80
# Assumptions (not measured here), each stated in the profile.
FP8_GEMM_SPEEDUP = 2.0
ATTN_FLOP_EFFICIENCY = 0.5  # FlashAttention-2 ~35%, FlashAttention-3 ~75% of peak on H100
KV_READ_EFFICIENCY = 0.8
GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default share of HBM for weights + KV
RESERVE_GIB_PER_GPU = 4.0  # activations, CUDA graphs, NCCL buffers
KV_DTYPE_BYTES = 2  # bf16 KV cache
PAGE_SIZE = 16
CHUNK_SIZE = 2048
MAX_RUNNING = 256
# The KV link's per-chunk costs and the sender's gather (assumptions, see "assumptions").
LINK_CHUNK_MS = 0.01
SEND_CHUNK_MS = 0.005
GATHER_EFFICIENCY = 0.8
ROUTER_MS = 0.08

_GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
_OTHERS = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")


def _median(row: dict[str, str], op: str) -> float:
    return float(row[f"time_stats.{op}.median"])


def _rows(path: str) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _collective(path: str, column: str, keep: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """(sizes in bytes, median ms) of the rows matching `keep`, by size."""
    rows = [r for r in _rows(path) if all(r[k] == v for k, v in keep.items())]
    by_size: dict[int, list[float]] = {}
    for r in rows:
        by_size.setdefault(int(r["size"]), []).append(float(r[f"time_stats.{column}.median"]))
    sizes = np.asarray(sorted(by_size), dtype=np.float64)
    return sizes, np.asarray([float(np.median(by_size[int(s)])) for s in sizes])


def _interp(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """Linear interpolation; past the last point, the last segment's slope."""
    if x <= xs[-1]:
        return float(np.interp(x, xs, ys))
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return float(ys[-1] + slope * (x - xs[-1]))


def build(data_dir: str = DATA_DIR) -> dict[str, Any]:
    mlp = [r for r in _rows(os.path.join(data_dir, "llama2_70b_mlp.csv"))
           if r["num_tensor_parallel_workers"] == str(TP)]
    ar_sizes, ar_ms = _collective(os.path.join(data_dir, "h100_dgx_all_reduce.csv"),
                                  "all_reduce", {"num_workers": str(TP)})
    sr_sizes, sr_ms = _collective(os.path.join(data_dir, "h100_dgx_send_recv.csv"),
                                  "send_recv", {"num_workers": "2", "devices_per_node": "2"})
    lm_head_ms = VOCAB * HIDDEN * 2 / TP / HBM_BYTES_S * 1e3  # bf16 weights, read once a step

    # Non-attention time of a step of n tokens (ms), all layers.
    tokens, step_ms = [], []
    for row in sorted(mlp, key=lambda r: int(r["num_tokens"])):
        n = int(row["num_tokens"])
        layer = (sum(_median(row, op) for op in _GEMMS) / FP8_GEMM_SPEEDUP
                 + sum(_median(row, op) for op in _OTHERS))
        all_reduce = 2 * _interp(n * HIDDEN * 2, ar_sizes, ar_ms)
        tokens.append(n)
        step_ms.append(_median(row, "emb") + LAYERS * (layer + all_reduce) + lm_head_ms)
    x = np.asarray([[1.0, n] for n in tokens])
    y = np.asarray(step_ms)
    const, per_token = (float(c) for c in fit_nonnegative(x, y))
    fit_error = float(np.median(np.abs(x @ np.asarray([const, per_token]) - y) / y))

    # Attention from FLOPs and bytes (per GPU: HEADS / TP query heads, KV_HEADS / TP KV heads).
    pair_flops = LAYERS * 4 * (HEADS // TP) * HEAD_DIM
    attention_ms_per_pair = pair_flops / (BF16_FLOPS * ATTN_FLOP_EFFICIENCY) * 1e3
    kv_bytes_gpu = LAYERS * 2 * (KV_HEADS // TP) * HEAD_DIM * KV_DTYPE_BYTES
    kv_read_ms_per_position = kv_bytes_gpu / (HBM_BYTES_S * KV_READ_EFFICIENCY) * 1e3

    # KV capacity of one TP4 engine.
    weights_bytes = PARAMS * 1 + 2 * VOCAB * HIDDEN * 2  # FP8 layers; bf16 embedding + LM head
    usable = TP * HBM_GIB * (1 << 30) * GPU_MEMORY_UTILIZATION
    kv_bytes = usable - weights_bytes - TP * RESERVE_GIB_PER_GPU * (1 << 30)
    kv_bytes_per_token = 2 * LAYERS * KV_HEADS * HEAD_DIM * KV_DTYPE_BYTES
    kv_pages = int(kv_bytes // (kv_bytes_per_token * PAGE_SIZE))

    # The link: latency + bytes / bandwidth over sends of 8 MiB and more, per GPU pair.
    big = sr_sizes >= 8 << 20
    slope, intercept = np.polyfit(sr_sizes[big], sr_ms[big], 1)
    pair_gbps = 1.0 / (slope * 1e-3) / 1e9
    body: dict[str, Any] = {
        "name": NAME,
        "description": "Llama-3.1-70B, FP8 weights, bf16 KV, one engine = 4 x H100 SXM (TP4); "
                       "two engines in one 8-GPU DGX, KV moving over NVLink. Non-attention "
                       "layers and communication measured (Vidur), attention computed from "
                       "FLOPs and bytes against H100 peaks.",
        "model": {"model_id": "meta-llama/Llama-3.1-70B-Instruct-FP8", "num_layers": LAYERS,
                  "num_kv_heads": KV_HEADS, "head_dim": HEAD_DIM,
                  "kv_dtype_bytes": KV_DTYPE_BYTES, "max_context": MAX_CONTEXT},
        "kv_bytes_per_token": kv_bytes_per_token,
        "page_size": PAGE_SIZE, "kv_pages": kv_pages, "chunk_size": CHUNK_SIZE,
        "max_running": MAX_RUNNING,
        "link_gbps": round(TP * pair_gbps, 1), "link_latency_ms": round(max(0.0, intercept), 4),
        "rpc_ms": 0.0,
        # Assumed, not measured (no H100 here): see "assumptions".
        "link_chunk_ms": LINK_CHUNK_MS, "send_chunk_ms": SEND_CHUNK_MS,
        "gather_gbps": round(TP * HBM_BYTES_S / 2 * GATHER_EFFICIENCY / 1e9, 1),
        "recv_step_share": 0.0, "cores": 0, "contention": 1.0, "decode_contention": 1.0,
        "router_ms": ROUTER_MS,
        "latency_model": {
            "const": round(const, 4), "prefill_tokens": round(per_token, 6),
            "decode_seqs": round(per_token, 6),
            "prefill_attention": float(f"{attention_ms_per_pair:.6g}"),
            "prefill_context": float(f"{kv_read_ms_per_position:.6g}"),
            "decode_context": float(f"{kv_read_ms_per_position:.6g}"),
        },
        "sources": [
            "Vidur (microsoft/vidur, MIT): data/profiling/compute/h100/meta-llama/Llama-2-70b-hf/"
            "mlp.csv (loadtest/data/vidur_h100/llama2_70b_mlp.csv), TP4 rows",
            "Vidur: data/profiling/network/h100_dgx/all_reduce.csv (4 workers) and "
            "send_recv.csv (2 workers, both on one node)",
            "NVIDIA H100 SXM5 datasheet: HBM3 3.35 TB/s, BF16 dense 989.4 TFLOP/s, 80 GB",
        ],
        "arithmetic": {
            "non_attention_step_ms(n tokens)": "emb(n) + 80 x [ (QKV + O + MLP up + MLP down GEMMs)"
                f"(n) / {FP8_GEMM_SPEEDUP} + norms, rope, act, adds (n) + 2 x all_reduce(n x "
                f"8192 x 2 B) ] + LM head {lm_head_ms:.3f} ms (bf16 128256 x 8192 / 4 GPUs / "
                "3.35 TB/s)",
            "fit": f"const + per_token x n over n = 1..4096 (the engine's relative-L1 fit): "
                   f"const {const:.3f} ms, {per_token * 1e3:.3f} us/token, median error "
                   f"{fit_error:.1%}; decode_seqs = prefill_tokens (a decode is one token "
                   "through the same layers)",
            "prefill_attention": f"80 layers x 4 x 16 heads x 128 = {pair_flops} FLOP per "
                                 f"query-key pair per GPU / ({BF16_FLOPS / 1e12:.1f} TFLOP/s x "
                                 f"{ATTN_FLOP_EFFICIENCY})",
            "prefill_context, decode_context": f"80 layers x K,V x 2 KV heads x 128 x 2 B = "
                                               f"{kv_bytes_gpu} B per position per GPU / "
                                               f"(3.35 TB/s x {KV_READ_EFFICIENCY})",
            "kv_pages": f"4 x {HBM_GIB} GiB x {GPU_MEMORY_UTILIZATION} - weights "
                        f"{weights_bytes / 1e9:.1f} GB (70.6e9 FP8 + bf16 embedding and LM head)"
                        f" - 4 x {RESERVE_GIB_PER_GPU} GiB reserve = {kv_bytes / (1 << 30):.1f} "
                        f"GiB of KV / {kv_bytes_per_token} B per token "
                        f"({kv_bytes // kv_bytes_per_token:.0f} tokens) / {PAGE_SIZE}",
            "link": f"send/recv within a node, sizes >= 8 MiB: {intercept * 1e3:.1f} us + bytes"
                    f" / {pair_gbps:.0f} GB/s per GPU pair; x 4 pairs",
        },
        "assumptions": {
            "fp8_gemm_speedup": FP8_GEMM_SPEEDUP,
            "attention_flop_efficiency": ATTN_FLOP_EFFICIENCY,
            "kv_read_efficiency": KV_READ_EFFICIENCY,
            "gpu_memory_utilization": GPU_MEMORY_UTILIZATION,
            "reserve_gib_per_gpu": RESERVE_GIB_PER_GPU,
            "chunk_size": f"{CHUNK_SIZE} prefill tokens per step",
            "max_running": f"{MAX_RUNNING} sequences (vLLM's default max_num_seqs)",
            "not_modelled": "per-step CPU scheduling overhead; the LM head's FLOPs (negligible);"
                            " attention kernel launch costs",
            "link_chunk_ms": f"{LINK_CHUNK_MS} ms per chunk on the receiver (a frame, a scatter "
                             "kernel's launch and completion event)",
            "send_chunk_ms": f"{SEND_CHUNK_MS} ms per chunk on the sender's step thread (a "
                             "gather kernel's launch, an event record)",
            "gather_gbps": f"each GPU gathers its own KV heads: HBM 3.35 TB/s / 2 (read and "
                           f"write) x {GATHER_EFFICIENCY} x 4 GPUs",
            "recv_step_share": "0: the receiver's scatter runs beside its step (copy engines)",
            "cores": "0: each engine owns its GPUs, engines never contend for them",
            "router_ms": f"{ROUTER_MS} ms per verb: this machine's router CPU per request with "
                         "a Python policy (0.228 ms, docs/benchmarks.md) over a pd request's "
                         "3 verbs",
        },
    }
    profile_from_dict(body, NAME)  # the simulator must accept what this writes
    return body


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=DATA_DIR, help="directory with Vidur's CSVs")
    p.add_argument("--out", default=os.path.join(PROFILE_DIR, f"{NAME}.json"))
    a = p.parse_args()
    body = build(a.data)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(body, f, indent=1)
        f.write("\n")
    print(f"wrote {a.out}")
    for key, value in body["arithmetic"].items():
        print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
