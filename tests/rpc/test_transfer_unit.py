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


def _send_intact(sink: DictSink, link: SocketLink, rid: str, n: int, chunk: int) -> None:
    """`n` tokens of random K/V sent for `rid` in `chunk`-token chunks: every byte acked, and the
    reservation holds exactly what was sent."""
    sink.reserve(rid, n)
    expected = torch.randn(LAYOUT.num_layers, 2, n, 2, 8)
    assert _send(link, rid, expected, chunk) == LAYOUT.range_bytes(n)
    assert torch.equal(sink.store[rid], expected)


@pytest.mark.parametrize("kind", ["shm", "tcp"])
def test_bytes_land_intact(receiver, kind: str) -> None:
    sink, listener = receiver
    pool = TransportPool(LAYOUT)
    try:
        for rid, n, chunk in [("a", 37, 5), ("b", 300, 64), ("c", 1, 1)]:
            link = pool.get(_addr(listener, rid, n), override=kind)
            assert link.name == kind
            _send_intact(sink, link, rid, n, chunk)
        assert listener.bytes_received == LAYOUT.range_bytes(37 + 300 + 1)
    finally:
        pool.close()


def test_shm_ring_wraps_under_backpressure(receiver) -> None:
    sink, listener = receiver
    link = SocketLink("127.0.0.1", listener.port, LAYOUT, staging_bytes=4096)
    try:
        # 7-token chunks are 896 bytes: the 4 KiB ring wraps many times.
        _send_intact(sink, link, "r", 500, 7)
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


def test_staging_ring_fifo_cumulative_release() -> None:
    ring = StagingRing(1024)
    try:
        a = ring.alloc(500, 1)
        b = ring.alloc(400, 1)
        with pytest.raises(TimeoutError):
            ring.alloc(200, 0.05)
        ring.release(a)
        c = ring.alloc(200, 1)  # wraps to the front
        assert (a, c) == (0, 0) and b == 512
        ring.release(c)  # acks are cumulative: frees b too
        assert ring.in_flight() == 0
        with pytest.raises(RuntimeError):
            ring.release(b)  # not in flight any more
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


