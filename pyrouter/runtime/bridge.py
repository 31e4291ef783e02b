"""The deciding side of the router's front (router_core.RouterFront / InProcessFront).

router_core does the whole request — parsing, the Rust built-ins' picks, every verb, the first
chunk, retries, error mapping, streaming, the close — and calls this bridge on the router's
asyncio loop only to decide: once per request that a Python policy decides (`decide`, answered
with a typed placement, its verbs meanwhile running in router_core's executor for the request),
once per segment boundary of a policy written as an async generator (`next_segment`), and, with
no wait, to close such a policy's run. How each placement went reaches the policy's closed loop
in batches before the next decision (`observed`). Routes the front does not serve itself
(/ready, /metrics, /openapi.json, /admin/...) come to `ops`.

Crossings of a request a Python policy decides: R->P decide (one job on the loop's queue, one GIL
hand-off per batch of jobs), P->R the Decision; and for a verb-API policy, each awaited verb is
one call into Rust and one answer back. Nothing else of the request runs in Python.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import parse_qsl

from pyrouter.errors import (
    EngineCallError,
    PolicyFailed,
    RouterError,
    TransferFailed,
    VerbOrderError,
)
from pyrouter.http.ops import answer
from pyrouter.http.routes import OpsRequest
from pyrouter.request import RouterRequest, request_of
from pyrouter.runtime.explanation import explanation
from pyrouter.runtime.observer import PlacementObserver, deliver, observer_for
from pyrouter.runtime.policy_run import Placement, PolicyRun, SegmentEnd
from pyrouter.state import RouterState
from router_core import (
    DecideSpec,
    Decision,
    Observation,
    OpsCall,
    OpsReply,
    RequestFailure,
    RequestVerbs,
    UseBuiltin,
    VerbFailed,
)
from router_core import SegmentEnd as RustSegmentEnd

log = logging.getLogger("switchyard.router")
_VERB_ERRORS = (EngineCallError, TransferFailed, VerbOrderError)


def failure(exc: RouterError) -> RequestFailure:
    return RequestFailure(exc.status, json.dumps(exc.body()).encode(), exc.retry_after_s or 0.0)


def decision(req: RouterRequest, placement: Placement, policy: str, run: PolicyRun | None,
             observer: PlacementObserver | None, traced: bool) -> Decision:
    """The typed answer; made with the request's verbs, it places the request in router_core's
    engine table at once (the next decision, made before this one is carried out, sees it)."""
    route = req.route
    return Decision(placement, route.pattern, [(k, str(v)) for k, v in route.params.items()],
                    list(route.degraded), policy, run=run, observer=observer,
                    explanation=explanation(req) if traced else None, verbs=req.verbs)


class PolicyRuntime:
    def __init__(self, state: RouterState) -> None:
        self.state = state
        self._deciding: dict[str, asyncio.Task[Any]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    # ---- once per request a Python policy decides ----
    async def decide(self, spec: DecideSpec, verbs: RequestVerbs
                     ) -> Decision | RequestFailure | UseBuiltin | VerbFailed:
        state = self.state
        group = state.group(spec.model)  # the front resolved it: a served model's name
        active = group.slot.current
        if active.spec.in_rust:
            return UseBuiltin()  # switched in while this request waited for its decision
        req = request_of(spec, verbs, group.name)
        task = asyncio.current_task()
        if task is not None:
            self._deciding[spec.key] = task
        try:
            placement, run = await group.dispatcher.decide(req, active)
        except _VERB_ERRORS:
            return VerbFailed(active.name)  # router_core maps the failure its verb recorded
        except RouterError as exc:
            if isinstance(exc, PolicyFailed):
                state.metrics.child(state.metrics.policy_errors, active.name).inc()
            return failure(exc)
        except asyncio.CancelledError:  # the client went away
            return failure(RouterError("client closed the request"))
        except Exception as exc:  # never a broken response: the client gets a 500
            log.exception("policy %r raised for request %s", active.name, spec.request_id)
            state.metrics.child(state.metrics.policy_errors, active.name).inc()
            return failure(PolicyFailed(active.name, f"{type(exc).__name__}: {exc}"))
        finally:
            self._deciding.pop(spec.key, None)
        observer = observer_for(req, group.dispatcher.feedback)
        keep = run if run.segmented else None
        return decision(req, placement, active.name, keep, observer, spec.traced)

    def cancel_decision(self, key: str) -> None:
        """The client went away while its decision runs."""
        task = self._deciding.get(key)
        if task is not None:
            task.cancel()

    # ---- once per segment boundary ----
    async def next_segment(self, run: PolicyRun, end: RustSegmentEnd, verbs: RequestVerbs
                           ) -> Decision | RequestFailure | VerbFailed | None:
        req = run.req
        req.verbs = verbs
        new_tokens = list(end.tokens)
        req.tokens.extend(new_tokens)
        engine = run.cluster.engine(end.engine_id)
        task = asyncio.current_task()
        if task is not None:  # the next engine may queue for long: cancel_decision stops it
            self._deciding[req.key] = task
        try:
            placement = await run.next(SegmentEnd(engine, end.reason, new_tokens,
                                                  dict(end.detail)))
        except _VERB_ERRORS:
            return VerbFailed(run.name)
        except RouterError as exc:
            return failure(exc)
        except asyncio.CancelledError:
            return failure(RouterError("client closed the request"))
        except Exception as exc:
            log.exception("request %s: the next segment failed", req.request_id)
            return failure(PolicyFailed(run.name, f"{type(exc).__name__}: {exc}"))
        finally:
            self._deciding.pop(req.key, None)
        if placement is None:
            return None
        return decision(req, placement, run.name, run, None, False)

    def close(self, run: PolicyRun) -> None:
        """The request ended: the policy's `finally` blocks run (a task nobody awaits)."""
        task = asyncio.get_running_loop().create_task(run.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def observed(self, batch: list[tuple[PlacementObserver, Observation]]) -> None:
        deliver(batch)

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
