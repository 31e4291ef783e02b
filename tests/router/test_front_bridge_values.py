"""The values crossing the policy bridge are typed, and a wrong one is a clear error, not a crash.

In-process: the router's state (the default model's tokenizer), the Rust front and one mock
engine. A bridge whose hook answers the wrong type (a positional tuple, a dict, a list) gets the
client a 500 naming the hook and the type it returned, and the router keeps serving; so does a
policy that returns something other than a placement, or a segmented one that yields one. The
verbs a policy awaits answer KvReservation / SendResult, made in Rust.
"""
from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

import pyrouter.router_command as router_server
from pyrouter import Dp, Pd, Segment, Split
from pyrouter.router_command import build_state, start_front
from pyrouter.runtime.bridge import PolicyRuntime
from pyrouter.runtime.policy_registry import policy
from pyrouter.state import RouterState
from router_core import (
    DecideSpec,
    Decision,
    KvReservation,
    MockEngineServer,
    Observation,
    OpsCall,
    RequestFailure,
    SendResult,
)
from router_core import SegmentEnd as RustSegmentEnd

pytestmark = pytest.mark.timeout(120)
BODY = {"prompt": "hello", "max_tokens": 6, "ignore_eos": True}


@policy("test_returns_a_dict")
async def _returns_a_dict(req: Any, cluster: Any) -> Any:
    return {"engine": cluster.engines()[0].id}


@policy("test_two_segments")
async def _two_segments(req: Any, cluster: Any) -> AsyncIterator[Any]:
    engine = cluster.engines()[0]
    yield engine.start_generate(req, begin=0, max_new_tokens_here=2)
    yield engine.start_generate(req, begin=0)


@policy("test_second_segment_is_a_string")
async def _second_segment_is_a_string(req: Any, cluster: Any) -> AsyncIterator[Any]:
    yield cluster.engines()[0].start_generate(req, begin=0, max_new_tokens_here=2)
    yield "e0"


Router = Callable[..., Awaitable[tuple[int, dict[str, Any]]]]


@policy("test_reserves_and_sends")
async def _reserves_and_sends(req: Any, cluster: Any) -> Any:
    """Checks what its verbs answer: KvReservation and SendResult, made in Rust."""
    engine = cluster.engines()[0]
    kv = await engine.prep_recv(req)
    assert isinstance(kv, KvReservation) and kv.engine_id == engine.id
    assert kv.end == len(req.tokens) - 1
    return engine.start_generate(req, begin=kv.matched)


async def _serve(bridge: type[PolicyRuntime], policy_name: str,
                 monkeypatch: pytest.MonkeyPatch) -> tuple[Any, RouterState, Any]:
    monkeypatch.setattr(router_server, "PolicyRuntime", bridge)
    engine = MockEngineServer(0)
    args = argparse.Namespace(engine=[f"127.0.0.1:{engine.port}"], policy=policy_name,
                              policy_file=None, model=None, host="127.0.0.1", port=0,
                              poll_s=0.05)
    state = await build_state(args)
    front = start_front(state, args)
    assert await state.engines.wait_ready(1, timeout_s=30)
    return engine, state, front


@pytest.fixture
async def router(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Callable[..., Any]]:
    """router(bridge_class, policy) -> post(path, body) -> (status, json body)."""
    started: list[tuple[Any, RouterState, Any]] = []

    async def start(bridge: type[PolicyRuntime], policy_name: str) -> Router:
        engine, state, front = await _serve(bridge, policy_name, monkeypatch)
        started.append((engine, state, front))

        async def request(path: str = "/v1/completions", body: dict[str, Any] | None = None,
                          method: str = "POST") -> tuple[int, dict[str, Any]]:
            async with aiohttp.ClientSession() as http, http.request(
                    method, f"http://127.0.0.1:{front.port}{path}",
                    json=BODY if body is None and method == "POST" else body) as resp:
                return resp.status, await resp.json(content_type=None)
        request.state = state  # type: ignore[attr-defined]
        return request

    yield start
    for engine, state, front in started:
        front.shutdown(0.0)
        await state.engines.close()
        engine.shutdown(0.0)


def _message(answer: dict[str, Any]) -> str:
    return str(answer["error"]["message"])


class OldTupleDecide(PolicyRuntime):
    """Answers decide with a positional tuple, as an untyped bridge would."""

    async def decide(self, spec: DecideSpec, verbs: Any) -> Any:
        return None, "test_two_segments", True, ("call", b"", "e0", "dp", "dp")


