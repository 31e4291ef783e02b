"""Failures leave every surviving engine's page pool accounted and the engine still serving.

Four real engines: `prefill` and `decode` survive everything; `victim-recv` and `victim-send` are
killed with SIGKILL in the middle of a transfer.
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from engine.server.launcher import EngineProcess, start_engines, stop_engines
from switchyard_engine_api.client import EngineClient, sampling
from switchyard_rpc import engine_pb2 as pb
from tests.rpc import patterns
from tests.rpc.accounting import assert_accounted, kv_bytes_per_token

pytestmark = [pytest.mark.procs, pytest.mark.timeout(240)]

# Long enough that a send takes several prefill steps, so a kill lands mid-transfer.
LONG_PROMPT = [100 + (i * 7919) % 40000 for i in range(1500)]


@pytest.fixture(scope="module")
def quad(engine_logs: Path) -> Iterator[dict[str, EngineProcess]]:
    engines = start_engines(["prefill", "decode", "victim-recv", "victim-send"], engine_logs)
    yield {e.name: e for e in engines}
    stop_engines(engines)


async def _still_serving(p: EngineClient, d: EngineClient, rid: str, make_prompts) -> None:  # type: ignore[no-untyped-def]
    """A full PD round trip works, and the receiver's byte counter moved by exactly the range."""
    prompt = make_prompts(rid)[2]
    before = (await d.stats()).kv_bytes_received
    run = await patterns.pd(p, d, rid, prompt)
    assert len(run.tokens) == patterns.MAX_TOKENS
    moved = (await d.stats()).kv_bytes_received - before
    assert moved == run.sends[0].bytes_expected == kv_bytes_per_token(await d.model_info()) * (
        len(prompt) - 1)
    await assert_accounted(p)
    await assert_accounted(d)


async def _wait_bytes(engine: EngineClient, above: int) -> None:
    while (await engine.stats()).kv_bytes_received <= above:
        await asyncio.sleep(0.02)


async def test_expired_lease_frees_pages_and_late_send_fails(quad, make_prompts) -> None:
    async with quad["prefill"].client() as p, quad["decode"].client() as d:
        prompt = make_prompts("expired")[3]
        kv = await d.prep_recv("late", prompt, end=-1, lease_s=0.3)
        assert (await d.stats()).leases == 1
        await assert_accounted(d)  # waits for the lease to lapse: its pages are back
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await p.remote_send("late", prompt, kv.kv_addr, d.address, 0, kv.end)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "expired" in (info.value.details() or "")
        await _still_serving(p, d, "after-expiry", make_prompts)


async def test_aborted_reservation_and_generation(quad, make_prompts) -> None:
    async with quad["prefill"].client() as p, quad["decode"].client() as d:
        prompt = make_prompts("aborted")[4]
        kv = await d.prep_recv("gone", prompt, end=-1)
        assert await d.abort("gone")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await p.remote_send("gone", prompt, kv.kv_addr, d.address, 0, kv.end)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION

        # Abort mid-generation ends the stream with finish_reason "abort".
        stream = d.start_generate("long-gen", prompt, params=sampling(500, ignore_eos=True))
        first = await stream.read()
        assert first.token_ids
        assert await d.abort("long-gen")
        last = first
        while (chunk := await stream.read()) is not grpc.aio.EOF:
            last = chunk
        assert last.finish_reason == "abort"

        # A client that walks away mid-stream aborts the request too.
        call = d.start_generate("walk-away", prompt, params=sampling(500, ignore_eos=True))
        assert (await call.read()).token_ids
        call.cancel()
        await assert_accounted(d)
        assert not await d.abort("walk-away")  # already gone
        await _still_serving(p, d, "after-abort", make_prompts)


async def test_dead_receiver_mid_transfer(quad, make_prompts) -> None:
    victim = quad["victim-recv"]
    async with quad["prefill"].client() as p, quad["decode"].client() as d, victim.client() as v:
        kv = await v.prep_recv("doomed", LONG_PROMPT, end=-1)
        send = asyncio.create_task(
            p.remote_send("doomed", LONG_PROMPT, kv.kv_addr, v.address, 0, kv.end))
        await asyncio.wait_for(_wait_bytes(v, 0), 60)
        victim.kill9()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await send
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value.details()
        await _still_serving(p, d, "after-dead-receiver", make_prompts)


async def test_dead_sender_mid_transfer(quad, make_prompts) -> None:
    victim = quad["victim-send"]
    async with quad["prefill"].client() as p, quad["decode"].client() as d, victim.client() as s:
        before = (await d.stats()).kv_bytes_received
        kv = await d.prep_recv("orphan", LONG_PROMPT, end=-1, lease_s=2.0)
        send = asyncio.create_task(
            s.remote_send("orphan", LONG_PROMPT, kv.kv_addr, d.address, 0, kv.end))
        await asyncio.wait_for(_wait_bytes(d, before), 60)
        victim.kill9()
        with pytest.raises(grpc.aio.AioRpcError):
            await send
        assert (await d.stats()).leases == 1
        await assert_accounted(d)  # the lease lapses and frees the half-filled pages
        await _still_serving(p, d, "after-dead-sender", make_prompts)


