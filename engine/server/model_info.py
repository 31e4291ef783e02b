"""What an engine tells peers about itself: model shape, KV layout, where to send KV."""
from __future__ import annotations

from typing import Any

from engine.transfer import KVLayout, local_host_id
from switchyard_rpc import engine_pb2 as pb


def kv_layout(core: Any) -> KVLayout:
    kv = core.kv
    return KVLayout(num_layers=kv.num_layers, num_kv_heads=kv.num_kv_heads, head_dim=kv.head_dim,
                    dtype=str(kv.dtype).removeprefix("torch."))


def model_info(core: Any, config: Any, transfer_addr: str) -> pb.ModelInfoResponse:
    mc = core.model_config
    return pb.ModelInfoResponse(
        model_id=mc.model_id,
        num_layers=mc.num_layers,
        num_kv_heads=mc.num_kv_heads,
        head_dim=mc.head_dim,
        page_size=config.page_size,
        dtype=config.numerics,
        block_hash_seed=core.block_hash_seed,
        vocab_size=mc.vocab_size,
        max_context=core.max_context,
        host_id=local_host_id(),
        transfer_addr=transfer_addr,
        role=config.role,
        engine_id=config.engine_id,
        served_model=config.served_model,
    )
