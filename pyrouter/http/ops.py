"""The routes the Rust front hands to Python: /ready, /metrics, /openapi.json and the admin API.

The front (router_core/src/front/http.rs) serves the OpenAI routes, /v1/models and /health
itself and passes every other request here through the bridge (pyrouter/front_bridge.py), with
the client's own Authorization header: the key ring (pyrouter/security/keys.py) decides, so an
admin route takes an admin key and an inference key never opens one. Two planes: the public
listener has everything (the admin routes only while they have no address of their own), the
admin plane (--admin-port) only /ready and the admin routes. Every error is an OpenAI error body
with a code — a bug's too (500 `internal_error`, logged).
"""
from __future__ import annotations

import logging
import math
from dataclasses import replace

from pyrouter.errors import MethodNotAllowed, NotFound, RouterError
from pyrouter.http.admin import ADMIN_ROUTES
from pyrouter.http.openapi import openapi_document
from pyrouter.http.probes import metrics, ready
from pyrouter.http.routes import OpsRequest, OpsResponse, Route, json_response
from pyrouter.state import RouterState

log = logging.getLogger("switchyard.router")
PUBLIC, ADMIN = "public", "admin"
# Served by the Rust front itself, per plane (documented in /openapi.json like the rest).
FRONT_ROUTES = {PUBLIC: (("POST", "/v1/completions"), ("POST", "/v1/chat/completions"),
                         ("GET", "/v1/models"), ("GET", "/health")),
                ADMIN: (("GET", "/health"),)}


async def _openapi(state: RouterState, request: OpsRequest) -> OpsResponse:
    admin_separate = state.config.keys.admin_plane_separate
    paths = {path for _, path in served_routes(request.plane, admin_separate)}
    return json_response(openapi_document(paths))


_READY = Route("GET", "/ready", ready)
_PUBLIC_ROUTES = (_READY, Route("GET", "/metrics", metrics),
                  Route("GET", "/openapi.json", _openapi))


def plane_routes(plane: str, admin_separate: bool) -> tuple[Route, ...]:
    """The routes Python answers on `plane`."""
    if plane == ADMIN:
        return (_READY, *ADMIN_ROUTES)
    return _PUBLIC_ROUTES if admin_separate else (*_PUBLIC_ROUTES, *ADMIN_ROUTES)


def served_routes(plane: str, admin_separate: bool) -> set[tuple[str, str]]:
    """(method, path) of every route a plane serves, the front's own included."""
    return {*FRONT_ROUTES[plane],
            *((r.method, r.path) for r in plane_routes(plane, admin_separate))}


def _find(routes: tuple[Route, ...], method: str, path: str) -> tuple[Route, dict[str, str]]:
    allowed: list[str] = []
    for route in routes:
        params = route.match(path)
        if params is None:
            continue
        # HEAD is a GET whose body the HTTP server leaves out.
        if route.method == method or (method == "HEAD" and route.method == "GET"):
            return route, params
        allowed.append(route.method)
    if allowed:
        raise MethodNotAllowed("Method Not Allowed", sorted(set(allowed)))
    raise NotFound("Not Found")


def error_response(exc: RouterError) -> OpsResponse:
    resp = json_response(exc.body(), status=exc.status)
    if exc.retry_after_s is not None:
        resp.headers.append(("Retry-After", str(max(1, math.ceil(exc.retry_after_s)))))
    if isinstance(exc, MethodNotAllowed):
        resp.headers.append(("Allow", ", ".join(exc.allow)))
    return resp


async def answer(state: RouterState, request: OpsRequest) -> OpsResponse:
    """The response to one request the front handed over."""
    try:
        state.config.keys.check(request.path, request.authorization, request.client_host)
        routes = plane_routes(request.plane, state.config.keys.admin_plane_separate)
        route, params = _find(routes, request.method, request.path)
        return await route.handler(state, replace(request, params=params))
    except RouterError as exc:
        if exc.status >= 500:
            log.warning("%s %s -> %d: %s", request.method, request.path, exc.status, exc.message)
        state.metrics.count_error(exc.code or exc.error_type)
        return error_response(exc)
    except Exception:
        log.exception("%s %s: unhandled error", request.method, request.path)
        state.metrics.count_error("internal_error")
        return error_response(RouterError("internal error (logged by the router)"))
