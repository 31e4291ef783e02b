"""The mock engine (Rust, router_core.MockEngineServer) over real gRPC: synthetic tokens, the
pretend prefix cache behind PrepRecv/RemoteSend/MatchPrefix/KVEvents, Stats and Abort, every
fault knob, health, bad input, and a clean SIGTERM of `python -m engine.mock`."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from router_core import MockEngineServer, block_hashes
from switchyard_engine_api.client import EngineClient, sampling

pytestmark = pytest.mark.procs

ROOT = Path(__file__).resolve().parents[2]
PROMPT = list(range(100, 140))  # 40 tokens: two full 16-token blocks


def reference_token(prompt: list[int], position: int) -> int:
    """The mock's documented 'model' (what the Python mock computed)."""
    return 1000 + (sum(prompt) * 31 + len(prompt) * 7 + position) % 1000


@pytest.fixture
def mock() -> Iterator[Any]:
    def start(**knobs: Any) -> MockEngineServer:
        server = MockEngineServer(0, **knobs)
        started.append(server)
        return server

    started: list[MockEngineServer] = []
    yield start
    for server in started:
        server.shutdown(0.0)


async def _client(server: MockEngineServer) -> EngineClient:
    return EngineClient(f"127.0.0.1:{server.port}", timeout_s=10)


async def _code(awaitable: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await awaitable
    return err.value.code()


async def test_tokens_depend_only_on_prompt_and_position(mock: Any) -> None:
    async with await _client(mock()) as e:
        whole = await e.generate("a", PROMPT, params=sampling(max_tokens=16))
        assert whole.token_ids == [reference_token(PROMPT, p) for p in range(16)]
        assert whole.text == "".join(f" w{t}" for t in whole.token_ids)
        assert (whole.chunks, whole.finish_reason, whole.prompt_tokens) == (1, "length", 40)
        # A hand-off segment, then the rest from another begin: the same ids.
        lead = await e.generate("b", PROMPT, params=sampling(max_tokens=16), max_new_tokens_here=5)
        assert (lead.token_ids, lead.finish_reason) == (whole.token_ids[:5], "handoff")
        later = await e.generate("c", PROMPT, begin=20, params=sampling(max_tokens=16))
        assert later.token_ids == whole.token_ids
        assert later.cached_tokens == 32  # the first generation cached both full blocks


async def test_no_coalesce_sends_one_step_per_message(mock: Any) -> None:
    async with await _client(mock(coalesce=False, tokens_per_chunk=3)) as e:
        out = await e.generate("a", PROMPT, params=sampling(max_tokens=8))
        assert out.chunks == 3 and len(out.token_ids) == 8


async def test_prefix_cache_verbs_and_kv_events(mock: Any) -> None:
    server = mock(page_size=16, seed=7)
    hashes = block_hashes(PROMPT, 16, 7)
    async with await _client(server) as e:
        call = e.kv_events(snapshot=True)
        events = aiter(call)
        first = await anext(events)
        assert (first.snapshot, list(first.stored), first.last_seq) == (True, [], 0)
        assert first.HasField("stats") and first.stats.cached_blocks == 0  # its load, pushed
        kv = await e.prep_recv("r", PROMPT, end=-1)
        assert (kv.matched_len, kv.end, kv.page_size, kv.kv_addr) == (0, 39, 16, b"mock:r")
        sent = await e.remote_send("r", PROMPT, kv.kv_addr, dst="x", begin=0, end=kv.end)
        assert (sent.transport, sent.cached_on_sender) == ("mock", 0)
        batch = await asyncio.wait_for(anext(events), 5)
        assert (batch.snapshot, batch.first_seq, batch.last_seq) == (False, 1, 1)
        assert list(batch.stored) == hashes
        assert await e.match_prefix(PROMPT) == 32
        assert (await e.prep_recv("r2", PROMPT, end=20)).matched_len == 16
        again = await e.remote_send("r2", PROMPT, b"", dst="x", begin=16, end=-1)
        assert again.cached_on_sender == 16
        stats = await e.stats()
        assert (stats.kv_event_seq, stats.cached_blocks, stats.page_size) == (1, 2, 16)
        info = await e.model_info()
        assert (info.model_id, info.block_hash_seed, info.page_size) == ("mock", 7, 16)
        call.cancel()  # type: ignore[attr-defined]


async def test_stats_and_abort_of_a_running_generation(mock: Any) -> None:
    async with await _client(mock(chunk_delay_ms=20, coalesce=False)) as e:
        call = e.start_generate("slow", PROMPT, params=sampling(max_tokens=1000))
        first = await call.read()
        assert len(first.token_ids) == 1
        stats = await e.stats()
        assert stats.running_requests == 1 and 0 < stats.unfinished_tokens < 1000
        assert await e.abort("slow") is True
        assert await e.abort("never-started") is False
        reasons = [chunk.finish_reason async for chunk in _rest(call)]
        assert reasons[-1] == "abort"
        assert (await e.stats()).running_requests == 0


async def test_a_cancelled_stream_leaves_no_running_request(mock: Any) -> None:
    async with await _client(mock(chunk_delay_ms=50)) as e:
        call = e.start_generate("gone", PROMPT, params=sampling(max_tokens=1000))
        await call.read()
        call.cancel()
        for _ in range(100):
            if (await e.stats()).running_requests == 0:
                break
            await asyncio.sleep(0.02)
        assert (await e.stats()).running_requests == 0


async def _rest(call: Any) -> AsyncIterator[Any]:
    while True:
        chunk = await call.read()
        if chunk is grpc.aio.EOF:
            return
        yield chunk


async def test_fault_knobs(mock: Any, tmp_path: Path) -> None:
    async with await _client(mock(fail_rate=1.0)) as e:
        assert await _code(e.generate("a", PROMPT)) == grpc.StatusCode.UNAVAILABLE
    async with await _client(mock(fail_after_tokens=3, coalesce=False)) as e:
        got: list[int] = []
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for chunk in e.start_generate("b", PROMPT, params=sampling(max_tokens=10)):
                got.extend(chunk.token_ids)
        assert err.value.code() == grpc.StatusCode.INTERNAL and len(got) == 3
    async with await _client(mock(fail_remote_send=True)) as e:
        code = await _code(e.remote_send("c", PROMPT, b"", dst="x", begin=0, end=-1))
        assert code == grpc.StatusCode.UNAVAILABLE
    flag = tmp_path / "unhealthy"
    server = mock(unhealthy_file=str(flag))
    async with await _client(server) as e:
        assert await e.healthy()
        flag.write_text("")
        assert await _eventually(e.healthy, False)
        flag.unlink()
        assert await _eventually(e.healthy, True)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="switchyard.v1.Engine"))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        await channel.close()


