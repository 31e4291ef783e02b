"""FakeCluster: run any policy in-process against constructed engine states, with no processes.

    cluster = FakeCluster([FakeEngine(role="prefill"), FakeEngine(role="decode", cached=[p])])
    run = await cluster.run("pd", prompt, max_tokens=8)
    assert run.route.startswith("pd") and run.tokens == cluster.reference(prompt, 8)
    cluster.assert_clean()

A request runs the path a client's request runs: its body goes through the router's front
(router_core.InProcessFront: parsing, admission, the Rust request task and executor — every
verb, retry and clean-up — the Rust built-ins, stop strings and the client going away) and its
policy bridge (pyrouter/runtime/bridge.py: the dispatcher, the policy unchanged), with
router_core's prefix index, engine table and scoring; only the engines are fakes (switchyard_sim/
fake/fake_engine.py) whose loads the test sets and whose verbs are recorded. So each decision a
policy makes — which engine, which pattern, which split — and each clean-up gets a fast unit
test.
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import router_core
from pyrouter.cluster import ClusterView
from pyrouter.engines.handle import EngineHandle
from pyrouter.engines.membership import EngineMembership
from pyrouter.outcomes import RecentOutcomes
from pyrouter.planning.prediction_feedback import PredictionFeedback
from pyrouter.request import RouterRequest, SloSpec
from pyrouter.runtime.dispatch import Dispatcher, PolicySlot
from pyrouter.runtime.policy_registry import ActivePolicy, PolicySpec, get_policy
from router_core import InProcessFront, RouterCore, engine_name
from switchyard_engine_api.sampling_params import SamplingParams
from switchyard_sim.fake.fake_engine import FakeEngineClient, Fault, next_token
from switchyard_sim.fake.front_run import FAKE_MODEL, FakeRun, FrontHarness, OnTokens
from switchyard_sim.fake.local_engines import LocalEngines


@dataclass(slots=True)
class FakeEngine:
    """An engine's state as a test declares it (what Stats and KV events would have said)."""

    role: str = "any"
    healthy: bool = True
    cached: Sequence[Sequence[int]] = ()  # token sequences whose full blocks it holds
    queued_prefill_tokens: int = 0
    longest_queued_prefill_tokens: int = 0  # of those, one request's (0: not reported)
    running_decodes: int = 0
    unfinished_tokens: int = 0
    kv_pages_used: int = 0
    kv_pages_evictable: int = 0  # of kv_pages_used, held only by the prefix cache
    kv_pages_total: int = 4096
    decode_step_ms: float = 0.0
    # The engine's step-time model, term -> ms per unit (router_core's terms: const,
    # prefill_tokens, prefill_attention, decode_seqs, decode_context, ...); {} = none yet.
    latency_model: dict[str, float] = field(default_factory=dict)
    prefill_chunk_size: int = 0
    decode_context_tokens: int = 0
    faults: Sequence[Fault] = ()


