"""The aiohttp applications: middleware (request id, route header, keys, OpenAI errors) + routes.

One public app (inference, probes, metrics, the API description) and the admin routes, either on
the same app or — with `--admin-port` — on an app of their own bound to another address.
"""
from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pyrouter.degrade import readiness
from pyrouter.errors import RouterError
from pyrouter.http.admin import add_admin_routes
from pyrouter.http.generation import ERROR_COUNTED, ROUTE_HEADER, chat_completions, completions
from pyrouter.http.openapi import openapi_handler
from pyrouter.request import new_request_id
from pyrouter.state import STATE, RouterState

log = logging.getLogger("switchyard.router")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The id prefix per route, as OpenAI's bodies have it. One id per request: X-Request-Id, the
# body's `id` and the trace's request id are the same string — the client's own X-Request-Id
# when it sent a sane one. Engines get a random id of their own (unguessable, never shared).
_ID_PREFIX = {"/v1/chat/completions": "chatcmpl-", "/v1/completions": "cmpl-"}
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_STARTED = int(time.time())
# aiohttp's own errors (unknown route, wrong method, oversized body) as OpenAI error codes.
_HTTP_CODES = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed",
               408: "request_timeout", 413: "request_too_large", 414: "uri_too_long"}


def _http_error(exc: web.HTTPException) -> web.Response:
    err = RouterError(exc.reason, code=_HTTP_CODES.get(exc.status, f"http_{exc.status}"))
    err.status = exc.status
    err.error_type = "invalid_request_error" if exc.status < 500 else "internal_error"
    resp = web.json_response(err.body(), status=exc.status)
    if "Allow" in exc.headers:  # 405 says which methods the route takes
        resp.headers["Allow"] = exc.headers["Allow"]
    return resp


def error_response(exc: RouterError) -> web.Response:
    resp = web.json_response(exc.body(), status=exc.status)
    if exc.retry_after_s is not None:
        resp.headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    if exc.status == 408:
        resp.force_close()  # the unread rest of the body makes the connection unusable
    return resp


@web.middleware
async def envelope(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every response gets X-Request-Id and X-Switchyard-Route; every error the OpenAI body with
    a code — including a bug's (500 `internal_error`, logged), never a plain-text page."""
    state = request.app[STATE]
    engine_request_id = new_request_id(_ID_PREFIX.get(request.path, "req-"))
    client_id = request.headers.get("X-Request-Id", "")
    request_id = client_id if _CLIENT_ID.fullmatch(client_id) else new_request_id(
        _ID_PREFIX.get(request.path, "req-"))
    request["request_id"], request["engine_request_id"] = request_id, engine_request_id
    try:
        state.config.keys.check(request.path, request.headers.get("Authorization", ""))
        resp = await handler(request)
    except RouterError as exc:
        if exc.status >= 500:
            log.warning("%s %s -> %d: %s", request.method, request.path, exc.status, exc.message)
        if not request.get(ERROR_COUNTED):
            state.metrics.count_error(exc.code or exc.error_type)
        resp = error_response(exc)
    except web.HTTPException as exc:  # aiohttp's own 404/405/413: same error shape
        state.metrics.count_error(_HTTP_CODES.get(exc.status, "") or str(exc.status))
        resp = _http_error(exc)
    except Exception:
        log.exception("%s %s: unhandled error", request.method, request.path)
        if not request.get(ERROR_COUNTED):
            state.metrics.count_error("internal_error")
        resp = error_response(RouterError("internal error (logged by the router)"))
    if not resp.prepared:
        resp.headers["X-Request-Id"] = request_id
        resp.headers.setdefault(ROUTE_HEADER, request.get("route", "none"))
    return resp


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def ready(request: web.Request) -> web.Response:
    """200 when the active policy can serve now; the body says what it has and lacks. 503 while
    draining or when no engine can serve; with `?strict=1` also when a role the policy asks for
    has no healthy engine (it is running degraded, pyrouter/degrade.py)."""
    state = request.app[STATE]
    report = readiness(state.slot.current.spec.roles, state.engines.healthy(), state.draining)
    strict = request.query.get("strict", "") in ("1", "true")
    ok = report.serving and not (strict and report.missing_roles)
    return web.json_response(report.body(), status=200 if ok else 503)


async def models(request: web.Request) -> web.Response:
    model = request.app[STATE].config.served_model
    return web.json_response({"object": "list", "data": [
        {"id": model, "object": "model", "created": _STARTED, "owned_by": "switchyard"}]})


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.fast_recorder is not None:
        state.fast_recorder.record()
    front = state.engines.front
    state.metrics.in_flight.set(front.inflight if front is not None else state.counters.inflight)
    for e in state.engines.engines.values():
        state.metrics.engine_healthy.labels(e.id, e.role, e.address).set(
            1 if e.healthy and not e.draining else 0)
    resp = web.Response(body=generate_latest(state.metrics.registry))
    resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
    return resp


def _new_app(state: RouterState) -> web.Application:
    # aiohttp enforces the size limit on chunked bodies too; read_body checks Content-Length
    # first so an oversized body is refused before it is read.
    app = web.Application(middlewares=[envelope], client_max_size=state.config.max_body_bytes)
    app[STATE] = state
    return app


def make_app(state: RouterState, with_admin: bool = True) -> web.Application:
    """The public app; `with_admin=False` when the admin routes have their own (make_admin_app)."""
    app = _new_app(state)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi_handler)
    if with_admin:
        add_admin_routes(app)
    return app


def make_admin_app(state: RouterState) -> web.Application:
    """The admin plane on its own address: admin routes plus the probes."""
    app = _new_app(state)
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    add_admin_routes(app)
    return app
