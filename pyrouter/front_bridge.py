"""The deciding side of the router's HTTP front (router_core.RouterFront).

The front parses, tokenises, streams tokens and writes SSE/JSON in Rust; it calls this bridge on
the router's asyncio loop once per request (`admit`: run the policy to the first chunk of its
first segment), once per segment boundary (`next_segment`) and once at the end (`close`) —
never per token. The policy session, the dispatcher's retries and error mapping, the request
scope, metrics, traces, outcomes and per-caller limits live here. Routes the front does not
serve itself (/ready, /metrics, /openapi.json, /admin/...) come to `ops`, which answers them
with pyrouter/http/ops.py behind the key ring: the request carries the client's own
Authorization header, so an admin route takes an admin key. While the router drains, `admit`
answers 503 `shutting_down`.

What crosses between the front and this bridge is typed (router_core's `AdmitSpec`,
`AdmitOutcome` of `Admitted` or `RequestFailure`, `SegmentHandoff`, `SegmentStart`,
`RequestEnd`, `OpsCall`/`OpsReply`; router_core/src/python/bridge_values.rs): an answer of any
other type is the client's 500 naming it, never a failed unpacking. Chunks are `EngineChunk`s,
made once in Rust: no protobuf is encoded or decoded on this side (an in-process engine double's
GenerateChunk messages are, once, in SegmentStart: tests and the simulator run this bridge too,
through router_core.InProcessFront).

Crossings of a pd request between Rust and Python, admission to close ("R->P": a tokio thread
queues a job for this loop, one GIL hand-off per batch of jobs; "P->R": this loop calls into
Rust, no hand-off):

  before (issue 22)                              now
  R->P admit(spec dict)                          R->P admit(AdmitSpec)
  (prep_recv, remote_send on Python's grpc.aio   P->R prep_recv, R->P a PrepRecvResult
   client: no crossing, a second gRPC stack)     P->R remote_send, R->P a RemoteSendResult
  P->R start_generate                            P->R start_generate
  P->R next_chunk()                              P->R next_chunk()
  R->P the first chunk, as bytes                 R->P the first chunk, an EngineChunk
  P->R admit's answer, a 5-tuple in a 4-tuple    P->R admit's answer, an AdmitOutcome
  R->P close(6 positional values)                R->P close(RequestEnd)
  P->R close's done-callback                     (none: close logs its own failures)
  = 7 crossings, 3 hand-offs; the first chunk    = 10 crossings, 5 hand-offs (the verbs' 4
  encoded in Rust, decoded and re-encoded in     replace the second client); the first chunk
  Python, decoded again in Rust: 4 codings       is the message tonic decoded: no coding

A request refused before the policy ran (bad sampling, drain, per-caller limit) is not closed at
all now (its AdmitOutcome's run is None). A hand-off adds R->P next_segment(SegmentHandoff) and
P->R its answer per segment, besides the next segment's start_generate and first chunk; before,
next_segment (like ops, cancel_admission and the log calls) took the GIL on a tokio thread
itself, now every call queues like admit. Left: the policy's side reads each segment's first
chunk (2 crossings) because the dispatcher retries an engine that fails before its first token;
start_generate still takes a StartGenerateRequest serialized here and decoded in Rust.
"""
from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from pyrouter.dispatch import RequestRun
from pyrouter.errors import BadRequest, PolicyFailed, RouterError
from pyrouter.http.drain import shutting_down
from pyrouter.http.ops import answer
from pyrouter.http.routes import OpsRequest
from pyrouter.request import RouterRequest, SloSpec
from pyrouter.request_end import record_request_end
from pyrouter.request_timeline import RequestTimeline
from pyrouter.request_trace import start_request_trace
from pyrouter.state import RouterState
from router_core import (
    AdmitOutcome,
    AdmitSpec,
    Admitted,
    OpsCall,
    OpsReply,
    RequestEnd,
    RequestFailure,
    SegmentHandoff,
    SegmentStart,
)
from switchyard_proto.errors import InvalidRequest
from switchyard_proto.sampling_params import ResponseFormat, SamplingParams

log = logging.getLogger("switchyard.router")