class FakeCluster(LocalEngines):
    def __init__(self, engines: Sequence[FakeEngine], block_size: int = 16,
                 policy_timeout_s: float = 5.0) -> None:
        super().__init__(RouterCore(block_size, router_core.model_seed(FAKE_MODEL)))
        self.outcomes = RecentOutcomes()  # kept across runs, as a router's dispatcher keeps it
        self.feedback = PredictionFeedback()  # likewise
        self.policy_timeout_s = policy_timeout_s
        # Where its requests' spans go, under which client traceparent (FakeCluster.trace).
        self.tracer: router_core.RouterTracer | None = None
        self.traceparent: str | None = None
        self._clients: dict[str, FakeEngineClient] = {}
        self._slot: PolicySlot | None = None  # kept across runs, as a router keeps its policy
        self._harness: FrontHarness | None = None  # its one front (made on the loop it runs on)
        for num, spec in enumerate(engines):
            name = engine_name(num)
            client = FakeEngineClient(self, name, f"fake-{num}:1", num, block_size,
                                      faults=list(spec.faults),
                                      prefill_chunk_size=spec.prefill_chunk_size)
            handle = EngineHandle(name, num, client.address, spec.role, client,
                                  self.core, healthy=spec.healthy)
            self._clients[name] = client
            self.add(handle)
            self.set_load(name, spec)
            for tokens in spec.cached:
                client.cache(list(tokens))

    # ---- test set-up and inspection ----
    def client(self, engine_id: str) -> FakeEngineClient:
        return self._clients[engine_id]

    def set_load(self, engine_id: str, spec: FakeEngine) -> None:
        """Set an engine's health and load as its Stats would."""
        handle = self.engines[engine_id]
        handle.healthy = spec.healthy
        self.core.table.set_health(handle.num, spec.healthy)
        self.core.table.update_stats(
            handle.num, spec.queued_prefill_tokens, spec.running_decodes, spec.unfinished_tokens,
            spec.kv_pages_used, spec.kv_pages_total, spec.decode_step_ms,
            latency_model=dict(spec.latency_model), prefill_chunk_size=spec.prefill_chunk_size,
            decode_context_tokens=spec.decode_context_tokens,
            kv_pages_evictable=spec.kv_pages_evictable,
            longest_queued_prefill_tokens=spec.longest_queued_prefill_tokens)

    def request(self, tokens: Sequence[int], max_tokens: int = 8, slo: SloSpec | None = None,
                **sampling: Any) -> RouterRequest:
        """A request as a client would send it (FakeCluster.run sends its body)."""
        params = SamplingParams(max_tokens=max_tokens, **sampling)
        return RouterRequest("fake-req", list(tokens), params, slo=slo or SloSpec())

    def view(self, policy: str | PolicySpec, params: dict[str, Any] | None = None
             ) -> ClusterView:
        return ClusterView(self, self._active(policy, params), self.outcomes)

    @staticmethod
    def reference(tokens: Sequence[int], max_tokens: int) -> list[int]:
        """What one engine alone generates for `tokens` (the fake model is deterministic)."""
        context, out = list(tokens), []
        for _ in range(max_tokens):
            out.append(next_token(context))
            context.append(out[-1])
        return out

    def assert_clean(self) -> None:
        """Router accounting at zero and no engine holding anything for any request."""
        front = self._harness.front if self._harness is not None else None
        if self._harness is not None:
            self._harness.settle()
            assert front is not None and front.inflight == 0, "requests still counted"
        assert self.feedback.running_requests == 0, "a prediction held past its request's end"
        for handle in self.engines.values():
            load = self.core.table.get(handle.num)
            assert load.inflight == 0, (handle.id, load.inflight)
            active = front.engine_active(handle.num) if front is not None else 0
            assert not active, (handle.id, active)
            client = self._clients[handle.id]
            assert client.holds_nothing, (handle.id, client.reservations, client.generations)

    def trace(self, tracer: router_core.RouterTracer, traceparent: str | None = None) -> None:
        """Record every request's spans (the front's and the policy's) with `tracer`, as
        children of the client's `traceparent` when given."""
        self.tracer, self.traceparent = tracer, traceparent
        self._harness = None  # the next front records with it

    # ---- running a policy ----
    def _active(self, policy: str | PolicySpec, params: dict[str, Any] | None) -> ActivePolicy:
        spec = get_policy(policy) if isinstance(policy, str) else policy
        return ActivePolicy(spec, spec.check_params(params or {}))

    def _dispatcher(self, policy: str | PolicySpec, params: dict[str, Any] | None
                    ) -> Dispatcher:
        active = self._active(policy, params)
        if self._slot is None:
            self._slot = PolicySlot(active)
        elif (self._slot.current.spec, self._slot.current.params) != (active.spec, active.params):
            self._slot.current = active  # a switch: fresh policy state, as PUT /admin/policy
        if self._harness is not None and self._harness.loop is not asyncio.get_running_loop():
            self._harness = None  # a front lives on the loop it was made on
        if self._harness is None:
            dispatcher = Dispatcher(self, self._slot, policy_timeout_s=self.policy_timeout_s)
            dispatcher.outcomes, dispatcher.feedback = self.outcomes, self.feedback
            self._harness = FrontHarness(cast(EngineMembership, self), dispatcher, self.tracer)
        return self._harness.state.dispatcher

    def harness(self, policy: str | PolicySpec, params: dict[str, Any] | None = None
                ) -> FrontHarness:
        """The cluster's one front under `policy` (switched to it when another ran before)."""
        self._dispatcher(policy, params)
        assert self._harness is not None
        return self._harness

    def front(self, policy: str | PolicySpec, params: dict[str, Any] | None = None
              ) -> InProcessFront:
        """The cluster's front for several requests at once (sent with
        switchyard_sim.fake.in_process.send), sharing its admission gate as a router's
        requests do (`router_core.set_admission(front, ...)` turns it on)."""
        return self.harness(policy, params).front

    async def run(self, policy: str | PolicySpec, request: RouterRequest | Sequence[int],
                  params: dict[str, Any] | None = None, max_tokens: int = 8,
                  disconnect_after: int | None = None, stop_after: int | None = None,
                  on_tokens: OnTokens | None = None) -> FakeRun:
        """Send one request through the router's front, as a client does (switchyard_sim/fake/
        front_run.py); `disconnect_after=k` makes the client go away after k tokens,
        `stop_after=k` sends a stop string the router matches on token k;
        `on_tokens(harness, n)` runs after each event the client reads (n tokens so far), e.g.
        to migrate the request mid-stream."""
        req = request if isinstance(request, RouterRequest) else self.request(request,
                                                                              max_tokens)
        harness = self.harness(policy, params)
        reference = (self.reference(req.tokens, req.sampling.max_tokens)
                     if stop_after is not None else None)
        return await harness.run(req, disconnect_after=disconnect_after, stop_after=stop_after,
                                 reference=reference, on_tokens=on_tokens,
                                 traceparent=self.traceparent)
