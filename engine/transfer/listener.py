"""Receiver side of the KV links: a listener thread plus one thread per sender connection.

Each DATA / SHM_DATA frame is checked against the agreed layout, viewed as K/V tensors (straight
from the socket buffer or the sender's staging area) and written into this engine's reserved pages
through the sink (EngineCore.write_kv — its one copy). Errors from the sink (lease expired, unknown
request) poison only that session; the sender hears about them in the END acknowledgement.
"""
from __future__ import annotations

import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from engine.transfer.cuda_ipc import AttachedDeviceStaging
from engine.transfer.frames import (
    FrameError,
    FrameKind,
    Header,
    recv_exact_into,
    recv_header,
    recv_payload,
    send_frame,
)
from engine.transfer.layout import KVLayout
from engine.transfer.staging import AttachedStaging
from switchyard_engine_api.auth import token_matches

log = logging.getLogger(__name__)


class AttachedArea(Protocol):
    """The sender's staging as the receiver sees it: /dev/shm or (CUDA IPC) device memory."""

    def view(self, offset: int, nbytes: int) -> torch.Tensor: ...

    def close(self) -> None: ...


class KVSink(Protocol):
    def write_kv(
        self, request_id: str, layer: int, start: int, k: torch.Tensor, v: torch.Tensor
    ) -> None: ...


def _default_code(exc: BaseException) -> str:
    return "INTERNAL"


@dataclass(slots=True)
class _Incoming:
    request_id: str
    bytes: int = 0
    busy_s: float = 0.0
    error: str = ""
    code: str = ""


class TransferListener:
    def __init__(
        self, sink: KVSink, layout: KVLayout, host: str = "127.0.0.1", port: int = 0,
        classify: Callable[[BaseException], str] = _default_code, token: str | None = None,
    ) -> None:
        self._sink = sink
        self._token = token  # the deployment's engine token a sender's HELLO must carry
        self._layout = layout
        self._classify = classify
        self._server = socket.create_server((host, port), reuse_port=False)
        self.host = host
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._bytes_received = 0
        self._conns: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept_loop, name="kv-listen", daemon=True).start()

    @property
    def bytes_received(self) -> int:
        with self._lock:
            return self._bytes_received

    def close(self) -> None:
        self._closed = True
        self._server.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), name="kv-rx", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        staging: AttachedArea | None = None
        try:
            staging = self._handshake(conn)
            _Connection(self, conn, staging).run()
        except (OSError, FrameError) as exc:
            # The sender died or hung up: its partial sessions are dropped, leases free the pages.
            if not self._closed:
                log.info("KV transfer connection closed: %s", exc)
        except Exception:  # noqa: BLE001 - close the connection: the sender sees it and fails safe
            log.exception("KV transfer connection failed")
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()
            if staging is not None:
                staging.close()

    def _handshake(self, conn: socket.socket) -> AttachedArea | None:
        header = recv_header(conn)
        if header.kind != FrameKind.HELLO:
            raise FrameError(f"expected HELLO, got {header.kind.name}")
        hello = json.loads(recv_payload(conn, header) or b"{}")
        if not token_matches(self._token, str(hello.get("token", ""))):
            send_frame(conn, Header(FrameKind.HELLO_ACK),
                       json.dumps({"error": "missing or invalid engine token"}).encode())
            raise FrameError("KV link refused: missing or invalid engine token")
        staging: AttachedArea | None = None
        try:
            if hello.get("shm_path"):
                staging = AttachedStaging(str(hello["shm_path"]), int(hello["shm_bytes"]))
            elif hello.get("cuda_ipc"):
                staging = AttachedDeviceStaging(hello["cuda_ipc"])
        except (OSError, ValueError, RuntimeError) as exc:  # RuntimeError: CUDA refused the handle
            send_frame(conn, Header(FrameKind.HELLO_ACK), json.dumps({"error": str(exc)}).encode())
            raise FrameError(f"cannot map the sender's staging area: {exc}") from exc
        send_frame(conn, Header(FrameKind.HELLO_ACK), b"{}")
        return staging

    def count(self, nbytes: int) -> None:
        with self._lock:
            self._bytes_received += nbytes


