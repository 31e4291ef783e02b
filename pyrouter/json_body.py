"""Request bodies -> Python values, with the limits that keep a hostile body cheap.

orjson parses (in C, no recursion on the Python stack): nesting deeper than 1024 levels, lone
UTF-16 surrogates (`"\\ud800"`, which no tokenizer can encode), integers beyond 64 bits and
non-finite numbers are all rejected as invalid JSON (400), never a crash or a 500. The body's
size is bounded before it is read (the HTTP front's `max_body_bytes`).
"""
from __future__ import annotations

from typing import Any

import orjson

from pyrouter.errors import BadRequest


def parse_json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        code = "json_too_deep" if "depth" in str(exc) else "invalid_json"
        raise BadRequest(f"request body is not valid JSON: {exc}", code=code) from None


def parse_json_object(raw: bytes) -> dict[str, Any]:
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object", code="invalid_json")
    return body
