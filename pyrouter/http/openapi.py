"""GET /openapi.json: the router's HTTP API as an OpenAPI 3.1 document.

Written by hand from what the handlers accept (router_core/src/front/openai_request.rs,
pyrouter/http/admin.py, migrate.py); tests/router/test_openapi_fuzz.py checks that it lists
exactly the routes the router serves and fuzzes the generation routes from these schemas (no
answer may be a 500). The document served holds only the public listener's routes (the admin
routes move to the admin plane with --admin-port; pyrouter/http/ops.py).
"""
from __future__ import annotations

from typing import Any

_INT = {"type": "integer"}
_NUM = {"type": "number"}
_BOOL = {"type": "boolean"}
_STR = {"type": "string"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


_ERRORS = {
    "400": "bad input (`code` says which rule)", "401": "missing or invalid key",
    "403": "not allowed (admin without an admin key, a file outside --policy-dir, an engine "
           "off the allow-list)",
    "404": "unknown route, model (`model_not_found`) or object",
    "405": "method not allowed (`Allow` lists the methods)",
    "408": "the body did not arrive in time", "413": "body too large",
    "429": "busy or over a per-caller limit (`Retry-After`)",
    "502": "an engine failed", "503": "no capacity, or the router is draining (`Retry-After`)",
}


def _errors(*codes: str) -> dict[str, Any]:
    return {c: {"description": _ERRORS[c], **_json(_ref("Error"))} for c in codes}


_SAMPLING = {
    "model": {**_STR, "description": "the served model's id (GET /v1/models) or 'default'"},
    "max_tokens": {**_INT, "minimum": 1}, "max_completion_tokens": {**_INT, "minimum": 1},
    "temperature": {**_NUM, "minimum": 0, "maximum": 2},
    "top_p": {**_NUM, "minimum": 0, "maximum": 1}, "top_k": {**_INT, "minimum": -1},
    "min_tokens": {**_INT, "minimum": 0}, "seed": _INT,
    # Scheduling priority, lower first (docs/api.md "Priorities and the admission queue").
    "priority": {**_INT, "minimum": -100, "maximum": 100},
    "stop": {"oneOf": [_STR, {"type": "array", "items": _STR, "maxItems": 4}]},
    "stream": _BOOL, "stream_options": {"type": "object",
                                        "properties": {"include_usage": _BOOL}},
    "ignore_eos": _BOOL, "return_token_ids": _BOOL, "n": {**_INT, "enum": [1]},
    "echo": {**_BOOL, "enum": [False]},
    "presence_penalty": {**_NUM, "enum": [0]}, "frequency_penalty": {**_NUM, "enum": [0]},
    "slo": {"type": "object", "properties": {"ttft_ms": {**_NUM, "minimum": 0},
                                             "tpot_ms": {**_NUM, "minimum": 0}}},
    # Structured output (docs/api.md): enforced by the engine's sampler.
    "response_format": {"type": "object", "required": ["type"], "properties": {
        "type": {**_STR, "enum": ["text", "json_object", "json_schema"]},
        "json_schema": {"type": "object", "required": ["schema"], "properties": {
            "name": _STR, "strict": _BOOL, "schema": {"type": "object"}}}}},
}
_TOKEN_IDS = {"type": "array", "items": {**_INT, "minimum": 0}, "minItems": 1}
_CONTENT_PART = {"type": "object", "required": ["type"],
                 "properties": {"type": {**_STR, "enum": ["text"]}, "text": _STR}}
_MESSAGE = {"type": "object", "required": ["role", "content"], "properties": {
    "role": {**_STR, "enum": ["system", "user", "assistant", "developer", "tool"]},
    "content": {"oneOf": [_STR, {"type": "array", "items": _CONTENT_PART}]}}}

SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type", "code"], "properties": {
            "message": _STR, "type": _STR, "param": {"type": ["string", "null"]},
            "code": _STR}}}},
    "CompletionRequest": {"type": "object", "required": ["prompt"], "properties": {
        "prompt": {"oneOf": [_STR, _TOKEN_IDS,
                             {"type": "array", "items": {"oneOf": [_STR, _TOKEN_IDS]},
                              "minItems": 1, "maxItems": 1}]},
        **_SAMPLING}},
    "ChatCompletionRequest": {"type": "object", "required": ["messages"], "properties": {
        "messages": {"type": "array", "items": _MESSAGE, "minItems": 1}, **_SAMPLING}},
    "Completion": {"type": "object", "required": ["id", "object", "choices", "usage"],
                   "properties": {"id": _STR, "object": _STR, "model": _STR,
                                  "choices": {"type": "array", "items": {"type": "object"}},
                                  "usage": {"type": "object"}}},
    "PolicyChange": {"type": "object", "properties": {
        "policy": _STR, "params": {"type": "object"},
        "file": {**_STR, "description": "a *.py file in --policy-dir, by name"},
        "model": {**_STR, "description": "the served model whose policy changes (default: "
                  "the first)"}}},
    "SessionAffinity": {"type": "object", "properties": {
        "load_bound": {**_NUM, "minimum": 1}, "from_user": _BOOL}},
    # PUT /admin/admission (docs/api.md "Priorities and the admission queue").
    "Admission": {"type": "object", "properties": {
        "max_inflight_per_engine": {**_INT, "minimum": 0},
        "max_queued_prefill_tokens": {**_INT, "minimum": 0},
        "queue_size": {**_INT, "minimum": 1}, "queue_timeout_s": {**_NUM, "exclusiveMinimum": 0},
        "weights": {"type": "object", "additionalProperties": {**_NUM, "exclusiveMinimum": 0}},
        "predicted": {"oneOf": [_BOOL, {**_STR, "enum": ["on", "off"]}]},
        "margin": {**_NUM, "exclusiveMinimum": -1, "maximum": 10},
        "slo_ttft_ms": {"type": ["number", "null"], "exclusiveMinimum": 0},
        "slo_tpot_ms": {"type": ["number", "null"], "exclusiveMinimum": 0}}},
    "EngineAdd": {"type": "object", "required": ["address"], "properties": {
        "address": {**_STR, "description": "HOST:PORT on the allow-list"},
        "role": {**_STR, "enum": ["any", "prefill", "decode"]}, "wait": _BOOL,
        "timeout_s": {**_NUM, "exclusiveMinimum": 0, "maximum": 600}}},
    "Migrate": {"type": "object", "required": ["to"], "properties": {
        "to": _STR, "from": _STR, "request_id": _STR,
        "prefix": {"oneOf": [_STR, _TOKEN_IDS]}}},
    # POST /admin/replication: one admin change a peer replica pushed (docs/deploy.md).
    "ReplicationRecord": {"type": "object", "required": ["key", "generation", "body"],
                          "properties": {"key": _STR, "body": {"type": "object"},
                                         "generation": {"type": "object",
                                                        "required": ["counter", "origin"],
                                                        "properties": {
                                                            "counter": {**_INT, "minimum": 1},
                                                            "origin": _STR}}}},
}


