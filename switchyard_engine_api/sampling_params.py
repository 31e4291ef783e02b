"""SamplingParams: how one request picks its tokens and when it stops (OpenAI semantics).

Shared by both sides: the router's Python side carries one per request (switchyard_engine_api/
sampling_proto.py sends it with each segment), and the engine checks what arrives over gRPC with
it (building one raises InvalidRequest naming the field, which the servicer answers as
INVALID_ARGUMENT). The rules themselves exist once, in Rust (router_core/src/sampling.rs): the
router's HTTP front applies them to every client request, and building a SamplingParams applies
them here through `router_core.check_sampling`, so both say the same thing for the same values.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import router_core
from switchyard_engine_api.errors import InvalidRequest

# The largest JSON schema (its JSON text) a request may carry: a grammar's compile time and
# memory grow with it. The router's front holds it (front/response_format.rs); this is its value.
MAX_SCHEMA_BYTES: int = router_core.MAX_SCHEMA_BYTES
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
    # Lower first: the scheduler admits and prefills queued requests by (priority, first-token
    # deadline, arrival); the deadline travels beside the sampling (StartGenerateRequest).
    priority: int = 0

    def __post_init__(self) -> None:
        # The rules (router_core/src/sampling.rs) check every field they know and normalise the
        # "off" spellings: top_p 0 (proto3's unset) is 1.0, top_k -1 (vLLM's) is 0.
        try:
            self.top_p, self.top_k = router_core.check_sampling(
                self.temperature, self.top_p, self.top_k, self.max_tokens, self.min_tokens,
                self.seed, self.stop_token_ids, self.stop, self.priority)
        except router_core.SamplingRefused as refused:
            raise InvalidRequest(str(refused), param=refused.param) from None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1