async def _eventually(probe: Any, want: bool) -> bool:
    for _ in range(50):
        if await probe() == want:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_bad_requests_are_invalid_argument(mock: Any) -> None:
    async with await _client(mock(vocab_size=2000)) as e:
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        assert await _code(e.generate("a", [])) == invalid
        assert await _code(e.generate("a", PROMPT, begin=41)) == invalid
        assert await _code(e.generate("a", PROMPT, params=sampling(max_tokens=0))) == invalid
        assert await _code(e.generate("a", [5, 2000])) == invalid
        assert await _code(e.generate("a", [-1])) == invalid
        assert await _code(e.prep_recv("a", PROMPT, end=-41)) == invalid
        assert await _code(e.remote_send("a", PROMPT, b"", "x", begin=30, end=20)) == invalid
        assert await _code(e.match_prefix([70000])) == invalid
        assert (await e.generate("ok", PROMPT, params=sampling(max_tokens=2))).finish_reason


def test_bad_knobs_and_taken_ports_are_errors(mock: Any) -> None:
    for knobs in ({"role": "both"}, {"tokens_per_chunk": 0}, {"fail_rate": 2.0},
                  {"page_size": 0}, {"chunk_delay_ms": -1.0}, {"vocab_size": 10}):
        with pytest.raises(ValueError):
            MockEngineServer(0, **knobs)
    server = mock()
    with pytest.raises(OSError, match="cannot bind"):
        MockEngineServer(server.port)
    assert server.is_running()
    server.shutdown()
    assert not server.is_running()
    server.shutdown()  # a second call is a no-op


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv", [["-m", "engine.mock"], ["-m", "pyrouter.cli", "engine", "--mock"]])
def test_process_serves_until_sigterm(argv: list[str]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SWITCHYARD_MOCK_FAIL_AFTER_TOKENS": "2"}
    proc = subprocess.Popen([sys.executable, *argv, "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert f"listening on 127.0.0.1:{port}" in banner and "no model" in banner

        async def check() -> None:
            async with EngineClient(f"127.0.0.1:{port}", timeout_s=10) as e:
                assert await e.healthy()
                # The environment knob reached the Rust server.
                assert await _code(e.generate("x", PROMPT, params=sampling(
                    max_tokens=5))) == grpc.StatusCode.INTERNAL

        asyncio.run(check())
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bad_flags_exit_with_an_error() -> None:
    proc = subprocess.run([sys.executable, "-m", "engine.mock", "--port", "1",
                           "--fail-rate", "3"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "fail_rate" in proc.stderr
