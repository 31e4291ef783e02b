"""The JSON object body every admin route takes (a clear 400 otherwise)."""
from __future__ import annotations

from typing import Any

from aiohttp import web

from pyrouter.errors import BadRequest


async def json_object(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body
