"""GET / PUT /admin/session-affinity: session affinity's settings while the router runs.

`PUT` takes `{"load_bound": C, "from_user": BOOL}` (either may be left out: it keeps its value)
and answers with the settings now in force; new requests follow them at once, requests in
flight keep their engines.
"""
from __future__ import annotations

import logging

from pyrouter.errors import BadRequest
from pyrouter.http.routes import OpsRequest, OpsResponse, Route, json_response
from pyrouter.replicas.admin_propagation import propagate
from pyrouter.session_affinity import SessionAffinityConfig
from pyrouter.state import RouterState

log = logging.getLogger("switchyard.router")


async def get_sessions(state: RouterState, request: OpsRequest) -> OpsResponse:
    return json_response(state.sessions.body())


async def put_sessions(state: RouterState, request: OpsRequest) -> OpsResponse:
    body = request.json_object()
    unknown = sorted(set(body) - {"load_bound", "from_user"})
    if unknown:
        raise BadRequest(f"unknown field(s) {unknown}; expected {{\"load_bound\": C >= 1, "
                         "\"from_user\": bool}", param=unknown[0])
    config = SessionAffinityConfig(body.get("load_bound", state.sessions.load_bound),
                                   body.get("from_user", state.sessions.from_user))
    config.apply(state.engines.front)
    state.sessions = config
    log.info("session affinity: load bound %s, user names the session: %s",
             config.load_bound, config.from_user)
    response = json_response(config.body())
    full = {"load_bound": config.load_bound, "from_user": config.from_user}
    response.headers += await propagate(state, request, "session-affinity", full)
    return response


SESSION_ROUTES = (
    Route("GET", "/admin/session-affinity", get_sessions),
    Route("PUT", "/admin/session-affinity", put_sessions),
)
