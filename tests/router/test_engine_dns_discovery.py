"""`--engine-dns NAME:PORT[@ROLE]`: engines join and leave the router as their DNS records do."""
from __future__ import annotations

import asyncio
import socket

import pytest
import requests
from router_procs import SWITCHYARD, Proc, free_port, start_mock, wait_ready

from pyrouter.engines import dns_discovery
from pyrouter.engines.dns_discovery import (
    DnsEngineDiscovery,
    DnsEngineSpec,
    format_address,
    resolve_addresses,
)
from pyrouter.engines.membership import EngineMembership
from pyrouter.errors import BadRequest

pytestmark = pytest.mark.procs


@pytest.mark.parametrize("value, expected", [
    ("engine-decode.switchyard.svc:50051@decode",
     DnsEngineSpec("engine-decode.switchyard.svc", 50051, "decode")),
    ("engines:7000", DnsEngineSpec("engines", 7000, None)),
])
def test_parse(value, expected):
    assert DnsEngineSpec.parse(value) == expected


@pytest.mark.parametrize("value", ["engines", "engines:", ":50051", "engines:0", "engines:70000",
                                   "engines:port", "engines:50051@leader"])
def test_parse_rejects_bad_values_clearly(value):
    with pytest.raises(BadRequest, match="engine-dns"):
        DnsEngineSpec.parse(value)


def test_ipv6_addresses_are_bracketed():
    assert format_address("10.1.2.3", 50051) == "10.1.2.3:50051"
    assert format_address("fd00::7", 50051) == "[fd00::7]:50051"


async def test_resolves_a_real_name():
    assert "127.0.0.1:50051" in (await resolve_addresses("localhost", 50051) or set())


@pytest.mark.parametrize("errno, expected", [(socket.EAI_NONAME, set()), (socket.EAI_AGAIN, None)])
async def test_no_such_name_is_empty_but_a_failed_lookup_is_unknown(monkeypatch, errno, expected):
    async def failing(self, *args, **kwargs):
        raise socket.gaierror(errno, "test")

    monkeypatch.setattr(asyncio.get_running_loop().__class__, "getaddrinfo", failing)
    assert await resolve_addresses("engines", 1) == expected


class FakeDns:
    """What the name resolves to right now (None = the lookup fails)."""

    def __init__(self) -> None:
        self.answer: set[str] | None = set()

    async def __call__(self, name: str, port: int) -> set[str] | None:
        return None if self.answer is None else set(self.answer)


async def test_membership_follows_the_records(monkeypatch):
    dns = FakeDns()
    monkeypatch.setattr(dns_discovery, "resolve_addresses", dns)
    engines = EngineMembership(poll_s=0.05)
    static = engines.add("127.0.0.1:1", "prefill")  # given with --engine: never touched by DNS
    discovery = DnsEngineDiscovery(engines, DnsEngineSpec("decoders", 2, "decode"), 0.01)
    try:
        dns.answer = {"127.0.0.2:2", "127.0.0.3:2", "127.0.0.1:1"}
        await discovery.sync_once()
        by_address = {e.address: e for e in engines.engines.values()}
        assert set(by_address) == {"127.0.0.1:1", "127.0.0.2:2", "127.0.0.3:2"}
        assert by_address["127.0.0.2:2"].role == by_address["127.0.0.3:2"].role == "decode"
        assert set(discovery.owned) == {"127.0.0.2:2", "127.0.0.3:2"}

        dns.answer = None  # the DNS server did not answer: nothing changes
        await discovery.sync_once()
        assert len(engines.engines) == 3

        dns.answer = {"127.0.0.3:2", "127.0.0.4:2"}  # a pod went, another came
        await discovery.sync_once()
        await asyncio.sleep(0.1)  # the drain of an idle engine finishes at once
        assert {e.address for e in engines.engines.values()} == {
            "127.0.0.1:1", "127.0.0.3:2", "127.0.0.4:2"}

        # An admin DELETE of a discovered engine: DNS still lists it, so it joins again.
        gone = discovery.owned["127.0.0.4:2"]
        await engines.drain_and_remove(gone)
        await discovery.sync_once()
        assert "127.0.0.4:2" in {e.address for e in engines.engines.values()}
        assert discovery.owned["127.0.0.4:2"] != gone

        dns.answer = set()  # NXDOMAIN: the Service has no pods
        await discovery.sync_once()
        await asyncio.sleep(0.1)
        assert list(engines.engines.values()) == [static]
    finally:
        await discovery.close()
        await engines.close()


@pytest.mark.timeout(60)
def test_router_discovers_engines_by_name():
    engine_port, router_port = free_port(), free_port()
    engine = start_mock(engine_port)
    router = Proc([*SWITCHYARD, "router", "--port", str(router_port), "--poll-s", "0.1",
                   "--engine-dns", f"localhost:{engine_port}@decode",
                   "--engine-dns-interval-s", "0.2"], log_name=f"router{router_port}")
    base = f"http://127.0.0.1:{router_port}"
    try:
        wait_ready(base, router)
        engines = requests.get(f"{base}/admin/engines", timeout=5).json()["engines"]
        assert [(e["address"], e["role"]) for e in engines] == [
            (f"127.0.0.1:{engine_port}", "decode")]
        r = requests.post(f"{base}/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2},
                          timeout=30)
        assert r.status_code == 200, r.text
    finally:
        router.stop()
        engine.stop()


def test_bad_flag_is_a_clear_error():
    router = Proc([*SWITCHYARD, "router", "--port", str(free_port()), "--engine-dns", "nope"],
                  log_name="router-bad-dns")
    try:
        assert router.popen.wait(timeout=60) == 2
        assert "--engine-dns must be NAME:PORT[@ROLE]" in router.output()
    finally:
        router.stop()
