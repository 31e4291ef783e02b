"""The router's one engine client (router_core's Rust EngineRpcClient behind
pyrouter/engines/rust_client.py): every call the router makes, against real SmolLM2 engines,
its error mapping, the engine token, a dead address and a peer that never answers."""
from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from router_procs import ROOT, free_port

from engine.server.launcher import EngineProcess, start_engines, stop_engines
from pyrouter.engines.front_call import FrontCall
from pyrouter.engines.handle import CALLER_MISTAKES
from pyrouter.engines.rust_client import RustEngineClient, dial
from router_core import EngineChunk, EngineRpcClient, MockEngineServer
from switchyard_rpc import engine_pb2 as pb

pytestmark = pytest.mark.procs

PROMPT = list(range(200, 260))  # 60 tokens: three full blocks of 16 and a tail


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[EngineProcess]]:
    engines = start_engines(["rpc-a", "rpc-b"], tmp_path_factory.mktemp("rpc-logs"))
    yield engines
    stop_engines(engines)


def _request(request_id: str, tokens: list[int], begin: int = 0,
             max_tokens: int = 8) -> pb.StartGenerateRequest:
    return pb.StartGenerateRequest(request_id=request_id, tokens=tokens, begin=begin,
                                   sampling=pb.SamplingParams(max_tokens=max_tokens,
                                                              temperature=0.0, ignore_eos=True))


async def _chunks(call: FrontCall) -> list[EngineChunk]:
    """The rest of the stream, to the engine's end of it."""
    chunks = []
    while (chunk := await call.read()) is not grpc.aio.EOF:
        assert isinstance(chunk, EngineChunk)
        chunks.append(chunk)
    return chunks


async def _generate(client: RustEngineClient, request: pb.StartGenerateRequest
                    ) -> tuple[list[int], str]:
    chunks = await _chunks(client.start_generate_request(request))
    return [t for c in chunks for t in c.token_ids], chunks[-1].finish_reason


async def _code_of(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call  # type: ignore[misc]
    return raised.value.code()


@pytest.mark.timeout(300)
async def test_every_verb_through_the_rust_client(pair: list[EngineProcess]) -> None:
    a, b = dial(pair[0].address, 120.0), dial(pair[1].address, 120.0)
    assert await a.healthy() and await b.healthy()
    info = await a.model_info(timeout_s=5.0)
    assert info.engine_id == "rpc-a" and info.page_size > 0 and info.max_context > 0
    stats = await b.stats(timeout_s=5.0)
    assert stats.kv_pages_total > 0 and stats.kv_pages_used == 0

    # One engine does everything: the reference tokens.
    reference, finish = await _generate(a, _request("ref", PROMPT))
    assert len(reference) == 8 and finish == "length"

    # b reserves, a prefills into it, b decodes from its end: the same tokens (greedy).
    kv = await b.prep_recv("pd", PROMPT, end=len(PROMPT) - 1,
                           metadata=(("traceparent",
                                      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),))
    assert kv.end == len(PROMPT) - 1 and kv.matched_len == 0 and kv.kv_addr
    sent = await a.remote_send("pd", PROMPT, kv.kv_addr, b.address, kv.matched_len, kv.end)
    assert sent.bytes_sent > 0 and sent.transport
    tokens, finish = await _generate(b, _request("pd", PROMPT, begin=kv.end))
    assert (tokens, finish) == (reference, "length")

    # The KV the prefill left on a shows in its event stream's snapshot.
    events = a.kv_events(snapshot=True)
    batch = await anext(events)
    await events.aclose()
    assert batch.snapshot and len(batch.stored) >= len(PROMPT) // info.page_size

    # Abort: unknown -> False; a running generation -> True, and its stream ends.
    assert await a.abort("nobody") is False
    call = a.start_generate_request(_request("long", PROMPT, max_tokens=400))
    first = await call.read()
    assert first is not grpc.aio.EOF
    assert await a.abort("long") is True
    assert (await _chunks(call))[-1].finish_reason == "abort"

    # Configure: the answer says what is in force; out of range is the caller's mistake.
    before = await a.configure(timeout_s=5.0)
    changed = await a.configure(prefill_chunk_size=32, timeout_s=5.0)
    assert changed.prefill_chunk_size == 32
    assert changed.previous_prefill_chunk_size == before.prefill_chunk_size
    await a.configure(prefill_chunk_size=before.prefill_chunk_size, timeout_s=5.0)
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await a.configure(prefill_chunk_size=-5, timeout_s=5.0)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and bad.value.details()

    # A verb the engine refuses keeps its status code: the handle's CALLER_MISTAKES see it.
    code = await _code_of(b.prep_recv("past-end", PROMPT, end=len(PROMPT) + 5))
    assert code in CALLER_MISTAKES
    code = await _code_of(a.remote_send("nothing", PROMPT, b"not an address", b.address, 0, 16))
    assert code in CALLER_MISTAKES


async def test_engine_token_is_sent_and_health_stays_open() -> None:
    server = MockEngineServer(0, engine_token="s3cret")
    try:
        address = f"127.0.0.1:{server.port}"
        good = RustEngineClient(EngineRpcClient(address, 5.0, "s3cret"))
        wrong = RustEngineClient(EngineRpcClient(address, 5.0, "guess"))
        none = RustEngineClient(EngineRpcClient(address, 5.0))
        assert (await good.model_info()).engine_id == "mock"
        assert await _code_of(wrong.stats()) == grpc.StatusCode.UNAUTHENTICATED
        assert await _code_of(none.model_info()) == grpc.StatusCode.UNAUTHENTICATED
        assert await none.healthy()  # the health service is open to probes
    finally:
        server.shutdown()


async def test_dead_address_is_unhealthy_and_unavailable() -> None:
    client = dial(f"127.0.0.1:{free_port()}", 5.0)
    assert await client.healthy(timeout_s=2.0) is False
    assert await _code_of(client.stats()) == grpc.StatusCode.UNAVAILABLE
    assert await _code_of(client.prep_recv("r", PROMPT)) == grpc.StatusCode.UNAVAILABLE
    assert await _code_of(client.abort("r")) == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await client.start_generate_request(_request("r", PROMPT)).read()
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_silent_peer_times_out_and_a_cancelled_call_ends() -> None:
    """A TCP listener that never speaks HTTP/2: the deadline is DEADLINE_EXCEEDED, as grpc.aio
    reports it; cancelling an awaitable before its answer leaves nothing pending."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        client = dial(f"127.0.0.1:{silent.getsockname()[1]}", 0.3)
        assert await _code_of(client.stats()) == grpc.StatusCode.DEADLINE_EXCEEDED
        assert await _code_of(client.model_info(timeout_s=0.2)) == \
            grpc.StatusCode.DEADLINE_EXCEEDED
        assert await client.healthy(timeout_s=0.2) is False
        slow = dial(f"127.0.0.1:{silent.getsockname()[1]}", 60.0)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await slow.stats()


def test_the_router_process_has_one_engine_client() -> None:
    """The router's modules never import the Python grpc.aio engine client."""
    code = ("import sys, pyrouter.router_command, pyrouter.engines.membership, pyrouter.dispatch; "
            "print('switchyard_proto.client' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(ROOT), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