class DictOps(PolicyRuntime):
    async def ops(self, call: OpsCall) -> Any:
        return {"status": 200}


class ListSegment(PolicyRuntime):
    async def next_segment(self, run: Any, end: RustSegmentEnd, verbs: Any) -> Any:
        answer = await super().next_segment(run, end, verbs)
        return [answer]


class FailingClose(PolicyRuntime):
    def close(self, run: Any) -> None:
        raise RuntimeError("close failed")


async def test_a_close_that_raises_is_logged_and_the_router_serves_on(
        router: Any, capfd: pytest.CaptureFixture[str]) -> None:
    post = await router(FailingClose, "test_two_segments")
    for _ in range(2):
        status, answer = await post()
        assert status == 200 and answer["usage"]["completion_tokens"] == 6, answer


async def test_decide_answering_a_tuple_is_a_500_naming_it(router: Any) -> None:
    post = await router(OldTupleDecide, "test_two_segments")
    status, answer = await post()
    assert status == 500
    assert ("the policy bridge's decide returned tuple, expected Decision or RequestFailure"
            in _message(answer)), answer


async def test_ops_answering_a_dict_is_a_500_and_the_router_serves_on(router: Any) -> None:
    post = await router(DictOps, "test_two_segments")
    status, answer = await post("/admin/policy", method="GET")
    assert status == 500
    assert "the policy bridge's ops returned dict, expected OpsReply" in _message(answer)
    status, answer = await post()
    assert status == 200 and answer["usage"]["completion_tokens"] == 6, answer


async def test_next_segment_answering_a_list_is_a_500_naming_it(router: Any) -> None:
    post = await router(ListSegment, "test_two_segments")
    status, answer = await post()
    assert status == 500
    assert ("the policy bridge's next_segment returned list, expected Decision or "
            "RequestFailure" in _message(answer)), answer


async def test_two_segments_through_the_typed_bridge(router: Any) -> None:
    post = await router(PolicyRuntime, "test_two_segments")
    status, answer = await post(body={**BODY, "return_token_ids": True})
    assert status == 200, answer
    assert answer["usage"]["completion_tokens"] == 6
    front = post.state.engines.front
    assert front.crossings()["next_segment"] == 1  # one decision per segment boundary


async def test_the_verbs_answer_typed_results_made_in_rust(router: Any) -> None:
    post = await router(PolicyRuntime, "test_reserves_and_sends")
    status, answer = await post()
    assert status == 200 and answer["usage"]["completion_tokens"] == 6, answer


@pytest.mark.parametrize(("policy_name", "phrase"), [
    ("test_returns_a_dict", "a policy returns a placement"),
    ("test_second_segment_is_a_string", "a policy returns a placement"),
])
async def test_a_policy_answering_the_wrong_type_is_a_500(router: Any, policy_name: str,
                                                          phrase: str) -> None:
    post = await router(PolicyRuntime, policy_name)
    status, answer = await post()
    assert status == 500 and phrase in _message(answer), answer
    assert policy_name in _message(answer)


async def test_the_router_serves_after_a_wrong_answer(router: Any) -> None:
    post = await router(PolicyRuntime, "test_returns_a_dict")
    assert (await post())[0] == 500
    status, answer = await post("/admin/policy", {"policy": "test_two_segments"}, "PUT")
    assert status == 200, answer
    status, answer = await post()
    assert status == 200 and answer["usage"]["completion_tokens"] == 6, answer


def test_a_decision_takes_only_a_placement() -> None:
    with pytest.raises(TypeError, match="a policy returns a placement"):
        Decision("oops", "dp", [], [], "p")  # type: ignore[arg-type]
    for placement in (Dp(0), Pd(None, 1), Split(0, 1, 4, 0), Segment(0, 2, begin=1)):
        assert Decision(placement, "p", [("k", "v")], [], "p") is not None
    with pytest.raises(ValueError):
        Split(0, 0)  # a split needs two engines
    with pytest.raises(ValueError):
        Segment(0, 0)  # a segment of no tokens
    failure = RequestFailure(503, b'{"error": {}}')
    assert failure.status == 503 and failure.body == b'{"error": {}}'


def test_the_values_python_only_reads_are_not_constructible() -> None:
    for cls in (DecideSpec, RustSegmentEnd, OpsCall, Observation, KvReservation, SendResult):
        with pytest.raises(TypeError):
            cls()