@dataclass(slots=True, eq=False)
class FrontRequest:
    """One request the front handed over: what `close` needs, whatever happened."""

    req: RouterRequest
    policy: str
    # The request's first engine-side id: router-made, so unique even when clients share an
    # X-Request-Id (the key of its admission and of its run).
    key: str = ""
    caller: str | None = None  # counted in by the per-caller limits (released at close)
    run: RequestRun | None = None
    error_type: str = ""  # why admission failed (the error metric's label)


def _failure(exc: RouterError, handle: FrontRequest | None = None) -> RequestFailure:
    if handle is not None:
        handle.error_type = exc.code or exc.error_type
    return RequestFailure(exc.status, json.dumps(exc.body()).encode())


def _request(spec: AdmitSpec, served_model: str) -> RouterRequest:
    try:
        sampling = SamplingParams(
            max_tokens=spec.max_tokens, temperature=spec.temperature, top_p=spec.top_p,
            top_k=spec.top_k, min_tokens=spec.min_tokens, seed=spec.seed, stop=spec.stop,
            ignore_eos=spec.ignore_eos, priority=spec.priority,
            response_format=(ResponseFormat(spec.response_format, spec.json_schema)
                             if spec.response_format else None))
    except InvalidRequest as exc:
        raise BadRequest(str(exc), param=exc.param) from exc
    req = RouterRequest(
        request_id=spec.request_id, tokens=spec.tokens, sampling=sampling, kind=spec.kind,
        model=served_model, stream=spec.stream, include_usage=spec.include_usage,
        return_token_ids=spec.return_token_ids, slo=SloSpec(spec.slo_ttft_ms, spec.slo_tpot_ms))
    req.engine_request_id = spec.engine_request_id
    req.session_id = spec.session_id
    if spec.session_load_bound is not None:
        req.session_load_bound = spec.session_load_bound
    return req


