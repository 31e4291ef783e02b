"""The KV transfer wire format: length-prefixed frames with a fixed 40-byte binary header.

Every frame is `Header` (struct, little endian) followed by `payload_len` raw bytes. DATA frames carry
one layer's K/V for positions [start, stop) as raw tensor bytes; SHM_DATA frames carry no payload
and instead point at `offset` in the sender's shared-memory staging area. Nothing is pickled: the
receiver reinterprets bytes only as the dtype/shape agreed through the KV layout.
"""
from __future__ import annotations

import enum
import socket
import struct
from dataclasses import dataclass

MAGIC = b"SYKV"
VERSION = 1
_HEADER = struct.Struct("<4sBBHIIIIQQ")
HEADER_SIZE = _HEADER.size
# A frame bigger than this is a corrupt or hostile stream, not a KV chunk.
MAX_PAYLOAD = 1 << 31


class FrameKind(enum.IntEnum):
    HELLO = 1  # payload: JSON {"shm_path", "shm_bytes"} (empty path = tcp only)
    HELLO_ACK = 2
    OPEN = 3  # payload: request id (utf-8) of the receiver's reservation
    DATA = 4  # payload: raw K/V bytes [2, n, kv_heads, head_dim]
    SHM_DATA = 5  # K/V at `offset` in the staging area, `payload_len` = 0, nbytes in `extra`
    END = 6  # the sender has pushed every chunk of the session
    CHUNK_ACK = 7  # receiver -> sender: the staging bytes at `offset` may be reused
    END_ACK = 8  # payload: JSON {"bytes": n} or {"error": msg, "code": name}
    ABORT = 9  # the sender gave up on the session; the receiver drops its partial state


class FrameError(ConnectionError):
    """The peer sent something that is not a valid frame, or closed the connection mid-frame."""


@dataclass(slots=True)
class Header:
    kind: FrameKind
    session: int = 0
    layer: int = 0
    start: int = 0
    stop: int = 0
    payload_len: int = 0
    offset: int = 0
    # SHM_DATA: bytes of the chunk in the staging area (payload_len stays 0).
    extra: int = 0

    def pack(self) -> bytes:
        # SHM_DATA carries no payload; its length field holds the chunk's size in the staging area.
        length = self.extra if self.kind == FrameKind.SHM_DATA else self.payload_len
        return _HEADER.pack(
            MAGIC, VERSION, int(self.kind), 0, self.session, self.layer, self.start, self.stop,
            length, self.offset,
        )

    @staticmethod
    def unpack(raw: bytes) -> Header:
        magic, version, kind, _flags, session, layer, start, stop, length, offset = _HEADER.unpack(raw)
        if magic != MAGIC or version != VERSION:
            raise FrameError(f"bad frame magic/version {magic!r}/{version}")
        try:
            frame_kind = FrameKind(kind)
        except ValueError as exc:
            raise FrameError(f"unknown frame kind {kind}") from exc
        if frame_kind == FrameKind.SHM_DATA:
            return Header(frame_kind, session, layer, start, stop, 0, offset, extra=length)
        if length > MAX_PAYLOAD:
            raise FrameError(f"frame payload of {length} bytes exceeds the limit")
        return Header(frame_kind, session, layer, start, stop, length, offset)


def recv_exact_into(sock: socket.socket, view: memoryview) -> None:
    """Fill `view` completely from the socket (raises FrameError on EOF)."""
    got = 0
    total = len(view)
    while got < total:
        n = sock.recv_into(view[got:], total - got)
        if n == 0:
            raise FrameError("peer closed the KV transfer connection mid-frame")
        got += n


def recv_header(sock: socket.socket) -> Header:
    buf = bytearray(HEADER_SIZE)
    recv_exact_into(sock, memoryview(buf))
    return Header.unpack(bytes(buf))


def recv_payload(sock: socket.socket, header: Header) -> bytes:
    buf = bytearray(header.payload_len)
    recv_exact_into(sock, memoryview(buf))
    return bytes(buf)


def send_frame(sock: socket.socket, header: Header, payload: bytes | memoryview = b"") -> None:
    """One frame; the caller serialises writers on a socket."""
    if header.kind != FrameKind.SHM_DATA:
        header.payload_len = len(payload)
    if len(payload) <= 65536:
        sock.sendall(header.pack() + bytes(payload))
    else:
        sock.sendall(header.pack())
        sock.sendall(payload)
