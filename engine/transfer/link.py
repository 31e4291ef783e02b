"""Sender side of a socket link to one receiver engine; `tcp` and `shm` are two modes of it.

One socket per engine pair carries frames for every concurrent session to that receiver. A writer
thread drains an outgoing queue (so the step thread only enqueues), a reader thread takes the
receiver's acknowledgements. In `shm` mode the frames only point into the staging area and the
bytes never touch the socket; in `tcp` mode the raw tensor bytes follow each header. A subclass
may bring its own staging ring (CUDA IPC: device memory the receiver maps; cuda_ipc.py).

A link fails safe: anything that goes wrong in either thread (a socket error, a bad frame, an
acknowledgement the ring does not expect, a bug) marks the link dead, fails every session in
flight at once (the receiver's engine falls back to prefilling locally) and the transport pool
opens a fresh link for the next send. A session whose send is cancelled half-way may leave a
chunk it allocated but never sent in the ring; acknowledgements are cumulative (staging.py), so
the next acknowledged chunk frees it too — release order cannot break.
"""
from __future__ import annotations

import json
import logging
import os
import queue
import socket
import threading
import time
from typing import Any, NamedTuple

import torch

from engine.transfer.base import (
    ChunkBuffer,
    SendSession,
    TransferError,
    TransferResult,
    Transport,
    ack_deadline_s,
)
from engine.transfer.frames import (
    FrameError,
    FrameKind,
    Header,
    recv_header,
    recv_payload,
    send_frame,
)
from engine.transfer.layout import KVLayout
from engine.transfer.staging import StagingArea, StagingRing, StagingTimeout
from switchyard_engine_api.auth import engine_token

log = logging.getLogger(__name__)
# How long a sender waits for staging space before deciding the receiver is stuck.
_STAGING_WAIT_S = 30.0
# Frames the writer sends in one go at most.
_MAX_BATCH = 64


# Fault injection for the real-process fault suite (tests/router/test_fault_injection_real.py):
# the first link of this process has its acknowledgement thread crash after this many acks.
FAULT_ACK_CRASH_ENV = "SWITCHYARD_FAULT_KV_ACK_CRASH_AFTER"
_ack_crash = {"left": int(os.environ.get(FAULT_ACK_CRASH_ENV, "0") or 0)}


def _injected_ack_crash() -> None:
    if _ack_crash["left"] > 0:
        _ack_crash["left"] -= 1
        if _ack_crash["left"] == 0:
            _ack_crash["left"] = -1  # once per process
            raise RuntimeError(f"injected acknowledgement-thread crash ({FAULT_ACK_CRASH_ENV})")


class _Outgoing(NamedTuple):
    header: Header
    payload: bytes | torch.Tensor
    # Recorded after the gather into device staging: the frame goes out once the bytes are there.
    ready: torch.cuda.Event | None = None


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    flat: Any = tensor.reshape(-1).view(torch.uint8).numpy()
    return memoryview(flat)


