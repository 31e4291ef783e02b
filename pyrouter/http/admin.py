"""Admin API: switch policy live, list/add/drain engines (docs/policies.md, docs/reliability.md).

Who may call these is keys.py's rule (an admin key, never an inference key). What they may do
is bounded too: a policy file loads only from --policy-dir (by its name there), an engine is
added only at an address on the allow-list (pyrouter/security/engine_allow.py), and every
field is checked before anything changes.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from pyrouter.engines.identify import check_is_engine
from pyrouter.errors import BadRequest, Forbidden
from pyrouter.http.admission_admin import ADMISSION_ROUTES
from pyrouter.http.migrate import migrate_handler
from pyrouter.http.replication_admin import REPLICATION_ROUTES
from pyrouter.http.routes import OpsRequest, OpsResponse, Route, json_response
from pyrouter.http.session_admin import SESSION_ROUTES
from pyrouter.replicas.admin_propagation import propagate
from pyrouter.runtime.policy_registry import ActivePolicy, available, get_policy
from pyrouter.security.engine_allow import split_host_port
from pyrouter.state import RouterState

log = logging.getLogger("switchyard.router")
_drains: set[asyncio.Task[None]] = set()
ENGINE_CHECK_S = 3.0  # how long POST /admin/engines waits for an address to answer as an engine


def _policy_body(state: RouterState, model: str | None = None) -> dict[str, Any]:
    """The policy of `model` (None: the first model's), and each served model's when the
    router serves several."""
    active = state.group(model).slot.current
    body: dict[str, Any] = {"policy": active.name, "params": active.params,
                            "available": available()}
    if len(state.models) > 1:
        body["model"] = state.group(model).name
        body["models"] = {name: {"policy": g.slot.current.name, "params": g.slot.current.params}
                          for name, g in state.models.items()}
    return body


async def get_policy_handler(state: RouterState, request: OpsRequest) -> OpsResponse:
    return json_response(_policy_body(state, request.query.get("model")))


async def put_policy_handler(state: RouterState, request: OpsRequest) -> OpsResponse:
    body = request.json_object()
    model = body.get("model")
    group = state.group(model)  # 404 model_not_found before anything changes
    slot = group.slot
    name = body.get("policy", slot.current.name)
    params = body.get("params", {})
    policy_file = body.get("file")
    if not isinstance(name, str) or not isinstance(params, dict) or not isinstance(
            policy_file, str | None):
        raise BadRequest("expected {\"policy\": NAME, \"params\": {...}, \"file\": optional "
                         "name of a policy file in --policy-dir, \"model\": optional served "
                         "model}", param="policy")
    if policy_file:
        if state.policy_dir is None:
            raise Forbidden("this router loads no policy files at run time (start it with "
                            "--policy-dir DIR to allow files from DIR)", param="file",
                            code="policy_file_not_allowed")
        state.policy_dir.load_one(policy_file)
    spec = get_policy(name)
    # A new ActivePolicy (fresh state) takes new requests; in-flight ones keep their own.
    slot.current = ActivePolicy(spec, spec.check_params(params))
    log.info("policy switched to %s %s%s", name, slot.current.params,
             f" for model {model}" if model is not None else "")
    # The other replicas switch too: the setting in full, the file (from their own
    # --policy-dir) included so that each loads it.
    change = {"policy": name, "params": slot.current.params, "model": group.name,
              **({"file": policy_file} if policy_file else {})}
    response = json_response(_policy_body(state, model))
    response.headers += await propagate(state, request, f"policy:{group.name}", change)
    return response


def _engine_view(state: RouterState) -> list[dict[str, Any]]:
    out = []
    for e in sorted(state.engines.engines.values(), key=lambda e: e.num):
        load = state.engines.core.table.get(e.num)
        state_name = "draining" if e.draining else "healthy" if e.healthy else "unreachable"
        out.append({"id": e.id, "address": e.address, "role": e.role, "healthy": e.healthy,
                    "draining": e.draining, "state": state_name, "model": e.model_id,
                    "served_model": e.model,
                    "load": {"unfinished_tokens": int(load.unfinished_tokens),
                             "running": int(load.running_decodes),
                             "queued_prefill_tokens": int(load.queued_prefill_tokens),
                             "inflight": int(load.inflight),
                             # dispatched (here and by peer replicas) since the latest Stats
                             "router_tokens": int(load.router_tokens)},
                    "kv_pages_used": int(load.kv_pages_used),
                    "kv_pages_evictable": int(load.kv_pages_evictable),
                    "kv_pages_total": int(load.kv_pages_total),
                    "cached_blocks": e.cached_blocks,
                    "active_requests": state.engines.active(e),
                    "upkeep": state.engines.upkeep_view(e.id)})
    return out


async def list_engines(state: RouterState, request: OpsRequest) -> OpsResponse:
    return json_response({"engines": _engine_view(state)})


async def _resolve(host: str) -> list[str]:
    """The IPs `host` resolves to (none when it does not)."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return []
    return sorted({str(info[4][0]) for info in infos})


async def add_engine(state: RouterState, request: OpsRequest) -> OpsResponse:
    body = request.json_object()
    address = body.get("address")
    role = body.get("role")
    wait = body.get("wait", True)
    timeout_s = body.get("timeout_s", 30)
    if not isinstance(address, str) or (role is not None and not isinstance(role, str)):
        raise BadRequest("expected {\"address\": \"HOST:PORT\", \"role\": optional, "
                         "\"wait\": optional bool, \"timeout_s\": optional seconds}",
                         param="address")
    if not isinstance(wait, bool):
        raise BadRequest("'wait' must be a boolean", param="wait")
    if (isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float)
            or not 0 < timeout_s <= 600):
        raise BadRequest("'timeout_s' must be a number of seconds in (0, 600]", param="timeout_s")
    host, port = split_host_port(address)
    if port is None:
        raise BadRequest(f"engine address must be HOST:PORT, got {address!r}", param="address")
    state.config.engine_allow.check(address, await _resolve(host))
    if any(e.address == address for e in state.engines.engines.values()):
        raise BadRequest(f"engine {address} is already a member", param="address")
    # Only an address that answers as an engine of this deployment is kept.
    await check_is_engine(address, min(ENGINE_CHECK_S, float(timeout_s)))
    handle = state.engines.add(address, role)
    headers = await propagate(state, request, f"engine:{address}",
                              {"member": True, "role": role})
    if wait:
        # Answer once the engine is healthy (or say it is not yet) so scripts can rely on it.
        await state.engines.wait_ready_one(handle.id, timeout_s=float(timeout_s))
    response = json_response({"id": handle.id, "address": handle.address, "role": handle.role,
                              "healthy": handle.healthy}, status=201)
    response.headers += headers
    return response


