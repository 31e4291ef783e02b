"""What a policy sees about one request: token ids, sampling, SLO, and where it was routed.

`tokens` is the prompt plus every token generated so far: it grows when a segment ends, so the
next segment's verbs (prep_recv / remote_send / start_generate on another engine) act on the
whole context. `prompt_len` stays the prompt's length. The request's verbs go through `verbs`,
its executor in router_core (router_core.RequestVerbs), which holds what they take.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pyrouter.session_affinity import DEFAULT_LOAD_BOUND
from router_core import first_engine_request_id

if TYPE_CHECKING:
    from pyrouter.planning.prediction_feedback import PredictedOutcome
    from router_core import DecideSpec, EnginePrediction, RequestVerbs


@dataclass(slots=True)
class SloSpec:
    """Latency targets a client may attach (extension field `slo`); None = best effort."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None


@dataclass(frozen=True, slots=True)
class RequestSampling:
    """The request's sampling as the front parsed and checked it (router_core's sampling rules;
    nothing is checked again here)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_tokens: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    priority: int = 0


@dataclass(slots=True)
class RouteNote:
    """What actually ran, for `X-Switchyard-Route` — set by the policy; router_core adds what
    carrying the placement out found (matched prefix, decode start, fallbacks)."""

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


class RouterRequest:
    """One request as its policy sees it (made per decision from the front's DecideSpec, or
    directly in tests)."""

    __slots__ = ("request_id", "key", "_tokens", "_spec", "prompt_len", "sampling", "kind",
                 "model", "slo", "session_id", "session_load_bound", "route",
                 "matched_by_engine", "predictions", "predicted", "verbs", "retries",
                 "_engine_request_id", "on_sent")

    def __init__(self, request_id: str, tokens: list[int] | None, sampling: Any, *,
                 kind: Literal["completion", "chat"] = "completion", model: str = "default",
                 slo: SloSpec | None = None, session_id: str | None = None,
                 session_load_bound: float = DEFAULT_LOAD_BOUND, key: str = "",
                 verbs: RequestVerbs | None = None, spec: DecideSpec | None = None,
                 prompt_len: int | None = None, retries: int = 0) -> None:
        self.request_id = request_id
        self._tokens = tokens
        self._spec = spec
        self.prompt_len = len(tokens) if prompt_len is None and tokens is not None else (
            prompt_len or 0)
        self.sampling = sampling
        self.kind = kind
        self.model = model
        self.slo = slo if slo is not None else SloSpec()
        # The conversation it belongs to (X-Session-Id, or the body's `user` where the operator
        # allows it; None: none), and session affinity's load bound in force when it arrived.
        self.session_id = session_id
        self.session_load_bound = session_load_bound
        self.route = RouteNote()
        # The router's prefix-match results, filled lazily by the cluster view (engine id ->
        # tokens), and router_core's predictions per engine id when the policy asked.
        self.matched_by_engine: dict[str, int] | None = None
        self.predictions: dict[str, EnginePrediction] | None = None
        # What the policy predicted for the placement it chose (compared with what happens:
        # the latency model's closed loop).
        self.predicted: PredictedOutcome | None = None
        # Where its verbs go (router_core's executor for this request).
        self.verbs = verbs
        self.retries = retries
        self._engine_request_id = first_engine_request_id("req-") if verbs is None else ""
        # The request's router-made name, the same through every attempt.
        self.key = key or self.engine_request_id
        # Told the size and exposed time of a KV transfer its placement makes (tokens, ms).
        self.on_sent: Any = None

    @property
    def tokens(self) -> list[int]:
        if self._tokens is None:
            self._tokens = list(self._spec.tokens) if self._spec is not None else []
        return self._tokens

    @property
    def engine_request_id(self) -> str:
        """The id engines know the current attempt by (router-made, never a client's)."""
        return self.verbs.engine_request_id if self.verbs is not None else (
            self._engine_request_id)

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


def request_of(spec: DecideSpec, verbs: RequestVerbs, model: str) -> RouterRequest:
    """The request a policy sees for the front's `spec` (its tokens read only when asked for)."""
    sampling = RequestSampling(
        max_tokens=spec.max_tokens, temperature=spec.temperature, top_p=spec.top_p,
        top_k=spec.top_k, min_tokens=spec.min_tokens, seed=spec.seed, stop=tuple(spec.stop),
        ignore_eos=spec.ignore_eos, priority=spec.priority)
    load_bound = spec.session_load_bound
    return RouterRequest(
        spec.request_id, None, sampling, kind="chat" if spec.kind == "chat" else "completion",
        model=model, slo=SloSpec(spec.slo_ttft_ms, spec.slo_tpot_ms),
        session_id=spec.session_id,
        session_load_bound=DEFAULT_LOAD_BOUND if load_bound is None else load_bound,
        key=spec.key, verbs=verbs, spec=spec, prompt_len=spec.prompt_len,
        retries=spec.retries)
