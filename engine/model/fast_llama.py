"""FastLlamaModel: the fast CPU mode of the Llama-family model (same forward contract as
LlamaModel), batch-invariant by construction.

Linear layers run on block-quantised weights (the GGUF's own Q4_1 / Q8_0 bits) against int8
block-quantised activations with exact integer block dot products (llama.cpp's scheme); norms,
SiLU, RoPE and attention run in float32 in the kernels of engine/kernels. Every kernel computes
a token's row with the same operations in the same order whatever the batch or prefill chunk,
so greedy tokens are identical across patterns (tests/engine/test_fast_mode.py). The residual
stream stays float32; the KV cache is bfloat16 by default.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.attention.context import ForwardContext
from engine.kernels import keep_freed_memory, ops
from engine.model.config import ModelConfig
from engine.model.quant_weights import (
    BlockWeight,
    RawBlocks,
    concat,
    dequantize,
    pack,
    quantize_q8_0,
)
from engine.model.rope import RopeTable

_LINEARS = {
    "qkv_proj": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "o_proj": ("self_attn.o_proj.weight",),
    "gate_up_proj": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
    "down_proj": ("mlp.down_proj.weight",),
}
_NORMS = {"input_norm": "input_layernorm.weight", "post_norm": "post_attention_layernorm.weight"}


class MissingFastWeight(KeyError):
    """The checkpoint lacks a tensor the fast model needs."""


def fast_state(config: ModelConfig, dense: dict[str, torch.Tensor],
               blocks: dict[str, RawBlocks]) -> dict[str, torch.Tensor]:
    """The packed state dict the fast model is built from (and the weight cache stores):
    linear layers packed from raw blocks where the checkpoint has them, otherwise quantised
    to Q8_0 from the dense weight."""

    def raw(name: str) -> RawBlocks:
        if name in blocks:
            return blocks[name]
        if name not in dense:
            raise MissingFastWeight(f"checkpoint has no tensor {name!r}")
        return quantize_q8_0(dense[name].float().numpy())

    def norm(name: str) -> torch.Tensor:
        if name not in dense:
            raise MissingFastWeight(f"checkpoint has no tensor {name!r}")
        return dense[name].float().contiguous()

    state: dict[str, torch.Tensor] = {}
    for i in range(config.num_layers):
        prefix = f"model.layers.{i}."
        for short, names in _LINEARS.items():
            state.update(pack(concat([raw(prefix + n) for n in names])).to_state(prefix + short))
        for short, name in _NORMS.items():
            state[prefix + short] = norm(prefix + name)
    state["model.norm.weight"] = norm("model.norm.weight")
    tied = config.tie_word_embeddings or not ({"lm_head.weight"} & (dense.keys() | blocks.keys()))
    head_name = "model.embed_tokens.weight" if tied else "lm_head.weight"
    head = raw(head_name)
    if head.fmt != 1:  # the lm_head (and the tied embedding lookup) is read as Q8_0
        head = quantize_q8_0(dequantize(head))
    state.update(pack(head).to_state("lm_head"))
    if not tied:
        embed = dense.get("model.embed_tokens.weight")
        state["embed"] = (embed.float() if embed is not None
                          else torch.from_numpy(dequantize(raw("model.embed_tokens.weight"))))
    return state


class FastLlamaLayer:
    def __init__(self, config: ModelConfig, state: dict[str, torch.Tensor], prefix: str) -> None:
        self.eps = config.rms_norm_eps
        self.q_size = config.q_size
        self.input_norm = state[prefix + "input_norm"]
        self.post_norm = state[prefix + "post_norm"]
        self.qkv_proj = BlockWeight.from_state(state, prefix + "qkv_proj")
        self.o_proj = BlockWeight.from_state(state, prefix + "o_proj")
        self.gate_up_proj = BlockWeight.from_state(state, prefix + "gate_up_proj")
        self.down_proj = BlockWeight.from_state(state, prefix + "down_proj")

    def forward(self, layer_idx: int, hidden: torch.Tensor, rope: RopeTable,
                ctx: ForwardContext) -> torch.Tensor:
        k = ops()
        qkv = self.qkv_proj.matmul(k.rmsnorm_quantize(hidden, self.input_norm, self.eps))
        attended = ctx.backend.run_qkv(layer_idx, qkv, rope, ctx)  # type: ignore[attr-defined]
        if ctx.layer_hook is not None:
            ctx.layer_hook(layer_idx)
        hidden = self.o_proj.matmul(k.quantize_rows(attended), residual=hidden)
        gate_up = self.gate_up_proj.matmul(k.rmsnorm_quantize(hidden, self.post_norm, self.eps))
        return self.down_proj.matmul(k.silu_mul_quantize(gate_up), residual=hidden)


class FastLlamaModel(nn.Module):
    """Forward contract of LlamaModel; needs the "cpu" attention backend (fused RoPE + KV
    write + attention per layer)."""

    dtype = torch.float32
    uses_int4 = False

    def __init__(self, config: ModelConfig, state: dict[str, torch.Tensor]) -> None:
        super().__init__()
        keep_freed_memory()
        self.config = config
        self.device = torch.device("cpu")
        self.layers_fast = [FastLlamaLayer(config, state, f"model.layers.{i}.")
                            for i in range(config.num_layers)]
        self.final_norm = state["model.norm.weight"]
        self.lm_head = BlockWeight.from_state(state, "lm_head")
        if self.lm_head.n != config.vocab_size or self.lm_head.k != config.hidden_size:
            raise MissingFastWeight(f"output projection is {self.lm_head.n}x{self.lm_head.k}, "
                                    f"expected {config.vocab_size}x{config.hidden_size}")
        self.embed = state.get("embed")  # None: tied, read from the packed lm_head
        self.rope = RopeTable(config, torch.float32, self.device)

    def weight_tensors(self) -> dict[str, torch.Tensor]:
        """Every weight the forward pass reads (packed bytes count as what streams per step)."""
        named = {"final_norm": self.final_norm, "lm_head": self.lm_head.packed}
        if self.embed is not None:
            named["embed"] = self.embed
        for i, layer in enumerate(self.layers_fast):
            for name in ("input_norm", "post_norm"):
                named[f"layers.{i}.{name}"] = getattr(layer, name)
            for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
                named[f"layers.{i}.{name}"] = getattr(layer, name).packed
        return named

    def param_count(self) -> int:
        """Weights the model computes with (block-quantised ones by their n x k)."""
        total = self.lm_head.n * self.lm_head.k + self.final_norm.numel()
        if self.embed is not None:
            total += self.embed.numel()
        for layer in self.layers_fast:
            total += layer.input_norm.numel() + layer.post_norm.numel()
            total += sum(w.n * w.k for w in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj,
                                             layer.down_proj))
        return total

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            return F.embedding(input_ids, self.embed)
        return ops().embed_q8_0(input_ids, self.lm_head.packed, self.config.vocab_size,
                                self.config.hidden_size)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                ctx: ForwardContext) -> torch.Tensor:
        max_ctx = max((s.ctx_len for s in ctx.batch.seqs), default=0)
        self.rope.ensure(max_ctx)
        ctx.backend.plan(ctx)
        hidden = self.embed_tokens(input_ids)
        for idx, layer in enumerate(self.layers_fast):
            hidden = layer.forward(idx, hidden, self.rope, ctx)
        picked = hidden.index_select(0, ctx.sample_indices)
        normed = ops().rmsnorm_quantize(picked, self.final_norm, self.config.rms_norm_eps)
        return self.lm_head.matmul(normed)