def _page_tables(rng, num_pages: int, n_pages: int) -> list[list[int]]:
    """Consecutive, a few runs, scattered (forces the indexed path), and mixed page tables."""
    import random as _random

    assert isinstance(rng, _random.Random)
    base = rng.randrange(0, num_pages - n_pages)
    consecutive = list(range(base, base + n_pages))
    ids = rng.sample(range(num_pages), num_pages)
    scattered = [p for p in ids if p % 2 == 0][:n_pages]  # no two consecutive ids
    runs: list[int] = []
    while len(runs) < n_pages:
        start = rng.randrange(0, num_pages - 8)
        runs.extend(p for p in range(start, start + rng.randint(1, 8)) if p not in runs)
    mixed = rng.sample(range(num_pages), n_pages)
    return [consecutive, scattered, runs[:n_pages], mixed]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_storage_write_read_match_naive_reference(dtype: torch.dtype) -> None:
    import random

    from engine.kvcache.kv_storage import KVStorage

    rng = random.Random(1234)
    page_size, heads, dim, num_pages = 4, 2, 8, 80
    for _ in range(6):
        n_pages = rng.randint(1, 36)
        for table in _page_tables(rng, num_pages, n_pages):
            total = n_pages * page_size
            for start, end in [(0, total), (rng.randrange(total), total),
                               (0, rng.randint(1, total))] + [
                    tuple(sorted(rng.sample(range(total + 1), 2))) for _ in range(3)]:
                kv = KVStorage(num_layers=2, num_pages=num_pages, page_size=page_size,
                               num_kv_heads=heads, head_dim=dim, dtype=dtype)
                kv.layer(1).copy_(torch.randn_like(kv.layer(1)))
                before = kv.layer(1).clone()
                n = end - start
                k = torch.randn(n, heads, dim).to(dtype)
                v = torch.randn(n, heads, dim).to(dtype)
                kv.write(1, table, start, k, v)
                expected = before.clone()
                for i in range(n):  # naive reference: one token at a time
                    pos = start + i
                    page, off = table[pos // page_size], pos % page_size
                    expected[page, 0, off] = k[i]
                    expected[page, 1, off] = v[i]
                assert torch.equal(kv.layer(1), expected), (table, start, end)
                assert torch.equal(kv.layer(0), torch.zeros_like(kv.layer(0)))
                rk, rv = kv.read(1, table, start, end)
                assert torch.equal(rk, k) and torch.equal(rv, v)
                # And reading an arbitrary sub-range matches the per-token reference.
                a, b = sorted(rng.sample(range(total + 1), 2))
                rk, rv = kv.read(1, table, a, b)
                for i in range(b - a):
                    page, off = table[(a + i) // page_size], (a + i) % page_size
                    assert torch.equal(rk[i], expected[page, 0, off])
                    assert torch.equal(rv[i], expected[page, 1, off])


def test_kv_storage_write_converts_dtype_and_validates() -> None:
    from engine.kvcache.kv_storage import KVStorage, KVStorageError

    kv = KVStorage(num_layers=1, num_pages=6, page_size=4, num_kv_heads=1, head_dim=4,
                   dtype=torch.bfloat16)
    k, v = torch.randn(9, 1, 4), torch.randn(9, 1, 4)
    kv.write(0, [3, 4, 5], 2, k, v)
    rk, rv = kv.read(0, [3, 4, 5], 2, 11)
    assert rk.dtype == torch.bfloat16
    assert torch.equal(rk, k.to(torch.bfloat16)) and torch.equal(rv, v.to(torch.bfloat16))
    # Non-contiguous input is fine.
    kt = torch.randn(1, 9, 4).transpose(0, 1)
    kv.write(0, [3, 4, 5], 2, kt, kt)
    assert torch.equal(kv.read(0, [3, 4, 5], 2, 11)[0], kt.to(torch.bfloat16))
    with pytest.raises(KVStorageError):
        kv.write(0, [3, 4], 2, k, v)  # positions past the page table
    with pytest.raises(KVStorageError):
        kv.write(0, [3, 6, 5], 2, k, v)  # page id out of range
    with pytest.raises(KVStorageError):
        kv.read(0, [3, -1, 5], 0, 12)
    assert kv.read(0, [3], 2, 2)[0].shape == (0, 1, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gather_matches_naive_reference_on_random_tables(dtype: torch.dtype) -> None:
    import random

    from engine.kvcache.kv_storage import KVStorage
    from engine.transfer.gather import gather_into

    rng = random.Random(99)
    kv = KVStorage(num_layers=1, num_pages=70, page_size=8, num_kv_heads=3, head_dim=4,
                   dtype=dtype)
    kv.layer(0).copy_(torch.randn_like(kv.layer(0)))
    layer = kv.layer(0)
    for n_pages in (1, 3, 17, 30):
        for table in _page_tables(rng, 70, n_pages):
            total = n_pages * 8
            for start, end in [(0, total), tuple(sorted(rng.sample(range(total + 1), 2)))]:
                out = torch.empty(2, end - start, 3, 4, dtype=dtype)
                gather_into(layer, table, start, end, out)
                for i in range(end - start):
                    page, off = table[(start + i) // 8], (start + i) % 8
                    assert torch.equal(out[0, i], layer[page, 0, off])
                    assert torch.equal(out[1, i], layer[page, 1, off])
                # A buffer of another dtype gets a converted copy.
                out32 = torch.empty(2, end - start, 3, 4, dtype=torch.float64)
                gather_into(layer, table, start, end, out32)
                assert torch.equal(out32, out.to(torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_storage_odd_sizes_and_scattered_pages(dtype: torch.dtype) -> None:
    """Page rows whose byte size is not a multiple of 8 take the plain (non-int64) indexed copy."""
    from engine.kvcache.kv_storage import KVStorage

    kv = KVStorage(num_layers=1, num_pages=40, page_size=3, num_kv_heads=1, head_dim=3,
                   dtype=dtype)
    table = list(range(38, 0, -2))  # 19 pages, no two consecutive: the indexed path
    k = torch.randn(55, 1, 3).to(dtype)
    v = torch.randn(55, 1, 3).to(dtype)
    kv.write(0, table, 1, k, v)
    for i in range(55):
        page, off = table[(1 + i) // 3], (1 + i) % 3
        assert torch.equal(kv.layer(0)[page, 0, off], k[i])
        assert torch.equal(kv.layer(0)[page, 1, off], v[i])
    rk, rv = kv.read(0, table, 1, 56)
    assert torch.equal(rk, k) and torch.equal(rv, v)
