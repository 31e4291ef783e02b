"""Run one request through the router's front in-process, as a client sends it: the front's
parsing, admission and Rust request task (router_core.InProcessFront) and its bridge
(pyrouter/front_bridge.py) over a dispatcher and its engines — the code a client's request runs,
with the engines the caller has (fakes, the simulator's, or real ones behind a fault-injecting
client). Shared by FakeCluster, the simulator and the real-engine fault tests.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyrouter.dispatch import Dispatcher, RequestRun
from pyrouter.engines.membership import EngineMembership
from pyrouter.front_bridge import FrontBridge, FrontRequest
from pyrouter.request import RouterRequest
from pyrouter.scope import RouterCounters
from pyrouter.state import RouterConfig, RouterState
from router_core import (
    AdmitOutcome,
    AdmitSpec,
    IncrementalDetokenizer,
    InProcessFront,
    RequestEnd,
    RouterTracer,
)
from switchyard_sim.fake.fake_tokenizer import fake_tokenizers
from switchyard_sim.fake.in_process import ClientError, ClientView, send

FAKE_MODEL = "fake-model"
# After each event the client reads: the request's run (live migration) and its tokens so far.
OnTokens = Callable[[RequestRun, int], Awaitable[None]]


@dataclass(slots=True)
class FakeRun:
    """One request's outcome: what the client got and what the engines were asked to do."""

    request: RouterRequest
    tokens: list[int] = field(default_factory=list)
    finish_reason: str = ""
    route: str = ""
    segments: int = 0
    error: ClientError | None = None
    usage: dict[str, Any] | None = None

    @property
    def verbs(self) -> list[tuple[str, str]]:
        return list(self.request.scope.verbs)


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


class _Bridge(FrontBridge):
    """The router's bridge, remembering the request it admitted and telling when it closed."""

    def __init__(self, state: RouterState) -> None:
        super().__init__(state)
        self.handle: FrontRequest | None = None
        self.closed = asyncio.Event()

    async def admit(self, spec: AdmitSpec) -> AdmitOutcome:
        outcome = await super().admit(spec)
        if isinstance(outcome.run, FrontRequest):
            self.handle = outcome.run
        return outcome

    async def close(self, handle: FrontRequest, end: RequestEnd) -> None:
        try:
            await super().close(handle, end)
        finally:
            self.closed.set()


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


def in_process_front(engines: EngineMembership, dispatcher: Dispatcher, counters: RouterCounters,
                     tracer: RouterTracer | None = None) -> tuple[InProcessFront, _Bridge]:
    """A front in-process over `dispatcher` and `engines`, as the router's over its own: the
    bridge's state, and the engines' router core for the admission gate to read (off until
    `router_core.set_admission` turns it on)."""
    engine_tokenizer, tokenizer, vocab = fake_tokenizers()
    # A cluster that knows its engines' context (a simulated profile's) is fronted by a router
    # configured for it; the others (FakeCluster: SmolLM2-sized, or 0: not known) by the
    # router's default.
    max_context = getattr(engines, "max_context", None)
    config = (RouterConfig(FAKE_MODEL) if not max_context
              else RouterConfig(FAKE_MODEL, max_context=int(max_context)))
    state = RouterState(config, engine_tokenizer, engines, dispatcher.slot,
                        dispatcher, vocab, counters=counters, tracer=tracer)
    bridge = _Bridge(state)
    front = InProcessFront(bridge, tokenizer, vocab, served_model=FAKE_MODEL,
                           max_context=state.config.max_context,
                           first_chunk_timeout_s=dispatcher.policy_timeout_s, tracer=tracer)
    core = getattr(engines, "core", None)
    if core is not None:
        front.set_core(core)
    return front, bridge


async def run_through_front(engines: EngineMembership, dispatcher: Dispatcher, req: RouterRequest,
                            counters: RouterCounters, *, disconnect_after: int | None = None,
                            stop_after: int | None = None,
                            reference: Sequence[int] | None = None,
                            on_tokens: OnTokens | None = None,
                            tracer: RouterTracer | None = None,
                            traceparent: str | None = None) -> FakeRun:
    """Send `req` (its tokens, sampling and SLO as a client's body) through a front over
    `dispatcher` and `engines`; returns when its clean-up is done. `disconnect_after=k`: the
    client goes away after k tokens; `stop_after=k`: a stop string the router first matches
    on token k of `reference` (the tokens the request will produce). With `tracer` the front
    and the policy record the request's spans there, under the client's `traceparent`."""
    front, bridge = in_process_front(engines, dispatcher, counters, tracer)
    state = bridge.state
    body = request_body(req)
    if stop_after is not None:
        if reference is None:
            raise ValueError("stop_after needs the tokens the request will produce")
        body["stop"] = [stop_string_at(reference, stop_after)]

    async def each_event(n: int) -> None:
        run = None if bridge.handle is None else state.runs.get(bridge.handle.key)
        if on_tokens is not None and run is not None:
            await on_tokens(run, n)

    headers = [("x-request-id", req.request_id)]
    if traceparent is not None:
        headers.append(("traceparent", traceparent))
    view: ClientView = await send(front, body, headers=headers,
                                  disconnect_after=disconnect_after,
                                  on_tokens=each_event if on_tokens is not None else None)
    handle = bridge.handle
    if handle is not None:
        await bridge.closed.wait()
    for _ in range(3):  # let background aborts reach the engines
        await asyncio.sleep(0)
    out = FakeRun(handle.req if handle is not None else req, view.tokens, view.finish_reason,
                  view.route, error=view.error, usage=view.usage)
    if handle is not None and handle.run is not None:
        out.segments = handle.run.segments
    return out
