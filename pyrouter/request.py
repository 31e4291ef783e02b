"""What a policy sees about one request: token ids, sampling, SLO, and where it was routed."""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from switchyard_rpc import engine_pb2 as pb

_ID_PREFIX = os.urandom(6).hex()  # per process, so ids from different routers never collide
_ID_SEQ = itertools.count()


def new_id() -> str:
    """A unique 32-hex-digit id (like uuid4().hex) without a getrandom call per request."""
    return f"{_ID_PREFIX}{next(_ID_SEQ):020x}"


@dataclass(slots=True)
class SamplingSpec:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_tokens: int = 0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: bool = False

    def to_proto(self) -> pb.SamplingParams:
        # Stop strings stay in the router: its detokenizer sees the text and ends the stream.
        msg = pb.SamplingParams(
            temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
            max_tokens=self.max_tokens, min_tokens=self.min_tokens,
            stop_token_ids=self.stop_token_ids, ignore_eos=self.ignore_eos,
            return_logprobs=self.logprobs)
        if self.seed is not None:
            msg.seed = self.seed
        return msg


@dataclass(slots=True)
class SloSpec:
    """Latency targets a client may attach (extension field `slo`); None = best effort."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None


@dataclass(slots=True)
class RouteNote:
    """What actually ran, for `X-Switchyard-Route` — set by the policy, or filled from the verbs."""

    pattern: str = ""
    params: dict[str, object] = field(default_factory=dict)

    def header(self) -> str:
        parts = [self.pattern or "unknown"]
        parts.extend(f"{k}={v}" for k, v in self.params.items())
        return " ".join(parts)


@dataclass(slots=True)
class RouterRequest:
    request_id: str
    tokens: list[int]
    sampling: SamplingSpec
    kind: Literal["completion", "chat"] = "completion"
    model: str = "default"
    stream: bool = False
    include_usage: bool = False
    return_token_ids: bool = False
    slo: SloSpec = field(default_factory=SloSpec)
    route: RouteNote = field(default_factory=RouteNote)
    # The router's prefix-match results, filled lazily by the cluster view (engine id -> tokens).
    matched_by_engine: dict[str, int] | None = None
    # Verbs issued so far as (verb, engine id): the default route header and clean-up use it.
    verbs: list[tuple[str, str]] = field(default_factory=list)
    # Engines this request touched (id -> handle), so a failure or disconnect aborts on each.
    touched: dict[str, Any] = field(default_factory=dict)
    # (verb, engine id, start, end) in perf_counter seconds; end 0.0 while running (tracing).
    verb_times: list[list[Any]] = field(default_factory=list)
    completion_tokens: int = 0  # filled when the response is complete

    @property
    def prompt_len(self) -> int:
        return len(self.tokens)

    def note_route(self, pattern: str, **params: object) -> None:
        """Record the pattern that ran and its parameters (shown in X-Switchyard-Route)."""
        self.route = RouteNote(pattern, dict(params))
