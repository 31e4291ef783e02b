"""The aiohttp application: middleware (request id, route header, auth, OpenAI errors) + routes."""
from __future__ import annotations

import hmac
import logging
import re
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pyrouter.errors import RouterError, Unauthorized
from pyrouter.http.admin import add_admin_routes
from pyrouter.http.generation import ROUTE_HEADER, chat_completions, completions
from pyrouter.request import new_request_id
from pyrouter.state import STATE, RouterState

log = logging.getLogger("switchyard.router")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_OPEN_PATHS = ("/health", "/ready", "/metrics")
# The id prefix per route, as OpenAI's bodies have it. One id per request: X-Request-Id, the
# body's `id` and the trace's request id are the same string — the client's own X-Request-Id
# when it sent a sane one. Engines get a random id of their own (unguessable, never shared).
_ID_PREFIX = {"/v1/chat/completions": "chatcmpl-", "/v1/completions": "cmpl-"}
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_STARTED = int(time.time())


def _check_key(state: RouterState, request: web.Request) -> None:
    keys = state.config.api_keys
    if not keys or request.path in _OPEN_PATHS:
        return
    auth = request.headers.get("Authorization", "")
    token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    if not token or not any(hmac.compare_digest(token, k) for k in keys):
        raise Unauthorized("missing or invalid API key", code="invalid_api_key")


@web.middleware
async def envelope(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every response gets X-Request-Id and X-Switchyard-Route; errors get the OpenAI body."""
    engine_request_id = new_request_id(_ID_PREFIX.get(request.path, "req-"))
    client_id = request.headers.get("X-Request-Id", "")
    request_id = client_id if _CLIENT_ID.fullmatch(client_id) else engine_request_id
    request["request_id"], request["engine_request_id"] = request_id, engine_request_id
    try:
        _check_key(request.app[STATE], request)
        resp = await handler(request)
    except RouterError as exc:
        if exc.status >= 500:
            log.warning("%s %s -> %d: %s", request.method, request.path, exc.status, exc.message)
        resp = web.json_response(exc.body(), status=exc.status)
    except web.HTTPException as exc:  # aiohttp's own 404/405: same error shape
        err = RouterError(exc.reason, code=str(exc.status))
        err.status, err.error_type = exc.status, "invalid_request_error"
        resp = web.json_response(err.body(), status=exc.status)
    if not resp.prepared:
        resp.headers["X-Request-Id"] = request_id
        resp.headers.setdefault(ROUTE_HEADER, request.get("route", "none"))
    return resp


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def ready(request: web.Request) -> web.Response:
    healthy = len(request.app[STATE].engines.healthy())
    return web.json_response({"ready": healthy > 0, "healthy_engines": healthy},
                             status=200 if healthy else 503)


async def models(request: web.Request) -> web.Response:
    model = request.app[STATE].config.served_model
    return web.json_response({"object": "list", "data": [
        {"id": model, "object": "model", "created": _STARTED, "owned_by": "switchyard"}]})


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.metrics.in_flight.set(state.counters.inflight)
    for e in state.engines.engines.values():
        state.metrics.engine_healthy.labels(e.id, e.role, e.address).set(
            1 if e.healthy and not e.draining else 0)
    resp = web.Response(body=generate_latest(state.metrics.registry))
    resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
    return resp



def make_app(state: RouterState) -> web.Application:
    app = web.Application(middlewares=[envelope], client_max_size=64 << 20)
    app[STATE] = state
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", metrics)
    add_admin_routes(app)
    return app
