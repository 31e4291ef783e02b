"""Tropical's SLO-aware multiplexing checks: may this prefill run on a multiplexing engine (next
to its decodes), and when do engines change role?

A prefill fits a multiplexing engine when, by the latency model, (1) each step carrying one of
its chunks still fits the TPOT SLO of the requests decoding there (the TPOT slack of an
iteration absorbs it), (2) the engine's decode step with this request added stays below
`margin` × the TPOT SLO (not approaching it), (3) its KV use stays under the watermark, and
(4) its TTFT (queue + prefill) meets the TTFT SLO. Before any of that, slo_mux runs a request
as data parallel would wherever that meets the TTFT SLO with the decodes' TPOT slack intact
(`dp_fit`): multiplexing is for when no engine can.

Roles: a prefill engine becomes multiplexing when every multiplexing engine is over the KV
watermark (decoding is short of memory); a multiplexing engine becomes prefill when prefills
keep waiting past their TTFT slack (most recent disaggregated prefills predicted late).
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pyrouter.errors import BadRequest
from pyrouter.planning.interference import prefill_extra_ms
from router_core import EnginePrediction

PREFILL, MUX = "prefill", "mux"
_LATE_WINDOW = 20  # recent disaggregated prefills whose TTFT was predicted late


def mux_fit(pred: EnginePrediction, running_decodes: int, ttft_ms: float, tpot_ms: float,
            margin: float) -> str | None:
    """None when the prefill fits this multiplexing engine, else why not."""
    if not pred.kv_ok:
        return "kv_over_watermark"
    if not pred.has_latency_model:
        return None  # nothing to predict with: trust the watermark alone
    if running_decodes and pred.prefill_step_ms > tpot_ms:
        return "prefill_step_over_tpot"
    if pred.decode_step_ms > margin * tpot_ms:
        return "decode_near_tpot"
    if pred.ttft_ms > ttft_ms:
        return "ttft"
    return None


def dp_fit(pred: EnginePrediction, running_decodes: int, ttft_ms: float, tokens: int) -> bool:
    """The request can run whole on this engine as data parallel would: its TTFT (queue +
    prefill) meets the SLO, KV stays under the watermark, and the decodes running there absorb
    its prefill — the time it adds to their steps fits the TPOT slack they have over `tokens`
    steps (a request's output length standing in for theirs). False without a latency model."""
    if not (pred.has_latency_model and pred.kv_ok and pred.ttft_ms <= ttft_ms
            and pred.tpot_slack_ms >= 0):
        return False
    extra = prefill_extra_ms(pred.prefill_ms, int(pred.prefill_steps), pred.decode_step_now_ms)
    return not running_decodes or extra <= pred.tpot_slack_ms * max(1, tokens)


def queue_saturated(pred: EnginePrediction, longest_queued_prefill: int, ttft_ms: float) -> bool:
    """The engine's queue alone is past the TTFT SLO, even without its longest prefill: a queue
    that is one long prompt (a 12k-token conversation on an engine that keeps up) would make
    every request behind it miss anyway, but it is not an engine falling behind — the queue
    behind it, which the requests after it wait for, is what says so. The longest prefill's
    time is taken as its share of the queued tokens; 0 (not reported) leaves the whole queue.
    A wait for KV (a full engine admitting requests only as running ones finish) is not one
    prompt's and is never discounted."""
    if not pred.queue_ms > ttft_ms:
        return False
    queued = int(pred.queued_prefill_tokens)
    share = min(1.0, longest_queued_prefill / queued) if queued > 0 else 0.0
    # queue_ms is past the SLO, so the model is known and kv_wait_ms finite.
    return max(pred.kv_wait_ms, pred.queue_ms * (1.0 - share)) > ttft_ms


@dataclass(slots=True)
class MuxRoles:
    """The policy's view of who does what; lives in its private state."""

    roles: dict[str, str] = field(default_factory=dict)      # engine id -> prefill | mux
    late: deque[bool] = field(default_factory=lambda: deque(maxlen=_LATE_WINDOW))
    last_switch: float = 0.0
    switches: list[str] = field(default_factory=list)        # "e1:mux->prefill (reason)"

    def sync(self, engines: dict[str, str]) -> None:
        """Adopt new engines (declared prefill -> prefill, else mux); forget gone ones. With no
        prefill engine among two or more, the first undeclared (`any`) one becomes prefill."""
        for engine_id, declared in engines.items():
            self.roles.setdefault(engine_id, PREFILL if declared == "prefill" else MUX)
        for gone in set(self.roles) - set(engines):
            del self.roles[gone]
        if not self.of(PREFILL) and len(self.roles) >= 2:
            undeclared = sorted(e for e, declared in engines.items() if declared == "any")
            if undeclared:
                self.roles[undeclared[0]] = PREFILL

    def of(self, role: str) -> list[str]:
        return sorted(e for e, r in self.roles.items() if r == role)

    def shared(self) -> dict[str, Any]:
        """What the other router replicas adopt (pyrouter/runtime/shared_policy_state.py)."""
        return {"roles": dict(self.roles), "switches": self.switches[-_LATE_WINDOW:]}

    def adopt(self, value: dict[str, Any], now: float | None = None) -> None:
        """A peer replica switched a role: take its roles, and wait an interval before
        switching again here (the peer's window of late prefills decided; this one restarts)."""
        roles, switches = value.get("roles"), value.get("switches", [])
        if not (isinstance(roles, dict) and all(isinstance(e, str) and r in (PREFILL, MUX)
                                                for e, r in roles.items())
                and isinstance(switches, list) and all(isinstance(s, str) for s in switches)):
            raise BadRequest("slo_mux roles must be {engine id: 'prefill' | 'mux'}")
        self.roles = dict(roles)
        self.switches = list(switches)
        self.last_switch = time.monotonic() if now is None else now
        self.late.clear()

    def maybe_switch(self, kv_over: dict[str, bool], decodes: dict[str, int],
                     queued: dict[str, int], interval_s: float, wait_ratio: float,
                     now: float | None = None) -> str | None:
        """At most one role change per interval; returns "e1:mux->prefill (reason)" or None."""
        now = time.monotonic() if now is None else now
        if now - self.last_switch < interval_s:
            return None
        mux, prefill = self.of(MUX), self.of(PREFILL)
        change = None
        if prefill and mux and all(kv_over.get(e, False) for e in mux):
            engine = min(prefill, key=lambda e: (queued.get(e, 0), e))
            change = (engine, PREFILL, MUX, "decode_kv_over_watermark")
        elif (len(mux) > 1 and len(self.late) >= _LATE_WINDOW // 2
              and sum(self.late) / len(self.late) >= wait_ratio):
            engine = min(mux, key=lambda e: (decodes.get(e, 0), e))
            change = (engine, MUX, PREFILL, "prefill_waiting")
        if change is None:
            return None
        engine, old, new, reason = change
        self.roles[engine], self.last_switch = new, now
        self.late.clear()
        note = f"{engine}:{old}->{new} ({reason})"
        self.switches.append(note)
        return note