class FrontBridge:
    def __init__(self, state: RouterState) -> None:
        self.state = state
        self._admitting: dict[str, asyncio.Task[Any]] = {}

    # ---- once per request ----
    async def admit(self, spec: AdmitSpec) -> AdmitOutcome:
        state = self.state
        group = state.group(spec.model)  # the front resolved it: a served model's name
        policy = group.slot.current.name
        try:
            if state.draining:
                raise shutting_down()
            req = _request(spec, group.name)
            caller = None
            if state.limiter.rules.active:
                caller = state.config.keys.caller_id(spec.authorization, spec.client_host)
                state.limiter.acquire(caller)
        except RouterError as exc:
            state.metrics.count_error(exc.code or exc.error_type)
            return AdmitOutcome(None, policy, _failure(exc))  # nothing taken: nothing to close
        req.timeline = RequestTimeline()
        req.timeline.trace = start_request_trace(state.tracer, req)
        handle = FrontRequest(req, policy, req.engine_request_id, caller)
        req.scope.open(state.counters)
        task = asyncio.current_task()
        if task is not None:
            self._admitting[handle.key] = task
        try:
            run = await group.dispatcher.admit(req)
        except RouterError as exc:
            if isinstance(exc, PolicyFailed):
                state.metrics.child(state.metrics.policy_errors, policy).inc()
            return AdmitOutcome(handle, policy, _failure(exc, handle))
        except asyncio.CancelledError:  # the client went away: close() still cleans up
            return AdmitOutcome(handle, policy,
                                _failure(RouterError("client closed the request"), handle))
        except Exception as exc:  # never a broken response: the client gets a 500
            log.exception("request %s: admission failed", req.request_id)
            return AdmitOutcome(handle, policy, _failure(
                PolicyFailed(policy, f"{type(exc).__name__}: {exc}"), handle))
        finally:
            self._admitting.pop(handle.key, None)
        handle.run, handle.policy = run, run.policy_name  # close() ends the run, whatever follows
        state.runs[handle.key] = run
        try:
            segment = SegmentStart(run.stream.segment_call, run.stream.engine.id, run.first)
        except (RuntimeError, TypeError, AttributeError) as exc:  # a stream it cannot read
            log.exception("request %s: the front cannot stream its segment", req.request_id)
            return AdmitOutcome(handle, run.policy_name, _failure(
                PolicyFailed(run.policy_name, f"{type(exc).__name__}: {exc}"), handle))
        state.metrics.count_selection(run.policy_name, req.route.label())
        req.timeline.arrived(len(segment.first.token_ids), req.timeline.first_token)
        return AdmitOutcome(handle, run.policy_name, Admitted(
            segment, req.route.header(), req.route.pattern or "unknown"))

    def cancel_admission(self, engine_request_id: str) -> None:
        """The client went away while its admission or a hand-off's next segment runs."""
        task = self._admitting.get(engine_request_id)
        if task is not None:
            task.cancel()

    # ---- once per segment boundary ----
    async def next_segment(self, handle: FrontRequest, handoff: SegmentHandoff
                           ) -> SegmentStart | RequestFailure:
        run, segment_tokens = handle.run, handoff.tokens
        if run is None:
            return _failure(RouterError("no policy session for a hand-off"))
        run.stream.mark_delivered()  # the hand-off chunk ended the segment on its engine
        # The front reads the chunks: the segment's one arrival time is its end.
        handle.req.timeline.arrived(len(segment_tokens))
        handle.req.timeline.end_segment(len(segment_tokens), "handoff")
        task = asyncio.current_task()
        if task is not None:  # the next engine may queue for long: cancel_admission stops it
            self._admitting[handle.key] = task
        try:
            # The segment's first chunk is read here: an engine that fails before it is
            # replaced (RequestRun.next_started) before the front sees anything.
            stream, first = await run.next_started(segment_tokens)
            return SegmentStart(stream.segment_call, stream.engine.id, first)
        except RouterError as exc:
            return _failure(exc)
        except asyncio.CancelledError:  # the client went away: close() still cleans up
            return _failure(RouterError("client closed the request"))
        except Exception as exc:
            log.exception("request %s: the next segment failed", handle.req.request_id)
            return _failure(PolicyFailed(run.policy_name, f"{type(exc).__name__}: {exc}"))
        finally:
            self._admitting.pop(handle.key, None)

    # ---- once at the end ----
    async def close(self, handle: FrontRequest, end: RequestEnd) -> None:
        """Runs as a task nobody awaits: a failure is logged here (the request has ended)."""
        try:
            await self._close(handle, end)
        except Exception:
            log.exception("request %s: closing it failed", handle.req.request_id)

    async def _close(self, handle: FrontRequest, end: RequestEnd) -> None:
        state, req, run = self.state, handle.req, handle.run
        status, delivered = end.status, end.delivered
        req.completion_tokens = end.completion_tokens
        if run is not None:
            # The front read the rest: the request's last arrival is its end (the timeline's
            # inter-token figures are per segment, not per chunk, on this front).
            req.timeline.arrived(max(0, end.completion_tokens - len(run.first.token_ids)))
            if delivered:  # the verb's span ends inside its segment's
                run.stream.mark_delivered()
            req.timeline.end_segment(end.completion_tokens,
                                     "finished" if delivered else status)
            if state.runs.get(handle.key) is run:
                del state.runs[handle.key]
            await run.close()
        req.scope.close()
        if handle.caller is not None:
            state.limiter.release(handle.caller)
        error_type = handle.error_type or ("" if status == "ok" else "client_or_engine")
        record_request_end(state, req, handle.policy, status, error_type)

    # ---- the routes the front does not serve ----
    async def ops(self, call: OpsCall) -> OpsReply:
        resp = await answer(self.state, OpsRequest(
            call.plane, call.method, call.path,
            dict(parse_qsl(call.query, keep_blank_values=True)), call.body, call.authorization,
            client_host=call.client_host or None))
        return OpsReply(resp.status, resp.content_type, resp.body, resp.headers)

    def engine_unavailable(self, num: int, message: str) -> None:
        for engine in self.state.engines.engines.values():
            if engine.num == num:
                self.state.engines.mark_unhealthy(engine.id)
        log.warning("%s", message)

    def warn(self, message: str) -> None:
        log.warning("%s", message)