async def test_bad_input_maps_to_status_codes(quad) -> None:
    async with quad["prefill"].client() as p, quad["decode"].client() as d:
        info = await d.model_info()
        cases = [
            (d.prep_recv("empty", [], end=-1), grpc.StatusCode.INVALID_ARGUMENT),
            (d.prep_recv("range", [1, 2, 3], end=9), grpc.StatusCode.INVALID_ARGUMENT),
            (d.prep_recv("vocab", [info.vocab_size + 5], end=1), grpc.StatusCode.INVALID_ARGUMENT),
            (p.remote_send("junk", [1, 2, 3], b"not-a-kv-addr", d.address, 0, 2),
             grpc.StatusCode.INVALID_ARGUMENT),
            (d.generate("nan", [1, 2, 3], params=sampling(4, temperature=float("nan"))),
             grpc.StatusCode.INVALID_ARGUMENT),
            # 4000 tokens hold 250 of the 512 pages: a third such reservation cannot fit.
            (_big_reservations(d), grpc.StatusCode.RESOURCE_EXHAUSTED),
            (_first_chunk(d, float("nan")), grpc.StatusCode.INVALID_ARGUMENT),
            (_first_chunk(d, -5.0), grpc.StatusCode.INVALID_ARGUMENT),
            (_send_due(p, d, -1.0), grpc.StatusCode.INVALID_ARGUMENT),
        ]
        for call, code in cases:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            assert err.value.code() == code, err.value.details()
            assert err.value.details()
        assert await d.abort("big-0") and await d.abort("big-1")
        assert await d.abort("due-send")  # the refused send's reservation
        await assert_accounted(d)
        assert await d.healthy()


async def _first_chunk(d: EngineClient, first_token_due_ms: float) -> None:
    """A StartGenerate whose first-token deadline is `first_token_due_ms`."""
    request = pb.StartGenerateRequest(request_id=f"due-{first_token_due_ms}", tokens=[1, 2, 3],
                                      sampling=sampling(4), first_token_due_ms=first_token_due_ms)
    await d.start_generate_request(request).read()


async def _send_due(p: EngineClient, d: EngineClient, first_token_due_ms: float) -> None:
    """A RemoteSend into a fresh reservation with a first-token deadline of
    `first_token_due_ms`."""
    kv = await d.prep_recv("due-send", LONG_PROMPT[:64], end=-1)
    await p.remote_send("due-send", LONG_PROMPT[:64], kv.kv_addr, d.address, 0, kv.end,
                        first_token_due_ms=first_token_due_ms)


async def _big_reservations(d: EngineClient) -> None:
    for i in range(3):
        await d.prep_recv(f"big-{i}", [100 + i, *LONG_PROMPT] * 3, end=4000)


async def test_kv_events_snapshot_then_live_stream(quad, make_prompts) -> None:
    """The KV events, and the engine's load pushed on the same stream (issue 48): in the first
    batch, then as a generate changes it (with the events or in batches of no events)."""
    async with quad["decode"].client() as d:
        events = d.kv_events(snapshot=True)
        snap = await events.read()
        assert snap.snapshot and snap.first_seq == snap.last_seq
        assert len(snap.stored) == (await d.stats()).cached_blocks
        assert snap.HasField("stats") and snap.stats.cached_blocks == len(snap.stored)
        assert snap.stats.kv_pages_total > 0
        prompt = make_prompts("events")[5]
        await d.generate("events", prompt, params=sampling(1))
        idle = await d.stats()  # nothing runs now: the last push must say what this says
        blocks = len(prompt) // 16
        stored: list[pb.KVEventBatch] = []
        last_push = snap.stats
        while not stored or (last_push.cached_blocks, last_push.running_requests) != (
                idle.cached_blocks, 0):
            batch = await asyncio.wait_for(events.read(), 30)
            assert not batch.snapshot
            if batch.stored or batch.evicted:
                stored.append(batch)
            else:  # only the load: a repeat of the last sequence number sent
                assert batch.HasField("stats") and batch.first_seq == batch.last_seq
            if batch.HasField("stats"):
                last_push = batch.stats
        assert stored[0].first_seq == snap.last_seq + 1
        assert sum(len(b.stored) for b in stored) == blocks
        assert await d.match_prefix(prompt) == blocks * 16
        events.cancel()


def test_sigterm_shuts_down_cleanly(quad) -> None:
    engine = quad["prefill"]
    engine.stop()
    assert engine.proc.returncode == 0, engine.log_tail()
