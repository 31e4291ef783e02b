"""What a policy sees about one request: token ids, sampling, SLO, and where it was routed.

`tokens` is the prompt plus every token generated so far: it grows when a segment ends, so the
next segment's verbs (prep_recv / remote_send / start_generate on another engine) act on the
whole context. `prompt_len` stays the prompt's length.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pyrouter.request_timeline import RequestTimeline
from pyrouter.scope import RequestScope
from pyrouter.session_affinity import DEFAULT_LOAD_BOUND
from router_core import first_engine_request_id, retry_engine_request_id
from switchyard_proto.sampling_params import SamplingParams

if TYPE_CHECKING:
    from pyrouter.planning.prediction_feedback import PredictedOutcome
    from router_core import EnginePrediction


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
    # Roles that had no healthy engine and who stood in ("decode->e0"; pyrouter/degrade.py).
    degraded: list[str] = field(default_factory=list)

    def label(self) -> str:
        """The pattern that ran, for metrics and outcomes: an adaptive policy's choice (`chose`)
        rather than its own name."""
        return str(self.params.get("chose") or self.pattern or "none")

    def header(self) -> str:
        parts = [self.pattern or "unknown"]
        parts.extend(f"{k}={v}" for k, v in self.params.items())
        if self.degraded:
            parts.append("degraded=" + ",".join(self.degraded))
        return " ".join(parts)


@dataclass(slots=True, eq=False)
class RouterRequest:
    request_id: str
    tokens: list[int]
    sampling: SamplingParams
    kind: Literal["completion", "chat"] = "completion"
    model: str = "default"
    stream: bool = False
    include_usage: bool = False
    return_token_ids: bool = False
    slo: SloSpec = field(default_factory=SloSpec)
    # The conversation it belongs to (X-Session-Id, or the body's `user` where the operator
    # allows it; None: none), and session affinity's load bound in force when it arrived: the
    # data-parallel built-ins keep a session on one engine within that bound (cluster.session).
    session_id: str | None = None
    session_load_bound: float = DEFAULT_LOAD_BOUND
    route: RouteNote = field(default_factory=RouteNote)
    # The router's prefix-match results, filled lazily by the cluster view (engine id -> tokens).
    matched_by_engine: dict[str, int] | None = None
    # router_core's predictions per engine id, when the policy asked (cluster.predict).
    predictions: dict[str, EnginePrediction] | None = None
    # What the policy predicted for the placement it chose (compared with what happened when
    # the request ends: the latency model's closed loop).
    predicted: PredictedOutcome | None = None
    # Every reservation, send and generation on any engine, and the router's counts.
    scope: RequestScope = field(default_factory=RequestScope)
    prompt_len: int = 0  # set from tokens at construction
    # The id the engines know this request by: router-made (router_core's engine_names, the
    # scheme both request paths share), never shown to a client and never derived from anything
    # a client sent; a fresh random one unless the front made it.
    engine_request_id: str = ""
    engine_attempts: int = 0  # engine-side ids made after the first (retries, resumptions)
    initial_engine_request_id: str = ""  # the first attempt's, which retries are named after
    completion_tokens: int = 0  # what the client received, filled when the response is complete
    # When each part of the request happened (metrics and spans at its end).
    timeline: RequestTimeline = field(default_factory=RequestTimeline)

    def __post_init__(self) -> None:
        self.prompt_len = len(self.tokens)
        self.engine_request_id = self.engine_request_id or first_engine_request_id("req-")

    @property
    def key(self) -> str:
        """The request's router-made name, the same through every attempt (its first attempt's
        engine-side id)."""
        return self.initial_engine_request_id or self.engine_request_id

    def new_engine_request_id(self) -> str:
        """A fresh engine-side id for the next attempt (the failed one may linger on its
        engine; a live engine may still hold the old id in a finished segment)."""
        if not self.engine_attempts:  # the current id is the first (the front may have set it)
            self.initial_engine_request_id = self.engine_request_id
        self.engine_attempts += 1
        return retry_engine_request_id(self.initial_engine_request_id, self.engine_attempts)

    @property
    def generated(self) -> int:
        """Tokens generated so far (by the segments that have ended)."""
        return len(self.tokens) - self.prompt_len

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.prompt_len:]

    def note_route(self, pattern: str, **params: object) -> None:
        """Record the pattern that ran and its parameters (shown in X-Switchyard-Route)."""
        self.route = RouteNote(pattern, dict(params), self.route.degraded)
