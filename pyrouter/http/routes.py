"""What a route the Rust front hands to Python looks like: a request in, a response out.

The front (router_core/src/front/http.rs) has already read the body within its size and time
limits, and adds X-Request-Id and X-Switchyard-Route to whatever comes back; pyrouter/http/ops.py
finds the route, checks keys and turns errors into OpenAI error bodies.
"""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyrouter.json_body import parse_json_object

if TYPE_CHECKING:
    from pyrouter.state import RouterState


@dataclass(frozen=True, slots=True)
class OpsRequest:
    plane: str  # "public", or "admin" (the --admin-port listener)
    method: str
    path: str
    query: dict[str, str]
    body: bytes
    authorization: str  # the client's own header ("" when absent)
    params: dict[str, str] = field(default_factory=dict)  # the route's {placeholders}
    client_host: str | None = None  # the client's IP (None: a caller inside the router)

    def json_object(self) -> dict[str, Any]:
        """The JSON object body every admin route takes (a clear 400 otherwise)."""
        return parse_json_object(self.body)


@dataclass(slots=True)
class OpsResponse:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


def json_response(obj: object, status: int = 200) -> OpsResponse:
    return OpsResponse(status, json.dumps(obj).encode())


Handler = Callable[["RouterState", OpsRequest], Awaitable[OpsResponse]]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str  # may hold one {name} segment, e.g. /admin/engines/{id}
    handler: Handler

    def match(self, path: str) -> dict[str, str] | None:
        """The placeholders' values when `path` is this route's, else None."""
        want, got = self.path.split("/"), path.split("/")
        if len(want) != len(got):
            return None
        params: dict[str, str] = {}
        for w, g in zip(want, got, strict=True):
            if w.startswith("{") and w.endswith("}"):
                if not g:
                    return None
                params[w[1:-1]] = g
            elif w != g:
                return None
        return params
