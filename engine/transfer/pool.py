"""Which transport to use for a receiver, and one cached link per (receiver, transport).

Automatic choice: a receiver with our host_id whose KV is on CUDA, like ours, in another process
gets `cuda_ipc` (GPU to GPU); another receiver with our host_id is reachable through /dev/shm;
anything else over tcp. `SWITCHYARD_KV_TRANSPORT=tcp|shm|cuda_ipc` (or a per-request override)
forces one. Dead links are replaced on the next use, so a restarted receiver is reachable again.
"""
from __future__ import annotations

import os
import socket
import threading
from functools import cache

from engine.transfer.base import TransferError, Transport
from engine.transfer.cuda_ipc import CudaIpcTransport, ipc_reachable
from engine.transfer.kv_addr import KVAddr
from engine.transfer.layout import KVLayout
from engine.transfer.shm import ShmTransport
from engine.transfer.tcp import TcpTransport

TRANSPORTS = ("shm", "tcp", "cuda_ipc")
FORCE_ENV = "SWITCHYARD_KV_TRANSPORT"


@cache
def local_host_id() -> str:
    """Hostname plus boot id: equal only for processes that share this kernel's /dev/shm."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "noboot"
    return f"{socket.gethostname()}/{boot}"


def choose_transport(addr: KVAddr, override: str = "", local_device: str = "cpu") -> str:
    """`local_device`: where this (sending) engine's KV pages live."""
    forced = override or os.environ.get(FORCE_ENV, "")
    same_host = addr.host_id == local_host_id()
    if forced:
        if forced not in TRANSPORTS:
            raise TransferError(f"unknown KV transport {forced!r} (have {TRANSPORTS})",
                                "INVALID_ARGUMENT")
        if forced == "shm" and not same_host:
            raise TransferError("shm transport asked for a receiver on another host",
                                "INVALID_ARGUMENT")
        if forced == "cuda_ipc" and not ipc_reachable(addr, local_device, same_host):
            raise TransferError(
                "cuda_ipc transport needs a receiver on this host, in another process, with both "
                f"engines' KV on CUDA (sender {local_device}, receiver {addr.kv_device})",
                "INVALID_ARGUMENT")
        return forced
    if ipc_reachable(addr, local_device, same_host):
        return "cuda_ipc"
    return "shm" if same_host else "tcp"


class TransportPool:
    def __init__(self, layout: KVLayout, device: str = "cpu") -> None:
        self._layout = layout
        self._device = device  # where this engine's KV pages live
        self._links: dict[tuple[str, str], Transport] = {}
        self._lock = threading.Lock()

    def get(self, addr: KVAddr, override: str = "") -> Transport:
        kind = choose_transport(addr, override, self._device)
        self._layout.check_compatible(addr.layout)
        key = (addr.transfer_addr, kind)
        with self._lock:
            link = self._links.get(key)
            if link is not None and link.alive:
                return link
            if link is not None:
                link.close()
            new: Transport
            if kind == "cuda_ipc":
                new = CudaIpcTransport(addr.transfer_host, addr.transfer_port, self._layout,
                                       self._device)
            elif kind == "shm":
                new = ShmTransport(addr.transfer_host, addr.transfer_port, self._layout)
            else:
                new = TcpTransport(addr.transfer_host, addr.transfer_port, self._layout)
            self._links[key] = new
            return new

    def close(self) -> None:
        with self._lock:
            links = list(self._links.values())
            self._links.clear()
        for link in links:
            link.close()