class SocketLink(Transport):
    def __init__(
        self, host: str, port: int, layout: KVLayout, staging_bytes: int = 0,
        connect_timeout_s: float = 5.0, ring: StagingArea | None = None,
    ) -> None:
        self.name = "shm" if staging_bytes else "tcp"
        self.layout = layout
        self.peer = f"{host}:{port}"
        try:
            self._sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        except OSError as exc:
            raise TransferError(f"cannot reach KV receiver at {self.peer}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.ring: StagingArea | None = (
            ring if ring is not None else StagingRing(staging_bytes) if staging_bytes else None)
        try:
            self._handshake(connect_timeout_s)
        except BaseException:
            self._sock.close()
            if self.ring is not None:
                self.ring.close()
            raise
        self._sock.settimeout(None)
        self._outgoing: queue.SimpleQueue[_Outgoing | None] = queue.SimpleQueue()
        self._sessions: dict[int, _LinkSession] = {}
        self._lock = threading.Lock()
        self._next_session = 1
        self._dead: str | None = None
        threading.Thread(target=self._write_loop, name=f"kv-tx-{self.peer}", daemon=True).start()
        threading.Thread(target=self._read_loop, name=f"kv-ack-{self.peer}", daemon=True).start()

    def _handshake(self, timeout_s: float) -> None:
        hello = self.ring.hello() if self.ring else {}
        token = engine_token()
        if token:  # the receiver refuses links without the deployment's engine token
            hello = {**hello, "token": token}
        try:
            send_frame(self._sock, Header(FrameKind.HELLO), json.dumps(hello).encode())
            reply = recv_header(self._sock)
            body = json.loads(recv_payload(self._sock, reply) or b"{}")
        except (OSError, FrameError, ValueError) as exc:
            raise TransferError(f"KV handshake with {self.peer} failed: {exc}") from exc
        if reply.kind != FrameKind.HELLO_ACK or "error" in body:
            raise TransferError(f"KV receiver {self.peer} refused the link: {body.get('error')}")
        if self.ring is not None:
            self.ring.unlink()  # both sides have it mapped; nothing can leak from here on

    @property
    def alive(self) -> bool:
        return self._dead is None

    def open_session(self, request_id: str) -> SendSession:
        with self._lock:
            if self._dead is not None:
                raise TransferError(self._dead)
            sid = self._next_session
            self._next_session += 1
            session = _LinkSession(self, sid)
            self._sessions[sid] = session
        self.enqueue(Header(FrameKind.OPEN, session=sid), request_id.encode())
        return session

    def enqueue(self, header: Header, payload: bytes | torch.Tensor = b"",
                ready: torch.cuda.Event | None = None) -> None:
        self._outgoing.put(_Outgoing(header, payload, ready))

    def forget(self, sid: int) -> None:
        with self._lock:
            self._sessions.pop(sid, None)

    def _write_loop(self) -> None:
        """Send queued frames; a burst of header-only frames (shm chunks, acks of sessions)
        goes out in one write, so the receiver wakes once for all of them."""
        while (item := self._outgoing.get()) is not None:
            batch = [item]
            while len(batch) < _MAX_BATCH:
                try:
                    more = self._outgoing.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._outgoing.put(None)  # stop after this batch
                    break
                batch.append(more)
            try:
                self._send_batch(batch)
            except Exception as exc:  # noqa: BLE001 - whatever broke, the link is unusable now
                self._die(f"KV link to {self.peer} lost while sending: "
                          f"{type(exc).__name__}: {exc}")
                return

    def _send_batch(self, batch: list[_Outgoing]) -> None:
        headers = bytearray()
        for item in batch:
            if item.ready is not None:
                item.ready.synchronize()  # this thread waits for the gather, not the step thread
            payload = item.payload
            if isinstance(payload, bytes) and not payload:
                if item.header.kind != FrameKind.SHM_DATA:
                    item.header.payload_len = 0
                headers += item.header.pack()
                continue
            if headers:
                self._sock.sendall(headers)
                headers = bytearray()
            data = _tensor_bytes(payload) if isinstance(payload, torch.Tensor) else payload
            send_frame(self._sock, item.header, data)
        if headers:
            self._sock.sendall(headers)

    def _read_loop(self) -> None:
        try:
            while True:
                self._read_one()
        except (OSError, FrameError) as exc:
            self._die(f"KV link to {self.peer} lost: {exc}")
        except Exception as exc:  # noqa: BLE001 - a link whose state is in doubt is dead
            self._die(f"KV link to {self.peer} broken: {type(exc).__name__}: {exc}")

    def _read_one(self) -> None:
        header = recv_header(self._sock)
        body = recv_payload(self._sock, header) if header.payload_len else b""
        if header.kind == FrameKind.CHUNK_ACK and self.ring is not None:
            _injected_ack_crash()
            self.ring.release(header.offset)
        elif header.kind == FrameKind.END_ACK:
            reply = json.loads(body or b"{}")
            with self._lock:
                session = self._sessions.pop(header.session, None)
            if session is not None:
                session.complete(reply)
        elif header.kind != FrameKind.CHUNK_ACK:
            raise FrameError(f"unexpected frame {header.kind.name} from the receiver")

    def fail_link(self, reason: str) -> None:
        """Mark the link dead from outside its threads (a stuck receiver): every session in
        flight fails now and the pool opens a fresh link for the next send."""
        self._die(reason)

    def _die(self, reason: str, closing: bool = False) -> None:
        with self._lock:
            if self._dead is not None:
                return
            self._dead = reason
            sessions = list(self._sessions.values())
            self._sessions.clear()
        if not closing:
            log.warning("%s; failing %d send(s) in flight, the next send opens a new link",
                        reason, len(sessions))
        for session in sessions:
            session.fail(TransferError(reason))
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._outgoing.put(None)
        if self.ring is not None:
            self.ring.close()

    def close(self) -> None:
        self._die(f"KV link to {self.peer} closed", closing=True)
        self._sock.close()


