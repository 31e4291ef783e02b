"""`cuda_ipc`: KV moves GPU to GPU on one host; the socket link only carries pointers.

The same link and pipelining as `shm` (engine/transfer/link.py), with the staging ring in device
memory: the sender gathers each layer's K/V from its pages into the ring on its compute stream
(its one copy), and its writer thread sends the frame once that gather has finished (a CUDA event,
so the step thread never waits). The ring's CUDA IPC handle travels once, in the link's HELLO
frame over the engines' KV connection; the receiver maps it and copies each chunk from the
sender's ring into its own pages on a side stream (`SideStreamSink`), waiting for the copy before
it acknowledges, so the sender only reuses ring space whose bytes have landed. Sender and receiver
may sit on the same or on different GPUs of the host; the copy crosses NVLink/PCIe peer to peer.

Why a ring and not the sender's pages directly: a finished send's pages go back to the prefix
cache or the free list while the receiver may still be copying; the ring is owned by the link.

Chosen automatically (engine/transfer/pool.py) when both engines hold KV on CUDA on the same
host in different processes (CUDA refuses to open an IPC handle in the process that made it).
NCCL between hosts is not built.
"""
from __future__ import annotations

import base64
import binascii
import os
from typing import TYPE_CHECKING, Any

import torch

from engine.transfer.kv_addr import KVAddr
from engine.transfer.layout import KVLayout
from engine.transfer.link import SocketLink
from engine.transfer.staging import FifoRing

if TYPE_CHECKING:
    from engine.transfer.listener import KVSink

DEFAULT_STAGING_BYTES = int(os.environ.get("SWITCHYARD_CUDA_IPC_STAGING_MB", "64")) << 20
# The fields of torch's `UntypedStorage._share_cuda_()`, in order (bytes fields travel as base64).
_HANDLE_FIELDS = ("device", "handle", "size_bytes", "offset_bytes", "ref_counter_handle",
                  "ref_counter_offset", "event_handle", "event_sync_required")
_BYTES_FIELDS = ("handle", "ref_counter_handle", "event_handle")


class IpcHandleError(ValueError):
    """A HELLO's cuda_ipc description is malformed."""


def is_cuda_device(device: str) -> bool:
    return device == "cuda" or device.startswith("cuda:")


def ipc_reachable(addr: KVAddr, local_device: str, same_host: bool,
                  pid: int | None = None) -> bool:
    """CUDA IPC can carry KV to `addr`: same host, both KV pools on CUDA, another process."""
    return (same_host and is_cuda_device(local_device) and is_cuda_device(addr.kv_device)
            and addr.pid > 0 and addr.pid != (os.getpid() if pid is None else pid))


def encode_handle(shared: tuple[Any, ...]) -> dict[str, Any]:
    """`storage._share_cuda_()` as JSON-able fields (nothing is ever pickled)."""
    if len(shared) != len(_HANDLE_FIELDS):
        raise IpcHandleError(f"expected {len(_HANDLE_FIELDS)} sharing fields, got {len(shared)}")
    fields = dict(zip(_HANDLE_FIELDS, shared, strict=True))
    for name in _BYTES_FIELDS:
        value = fields[name]
        fields[name] = None if value is None else base64.b64encode(bytes(value)).decode()
    fields["device"] = int(fields["device"])
    return fields


def decode_handle(fields: Any) -> tuple[Any, ...]:
    """The inverse of encode_handle, checked field by field."""
    if not isinstance(fields, dict) or set(fields) != {*_HANDLE_FIELDS, "nbytes"}:
        raise IpcHandleError(f"malformed cuda_ipc description: {fields!r}")
    out: list[Any] = []
    for name in _HANDLE_FIELDS:
        value = fields[name]
        if name in _BYTES_FIELDS:
            if value is None and name == "event_handle":
                out.append(None)
                continue
            if not isinstance(value, str):
                raise IpcHandleError(f"cuda_ipc field {name} must be base64 text")
            try:
                out.append(base64.b64decode(value, validate=True))
            except binascii.Error as exc:
                raise IpcHandleError(f"cuda_ipc field {name} is not base64: {exc}") from exc
        elif name == "event_sync_required":
            out.append(bool(value))
        else:
            if not isinstance(value, int) or value < 0:
                raise IpcHandleError(f"cuda_ipc field {name} must be a non-negative int")
            out.append(value)
    return tuple(out)


class DeviceStagingRing(FifoRing):
    """Sender side: a device buffer handed out in FIFO chunks, shareable by CUDA IPC."""

    def __init__(self, nbytes: int, device: torch.device | str) -> None:
        super().__init__(nbytes)
        self.device = torch.device(device)
        self.bytes = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        self._shared = encode_handle(self.bytes.untyped_storage()._share_cuda_())

    def view(self, offset: int, nbytes: int) -> torch.Tensor:
        if offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(f"staging range [{offset}, {offset + nbytes}) outside {self.nbytes}")
        return self.bytes[offset : offset + nbytes]

    def hello(self) -> dict[str, object]:
        return {"cuda_ipc": {**self._shared, "nbytes": self.nbytes}}

    def unlink(self) -> None:
        """Nothing named to remove: the allocation lives as long as this ring (and the peer's
        mapping of it; torch's IPC reference counting keeps it until the receiver lets go)."""


class AttachedDeviceStaging:
    """Receiver side: the sender's device ring, mapped into this process."""

    def __init__(self, description: Any) -> None:
        if not torch.cuda.is_available():
            raise ValueError("cuda_ipc link offered to a receiver without CUDA")
        shared = decode_handle(description)
        self.nbytes = int(description["nbytes"])
        torch.cuda.init()
        storage = torch.UntypedStorage._new_shared_cuda(*shared)
        self.bytes = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
        if self.bytes.numel() < self.nbytes:
            raise ValueError(f"mapped {self.bytes.numel()} bytes, the sender announced "
                             f"{self.nbytes}")

    def view(self, offset: int, nbytes: int) -> torch.Tensor:
        if offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(f"staging range [{offset}, {offset + nbytes}) outside {self.nbytes}")
        return self.bytes[offset : offset + nbytes]

    def close(self) -> None:
        del self.bytes  # drops this process's reference to the sender's allocation


class CudaIpcTransport(SocketLink):
    def __init__(self, host: str, port: int, layout: KVLayout, device: torch.device | str,
                 staging_bytes: int = DEFAULT_STAGING_BYTES) -> None:
        super().__init__(host, port, layout, ring=DeviceStagingRing(staging_bytes, device))
        self.name = "cuda_ipc"


class SideStreamSink:
    """Wraps an engine's write_kv for a CUDA engine: each chunk is copied into the pages on a
    side stream (concurrent with the step's compute, which never reads reserved pages before the
    transfer completes) and waited for before write_kv returns, so the listener's acknowledgement
    means the bytes have landed and the sender's staging (CUDA IPC) may be reused."""

    def __init__(self, sink: KVSink, device: torch.device | str) -> None:
        self._sink = sink
        self.device = torch.device(device)
        self._stream = torch.cuda.Stream(self.device)

    def write_kv(self, request_id: str, layer: int, start: int, k: torch.Tensor,
                 v: torch.Tensor) -> None:
        with torch.cuda.stream(self._stream):
            self._sink.write_kv(request_id, layer, start, k, v)
        self._stream.synchronize()


def receiving_sink(sink: KVSink, kv_device: torch.device | str) -> KVSink:
    """The sink a transfer listener should write through for KV held on `kv_device`."""
    device = torch.device(kv_device)
    if device.type != "cuda":
        return sink
    return SideStreamSink(sink, device)
