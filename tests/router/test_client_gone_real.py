"""Clients that go away before their first token, on real engines (SmolLM2): the router notices
each closed connection while the request still waits — queued behind the others on a busy
engine, or prefilling its long prompt — for streamed and plain requests, also when the client
sent a byte more than its request (which hyper's own reads never look past), on the fast path
(round_robin: Rust only) and the Python-policy path (pd: a reservation on the decode engine, a
transfer from the prefill engine). Every engine's queue and running count must come back to
zero, with no KV lease and no page held beyond the prefix cache, and the router must count
nothing in flight — long before the work itself could have finished (each request asks for
thousands of tokens with ignore_eos), so only the aborts can empty the engines.
"""
from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator

import pytest
import requests
from router_procs import LOG_DIR, free_port, start_router, wait_ready

from engine.server.launcher import EngineSpec, start_engines, stop_engines
from switchyard_bench.soak.audit import audit_engine, router_inflight
from switchyard_engine_api.client import EngineClient

pytestmark = [pytest.mark.procs, pytest.mark.slow, pytest.mark.timeout(900)]

CLIENTS = 12  # requests cut per case: streamed and plain, with and without a trailing CR LF
PROMPT_WORDS = 2500  # some 5000 tokens: prefilling them all takes minutes on one thread
_WORDS = ("harbour lighthouse keeper nets dawn cargo weather flag ship tide rope gull anchor "
          "sail mast deck").split()
# Generous for the aborts (a step in progress ends first), short of the time the engines would
# take to prefill every cut request (a router that noticed the clients only at its first write
# would end each request at its first token: the engines would stay busy past this).
SETTLE_S = 120.0


def _prompt(n: int) -> str:
    """A long prompt no other request shares (the prefix cache saves nothing)."""
    return f"[{n} {time.monotonic_ns()}] " + " ".join(_WORDS[(n + i * 7) % len(_WORDS)]
                                                       for i in range(PROMPT_WORDS))


def _send(port: int, n: int) -> socket.socket:
    """Request n: streamed when n is even; every other pair sends a CR LF after its body, as
    some clients do (the router once noticed those clients' going only at its first write)."""
    body = json.dumps({"prompt": _prompt(n), "max_tokens": 1000, "ignore_eos": True,
                       "temperature": 0, "stream": n % 2 == 0}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                 + (b"\r\n" if n % 4 < 2 else b""))
    return sock


async def _busy(addresses: list[str]) -> int:
    total = 0
    for address in addresses:
        async with EngineClient(address, timeout_s=10.0) as client:
            s = await client.stats()
            total += int(s.running_requests) + int(s.queued_requests) + int(s.leases)
    return total


class Cluster:
    def __init__(self, addresses: list[str], base: str) -> None:
        self.addresses, self.base = addresses, base
        self.port = int(base.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    specs = [EngineSpec(f"gone-{i}-{free_port()}", threads=1, num_pages=2048, mode="exact",
                        # A lease outlives the test: only a release frees it.
                        env={"SWITCHYARD_LOG_LEVEL": "WARNING", "SWITCHYARD_LEASE_S": "900"})
             for i in range(2)]
    engines = start_engines(specs, LOG_DIR)
    port = free_port()
    router = start_router(port, [e.port for e in engines])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, router, want_engines=2, timeout_s=120)
        yield Cluster([e.address for e in engines], base)
    finally:
        router.stop()
        stop_engines(engines)


@pytest.mark.parametrize("policy", ["round_robin", "pd"])
def test_clients_gone_before_the_first_token_leave_every_engine_idle(cluster: Cluster,
                                                                      policy: str) -> None:
    r = requests.put(f"{cluster.base}/admin/policy", json={"policy": policy, "params": {}})
    assert r.status_code == 200, r.text
    socks = [_send(cluster.port, n) for n in range(CLIENTS)]
    # Every request reached an engine (queued, prefilling, or reserved for a transfer)...
    deadline = time.monotonic() + SETTLE_S
    while asyncio.run(_busy(cluster.addresses)) == 0:
        assert time.monotonic() < deadline, "no request reached an engine"
        time.sleep(0.05)
    # ...and the clients go (the first streamed one may just have had its first token; the
    # plain ones can have nothing before their last).
    for sock in socks:
        sock.close()
    for address in cluster.addresses:
        audit = asyncio.run(audit_engine(address, settle_s=SETTLE_S))
        assert audit.clean, audit
    deadline = time.monotonic() + SETTLE_S
    while asyncio.run(router_inflight(cluster.base)) != 0:
        assert time.monotonic() < deadline, "the router still counts requests in flight"
        time.sleep(0.2)
    # The router still serves.
    r = requests.post(f"{cluster.base}/v1/completions",
                      json={"prompt": "The harbour", "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200, r.text
