"""Where a tandem request splits (DynaServe's φ_r): which engine leads, which follows, and how
much of the request the lead computes — from the latency model and live load.

Pairs: the follow decodes, so candidates are the engines whose decode batch absorbs the request
best (smallest predicted decode step with it added, KV under the watermark; `decode` engines
first); the lead prefills, so candidates are those that would finish the prompt soonest
(`prefill` engines first). The best few of each are paired and every pair planned.

Split inside the prompt (k = 0): the lead computes tokens[:s] and sends that KV, the follow
computes the rest and decodes. The follow can only start once the KV is there and its own
backlog is through, so TTFT(s) = max(lead backlog + lead's part, follow backlog) + follow's
part; s is chosen on a grid to minimise it, and among splits within 2% of the best, the one
that leaves the two engines equally busy (backlog + what this request adds, the follow's
decoding included) — DynaServe's balance.

Split past the prompt (k > 0): the lead prefills everything and emits the first k tokens before
the follow takes over — the first token comes without a transfer on its path (`k_default`, when
that costs no more than a tenth of TTFT), and a follow whose decode step would break the ITL
SLO gets `k_max` tokens' worth of time before it must take the request.

The plan with the lowest predicted TTFT wins, preferring plans whose decoding engine keeps the
ITL SLO.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from pyrouter.engines.handle import EngineHandle
from router_core import EnginePrediction, EngineTable

_CANDIDATES = 3  # best engines per side to pair


@dataclass(frozen=True, slots=True)
class TandemPlan:
    lead: EngineHandle
    follow: EngineHandle
    split: int              # the lead computes KV of tokens[:split]
    lead_tokens: int        # k: tokens the lead emits before handing off (0: split in the prompt)
    ttft_ms: float          # predicted (NaN without a latency model)
    follow_step_ms: float   # the follow's predicted decode step with this request
    reason: str

    def key(self, itl_ms: float) -> tuple[bool, float]:
        decoding = self.follow_step_ms if self.lead_tokens == 0 else min(
            self.follow_step_ms, itl_ms)  # with k > 0 the follow's batch has time to turn over
        return decoding > itl_ms, self.ttft_ms


def _grid(lo: int, hi: int, align: int, points: int = 16) -> list[int]:
    """Up to `points` split candidates in [lo, hi], page-aligned, always with both ends."""
    if hi <= lo:
        return [hi]
    step = max(align, -(-(hi - lo) // points) // align * align or align)
    first = -(-lo // align) * align
    return sorted({lo, hi, *range(first, hi, step)})


def plan_tandem(tokens_len: int, max_tokens: int, engines: list[EngineHandle],
                preds: dict[str, EnginePrediction], table: EngineTable, itl_ms: float,
                k_default: int, k_max: int, align: int) -> TandemPlan:
    """`engines`: at least two healthy candidates; `preds`: router_core's predictions by id."""
    decoders = [e for e in engines if e.role == "decode"] or list(engines)
    usable = [e for e in decoders if preds[e.id].kv_ok] or decoders
    follows = sorted(usable, key=lambda e: (_nan_last(preds[e.id].decode_step_ms),
                                            -preds[e.id].matched_tokens, e.num))[:_CANDIDATES]
    prefillers = [e for e in engines if e.role != "decode"] or list(engines)
    leads = sorted(prefillers, key=lambda e: (_nan_last(preds[e.id].ttft_ms), e.num))
    pairs = [(lead, follow) for follow in follows
             for lead in [x for x in leads if x is not follow][:_CANDIDATES]]
    if not pairs:  # only decode engines and one of them: pair it with any other
        follow = follows[0]
        pairs = [(next(e for e in engines if e is not follow), follow)]
    plans = [_plan_pair(lead, follow, tokens_len, max_tokens, preds, table, itl_ms, k_default,
                        k_max, align) for lead, follow in pairs]
    return min(plans, key=lambda p: p.key(itl_ms)) if not math.isnan(plans[0].ttft_ms) \
        else plans[0]


def _plan_pair(lead: EngineHandle, follow: EngineHandle, tokens_len: int, max_tokens: int,
               preds: dict[str, EnginePrediction], table: EngineTable, itl_ms: float,
               k_default: int, k_max: int, align: int) -> TandemPlan:
    pl, pf = preds[lead.id], preds[follow.id]
    last = tokens_len - 1  # the follow computes at least the last token itself
    if not (pl.has_latency_model and pf.has_latency_model):
        return TandemPlan(lead, follow, last, k_default, math.nan, math.nan, "no_latency_model")
    matched_f = min(pf.matched_tokens, last)
    load = table.get(follow.num)
    without = table.predict_step_ms(follow.num, None, load.running_decodes,
                                    load.decode_context_tokens)
    decode_ms = max_tokens * max(0.0, pf.decode_step_ms - without)  # what decoding adds there
    options = [(s, *_split(table, lead, follow, pl, pf, s, matched_f, tokens_len))
               for s in _grid(matched_f, last, align)]
    best_ttft = min(ttft for _, ttft, _, _ in options)
    best_s = min((o for o in options if o[1] <= best_ttft * 1.02),
                 key=lambda o: (abs(o[2] - (o[3] + decode_ms)), -o[0]))[0]
    lead_can_decode = pl.decode_step_ms <= itl_ms
    if pf.decode_step_ms > itl_ms and lead_can_decode and k_max > 0:
        return TandemPlan(lead, follow, last, k_max, pl.ttft_ms, pf.decode_step_ms,
                          "follow_decode_over_itl")
    if k_default > 0 and lead_can_decode and pl.ttft_ms <= best_ttft * 1.1:
        return TandemPlan(lead, follow, last, k_default, pl.ttft_ms, pf.decode_step_ms,
                          "lead_first_tokens")
    return TandemPlan(lead, follow, best_s, 0, best_ttft, pf.decode_step_ms, "balanced_prefill")


def _split(table: EngineTable, lead: EngineHandle, follow: EngineHandle,
           pl: EnginePrediction, pf: EnginePrediction, s: int, matched_f: int,
           tokens_len: int) -> tuple[float, float, float]:
    """(TTFT, lead busy until, follow busy until before decoding) for split s, in ms."""
    lead_busy = pl.queue_ms
    if s > matched_f:  # the lead computes [its cached prefix, s) and sends [matched_f, s)
        cached_l = min(pl.matched_tokens, s)
        lead_busy += table.predict_prefill_ms(lead.num, s - cached_l, cached_l)
    start = max(lead_busy if s > matched_f else 0.0, pf.queue_ms)
    have = max(s, matched_f)
    follow_part = table.predict_prefill_ms(follow.num, tokens_len - have, have)
    return start + follow_part, lead_busy, pf.queue_ms + follow_part


def _nan_last(value: float) -> float:
    return math.inf if math.isnan(value) else value
