"""GET / PUT /admin/admission: the admission queue's settings while the router runs.

`PUT` takes any of `max_inflight_per_engine`, `max_queued_prefill_tokens`, `queue_size`,
`queue_timeout_s`, `weights` (`{API key: weight}`, replacing the weights in force), `predicted`
(admission by predicted outcome: true/false or "on"/"off"), `margin`, and the deployment's
default objectives `slo_ttft_ms` / `slo_tpot_ms` (null: none); fields left out keep their
values. It answers with the settings now in force (the weights' keys, being
secrets, only counted), as `GET` does. Requests already queued keep their place and deadline.
"""
from __future__ import annotations

import logging

from pyrouter.admission import AdmissionConfig
from pyrouter.errors import BadRequest
from pyrouter.http.routes import OpsRequest, OpsResponse, Route, json_response
from pyrouter.replicas.admin_propagation import propagate
from pyrouter.state import RouterState

log = logging.getLogger("switchyard.router")
FIELDS = ("max_inflight_per_engine", "max_queued_prefill_tokens", "queue_size", "queue_timeout_s",
          "weights", "predicted", "margin", "slo_ttft_ms", "slo_tpot_ms")


async def get_admission(state: RouterState, request: OpsRequest) -> OpsResponse:
    return json_response(state.admission.body())


async def put_admission(state: RouterState, request: OpsRequest) -> OpsResponse:
    body = request.json_object()
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise BadRequest(f"unknown field(s) {unknown}; expected any of {list(FIELDS)}",
                         param=unknown[0])
    now = state.admission
    config = AdmissionConfig(*(body.get(name, getattr(now, name)) for name in FIELDS))
    config.apply(state.engines.front)
    state.admission = config
    log.info("admission queue: %s", config.body())
    response = json_response(config.body())
    # The peers take the settings in full (the weights too: the keys travel to the peers'
    # admin API only, never back out of GET /admin/replication).
    full = {name: getattr(config, name) for name in FIELDS}
    response.headers += await propagate(state, request, "admission", full)
    return response


ADMISSION_ROUTES = (
    Route("GET", "/admin/admission", get_admission),
    Route("PUT", "/admin/admission", put_admission),
)