class _Connection:
    def __init__(
        self, listener: TransferListener, conn: socket.socket, staging: AttachedArea | None
    ) -> None:
        self._listener = listener
        self._conn = conn
        self._staging = staging
        self._layout = listener._layout
        self._sessions: dict[int, _Incoming] = {}
        self._payload = bytearray(1 << 20)
        self._unacked: int | None = None  # staging offset of the last consumed, unacked chunk

    def _flush_ack(self) -> None:
        if self._unacked is not None:
            send_frame(self._conn, Header(FrameKind.CHUNK_ACK, offset=self._unacked))
            self._unacked = None

    def run(self) -> None:
        while True:
            # Acks are cumulative: while more frames are already waiting, consuming them comes
            # first; the ack goes out before this thread would block (and before any END_ACK).
            if self._unacked is not None and not select.select([self._conn], [], [], 0)[0]:
                self._flush_ack()
            header = recv_header(self._conn)
            kind = header.kind
            if kind == FrameKind.OPEN:
                rid = recv_payload(self._conn, header).decode()
                self._sessions[header.session] = _Incoming(rid)
            elif kind == FrameKind.DATA:
                self._on_data(header, self._recv_chunk(header))
            elif kind == FrameKind.SHM_DATA:
                if self._staging is None:
                    raise FrameError("SHM_DATA on a link without a staging area")
                self._on_data(header, self._staging.view(header.offset, header.extra))
                self._unacked = header.offset
            elif kind == FrameKind.END:
                self._flush_ack()
                self._on_end(header.session)
            elif kind == FrameKind.ABORT:
                self._sessions.pop(header.session, None)
            else:
                raise FrameError(f"unexpected frame {kind.name} from a sender")

    def _recv_chunk(self, header: Header) -> torch.Tensor:
        if header.payload_len > len(self._payload):
            self._payload = bytearray(header.payload_len)
        view = memoryview(self._payload)[: header.payload_len]
        recv_exact_into(self._conn, view)
        return torch.frombuffer(view, dtype=torch.uint8) if header.payload_len else torch.empty(0)

    def _on_data(self, header: Header, raw: torch.Tensor) -> None:
        t0 = time.perf_counter()
        session = self._sessions.get(header.session)
        if session is None or session.error:
            return
        n = header.stop - header.start
        if n <= 0 or raw.numel() != self._layout.chunk_bytes(n):
            raise FrameError(f"chunk of {raw.numel()} bytes does not hold {n} tokens' K/V")
        if header.layer >= self._layout.num_layers:
            session.error, session.code = f"layer {header.layer} out of range", "INVALID_ARGUMENT"
            return
        kv = raw.view(self._layout.torch_dtype).view(self._layout.chunk_shape(n))
        try:
            self._listener._sink.write_kv(session.request_id, header.layer, header.start, kv[0], kv[1])
        except Exception as exc:  # noqa: BLE001 - any sink failure poisons just this session
            session.error, session.code = str(exc), self._listener._classify(exc)
            return
        session.bytes += raw.numel()
        session.busy_s += time.perf_counter() - t0
        self._listener.count(raw.numel())

    def _on_end(self, sid: int) -> None:
        session = self._sessions.pop(sid, None)
        reply: dict[str, object]
        if session is None:
            reply = {"error": f"unknown transfer session {sid}", "code": "NOT_FOUND"}
        elif session.error:
            reply = {"error": session.error, "code": session.code}
        else:
            reply = {"bytes": session.bytes, "busy_ms": session.busy_s * 1e3}
        send_frame(self._conn, Header(FrameKind.END_ACK, sid), json.dumps(reply).encode())
