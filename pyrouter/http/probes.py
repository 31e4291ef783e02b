"""GET /ready and GET /metrics (GET /health is the Rust front's own)."""
from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pyrouter.degrade import readiness
from pyrouter.http.routes import OpsRequest, OpsResponse, json_response
from pyrouter.state import RouterState


async def ready(state: RouterState, request: OpsRequest) -> OpsResponse:
    """200 when the active policy can serve now; the body says what it has and lacks. 503 while
    draining or when no engine can serve; with `?strict=1` also when a role the policy asks for
    has no healthy engine (it is running degraded, pyrouter/degrade.py)."""
    report = readiness(state.slot.current.spec.roles, state.engines.healthy(), state.draining)
    strict = request.query.get("strict", "") in ("1", "true")
    ok = report.serving and not (strict and report.missing_roles)
    return json_response(report.body(), status=200 if ok else 503)


async def metrics(state: RouterState, request: OpsRequest) -> OpsResponse:
    if state.recorder is not None:
        state.recorder.record()
    front = state.engines.front
    state.metrics.in_flight.set(front.inflight if front is not None else 0)
    state.metrics.admission.record(front)
    for e in state.engines.engines.values():
        state.metrics.engine_healthy.labels(e.id, e.role, e.address).set(
            1 if e.healthy and not e.draining else 0)
    return OpsResponse(200, generate_latest(state.metrics.registry),
                       content_type=CONTENT_TYPE_LATEST.split(";")[0])
