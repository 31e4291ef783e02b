"""What a replicated admin change does on the replica that receives it, and the wiring at start.

A record (pyrouter/replicas/admin_propagation.py) is applied through the same admin handlers a client's
call runs, as a request of the `peer` plane, so a peer checks it as strictly as its own callers'
(its --policy-dir, its engine allow-list) and does not push it on. Engines are named by address,
not id: replicas number the engines each has seen, and those numbers need not agree.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
from typing import Any

from pyrouter.http.admin import add_engine, delete_engine, put_policy_handler
from pyrouter.http.admission_admin import put_admission
from pyrouter.http.routes import OpsRequest
from pyrouter.http.session_admin import put_sessions
from pyrouter.model_groups import ModelGroup
from pyrouter.replicas.admin_propagation import (
    PEER_PLANE,
    AdminPropagation,
    ChangeRecord,
    peer_admin_offset,
)
from pyrouter.runtime.shared_policy_state import shared_keys
from pyrouter.state import RouterState

log = logging.getLogger("switchyard.router")
_pushes: set[asyncio.Task[tuple[int, int]]] = set()


def _peer_request(method: str, path: str, body: dict[str, Any] | None = None,
                  query: dict[str, str] | None = None,
                  params: dict[str, str] | None = None) -> OpsRequest:
    return OpsRequest(PEER_PLANE, method, path, query or {}, json.dumps(body or {}).encode(), "",
                      params or {})


async def apply_record(state: RouterState, record: ChangeRecord) -> None:
    """Make `record` this replica's setting (RouterError when this replica refuses it)."""
    kind, _, rest = record.key.partition(":")
    body = record.body
    if kind == "policy":
        await put_policy_handler(state, _peer_request("PUT", "/admin/policy", body))
    elif kind == "admission":
        await put_admission(state, _peer_request("PUT", "/admin/admission", body))
    elif kind == "session-affinity":
        await put_sessions(state, _peer_request("PUT", "/admin/session-affinity", body))
    elif kind == "engine":
        await _apply_engine(state, rest, body)
    elif kind == "state" and state.replication is not None:
        model = rest.split(":", 2)[-1]
        adopt_shared_state(state.group(model), state.replication, record)
    else:  # a newer replica's kind of record: kept (its peers agree on it), not understood
        log.warning("replicated change %s is of a kind this router does not know", record.key)


async def _apply_engine(state: RouterState, address: str, body: dict[str, Any]) -> None:
    here = next((e for e in state.engines.engines.values() if e.address == address), None)
    if body.get("member"):
        if here is None:
            await add_engine(state, _peer_request("POST", "/admin/engines", {
                "address": address, "role": body.get("role"), "wait": False}))
    elif here is not None and not here.draining:
        query = {"wait": "false", "migrate": "true" if body.get("migrate") else "false"}
        await delete_engine(state, _peer_request("DELETE", f"/admin/engines/{here.id}",
                                                 query=query, params={"id": here.id}))


def shared_state_key(policy: str, name: str, group: ModelGroup) -> str:
    return f"state:{policy}:{name}:{group.name}"


def adopt_shared_state(group: ModelGroup, replication: AdminPropagation,
                       record: ChangeRecord) -> None:
    """A peer's policy state (`state:<policy>:<name>:<model>`), taken when this replica runs
    the same policy since the same switch (a record older than the model's policy record
    belongs to an earlier instance of it)."""
    _, policy, name, _ = record.key.split(":", 3)
    switched = replication.newest(f"policy:{group.name}")
    active = group.slot.current
    factory = shared_keys(policy).get(name)
    if (factory is None or active.name != policy
            or (switched is not None and switched.generation > record.generation)):
        return
    value = record.body.get("value")
    mine = active.state.get(name) or factory()
    mine.adopt(value if isinstance(value, dict) else {})
    active.state[name] = mine
    log.info("%s %s adopted from a peer replica: %s", policy, name, value)


def share_on_events(replication: AdminPropagation, group: ModelGroup) -> None:
    """After a policy event (slo_mux's role switch) the active policy's shared state goes to
    the peers when it changed (pyrouter/runtime/shared_policy_state.py)."""
    inner = group.dispatcher.events

    def sink(kind: str, detail: str) -> None:
        if inner is not None:
            inner(kind, detail)
        active = group.slot.current
        for name in shared_keys(active.name):
            value = active.state.get(name)
            key = shared_state_key(active.name, name, group)
            now = replication.newest(key)
            if value is None or (now is not None and now.body.get("value") == value.shared()):
                continue
            task = asyncio.create_task(replication.push(
                replication.stamp(key, {"value": value.shared()})))
            _pushes.add(task)
            task.add_done_callback(_pushes.discard)

    group.dispatcher.events = sink


async def start_admin_propagation(state: RouterState,
                                  args: argparse.Namespace) -> AdminPropagation | None:
    """For a router with peers: catch up with them (before it serves), then follow them."""
    if state.peers.alone:
        return None
    admin_key = min(state.config.keys.admin_keys, default=None)
    sync_s = float(getattr(args, "peer_sync_s", None) or 2.0)

    async def apply(record: ChangeRecord) -> None:
        await apply_record(state, record)

    replication = AdminPropagation(
        state.peers, apply, peer_admin_offset(args.port, getattr(args, "admin_port", None)),
        admin_key, sync_s)
    state.replication = replication
    for group in list(state.models.values()) or [state.group()]:
        share_on_events(replication, group)
    await replication.pull_once(starting=True)
    replication.start()
    return replication