def _generation(summary: str, schema: str) -> dict[str, Any]:
    return {"post": {
        "summary": summary, "requestBody": {"required": True, **_json(_ref(schema))},
        "responses": {"200": {"description": "the completion, or an SSE stream ending "
                                             "`data: [DONE]` when stream=true",
                              "content": {"application/json": {"schema": _ref("Completion")},
                                          "text/event-stream": {"schema": _STR}}},
                      **_errors("400", "401", "404", "408", "413", "429", "502", "503"),
                      "500": {"description": "a policy failed (its own bug)",
                              **_json(_ref("Error"))}}}}


def _simple(method: str, summary: str, body: str | None = None,
            errors: tuple[str, ...] = ("401", "403")) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {
        "200": {"description": "ok", **_json({"type": "object"})}, **_errors(*errors)}}
    if body is not None:
        op["requestBody"] = {"required": True, **_json(_ref(body))}
    return {method: op}


PATHS: dict[str, Any] = {
    "/v1/completions": _generation("OpenAI completions", "CompletionRequest"),
    "/v1/chat/completions": _generation("OpenAI chat completions", "ChatCompletionRequest"),
    "/v1/models": _simple("get", "the served model", errors=("401",)),
    "/health": _simple("get", "alive", errors=()),
    "/ready": {"get": {"summary": "can serve now (503 when not; ?strict=1: every role the "
                                  "policy asks for has a healthy engine)",
                       "parameters": [{"name": "strict", "in": "query", "required": False,
                                       "schema": _STR}],
                       "responses": {"200": {"description": "ready"},
                                     "503": {"description": "not ready or draining"}}}},
    "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {
        "200": {"description": "text exposition format",
                "content": {"text/plain": {"schema": _STR}}}}}},
    "/openapi.json": _simple("get", "this document", errors=()),
    "/admin/policy": {**_simple("get", "active policy"),
                      **_simple("put", "switch policy", "PolicyChange",
                                ("400", "401", "403", "404"))},
    "/admin/engines": {**_simple("get", "engines"),
                       **_simple("post", "add an engine", "EngineAdd", ("400", "401", "403"))},
    "/admin/engines/{id}": {"delete": {
        "summary": "drain and remove an engine",
        "parameters": [{"name": "id", "in": "path", "required": True, "schema": _STR},
                       {"name": "migrate", "in": "query", "required": False, "schema": _STR},
                       {"name": "wait", "in": "query", "required": False, "schema": _STR}],
        "responses": {"200": {"description": "removed"}, "202": {"description": "draining"},
                      **_errors("401", "403", "404")}}},
    "/admin/migrate": _simple("post", "copy a context or move a running request", "Migrate",
                              ("400", "401", "403", "404")),
    "/admin/admission": {**_simple("get", "the admission queue's settings"),
                         **_simple("put", "change the admission queue's settings", "Admission",
                                   ("400", "401", "403"))},
    "/admin/session-affinity": {**_simple("get", "session affinity's settings"),
                                **_simple("put", "change session affinity's settings",
                                          "SessionAffinity", ("400", "401", "403"))},
    "/admin/replication": {**_simple("get", "the admin changes this replica shares with its "
                                     "peers"),
                           **_simple("post", "apply an admin change a peer replica made",
                                     "ReplicationRecord", ("400", "401", "403"))},
}


def openapi_document(paths: set[str] | None = None) -> dict[str, Any]:
    """The document, limited to `paths` (None: every route the router can serve)."""
    return {"openapi": "3.1.0",
            "info": {"title": "Switchyard router", "version": "1",
                     "description": "OpenAI-compatible completions over programmable routing "
                                    "(docs/reliability.md: limits, errors, drain)."},
            "paths": {p: ops for p, ops in PATHS.items() if paths is None or p in paths},
            "components": {"schemas": SCHEMAS}}

