"""`kv_addr`: the opaque descriptor PrepRecv hands out and RemoteSend consumes.

It names the receiver (host id, KV device and process id for the transport choice, the transfer
listener's address), the reservation (request id, matched prefix, end) and the receiver's KV layout
so the sender can refuse an incompatible pairing before computing anything. Encoded as a magic prefix plus JSON: it is small,
sent once per transfer, and readable when debugging; nothing is ever unpickled.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from engine.transfer.layout import KVLayout

_MAGIC = b"SYKV1:"


class BadKVAddr(ValueError):
    """A kv_addr that was not produced by PrepRecv (or by an incompatible version)."""


@dataclass(slots=True, frozen=True)
class KVAddr:
    request_id: str
    host_id: str
    transfer_host: str
    transfer_port: int
    matched_len: int
    end: int
    layout: KVLayout
    engine_id: str = ""
    # Where the receiver's KV pages live ("cpu", "cuda:0") and its process: CUDA IPC needs both.
    kv_device: str = "cpu"
    pid: int = 0

    def __post_init__(self) -> None:
        if not self.request_id:
            raise BadKVAddr("kv_addr has an empty request id")
        if not 0 <= self.matched_len <= self.end:
            raise BadKVAddr(f"kv_addr range invalid: matched={self.matched_len} end={self.end}")
        if not 0 < self.transfer_port < 65536:
            raise BadKVAddr(f"kv_addr transfer port {self.transfer_port} out of range")

    @property
    def transfer_addr(self) -> str:
        return f"{self.transfer_host}:{self.transfer_port}"

    def encode(self) -> bytes:
        return _MAGIC + json.dumps(asdict(self), separators=(",", ":")).encode()

    @staticmethod
    def decode(raw: bytes) -> KVAddr:
        if not raw.startswith(_MAGIC):
            raise BadKVAddr("kv_addr is not a Switchyard KV descriptor (bad magic/version)")
        try:
            fields: dict[str, Any] = json.loads(raw[len(_MAGIC) :])
            layout = KVLayout(**fields.pop("layout"))
            return KVAddr(layout=layout, **fields)
        except (ValueError, TypeError, KeyError) as exc:
            raise BadKVAddr(f"kv_addr could not be decoded: {exc}") from exc