def _evacuate(state: RouterState, engine_id: str) -> int:
    """Move every request decoding on `engine_id` to the least loaded other engine (router_core
    moves each at its next token boundary)."""
    front = state.engines.front
    others = [e for e in state.engines.healthy() if e.id != engine_id]
    if front is None or not others:
        return 0
    loads = {e.id: state.engines.core.table.get(e.num) for e in others}
    target = min(others, key=lambda e: (loads[e.id].unfinished_tokens
                                        + loads[e.id].router_tokens, e.num))
    return int(front.evacuate(state.engines.get(engine_id).num, target.num))


async def delete_engine(state: RouterState, request: OpsRequest) -> OpsResponse:
    """Drain (no new work; wait for in-flight requests) and remove; `?migrate=true` first moves
    the requests decoding there to other engines, so the drain does not wait for them."""
    engine_id = request.params["id"]
    address = state.engines.get(engine_id).address  # 404 for unknown ids
    migrate = request.query.get("migrate", "false") == "true"
    if migrate:
        log.info("draining %s: %d running request(s) migrated", engine_id,
                 _evacuate(state, engine_id))
    task = asyncio.create_task(state.engines.drain_and_remove(engine_id))
    _drains.add(task)
    task.add_done_callback(_drains.discard)
    # The peers drain it too (by address: their ids for it may differ).
    headers = await propagate(state, request, f"engine:{address}",
                              {"member": False, "migrate": migrate})
    if request.query.get("wait", "true") != "false":
        await asyncio.shield(task)
        response = json_response({"id": engine_id, "removed": True})
    else:
        response = json_response({"id": engine_id, "draining": True}, status=202)
    response.headers += headers
    return response


ADMIN_ROUTES = (
    Route("GET", "/admin/policy", get_policy_handler),
    Route("PUT", "/admin/policy", put_policy_handler),
    Route("GET", "/admin/engines", list_engines),
    Route("POST", "/admin/engines", add_engine),
    Route("DELETE", "/admin/engines/{id}", delete_engine),
    *ADMISSION_ROUTES,
    Route("POST", "/admin/migrate", migrate_handler),
    *SESSION_ROUTES,
    *REPLICATION_ROUTES,
)
