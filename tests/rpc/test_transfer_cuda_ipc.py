"""The CUDA IPC transport's CPU-checkable half: when it is chosen, what travels, clean refusals.

- choose_transport picks cuda_ipc exactly for a receiver on this host, in another process, with
  both KV pools on CUDA; forcing it elsewhere is an INVALID_ARGUMENT TransferError.
- kv_addr carries the receiver's KV device and pid; descriptors without them still decode.
- The IPC handle fields survive JSON both ways; malformed ones are refused.
- A listener on a machine without CUDA answers a cuda_ipc HELLO with an error and keeps serving.
The transfer itself (two processes, one GPU) runs on a GPU: tests/gpu/test_cuda_ipc_transport.py.
"""
from __future__ import annotations

import json
import os
import socket

import pytest
import torch

from engine.transfer import KVAddr, KVLayout, TransferError, TransferListener, choose_transport
from engine.transfer.cuda_ipc import (
    IpcHandleError,
    decode_handle,
    encode_handle,
    ipc_reachable,
    receiving_sink,
)
from engine.transfer.frames import FrameKind, Header, recv_header, recv_payload, send_frame
from engine.transfer.pool import local_host_id
from engine.transfer.tcp import TcpTransport

pytestmark = pytest.mark.timeout(60)

LAYOUT = KVLayout(num_layers=2, num_kv_heads=2, head_dim=8, dtype="bfloat16")
OTHER_PID = os.getpid() + 1


def _addr(kv_device: str = "cuda:0", pid: int = OTHER_PID, host_id: str | None = None,
          port: int = 1234) -> KVAddr:
    return KVAddr("r1", host_id or local_host_id(), "127.0.0.1", port, 0, 16, LAYOUT,
                  "e1", kv_device=kv_device, pid=pid)


def test_cuda_ipc_is_chosen_for_a_cuda_peer_process_on_this_host(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWITCHYARD_KV_TRANSPORT", raising=False)
    assert choose_transport(_addr(), "", "cuda:0") == "cuda_ipc"
    assert choose_transport(_addr("cuda:1"), "", "cuda") == "cuda_ipc"  # across GPUs too
    assert choose_transport(_addr(), "", "cpu") == "shm"  # our pages are on the CPU
    assert choose_transport(_addr("cpu"), "", "cuda:0") == "shm"  # theirs are
    assert choose_transport(_addr(pid=os.getpid()), "", "cuda:0") == "shm"  # same process
    assert choose_transport(_addr(pid=0), "", "cuda:0") == "shm"  # an older receiver
    assert choose_transport(_addr(host_id="elsewhere/boot"), "", "cuda:0") == "tcp"
    assert choose_transport(_addr(), "tcp", "cuda:0") == "tcp"  # forcing still wins


@pytest.mark.parametrize("addr", [_addr("cpu"), _addr(pid=os.getpid()),
                                  _addr(host_id="elsewhere/boot")])
def test_forcing_cuda_ipc_where_it_cannot_work_is_invalid(
        monkeypatch: pytest.MonkeyPatch, addr: KVAddr) -> None:
    monkeypatch.setenv("SWITCHYARD_KV_TRANSPORT", "cuda_ipc")
    with pytest.raises(TransferError) as err:
        choose_transport(addr, "", "cuda:0")
    assert err.value.code == "INVALID_ARGUMENT"
    with pytest.raises(TransferError):
        choose_transport(_addr(), "", "cpu")
    assert choose_transport(_addr(), "", "cuda:0") == "cuda_ipc"


def test_ipc_reachable_takes_the_pid_to_compare() -> None:
    addr = _addr(pid=4242)
    assert ipc_reachable(addr, "cuda:0", True, pid=1)
    assert not ipc_reachable(addr, "cuda:0", True, pid=4242)
    assert not ipc_reachable(addr, "cuda:0", False, pid=1)


def test_kv_addr_carries_device_and_pid_and_old_descriptors_decode() -> None:
    addr = _addr("cuda:3", 777)
    back = KVAddr.decode(addr.encode())
    assert back == addr and back.kv_device == "cuda:3" and back.pid == 777
    old = json.loads(addr.encode()[len(b"SYKV1:"):])
    del old["kv_device"], old["pid"]
    legacy = KVAddr.decode(b"SYKV1:" + json.dumps(old).encode())
    assert legacy.kv_device == "cpu" and legacy.pid == 0


def test_handle_fields_round_trip_through_json() -> None:
    shared = (1, b"\x00\x01handle" * 8, 1 << 26, 4096, b"/torch_123_ref", 8, b"evt" * 20, True)
    fields = json.loads(json.dumps({**encode_handle(shared), "nbytes": 1 << 26}))
    assert decode_handle(fields) == shared
    no_event = (0, b"h" * 64, 100, 0, b"r", 0, None, False)
    assert decode_handle({**encode_handle(no_event), "nbytes": 100}) == no_event


@pytest.mark.parametrize("breakage", [
    lambda f: f.pop("handle"),
    lambda f: f.update(handle=12),
    lambda f: f.update(handle="not base64!"),
    lambda f: f.update(size_bytes=-1),
    lambda f: f.update(extra=1),
])
def test_malformed_handles_are_refused(breakage) -> None:  # type: ignore[no-untyped-def]
    fields = {**encode_handle((0, b"h" * 64, 100, 0, b"r", 0, None, False)), "nbytes": 100}
    breakage(fields)
    with pytest.raises(IpcHandleError):
        decode_handle(fields)
    with pytest.raises(IpcHandleError):
        encode_handle((0, b"h"))


class _Sink:
    def __init__(self) -> None:
        self.writes: list[tuple[str, int, int]] = []

    def write_kv(self, request_id: str, layer: int, start: int, k: torch.Tensor,
                 v: torch.Tensor) -> None:
        self.writes.append((request_id, layer, start))


def test_cpu_engines_write_through_their_own_sink() -> None:
    sink = _Sink()
    assert receiving_sink(sink, "cpu") is sink


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a CPU machine")
def test_listener_without_cuda_refuses_a_cuda_ipc_link_and_keeps_serving() -> None:
    sink = _Sink()
    listener = TransferListener(sink, LAYOUT)
    try:
        hello = {"cuda_ipc": {**encode_handle((0, b"h" * 64, 100, 0, b"r", 0, None, False)),
                              "nbytes": 100}}
        with socket.create_connection(("127.0.0.1", listener.port), timeout=10) as conn:
            send_frame(conn, Header(FrameKind.HELLO), json.dumps(hello).encode())
            reply = recv_header(conn)
            body = json.loads(recv_payload(conn, reply))
        assert reply.kind == FrameKind.HELLO_ACK and "CUDA" in body["error"]
        link = TcpTransport("127.0.0.1", listener.port, LAYOUT)  # the listener still serves
        try:
            session = link.open_session("r1")
            buf = session.buffer(0, 0, 3)
            buf.tensor.zero_()
            session.commit(0, 0, 3, buf)
            assert session.finish(timeout_s=10).bytes_acked == LAYOUT.chunk_bytes(3)
        finally:
            link.close()
        assert sink.writes == [("r1", 0, 0)]
    finally:
        listener.close()
