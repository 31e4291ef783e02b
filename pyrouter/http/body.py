"""Reading a request body: bounded in size (413) and in time (408), parsed by json_body.py.

A Content-Length above the limit is refused before a byte of the body is read; a body that
arrives slower than `body_timeout_s` allows (a client that announced more than it sends, a
slowloris body) gets 408 and the connection is closed (its unread bytes make it unusable).
"""
from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from pyrouter.errors import PayloadTooLarge, RequestTimeout
from pyrouter.json_body import parse_json_object
from pyrouter.state import STATE


async def read_body(request: web.Request) -> bytes:
    cfg = request.app[STATE].config
    if request.content_length is not None and request.content_length > cfg.max_body_bytes:
        raise PayloadTooLarge(f"request body of {request.content_length} bytes exceeds the "
                              f"limit of {cfg.max_body_bytes}")
    try:
        async with asyncio.timeout(cfg.body_timeout_s):
            return await request.read()
    except TimeoutError:
        raise RequestTimeout(f"request body not received within {cfg.body_timeout_s:g} s") from None
    except web.HTTPRequestEntityTooLarge:  # a chunked body that grew past the limit
        raise PayloadTooLarge(f"request body exceeds the limit of {cfg.max_body_bytes} "
                              "bytes") from None


async def json_object(request: web.Request) -> dict[str, Any]:
    """The JSON object body every admin route takes (a clear 400 otherwise)."""
    return parse_json_object(await read_body(request))
