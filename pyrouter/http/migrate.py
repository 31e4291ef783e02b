"""POST /admin/migrate: copy a cached context to another engine, or move a running request.

    {"prefix": "text" | [token ids], "from": "e0", "to": "e1"}   copy a context's KV
    {"request_id": "<X-Request-Id>", "to": "e1"}                  move a running request

Text is tokenised as a completion prompt is, so a later request whose prompt starts with the
same text shares the copied blocks; pass token ids to copy exactly. A moved request keeps
streaming to its client without a seam. Engines are given by their router ids (GET
/admin/engines).
"""
from __future__ import annotations

import asyncio
from typing import Any

from pyrouter.engines.handle import EngineHandle
from pyrouter.errors import BadRequest, NoCapacity
from pyrouter.http.routes import OpsRequest, OpsResponse, json_response
from pyrouter.migration import copy_context, move_request
from pyrouter.state import RouterState

_MOVE_TIMEOUT_S = 120.0


def _engine(state: RouterState, body: dict[str, Any], key: str) -> EngineHandle:
    engine_id = body.get(key)
    if not isinstance(engine_id, str):
        raise BadRequest(f"'{key}' must be an engine id such as \"e0\"", param=key)
    handle = state.engines.get(engine_id)
    if not handle.healthy or handle.draining:
        raise BadRequest(f"engine {engine_id} is not serving", param=key)
    return handle


def _same_model(state: RouterState, target: EngineHandle, model: str | None, what: str) -> None:
    """KV and requests move only between engines of one served model (several models)."""
    if len(state.models) > 1 and target.model != model:
        raise BadRequest(f"engine {target.id} serves model {target.model!r}, {what} model "
                         f"{model!r}", param="to")


def _context_tokens(state: RouterState, source: EngineHandle, prefix: object) -> list[int]:
    tokenizer = state.group(source.model).tokenizer if len(state.models) > 1 else None
    tokenizer = tokenizer or state.tokenizer  # the source's model's: its blocks are that text's
    if isinstance(prefix, str) and prefix:
        return tokenizer.encode(prefix)
    vocab = tokenizer.vocab_size
    if isinstance(prefix, list) and prefix and all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in prefix):
        return list(prefix)
    raise BadRequest(f"'prefix' must be non-empty text or token ids in [0, {vocab})",
                     param="prefix")


async def migrate(state: RouterState, body: dict[str, Any]) -> dict[str, Any]:
    target = _engine(state, body, "to")
    front = state.engines.front
    if front is None:
        raise NoCapacity("the router is not serving yet")
    if "request_id" in body:
        request_id = str(body["request_id"])
        try:
            moved = await asyncio.wait_for(move_request(front, request_id, target),
                                           _MOVE_TIMEOUT_S)
        except TimeoutError:  # still under way: say so
            moved = {"from": None, "to": target.id, "outcome": "pending", "moved_tokens": 0}
        return {"request_id": request_id, "from": moved["from"], "to": target.id,
                "outcome": moved["outcome"], "moved_tokens": moved["moved_tokens"]}
    source = _engine(state, body, "from")
    _same_model(state, target, source.model, f"engine {source.id} serves")
    tokens = _context_tokens(state, source, body.get("prefix"))
    copied = await copy_context(front, tokens, source, target)
    return {"from": source.id, "to": target.id, "tokens": len(tokens),
            "matched": copied.matched, "copied": copied.copied,
            "bytes_sent": copied.bytes_sent, "transport": copied.transport}


async def migrate_handler(state: RouterState, request: OpsRequest) -> OpsResponse:
    return json_response(await migrate(state, request.json_object()))
