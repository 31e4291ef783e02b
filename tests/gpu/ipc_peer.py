"""A receiver in another process, for CUDA IPC checks and the transfer benchmark.

`ReceiverProcess` spawns a process holding a TransferListener whose sink writes K/V into a CUDA
tensor (through the SideStreamSink a CUDA engine uses); the parent sends to it over a real link
and then asks for what arrived. CUDA refuses to open an IPC handle in the process that made it,
so a second process is what the transport really needs.
"""
from __future__ import annotations

import multiprocessing as mp
from multiprocessing.connection import Connection
from typing import Any

import torch

from engine.transfer import KVLayout, TransferListener
from engine.transfer.cuda_ipc import receiving_sink


class _TensorSink:
    def __init__(self, layout: KVLayout, tokens: int, device: str) -> None:
        self.store = torch.zeros(layout.num_layers, 2, tokens, layout.num_kv_heads,
                                 layout.head_dim, dtype=layout.torch_dtype, device=device)

    def write_kv(self, request_id: str, layer: int, start: int, k: torch.Tensor,
                 v: torch.Tensor) -> None:
        self.store[layer, 0, start : start + k.shape[0]].copy_(k)
        self.store[layer, 1, start : start + v.shape[0]].copy_(v)


def _serve(layout: dict[str, Any], tokens: int, device: str, conn: Connection) -> None:
    kv_layout = KVLayout(**layout)
    sink = _TensorSink(kv_layout, tokens, device)
    listener = TransferListener(receiving_sink(sink, device), kv_layout)
    conn.send(listener.port)
    while (command := conn.recv()) != "stop":
        if command == "dump":
            torch.cuda.synchronize()
            conn.send(sink.store.cpu())
        elif command == "clear":
            sink.store.zero_()
            conn.send("ok")
    listener.close()


class ReceiverProcess:
    def __init__(self, layout: KVLayout, tokens: int, device: str = "cuda:0") -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        fields = {"num_layers": layout.num_layers, "num_kv_heads": layout.num_kv_heads,
                  "head_dim": layout.head_dim, "dtype": layout.dtype}
        self._proc = ctx.Process(target=_serve, args=(fields, tokens, device, child), daemon=True)
        self._proc.start()
        if not self._conn.poll(120):
            self.stop()
            raise RuntimeError("the receiver process did not start")
        self.port: int = self._conn.recv()

    def dump(self) -> torch.Tensor:
        self._conn.send("dump")
        store: torch.Tensor = self._conn.recv()
        return store

    def clear(self) -> None:
        self._conn.send("clear")
        self._conn.recv()

    def stop(self) -> None:
        if self._proc.is_alive():
            try:
                self._conn.send("stop")
            except OSError:
                pass
            self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
