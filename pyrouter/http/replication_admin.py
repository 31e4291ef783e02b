"""GET / POST /admin/replication: the admin changes router replicas share (an admin route: the
admin key; pyrouter/replicas/admin_propagation.py says how they are used).

`GET` lists this replica's newest record per setting — what a peer pulls at start and every
--peer-sync-s; the admission queue's weights are left out (their keys are API keys: they reach
a peer only in the push made when they were set). `POST` takes one record a peer pushed and
applies it when it is newer than this replica's, answering `{"applied": BOOL}`; a record
received is never pushed on. A router without peers lists no records and answers a record
with 400 `no_peers`.
"""
from __future__ import annotations

import asyncio
from typing import Any

from pyrouter.errors import BadRequest
from pyrouter.http.routes import OpsRequest, OpsResponse, Route, json_response
from pyrouter.replicas.admin_propagation import AdminPropagation, ChangeRecord
from pyrouter.state import RouterState


def _replication(state: RouterState) -> AdminPropagation:
    if state.replication is None:
        raise BadRequest("this router has no peers (--peer / --peers-dns) to take changes from",
                         code="no_peers")
    return state.replication


def _public(record: ChangeRecord) -> dict[str, Any]:
    out = record.to_json()
    if record.key == "admission":
        out["body"] = {k: v for k, v in record.body.items() if k != "weights"}
    return out


async def get_replication(state: RouterState, request: OpsRequest) -> OpsResponse:
    if state.replication is None:
        return json_response({"origin": None, "records": []})
    replication = state.replication
    return json_response({"origin": replication.origin,
                          "records": [_public(r) for r in replication.records.values()]})


async def post_replication(state: RouterState, request: OpsRequest) -> OpsResponse:
    replication = _replication(state)
    record = ChangeRecord.from_json(request.json_object())
    # Shielded: a peer that stops waiting (its push timed out) does not cut the change in half.
    applied = await asyncio.shield(replication.receive(record))
    return json_response({"applied": applied})


REPLICATION_ROUTES = (
    Route("GET", "/admin/replication", get_replication),
    Route("POST", "/admin/replication", post_replication),
)