class _LinkSession(SendSession):
    def __init__(self, link: SocketLink, sid: int) -> None:
        self._link = link
        self._sid = sid
        self._done = threading.Event()
        self._error: TransferError | None = None
        self._reply: dict[str, object] = {}
        self._chunks = 0
        self._bytes = 0  # committed so far: what may still be in flight at finish()
        self._t_first: float | None = None
        self._t_finish = 0.0
        self._t_ack = 0.0

    def _check_alive(self) -> None:
        # A session that already failed (receiver gone) stops taking chunks, so the sender can
        # give up on its prefill early instead of computing into the void.
        if self._error is not None:
            raise self._error

    def buffer(self, layer: int, start: int, stop: int) -> ChunkBuffer:
        self._check_alive()
        layout = self._link.layout
        n = stop - start
        ring = self._link.ring
        if ring is None:
            return ChunkBuffer(torch.empty(layout.chunk_shape(n), dtype=layout.torch_dtype), -1)
        nbytes = layout.chunk_bytes(n)
        try:
            offset = ring.alloc(nbytes, _STAGING_WAIT_S)
            raw = ring.view(offset, nbytes)
        except StagingTimeout as exc:
            # Closed because the link died: its reason (already this session's error) says why.
            self._check_alive()
            raise TransferError(str(exc)) from exc
        return ChunkBuffer(raw.view(layout.torch_dtype).view(layout.chunk_shape(n)), offset)

    def commit(self, layer: int, start: int, stop: int, chunk: ChunkBuffer) -> None:
        try:
            self._check_alive()
        except TransferError:
            self.discard(chunk)
            raise
        if self._t_first is None:
            self._t_first = time.perf_counter()
        self._chunks += 1
        self._bytes += chunk.tensor.numel() * chunk.tensor.element_size()
        header = Header(FrameKind.DATA, self._sid, layer, start, stop)
        if chunk.offset >= 0:
            header.kind = FrameKind.SHM_DATA
            header.offset = chunk.offset
            header.extra = chunk.tensor.numel() * chunk.tensor.element_size()
            ready = None
            if chunk.tensor.is_cuda:  # the gather is queued on the step thread's stream
                ready = torch.cuda.Event()
                ready.record(torch.cuda.current_stream(chunk.tensor.device))
            self._link.enqueue(header, ready=ready)
        else:
            self._link.enqueue(header, chunk.tensor)

    def discard(self, chunk: ChunkBuffer) -> None:
        ring = self._link.ring
        if ring is not None and chunk.offset >= 0:
            ring.discard(chunk.offset)

    def finish(self, timeout_s: float | None = None) -> TransferResult:
        self._t_finish = time.perf_counter()
        if self._t_first is None:
            self._t_first = self._t_finish
        if timeout_s is None:
            timeout_s = ack_deadline_s(self._bytes)
        self._link.enqueue(Header(FrameKind.END, self._sid))
        if not self._done.wait(timeout_s):
            # A receiver that stays silent this long is stuck: nothing on this link is trusted.
            self._link.fail_link(f"no acknowledgement from {self._link.peer} within "
                                 f"{timeout_s:.1f} s")
        if self._error is not None:
            raise self._error
        if "error" in self._reply:
            raise TransferError(str(self._reply["error"]), str(self._reply.get("code", "INTERNAL")))
        return TransferResult(
            bytes_acked=int(str(self._reply.get("bytes", 0))),
            chunks=self._chunks,
            transfer_ms=(self._t_ack - self._t_first) * 1e3,
            tail_ms=(self._t_ack - self._t_finish) * 1e3,
            receiver_busy_ms=float(str(self._reply.get("busy_ms", 0.0))),
        )

    def abort(self, reason: str) -> None:
        if self._done.is_set():
            return
        self._link.forget(self._sid)
        if self._link.alive:
            self._link.enqueue(Header(FrameKind.ABORT, self._sid))
        self.fail(TransferError(f"transfer aborted: {reason}", "ABORTED"))

    def complete(self, reply: dict[str, object]) -> None:
        self._reply = reply
        self._t_ack = time.perf_counter()
        self._done.set()

    def fail(self, error: TransferError) -> None:
        if not self._done.is_set():
            self._error = error
            self._t_ack = time.perf_counter()
            self._done.set()
