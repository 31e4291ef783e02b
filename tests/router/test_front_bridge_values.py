"""The values crossing the policy bridge are typed, and a wrong one is a clear error, not a crash.

In-process: the router's state (the default model's tokenizer), the Rust front and one mock
engine. A bridge whose hook answers the wrong type (the old positional tuples, a dict) gets the
client a 500 naming the hook and the type it returned, and the router keeps serving; so does a
policy that returns something other than a stream, or a segmented one that yields one. The
first chunk reaches the policy as an EngineChunk made in Rust (no protobuf on the Python side),
and the verbs a policy awaits answer PrepRecvResult / RemoteSendResult, made in Rust too.
"""
from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

import pyrouter.router_command as router_server
from pyrouter.engines.front_call import FrontCall
from pyrouter.engines.handle import GenerationStream
from pyrouter.front_bridge import FrontBridge
from pyrouter.policy_registry import policy
from pyrouter.router_command import build_state, start_front
from pyrouter.state import RouterState
from router_core import (
    AdmitOutcome,
    Admitted,
    EngineChunk,
    EngineRpcClient,
    MockEngineServer,
    OpsCall,
    PrepRecvResult,
    RemoteSendResult,
    RequestEnd,
    RequestFailure,
    SegmentHandoff,
)

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


async def _serve(bridge: type[FrontBridge], policy_name: str,
                 monkeypatch: pytest.MonkeyPatch) -> tuple[Any, RouterState, Any]:
    monkeypatch.setattr(router_server, "FrontBridge", bridge)
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

    async def start(bridge: type[FrontBridge], policy_name: str) -> Router:
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


class OldTupleAdmit(FrontBridge):
    """Answers admit the way the bridge did before it was typed."""

    async def admit(self, spec: Any) -> Any:
        return None, "test_two_segments", True, ("call", b"", "e0", "dp", "dp")


class DictOps(FrontBridge):
    async def ops(self, call: OpsCall) -> Any:
        return {"status": 200}


class ListSegment(FrontBridge):
    async def next_segment(self, handle: Any, handoff: SegmentHandoff) -> Any:
        answer = await super().next_segment(handle, handoff)
        return [answer]


class FailingClose(FrontBridge):
    async def _close(self, handle: Any, end: RequestEnd) -> None:
        raise RuntimeError(f"close failed after {end.completion_tokens} tokens")


async def test_a_close_that_raises_is_logged_and_the_router_serves_on(
        router: Any, caplog: pytest.LogCaptureFixture) -> None:
    post = await router(FailingClose, "test_two_segments")
    for _ in range(2):
        status, answer = await post()
        assert status == 200 and answer["usage"]["completion_tokens"] == 6, answer
    while len([r for r in caplog.records if "closing it failed" in r.getMessage()]) < 2:
        await asyncio.sleep(0.01)  # close runs after the response (bounded by the timeout)
    failed = [r for r in caplog.records if "closing it failed" in r.getMessage()]
    assert all(r.exc_info and "close failed after 6 tokens" in str(r.exc_info[1])
               for r in failed)


async def test_admit_answering_a_tuple_is_a_500_naming_it(router: Any) -> None:
    post = await router(OldTupleAdmit, "test_two_segments")
    status, answer = await post()
    assert status == 500
    assert ("the policy bridge's admit returned tuple, expected AdmitOutcome"
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
    assert ("the policy bridge's next_segment returned list, expected SegmentStart or "
            "RequestFailure" in _message(answer)), answer


async def test_a_stream_the_front_cannot_read_is_a_500_and_its_run_is_closed(
        router: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(self: GenerationStream) -> Any:
        raise RuntimeError("this stream cannot be read by the front")
    monkeypatch.setattr(GenerationStream, "segment_call", property(unreadable))
    post = await router(FrontBridge, "test_two_segments")
    status, answer = await post()
    assert status == 500 and "cannot be read by the front" in _message(answer)
    while post.state.runs:  # close() ends the admitted run (bounded by the test's timeout)
        await asyncio.sleep(0.01)
    assert post.state.counters.inflight == 0
    assert all(not e.active for e in post.state.engines.engines.values())


async def test_two_segments_through_the_typed_bridge(router: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    firsts: list[object] = []
    read = FrontCall.read

    async def recording(self: FrontCall) -> object:
        chunk = await read(self)
        firsts.append(chunk)
        return chunk
    monkeypatch.setattr(FrontCall, "read", recording)
    post = await router(FrontBridge, "test_two_segments")
    status, answer = await post(body={**BODY, "return_token_ids": True})
    assert status == 200, answer
    assert answer["usage"]["completion_tokens"] == 6
    # One first chunk per segment, read by the policy's side: EngineChunks made in Rust.
    assert len(firsts) == 2 and all(isinstance(c, EngineChunk) for c in firsts), firsts
    assert isinstance(firsts[0], EngineChunk) and len(firsts[0].token_ids) >= 1


@pytest.mark.parametrize(("policy_name", "phrase"), [
    ("test_returns_a_dict", "must return the stream from start_generate"),
    ("test_second_segment_is_a_string", "must return the stream from start_generate"),
])
async def test_a_policy_answering_the_wrong_type_is_a_500(router: Any, policy_name: str,
                                                          phrase: str) -> None:
    post = await router(FrontBridge, policy_name)
    status, answer = await post()
    assert status == 500 and phrase in _message(answer), answer
    assert policy_name in _message(answer)


async def test_the_router_serves_after_a_wrong_answer(router: Any) -> None:
    post = await router(FrontBridge, "test_returns_a_dict")
    assert (await post())[0] == 500
    status, answer = await post("/admin/policy", {"policy": "test_two_segments"}, "PUT")
    assert status == 200, answer
    status, answer = await post()
    assert status == 200 and answer["usage"]["completion_tokens"] == 6, answer


async def test_the_verbs_answer_typed_results_made_in_rust() -> None:
    tokens = list(range(100, 140))
    with MockEngineServer(0) as sender, MockEngineServer(0, page_size=8) as receiver:
        send_from = EngineRpcClient(f"127.0.0.1:{sender.port}", 10.0)
        recv_on = EngineRpcClient(f"127.0.0.1:{receiver.port}", 10.0)
        kv = await recv_on.prep_recv("r1", tokens, 39)
        assert isinstance(kv, PrepRecvResult)
        assert (kv.kv_addr, kv.matched_len, kv.end, kv.page_size) == (b"mock:r1", 0, 39, 8)
        sent = await send_from.remote_send("r1", tokens, kv.kv_addr, recv_on.address, 4, 39)
        assert isinstance(sent, RemoteSendResult)
        assert (sent.transport, sent.begin, sent.end, sent.cached_on_sender) == ("mock", 4, 39, 0)


def test_outcome_takes_only_admitted_or_failure() -> None:
    with pytest.raises(TypeError, match="must be Admitted or RequestFailure, got str"):
        AdmitOutcome(None, "p", "oops")  # type: ignore[arg-type]
    failure = RequestFailure(503, b'{"error": {}}')
    outcome = AdmitOutcome(None, "p", failure)
    assert outcome.result is failure and outcome.run is None and failure.body == b'{"error": {}}'
    with pytest.raises(TypeError):
        Admitted("not a segment", "dp", "dp")  # type: ignore[arg-type]


def test_the_values_python_only_reads_are_not_constructible() -> None:
    for cls in (RequestEnd, SegmentHandoff, OpsCall, EngineChunk):
        with pytest.raises(TypeError):
            cls()
