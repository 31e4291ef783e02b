"""LlamaModel: a Llama-family decoder (RMSNorm, RoPE, GQA, SwiGLU, tied embeddings) for inference.

Built from Hugging Face-named weights. q/k/v and gate/up projections are fused into one matmul
each at load time: on CPU a step's cost is dominated by streaming weights, and fewer, larger
matmuls stream them with less overhead. Attention is delegated to `ctx.backend`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.attention.context import ForwardContext
from engine.model.config import ModelConfig
from engine.model.linear import Linear
from engine.model.q4_weights import Int4Weight, is_q4_part
from engine.model.rope import RopeTable


class MissingWeight(KeyError):
    """The checkpoint lacks a tensor the model needs."""


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Normalised in float32 like the reference implementation, scaled in the model dtype; the
    # fused kernel saves five dispatches per call over the spelled-out formula.
    normed = F.rms_norm(x.to(torch.float32), (x.shape[-1],), eps=eps)
    return weight * normed.to(x.dtype)


class LlamaLayer(nn.Module):
    def __init__(self, config: ModelConfig, weights: dict[str, torch.Tensor], prefix: str,
                 raw_q4: dict[str, torch.Tensor] | None) -> None:
        super().__init__()
        self.q_size = config.q_size
        self.kv_size = config.kv_size
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.eps = config.rms_norm_eps

        def w(name: str) -> torch.Tensor:
            key = prefix + name
            if key not in weights:
                raise MissingWeight(f"checkpoint has no tensor {key!r}")
            return weights[key]

        def linear(*names: str) -> Linear:
            # Fused along the output dim: one matmul streams all of these weights at once.
            dense = torch.cat([w(n) for n in names]) if len(names) > 1 else w(names[0])
            int4 = None
            if raw_q4 is not None:
                int4 = Int4Weight.from_state(raw_q4, [prefix + n for n in names])
            return Linear(dense, int4)

        self.input_norm = w("input_layernorm.weight")
        self.qkv_proj = linear("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                               "self_attn.v_proj.weight")
        self.o_proj = linear("self_attn.o_proj.weight")
        self.post_norm = w("post_attention_layernorm.weight")
        self.gate_up_proj = linear("mlp.gate_proj.weight", "mlp.up_proj.weight")
        self.down_proj = linear("mlp.down_proj.weight")

    def weight_tensors(self) -> dict[str, torch.Tensor]:
        return {"input_norm": self.input_norm, "qkv_proj": self.qkv_proj.weight,
                "o_proj": self.o_proj.weight, "post_norm": self.post_norm,
                "gate_up_proj": self.gate_up_proj.weight, "down_proj": self.down_proj.weight}

    def forward(self, layer_idx: int, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                rope: RopeTable, ctx: ForwardContext) -> torch.Tensor:
        tokens = hidden.shape[0]
        x = rms_norm(hidden, self.input_norm, self.eps)
        qkv = self.qkv_proj(x)
        # q and k heads are adjacent in the fused output: rotate them in one go.
        qk = qkv[:, : self.q_size + self.kv_size].view(tokens, -1, self.head_dim)
        qk = rope.apply(qk, cos, sin)
        q, k = qk[:, : self.num_heads], qk[:, self.num_heads:]
        v = qkv[:, self.q_size + self.kv_size:].view(tokens, self.num_kv_heads, self.head_dim)
        attended = ctx.backend.run(layer_idx, q, k, v, ctx)
        if ctx.layer_hook is not None:
            ctx.layer_hook(layer_idx)
        hidden = hidden + self.o_proj(attended.reshape(tokens, self.q_size))
        x = rms_norm(hidden, self.post_norm, self.eps)
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return hidden + self.down_proj(F.silu(gate) * up)


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig, weights: dict[str, torch.Tensor],
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                 use_int4: bool = False) -> None:
        """`weights` in Hugging Face naming; with `use_int4`, Q4_1 parts (q4_weights) present in
        `weights` feed the int4 kernel for small batches."""
        super().__init__()
        self.config = config
        self.dtype = dtype
        self.device = torch.device(device)
        cast = {name: t.to(device=self.device, dtype=dtype) for name, t in weights.items()
                if not is_q4_part(name)}
        raw_q4 = {name: t for name, t in weights.items() if is_q4_part(name)} if use_int4 else None
        self.uses_int4 = bool(raw_q4)
        if "model.embed_tokens.weight" not in cast:
            raise MissingWeight("checkpoint has no tensor 'model.embed_tokens.weight'")
        self.embed = cast["model.embed_tokens.weight"]
        if tuple(self.embed.shape) != (config.vocab_size, config.hidden_size):
            raise MissingWeight(f"embedding shape {tuple(self.embed.shape)} does not match "
                                f"vocab_size x hidden_size {config.vocab_size}x{config.hidden_size}")
        self.layers = nn.ModuleList(LlamaLayer(config, cast, f"model.layers.{i}.", raw_q4)
                                    for i in range(config.num_layers))
        if "model.norm.weight" not in cast:
            raise MissingWeight("checkpoint has no tensor 'model.norm.weight'")
        self.final_norm = cast["model.norm.weight"]
        lm_head = cast.get("lm_head.weight")
        if lm_head is None or config.tie_word_embeddings:
            lm_head = self.embed  # tied: the output projection is the embedding matrix
        self.lm_head = lm_head
        self.rope = RopeTable(config, dtype, self.device)

    def weight_tensors(self) -> dict[str, torch.Tensor]:
        """Every weight the forward pass reads, by a stable name (fused layout)."""
        named = {"embed": self.embed, "final_norm": self.final_norm, "lm_head": self.lm_head}
        for i, layer in enumerate(self.layers):
            assert isinstance(layer, LlamaLayer)
            named.update({f"layers.{i}.{k}": v for k, v in layer.weight_tensors().items()})
        return named

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                ctx: ForwardContext) -> torch.Tensor:
        max_ctx = max((s.ctx_len for s in ctx.batch.seqs), default=0)
        self.rope.ensure(max_ctx)
        cos = self.rope.cos[positions].unsqueeze(1)
        sin = self.rope.sin[positions].unsqueeze(1)
        ctx.backend.plan(ctx)
        hidden = F.embedding(input_ids, self.embed)
        for idx, layer in enumerate(self.layers):
            hidden = layer(idx, hidden, cos, sin, self.rope, ctx)
        # Norm and project only the rows whose logits are wanted; RMSNorm is per row.
        picked = rms_norm(hidden[ctx.sample_indices], self.final_norm, self.config.rms_norm_eps)
        return F.linear(picked, self.lm_head).to(torch.float32)
