"""The router's front in-process, requests sent to it as a client sends them: the front's
parsing, admission, request task and executor (router_core.InProcessFront) and its policy bridge
(pyrouter/runtime/bridge.py) over a dispatcher and its engines — the code a client's request
runs, the Rust built-ins included, with the engines the caller has (fakes, the simulator's, or
real ones, behind a fault-injecting client or not). One front per cluster, as a router has one:
the built-ins' cursors, the retry budget and the observations the policies learn from live
there. Shared by FakeCluster, the simulator and the real-engine fault tests.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyrouter.engines.membership import EngineMembership
from pyrouter.migration import move_request
from pyrouter.request import RouterRequest
from pyrouter.runtime.bridge import PolicyRuntime
from pyrouter.runtime.builtins import sync_builtins
from pyrouter.runtime.dispatch import Dispatcher
from pyrouter.runtime.records import RequestRecorder
from pyrouter.state import RouterConfig, RouterState
from router_core import IncrementalDetokenizer, InProcessFront, RouterTracer
from switchyard_sim.fake.engine_double import attach
from switchyard_sim.fake.fake_tokenizer import fake_tokenizers
from switchyard_sim.fake.in_process import ClientError, ClientView, send_request

FAKE_MODEL = "fake-model"


@dataclass(slots=True)
class FakeRun:
    """One request's outcome: what the client got and what the engines were asked to do."""

    request: RouterRequest
    tokens: list[int] = field(default_factory=list)
    finish_reason: str = ""
    # What ran (X-Switchyard-Route as the request ended: a migration or resumption noted after
    # the response began is in it).
    route: str = ""
    segments: int = 0
    error: ClientError | None = None
    usage: dict[str, Any] | None = None
    # (verb, engine id) in issue order, and the id engines knew its last attempt by.
    verbs: list[tuple[str, str]] = field(default_factory=list)
    engine_request_id: str = ""


def stop_string_at(tokens: Sequence[int], at: int) -> str:
    """A stop string the router's detokenizer first completes on token `at` (1-based) of
    `tokens`: the shortest tail of the text so far that it matches there and not before."""
    vocab = fake_tokenizers()[2]
    plain = IncrementalDetokenizer(vocab)
    for token in tokens[:at]:
        plain.push([token])
    text = plain.text
    for size in range(1, len(text) + 1):
        stop = text[-size:]
        if not stop.strip():
            continue
        check = IncrementalDetokenizer(vocab, [stop])
        ends = [n for n, token in enumerate(tokens[:at], 1) if check.push([token])[1]]
        if ends == [at]:
            return stop
    raise ValueError(f"no stop string ends the text on token {at}")


def request_body(req: RouterRequest, model: str = FAKE_MODEL) -> dict[str, Any]:
    """The completion request a client sends for `req` (streamed, with its token ids and
    usage)."""
    s = req.sampling
    body: dict[str, Any] = {
        "model": model, "prompt": list(req.tokens), "max_tokens": s.max_tokens,
        "stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True,
        "temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k,
        "min_tokens": s.min_tokens, "ignore_eos": s.ignore_eos}
    if s.seed is not None:
        body["seed"] = s.seed
    if s.stop:
        body["stop"] = list(s.stop)
    slo = {k: v for k, v in (("ttft_ms", req.slo.ttft_ms), ("tpot_ms", req.slo.tpot_ms))
           if v is not None}
    if slo:
        body["slo"] = slo
    return body


# After each event the client reads: the harness (to migrate the request, say) and the tokens
# it has so far.
OnTokens = Callable[["FrontHarness", int], Awaitable[None]]


