"""The router's one engine client (router_core's Rust EngineRpcClient behind
pyrouter/engines/rust_client.py): health, ModelInfo and Configure as typed answers, against
real SmolLM2 engines, its errors (router_core's EngineCallError with the status code's name), the
engine token, a dead address and a peer that never answers. The verbs are the executor's alone
(their end-to-end tests run through the router: test_router_seed_patterns_real.py)."""
from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from router_procs import ROOT, free_port

from engine.server.launcher import EngineProcess, start_engines, stop_engines
from pyrouter.engines.rust_client import RustEngineClient, dial
from router_core import EngineCallError, EngineRpcClient, MockEngineServer, ModelInfo

pytestmark = pytest.mark.procs

@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[EngineProcess]]:
    engines = start_engines(["rpc-a", "rpc-b"], tmp_path_factory.mktemp("rpc-logs"))
    yield engines
    stop_engines(engines)


async def _code_of(call: object) -> str:
    with pytest.raises(EngineCallError) as raised:
        await call  # type: ignore[misc]
    return str(raised.value.code)


@pytest.mark.timeout(300)
async def test_every_call_through_the_rust_client(pair: list[EngineProcess]) -> None:
    a, b = dial(pair[0].address, 120.0), dial(pair[1].address, 120.0)
    assert await a.healthy() and await b.healthy()
    info = await a.model_info(timeout_s=5.0)
    assert isinstance(info, ModelInfo)
    assert info.engine_id == "rpc-a" and info.page_size > 0 and info.max_context > 0
    assert (await b.model_info()).engine_id == "rpc-b"

    # Configure: the answer says what is in force; out of range is the caller's mistake.
    before = await a.configure(timeout_s=5.0)
    changed = await a.configure(prefill_chunk_size=32, timeout_s=5.0)
    assert changed.prefill_chunk_size == 32
    assert changed.previous_prefill_chunk_size == before.prefill_chunk_size
    await a.configure(prefill_chunk_size=before.prefill_chunk_size, timeout_s=5.0)
    with pytest.raises(EngineCallError) as bad:
        await a.configure(prefill_chunk_size=-5, timeout_s=5.0)
    assert bad.value.code == "INVALID_ARGUMENT" and bad.value.details


async def test_engine_token_is_sent_and_health_stays_open() -> None:
    server = MockEngineServer(0, engine_token="s3cret")
    try:
        address = f"127.0.0.1:{server.port}"
        good = RustEngineClient(EngineRpcClient(address, 5.0, "s3cret"))
        wrong = RustEngineClient(EngineRpcClient(address, 5.0, "guess"))
        none = RustEngineClient(EngineRpcClient(address, 5.0))
        assert (await good.model_info()).engine_id == "mock"
        assert await _code_of(wrong.model_info()) == "UNAUTHENTICATED"
        assert await _code_of(none.model_info()) == "UNAUTHENTICATED"
        assert await none.healthy()  # the health service is open to probes
    finally:
        server.shutdown()


async def test_dead_address_is_unhealthy_and_unavailable() -> None:
    client = dial(f"127.0.0.1:{free_port()}", 5.0)
    assert await client.healthy(timeout_s=2.0) is False
    assert await _code_of(client.configure()) == "UNAVAILABLE"
    assert await _code_of(client.model_info()) == "UNAVAILABLE"


async def test_a_silent_peer_times_out_and_a_cancelled_call_ends() -> None:
    """A TCP listener that never speaks HTTP/2: the deadline is DEADLINE_EXCEEDED, as grpc.aio
    reports it; cancelling an awaitable before its answer leaves nothing pending."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        client = dial(f"127.0.0.1:{silent.getsockname()[1]}", 0.3)
        assert await _code_of(client.configure()) == "DEADLINE_EXCEEDED"
        assert await _code_of(client.model_info(timeout_s=0.2)) == "DEADLINE_EXCEEDED"
        assert await client.healthy(timeout_s=0.2) is False
        slow = dial(f"127.0.0.1:{silent.getsockname()[1]}", 60.0)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await slow.model_info()


def test_the_router_process_has_one_engine_client() -> None:
    """The router's modules never import the Python grpc.aio engine client."""
    code = ("import sys, pyrouter.router_command, pyrouter.engines.membership, pyrouter.runtime.dispatch; "
            "print('switchyard_engine_api.client' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(ROOT), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
