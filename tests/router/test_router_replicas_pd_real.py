"""PD across router replicas (issue 25, deliver 5), on real SmolLM2 engines.

A PrepRecv reservation is the engine's own lease: the engine allocates its pages, keys it by
the router's engine-side request id (128 random bits per request, so replicas never collide),
and frees it when a StartGenerate takes it, an Abort releases it, or its lease runs out with
nothing written (a router that died, or never sent). No router keeps a page count of its own.
So two replicas running `pd` at once over the same two engines cannot book a page twice.

The engines under test run with SWITCHYARD_CHECK_KV_PAGES=1: after every verb and step each
audits its page ownership (engine/kvcache/page_audit.py: every page's references equal its
holders, no page that a request or reservation still writes is shared, the free list is exact)
and Stats counts the audits and failures. Checked here: every request's tokens equal what one
engine generates alone (greedy; the fast mode is batch-invariant), KV really crossed, and once
idle both engines hold no lease and no reserved page, leaked nothing, and no audit failed —
also after a replica is SIGKILLed with its requests in flight.
"""
from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import requests
from router_procs import free_port, start_router, wait_ready, wait_until
from router_real_cluster import greedy_token_ids, real_engines, router_over

from switchyard_bench.soak.audit import EngineAudit, audit_engine
from switchyard_engine_api.client import EngineClient

pytestmark = [pytest.mark.procs, pytest.mark.timeout(900)]

CHECKED = {"SWITCHYARD_CHECK_KV_PAGES": "1"}
# A shared opening: later requests find it cached on one engine and pin the same pages from
# both replicas while each writes its own tail.
SHARED = ("The harbour master kept a ledger of every ship that entered the bay: its name, its "
          "cargo, the weather on the day it arrived and the captain's opinion of the pilots. ")
QUESTIONS = ["What did the ledger say about the schooner Marta?",
             "Which cargo arrived most often in winter?",
             "Why did the captains complain about the pilots?"]
ALONE = ["Explain in two sentences why a paged KV cache helps an LLM server.",
         "List three rivers of Europe and the seas they flow into."]


@dataclass(frozen=True)
class Cluster:
    addresses: list[str]  # the two engines under test (pages checked)
    ports: list[int]
    a: str
    b: str
    reference: str        # a router over the third engine alone


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with real_engines(["any", "any", "any"], mode="fast", env=CHECKED) as ports, \
            router_over(ports[2:]) as reference, \
            router_over(ports[:2], "--policy", "pd") as a, \
            router_over(ports[:2], "--policy", "pd") as b:
        yield Cluster([f"127.0.0.1:{p}" for p in ports[:2]], ports[:2], a, b, reference)


def _generate(base: str, prompt: str) -> tuple[list[int], str]:
    return greedy_token_ids(base, prompt, max_tokens=12)


def _route(header: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in header.split()[1:] if "=" in p)


def _transferred(header: str) -> bool:
    route = _route(header)
    return header.startswith("pd ") and route["prefill"] not in ("-", route["decode"])


def _settled(addresses: list[str]) -> list[EngineAudit]:
    # Up to 90 s: a lease its router left behind lapses after the engine's 30 s.
    return [asyncio.run(audit_engine(address, settle_s=90)) for address in addresses]


async def _busy(address: str) -> bool:
    async with EngineClient(address, timeout_s=10.0) as client:
        s = await client.stats()
    return bool(s.leases or s.running_requests or s.queued_requests)


def _assert_clean(cluster: Cluster) -> None:
    for audit in _settled(cluster.addresses):
        assert audit.clean, audit  # no lease, no reserved page, no leak, no failed audit
        assert audit.page_audits > 0, audit  # the check really ran


def test_two_replicas_run_pd_at_once_without_sharing_a_page(cluster: Cluster) -> None:
    # The shared opening cached first, so the burst's reservations pin cached pages (matched > 0)
    # beside the pages they receive into.
    for base in (cluster.a, cluster.b):
        _generate(base, SHARED + "Begin.")
    prompts = [SHARED + q for q in QUESTIONS] + ALONE
    # Every prompt through both replicas at the same time: the same request reaches the same
    # engines from two routers, each with its own reservation.
    jobs = [(base, p) for p in prompts for base in (cluster.a, cluster.b)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda job: _generate(*job), jobs))
    expected = {p: _generate(cluster.reference, p)[0] for p in prompts}
    for (base, prompt), (ids, route) in zip(jobs, results, strict=True):
        assert ids == expected[prompt], (base, route)
        assert route.startswith("pd "), route
    assert any(int(_route(route)["matched"]) > 0 for _, route in results), results
    for base in (cluster.a, cluster.b):
        routes = [route for (via, _), (_, route) in zip(jobs, results, strict=True) if via == base]
        assert any(_transferred(r) for r in routes), routes  # KV crossed under this replica
    _assert_clean(cluster)


def test_a_replica_killed_mid_request_leaves_no_reservation_behind(cluster: Cluster) -> None:
    port = free_port()
    doomed = start_router(port, cluster.ports, "--policy", "pd")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, doomed, want_engines=2)
        prompts = [f"{SHARED}Entry {i}: the brig Osprey, cargo of {cargo}."
                   for i, cargo in enumerate(("salt", "timber", "wool", "copper"))]
        pool = ThreadPoolExecutor(len(prompts))
        pending = [pool.submit(requests.post, f"{base}/v1/completions", timeout=600,
                               json={"prompt": p, "max_tokens": 64, "ignore_eos": True})
                   for p in prompts]
        # Once the engines hold its work (reservations, sends, generations), the replica dies.
        wait_until(lambda: any(asyncio.run(_busy(a)) for a in cluster.addresses), 120,
                   "the engines to hold the doomed replica's requests")
        doomed.popen.send_signal(signal.SIGKILL)
        doomed.popen.wait()
        for future in pending:
            future.exception()  # each either finished before the kill or lost its connection
        pool.shutdown()
    finally:
        doomed.stop()
    # The survivor still serves pd with one engine's tokens, and nothing is left held.
    prompt = SHARED + QUESTIONS[0]
    ids, route = _generate(cluster.a, prompt)
    assert ids == _generate(cluster.reference, prompt)[0], route
    _assert_clean(cluster)