class FrontHarness:
    """One in-process front over `dispatcher` and `engines` (make it on the loop that drives
    its requests)."""

    def __init__(self, engines: EngineMembership, dispatcher: Dispatcher,
                 tracer: RouterTracer | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        engine_tokenizer, tokenizer, vocab = fake_tokenizers()
        # A cluster that knows its engines' context (a simulated profile's) is fronted by a
        # router configured for it; the others (FakeCluster: SmolLM2-sized, or 0: not known) by
        # the router's default.
        max_context = getattr(engines, "max_context", None)
        config = (RouterConfig(FAKE_MODEL) if not max_context
                  else RouterConfig(FAKE_MODEL, max_context=int(max_context)))
        self.state = RouterState(config, engine_tokenizer, engines, dispatcher.slot,
                                 dispatcher, vocab, tracer=tracer)
        self.front = InProcessFront(
            PolicyRuntime(self.state), tokenizer, vocab, served_model=FAKE_MODEL,
            max_context=config.max_context, first_chunk_timeout_s=dispatcher.policy_timeout_s,
            tracer=tracer)
        core = getattr(engines, "core", None)
        if core is not None:
            self.front.set_core(core)
        for handle in engines.engines.values():
            attach(self.front, handle.num, handle.client, handle.address)
        sync_builtins(self.state, self.front)
        self._follow_policy: Callable[[Any], None] = (
            lambda _active: sync_builtins(self.state, self.front))
        dispatcher.slot.on_change(self._follow_policy)
        self.state.recorder = RequestRecorder(self.state, self.front)

    def close(self) -> None:
        """Let go of the front once its requests are over (call on its loop's last turn).

        The front (Rust) holds its policy bridge, whose router state reaches back to the front
        through the recorder and the policy slot's listener: a cycle through Rust, which
        Python's collector cannot see into. Unbroken, every front made stays alive with its
        router state, dispatcher and engines (the simulator's: their caches and router core),
        so a process running many simulations grows by a whole cluster per run."""
        self.state.dispatcher.slot.off_change(self._follow_policy)
        self.state.recorder = None

    def settle(self) -> None:
        """What the finished requests taught: observations to the policies, records to the
        metrics and outcome window (a router does both a few times a second)."""
        self.front.deliver_observations()
        assert self.state.recorder is not None
        self.state.recorder.record()

    async def migrate(self, request_id: str, target: Any) -> dict[str, Any]:
        """Move the running request `request_id` to engine handle `target` (a live migration,
        as POST /admin/migrate does)."""
        return await move_request(self.front, request_id, target)

    async def run(self, req: RouterRequest, *, disconnect_after: int | None = None,
                  stop_after: int | None = None, reference: Sequence[int] | None = None,
                  on_tokens: OnTokens | None = None, traceparent: str | None = None) -> FakeRun:
        """Send `req` (its tokens, sampling and SLO as a client's body); returns when its
        clean-up is done. `disconnect_after=k`: the client goes away after k tokens;
        `stop_after=k`: a stop string the router first matches on token k of `reference` (the
        tokens the request will produce). With a tracer the request's spans go there, under
        the client's `traceparent`."""
        body = request_body(req)
        if stop_after is not None:
            if reference is None:
                raise ValueError("stop_after needs the tokens the request will produce")
            body["stop"] = [stop_string_at(reference, stop_after)]

        async def each_event(n: int) -> None:
            if on_tokens is not None:
                await on_tokens(self, n)

        headers = [("x-request-id", req.request_id)]
        if req.session_id is not None:
            headers.append(("x-session-id", req.session_id))
        if traceparent is not None:
            headers.append(("traceparent", traceparent))
        view, request = await send_request(self.front, body, headers=headers,
                                           disconnect_after=disconnect_after,
                                           on_tokens=each_event if on_tokens else None)
        for _ in range(3):  # let background aborts reach the engines
            await asyncio.sleep(0)
        self.settle()
        verbs, route, _policy, segments, engine_request_id = request.outcome()
        return _fake_run(req, view, route, verbs, segments, engine_request_id)


def _fake_run(req: RouterRequest, view: ClientView, route: str, verbs: list[tuple[str, str]],
              segments: int, engine_request_id: str) -> FakeRun:
    return FakeRun(req, view.tokens, view.finish_reason, route or view.route, segments,
                   error=view.error, usage=view.usage, verbs=list(verbs),
                   engine_request_id=engine_request_id)
