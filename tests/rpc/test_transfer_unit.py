"""KV transports with plain tensors: bytes land intact on both transports, errors are typed."""
from __future__ import annotations

import threading

import pytest
import torch

from engine.transfer import (
    BadKVAddr,
    KVAddr,
    KVLayout,
    LayoutMismatch,
    TransferError,
    TransferListener,
    TransportPool,
    choose_transport,
    local_host_id,
)
from engine.transfer.frames import FrameKind, Header
from engine.transfer.link import SocketLink
from engine.transfer.staging import StagingRing

pytestmark = pytest.mark.timeout(60)

LAYOUT = KVLayout(num_layers=3, num_kv_heads=2, head_dim=8, dtype="float32")


class LeaseGone(Exception):
    pass


class DictSink:
    """Stands in for EngineCore.write_kv: one [layers, 2, T, H, D] tensor per reservation."""

    def __init__(self) -> None:
        self.store: dict[str, torch.Tensor] = {}
        self.lock = threading.Lock()

    def reserve(self, request_id: str, n_tokens: int) -> None:
        self.store[request_id] = torch.zeros(LAYOUT.num_layers, 2, n_tokens, 2, 8)

    def write_kv(self, request_id: str, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        if request_id not in self.store:
            raise LeaseGone(f"no reservation {request_id}")
        dst = self.store[request_id]
        dst[layer, 0, start : start + k.shape[0]] = k
        dst[layer, 1, start : start + v.shape[0]] = v


def _classify(exc: BaseException) -> str:
    return "FAILED_PRECONDITION" if isinstance(exc, LeaseGone) else "INTERNAL"


@pytest.fixture()
def receiver():
    sink = DictSink()
    listener = TransferListener(sink, LAYOUT, classify=_classify)
    yield sink, listener
    listener.close()


def _addr(listener: TransferListener, rid: str, end: int, host_id: str | None = None) -> KVAddr:
    return KVAddr(rid, host_id or local_host_id(), "127.0.0.1", listener.port, 0, end, LAYOUT)


def _send(link: SocketLink, rid: str, expected: torch.Tensor, chunk: int) -> int:
    session = link.open_session(rid)
    n = expected.shape[2]
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        for layer in range(LAYOUT.num_layers):
            buf = session.buffer(layer, start, stop)
            buf.tensor.copy_(expected[layer, :, start:stop])
            session.commit(layer, start, stop, buf)
    return session.finish(timeout_s=10).bytes_acked


@pytest.mark.parametrize("kind", ["shm", "tcp"])
def test_bytes_land_intact(receiver, kind: str) -> None:
    sink, listener = receiver
    pool = TransportPool(LAYOUT)
    try:
        for rid, n, chunk in [("a", 37, 5), ("b", 300, 64), ("c", 1, 1)]:
            sink.reserve(rid, n)
            expected = torch.randn(LAYOUT.num_layers, 2, n, 2, 8)
            link = pool.get(_addr(listener, rid, n), override=kind)
            assert link.name == kind
            assert _send(link, rid, expected, chunk) == LAYOUT.range_bytes(n)
            assert torch.equal(sink.store[rid], expected)
        assert listener.bytes_received == LAYOUT.range_bytes(37 + 300 + 1)
    finally:
        pool.close()


def test_shm_ring_wraps_under_backpressure(receiver) -> None:
    sink, listener = receiver
    link = SocketLink("127.0.0.1", listener.port, LAYOUT, staging_bytes=4096)
    try:
        sink.reserve("r", 500)
        expected = torch.randn(LAYOUT.num_layers, 2, 500, 2, 8)
        # 7-token chunks are 896 bytes: the 4 KiB ring wraps many times.
        assert _send(link, "r", expected, 7) == LAYOUT.range_bytes(500)
        assert torch.equal(sink.store["r"], expected)
        assert link.ring is not None and link.ring.in_flight() == 0
    finally:
        link.close()


@pytest.mark.parametrize("kind", ["shm", "tcp"])
def test_sink_error_is_reported_with_code(receiver, kind: str) -> None:
    _sink, listener = receiver
    pool = TransportPool(LAYOUT)
    try:
        link = pool.get(_addr(listener, "missing", 4), override=kind)
        with pytest.raises(TransferError, match="no reservation") as info:
            _send(link, "missing", torch.randn(LAYOUT.num_layers, 2, 4, 2, 8), 4)
        assert info.value.code == "FAILED_PRECONDITION"
        assert link.alive  # one failed session does not poison the link
    finally:
        pool.close()


def test_dead_receiver_fails_the_session(receiver) -> None:
    sink, listener = receiver
    link = SocketLink("127.0.0.1", listener.port, LAYOUT, staging_bytes=1 << 16)
    sink.reserve("r", 8)
    session = link.open_session("r")
    listener.close()  # the receiver goes away mid-transfer
    with pytest.raises(TransferError):
        for _ in range(200):
            buf = session.buffer(0, 0, 8)
            session.commit(0, 0, 8, buf)
        session.finish(timeout_s=5)
    assert not link.alive
    link.close()


def test_receiver_unreachable_is_a_transfer_error() -> None:
    with pytest.raises(TransferError, match="cannot reach"):
        SocketLink("127.0.0.1", 1, LAYOUT)


def test_kv_addr_round_trip_and_validation() -> None:
    addr = KVAddr("req-1", "h", "10.0.0.2", 9000, 16, 40, LAYOUT, engine_id="e1")
    assert KVAddr.decode(addr.encode()) == addr
    with pytest.raises(BadKVAddr):
        KVAddr.decode(b"not a descriptor")
    with pytest.raises(BadKVAddr):
        KVAddr.decode(b"SYKV1:{}")
    with pytest.raises(BadKVAddr):
        KVAddr("req", "h", "x", 9000, 5, 4, LAYOUT)


def test_transport_choice_and_layout_check(receiver) -> None:
    _sink, listener = receiver
    assert choose_transport(_addr(listener, "r", 4)) == "shm"
    assert choose_transport(_addr(listener, "r", 4, host_id="other-host")) == "tcp"
    with pytest.raises(TransferError):
        choose_transport(_addr(listener, "r", 4, host_id="other-host"), override="shm")
    with pytest.raises(TransferError):
        choose_transport(_addr(listener, "r", 4), override="carrier-pigeon")
    other = KVLayout(num_layers=3, num_kv_heads=2, head_dim=8, dtype="bfloat16")
    with pytest.raises(LayoutMismatch):
        TransportPool(other).get(_addr(listener, "r", 4))


def test_header_round_trip() -> None:
    h = Header(FrameKind.SHM_DATA, session=7, layer=3, start=10, stop=20, offset=4096, extra=640)
    assert Header.unpack(h.pack()) == h


def test_staging_ring_fifo() -> None:
    ring = StagingRing(1024)
    try:
        a = ring.alloc(500, 1)
        b = ring.alloc(400, 1)
        with pytest.raises(TimeoutError):
            ring.alloc(200, 0.05)
        ring.release(a)
        c = ring.alloc(200, 1)  # wraps to the front
        assert (a, c) == (0, 0) and b == 512
        with pytest.raises(RuntimeError):
            ring.release(c)  # out of order
    finally:
        ring.close()


def test_gather_matches_kv_storage_read() -> None:
    from engine.kvcache.kv_storage import KVStorage
    from engine.transfer.gather import gather_into

    kv = KVStorage(num_layers=2, num_pages=9, page_size=4, num_kv_heads=2, head_dim=8)
    kv.layer(1).copy_(torch.randn_like(kv.layer(1)))
    page_table = [7, 2, 5, 0]
    out = torch.empty(2, 11, 2, 8)
    gather_into(kv.layer(1), page_table, 3, 14, out)
    k, v = kv.read(1, page_table, 3, 14)
    assert torch.equal(out[0], k) and torch.equal(out[1], v)
