"""Session affinity through the router (issue 26, deliver 2). On two real SmolLM2 engines (fast
CPU mode): a session (X-Session-Id) stays on one engine under round_robin, least_load and
cache_aware (the Rust fast path) and the route header says `session=stuck`; different sessions
spread over both engines; the body's `user` names a session only once the operator allows it
(the --session-from-user setting, changed live with PUT /admin/session-affinity); bad values
are 400s naming their source; a Python policy reads `req.session_id`. On two mock engines
(synthetic tokens, slow enough that requests stay in flight): a session whose engine is over
the load bound overflows to the other engine (`session=overflow`), and comes back once the load
is gone."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from router_procs import mock_router, wait_until
from router_real_cluster import real_engines, router_over

pytestmark = [pytest.mark.procs, pytest.mark.timeout(600)]

SESSION_ECHO_PY = """from pyrouter.runtime.policy_registry import policy


@policy("session_echo")
async def route(req, cluster):
    engine = cluster.engines("any")[0]
    req.note_route("dp", engine=engine.id, seen=req.session_id or "none")
    return engine.start_generate(req, begin=0)
"""


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    policies = tmp_path_factory.mktemp("policies")
    (policies / "session_echo.py").write_text(SESSION_ECHO_PY)
    with real_engines(["any", "any"], mode="fast") as ports, \
            router_over(ports, "--policy-dir", str(policies), "--session-load-bound",
                        "1.5") as router:
        yield router


def _complete(base: str, prompt: str, session: str | bytes | None = None,
              **body: Any) -> requests.Response:
    headers = {} if session is None else {"X-Session-Id": session}
    return requests.post(f"{base}/v1/completions", headers=headers, timeout=300,
                         json={"prompt": prompt, "max_tokens": 2, "temperature": 0, **body})


def _engine(route: str) -> str:
    return next(p.split("=", 1)[1] for p in route.split() if p.startswith("engine="))


def _routes(base: str, prompt: str, session: str | None = None, n: int = 4,
            **body: Any) -> list[str]:
    out = []
    for _ in range(n):
        r = _complete(base, prompt, session, **body)
        assert r.status_code == 200, r.text
        out.append(r.headers["X-Switchyard-Route"])
    return out


def _policy(base: str, name: str) -> None:
    r = requests.put(f"{base}/admin/policy", json={"policy": name}, timeout=30)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("policy", ["round_robin", "least_load", "cache_aware"])
def test_a_session_stays_on_one_engine_and_sessions_spread(base: str, policy: str) -> None:
    _policy(base, policy)
    routes = _routes(base, "The capital of France is", "conversation-1")
    assert len({_engine(r) for r in routes}) == 1, routes
    assert all(r.endswith(" session=stuck") for r in routes), routes
    # Twelve sessions, each sticking, land on both engines (a ring splits them).
    homes = set()
    for s in range(12):
        seen = {_engine(r) for r in _routes(base, f"Session {s} says", f"user-{s}", n=2)}
        assert len(seen) == 1, (s, seen)
        homes |= seen
    assert homes == {"e0", "e1"}
    # Without a session the policy decides alone.
    plain = _routes(base, "The capital of France is", None, n=2)
    assert not any("session=" in r for r in plain), plain
    if policy == "round_robin":
        assert {_engine(r) for r in plain} == {"e0", "e1"}


def test_user_names_a_session_only_once_allowed(base: str) -> None:
    _policy(base, "round_robin")
    assert requests.get(f"{base}/admin/session-affinity", timeout=10).json() == {
        "load_bound": 1.5, "from_user": False}
    off = _routes(base, "Hello", user="alice")
    assert not any("session=" in r for r in off) and len({_engine(r) for r in off}) == 2, off
    r = requests.put(f"{base}/admin/session-affinity", json={"from_user": True}, timeout=10)
    assert r.status_code == 200 and r.json() == {"load_bound": 1.5, "from_user": True}, r.text
    try:
        on = _routes(base, "Hello", user="alice")
        assert len({_engine(r) for r in on}) == 1 and on[0].endswith(" session=stuck"), on
        bad = _complete(base, "Hello", user=["alice"])
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "user", bad.text
        # The header still wins over `user`.
        header = _complete(base, "Hello", "conversation-1", user="alice")
        assert header.status_code == 200 and "session=stuck" in header.headers[
            "X-Switchyard-Route"]
    finally:
        requests.put(f"{base}/admin/session-affinity", json={"from_user": False}, timeout=10)
    for body in ({"load_bound": 0.5}, {"from_user": "yes"}, {"bound": 2}):
        r = requests.put(f"{base}/admin/session-affinity", json=body, timeout=10)
        assert r.status_code == 400, (body, r.text)
    assert requests.get(f"{base}/admin/session-affinity", timeout=10).json() == {
        "load_bound": 1.5, "from_user": False}


@pytest.mark.parametrize("value", ["x" * 257, "sessi\u00f3n".encode(), ""])
def test_bad_session_headers_are_400s(base: str, value: str | bytes) -> None:
    r = _complete(base, "Hello", value)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == ("X-Session-Id", "invalid_session_id"), error
    assert "printable ASCII" in error["message"]


def test_a_python_policy_reads_the_session_id(base: str) -> None:
    _policy(base, "session_echo")
    try:
        assert _routes(base, "Hi", "chat-9", n=1)[0] == "dp engine=e0 seen=chat-9"
        assert _routes(base, "Hi", None, n=1)[0] == "dp engine=e0 seen=none"
    finally:
        _policy(base, "round_robin")


@pytest.fixture(scope="module")
def slow_mocks() -> Iterator[str]:
    """Two mock engines that send one token every 100 ms: a stream held open stays in flight."""
    with mock_router("--chunk-delay-ms", "100", "--tokens-per-chunk", "1") as base:
        yield base


def _inflight(base: str) -> int:
    engines = requests.get(f"{base}/admin/engines", timeout=10).json()["engines"]
    return sum(int(e["load"]["inflight"]) for e in engines)


def test_an_overloaded_session_engine_overflows(slow_mocks: str) -> None:
    """The bound is ceil(1.25 × (in flight + 1) / 2): the session's engine takes its first two
    held streams, the third goes to the other engine, and once they end the session is home
    again."""
    held: list[requests.Response] = []
    try:
        for _ in range(3):
            r = requests.post(f"{slow_mocks}/v1/completions", stream=True, timeout=60,
                              headers={"X-Session-Id": "busy-session"},
                              json={"prompt": "hold", "max_tokens": 500, "stream": True,
                                    "ignore_eos": True})
            assert r.status_code == 200
            held.append(r)
        routes = [r.headers["X-Switchyard-Route"] for r in held]
        home = _engine(routes[0])
        assert routes[:2] == [routes[0]] * 2 and routes[0].endswith(" session=stuck"), routes
        assert _engine(routes[2]) != home and routes[2].endswith(" session=overflow"), routes
    finally:
        for r in held:
            r.close()
    wait_until(lambda: _inflight(slow_mocks) == 0, 30, "the held streams to end")
    r = requests.post(f"{slow_mocks}/v1/completions", timeout=60,
                      headers={"X-Session-Id": "busy-session"},
                      json={"prompt": "hold", "max_tokens": 2})
    assert r.status_code == 200
    assert r.headers["X-Switchyard-Route"] == routes[0], r.headers["X-Switchyard-Route"]
