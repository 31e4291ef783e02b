"""SamplingParams: how one request picks its tokens and when it stops (OpenAI semantics).

Shared by both sides: the router's Python side carries one per request (switchyard_proto/
sampling_proto.py sends it with each segment), and the engine checks what arrives over gRPC with
it (building one raises InvalidRequest naming the field, which the servicer answers as
INVALID_ARGUMENT). The rules' source of truth is router_core/src/sampling.rs, which the router's
HTTP front applies to every client request before routing; any gRPC caller can reach an engine,
though, so the engine checks again with this Python copy, held to the same answers and messages
by tests/router_core/test_sampling_parity.py. Change a rule there first, then here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from switchyard_proto.errors import InvalidRequest

MAX_TEMPERATURE = 2.0  # OpenAI's upper bound
MAX_STOP_STRINGS = 4  # OpenAI accepts at most this many
# Scheduling priorities a request may ask for (lower first, as vLLM's; 0 by default).
PRIORITY_MIN, PRIORITY_MAX = -100, 100
# The largest JSON schema (its JSON text) a request may carry: a grammar's compile time and
# memory grow with it. The router's front holds the same limit (front/response_format.rs).
MAX_SCHEMA_BYTES = 32 * 1024
RESPONSE_FORMAT_TYPES = ("json_object", "json_schema")
# How every refusal of a request's response_format begins (the engine's messages): the router
# tells by it that an engine's INVALID_ARGUMENT is about the client's own field (a 400), not about
# how a policy used the verbs.
RESPONSE_FORMAT_REFUSED = "response_format: "


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """Structured output: the tokens must spell JSON (json_object: any object) valid against
    `json_schema` (its JSON text; type json_schema). engine/core/grammar.py compiles it."""

    type: str
    json_schema: str = ""

    def __post_init__(self) -> None:
        if self.type not in RESPONSE_FORMAT_TYPES:
            raise InvalidRequest(f"{RESPONSE_FORMAT_REFUSED}the type must be one of "
                                 f"{', '.join(RESPONSE_FORMAT_TYPES)}, got {self.type!r}",
                                 param="response_format")
        size = len(self.json_schema.encode())
        if size > MAX_SCHEMA_BYTES:
            raise InvalidRequest(f"{RESPONSE_FORMAT_REFUSED}the JSON schema is {size} bytes; at most "
                                 f"{MAX_SCHEMA_BYTES} are accepted", param="response_format")
        if (self.type == "json_schema") != bool(self.json_schema):
            raise InvalidRequest(f"{RESPONSE_FORMAT_REFUSED}type json_schema needs a schema (and "
                                 f"json_object takes none)", param="response_format")


@dataclass(slots=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0  # 1 (or 0, as proto3 defaults it) = off
    top_k: int = 0  # 0 (or vLLM's -1) = off
    max_tokens: int = 16
    min_tokens: int = 0
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    return_logprobs: bool = False
    response_format: ResponseFormat | None = None
    # Lower first: the scheduler admits and prefills queued requests by (priority, arrival).
    priority: int = 0

    def __post_init__(self) -> None:
        if not math.isfinite(self.temperature) or not 0 <= self.temperature <= MAX_TEMPERATURE:
            raise InvalidRequest(f"temperature must be in [0, {MAX_TEMPERATURE:g}], got "
                                 f"{float(self.temperature)!r}", param="temperature")
        if not math.isfinite(self.top_p) or not 0 <= self.top_p <= 1:
            raise InvalidRequest(f"top_p must be in [0, 1], got {float(self.top_p)!r}",
                                 param="top_p")
        if self.top_p == 0:
            self.top_p = 1.0
        if self.top_k < -1:
            raise InvalidRequest(f"top_k must be -1, 0 (off) or > 0, got {self.top_k}",
                                 param="top_k")
        if self.top_k == -1:
            self.top_k = 0
        if self.max_tokens <= 0:
            raise InvalidRequest(f"max_tokens must be > 0, got {self.max_tokens}",
                                 param="max_tokens")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise InvalidRequest(f"min_tokens must be in [0, max_tokens={self.max_tokens}], got "
                                 f"{self.min_tokens}", param="min_tokens")
        if self.seed is not None and not -(2**63) <= self.seed < 2**63:  # the proto's int64
            raise InvalidRequest(f"seed must be a signed 64-bit integer, got {self.seed}",
                                 param="seed")
        if any(t < 0 for t in self.stop_token_ids):
            raise InvalidRequest("stop_token_ids must be non-negative", param="stop_token_ids")
        if len(self.stop) > MAX_STOP_STRINGS or any(not isinstance(s, str) or not s
                                                    for s in self.stop):
            raise InvalidRequest(f"stop must be up to {MAX_STOP_STRINGS} non-empty strings",
                                 param="stop")
        if not PRIORITY_MIN <= self.priority <= PRIORITY_MAX:
            raise InvalidRequest(f"priority must be an integer in [{PRIORITY_MIN}, {PRIORITY_MAX}] "
                                 f"(lower first), got {self.priority}", param="priority")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1
