"""KV transports between engines behind one interface (engine/transfer/base.py)."""
from __future__ import annotations

from engine.transfer.base import ChunkBuffer, SendSession, TransferError, TransferResult, Transport
from engine.transfer.kv_addr import BadKVAddr, KVAddr
from engine.transfer.layout import KVLayout, LayoutMismatch
from engine.transfer.listener import KVSink, TransferListener
from engine.transfer.pool import TransportPool, choose_transport, local_host_id

__all__ = [
    "BadKVAddr", "ChunkBuffer", "KVAddr", "KVLayout", "KVSink", "LayoutMismatch", "SendSession",
    "TransferError", "TransferListener", "TransferResult", "Transport", "TransportPool",
    "choose_transport", "local_host_id",
]
