"""Per-request placement from predicted outcomes: where should this request prefill and decode so
that the most requests meet their SLO — this one and those already running?

A placement is a (prefill engine, decode engine) pair: the same engine is data parallel
("dp"), two engines are disaggregation ("pd": the decode engine reserves, the prefill engine
computes and sends the K/V it lacks). For each, from router_core's predictions (queue, chunked
prefill, decode step with and without this request; pyrouter/cluster.py `predict`), the K/V
transfer's learned cost, the prefill share each engine already carries
(pyrouter/planning/interference.py) and the closed loop's corrections
(pyrouter/planning/prediction_feedback.py):

  ttft  dp: queue + prefill on e    pd: queue + prefill on p + transfer (or d's queue, if longer)
                                        + a step on d
  tpot  a full prefill chunk's step while d works off the backlog it still has when this request
        starts decoding, then d's decode step (this request added) / (1 - the share of d's time
        others' prefills take)
  harm  the decodes already running on an engine, and still within their SLO, whose TPOT over
        their remaining life this placement pushes over the SLO (the prefill engine's, by its
        prefill joining the backlog and the share; the decode engine's, by one more sequence in
        every step); a decode late anyway loses nothing (the closed loop knows which running
        requests were placed late or got their first token late)

A data-parallel placement whose prefill harms at its engine's current chunk may also be weighed
at the engine's LCU chunk (`at_chunk`, from chunk_control.py `lcu_option`): every step then stays
within the TPOT SLO (no harm), and its queue and prefill take longer by that chunk's cost per
token.

Choice: the most requests within SLO (this one's 1 if it meets both objectives, minus harm);
among equals the lowest predicted TTFT (spreading load), data parallel before disaggregation at a
tie (it moves no bytes). When no placement lets this request meet its SLO: once some engine's
queue alone is past the TTFT SLO (saturation), onto such a queue (the least harm, then the
longest), even where a shorter queue would harm no running decode: under overload this keeps the
other engines short enough for the requests that can still meet theirs (Tropical's gain),
instead of spreading lateness until every request misses; likewise, once some engine's running
decodes already step slower than the TPOT SLO (saturated in decode steps), onto the slowest: a
load spread evenly puts every engine past the step time its decodes can bear, an uneven one
keeps some within it — unless an engine is still calm (its decodes step within the SLO, and
this request pushes none of them over), where it goes instead; before either, where it harms
least and runs soonest (every engine kept busy). The only parameters are the SLO, the KV
watermark and measured costs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pyrouter.planning.chunk_control import LcuOption
from pyrouter.planning.interference import PrefillShare, prefill_extra_ms, tpot_under
from pyrouter.planning.prediction_feedback import TPOT, TTFT, PredictedOutcome, PredictionFeedback
from router_core import EnginePrediction

DP, PD = "dp", "pd"


@dataclass(frozen=True, slots=True)
class EngineState:
    """One engine as the planner sees it for this request."""

    id: str
    num: int
    prefills: bool            # may compute a prefill (role any / prefill)
    decodes: bool             # may decode (role any / decode)
    running_decodes: int      # reported plus dispatched since (router_core's table)
    pred: EnginePrediction
    # Of them, the share still within their SLO as far as the router knows (the closed loop's
    # running predictions: one placed late anyway is lost already).
    in_slo: float = 1.0


@dataclass(frozen=True, slots=True)
class Placement:
    pattern: str              # DP | PD
    prefill: str
    decode: str
    ttft_ms: float
    tpot_ms: float
    meets: bool
    harm: int                 # running decodes this placement pushes over the TPOT SLO
    kv_ok: bool
    prefill_queue_ms: float
    outcome: PredictedOutcome
    prefill_extra_ms: float = 0.0  # what its prefill adds to the prefill engine's steps
    decode_step_now_ms: float = 0.0  # the decode engine's step as it runs now (without this one)
    chunk: int = 0  # the prefill chunk it needs its engine to run (0: the engine's current one)

    @property
    def score(self) -> int:
        return int(self.meets) - self.harm


@dataclass(slots=True)
class TransferCost:
    """Milliseconds per token a RemoteSend adds after the sender's prefill is done (its exposed
    tail: the rest overlaps the prefill layer by layer), learned from the sends' answers (the
    latency model does not cover the link); 0 until a send has been seen."""

    ms_per_token: float = 0.0
    seen: int = 0

    def observe(self, tokens: int, total_ms: float) -> None:
        if tokens <= 0 or not (total_ms >= 0 and math.isfinite(total_ms)):
            return
        alpha = max(0.1, 1.0 / (self.seen + 1))
        self.seen += 1
        self.ms_per_token += alpha * (total_ms / tokens - self.ms_per_token)


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_ms: float   # inf when the request has none
    tpot_ms: float


def _finite(x: float, default: float = 0.0) -> float:
    return x if math.isfinite(x) else default


def candidates(engines: list[EngineState], prompt_len: int, max_tokens: int, slo: Slo,
               share: PrefillShare, transfer: TransferCost, feedback: PredictionFeedback,
               now: float) -> list[Placement]:
    out: list[Placement] = []
    for p in engines:
        for d in engines:
            if not (p.prefills and d.decodes):
                continue
            out.append(_evaluate(p, d, prompt_len, max_tokens, slo, share, transfer,
                                 feedback, now))
    return out


def _evaluate(p: EngineState, d: EngineState, prompt_len: int, max_tokens: int, slo: Slo,
              share: PrefillShare, transfer: TransferCost, feedback: PredictionFeedback,
              now: float) -> Placement:
    pattern = DP if p.id == d.id else PD
    pp, dp_ = p.pred, d.pred
    extra = prefill_extra_ms(pp.prefill_ms, int(pp.prefill_steps), pp.decode_step_now_ms)
    if pattern == DP:
        raw_ttft = _finite(pp.ttft_ms)
    else:
        # The decode engine computes the last token once the K/V has landed, queued behind
        # whatever prefill it still has then (its scheduler is first come, first served).
        sent = max(0, prompt_len - 1 - int(dp_.matched_tokens))
        landed = _finite(pp.ttft_ms) + transfer.ms_per_token * sent
        raw_ttft = max(landed, _finite(dp_.queue_ms)) + _finite(dp_.decode_step_ms)
    d_share = share.share(d.id, now)
    raw_tpot = _own_tpot(d, d_share, max_tokens, 0.0 if pattern == DP else raw_ttft)
    ttft = raw_ttft * feedback.correction(p.id, pattern, TTFT)
    tpot = raw_tpot * feedback.correction(d.id, pattern, TPOT)
    meets = ttft <= slo.ttft_ms and (max_tokens <= 1 or tpot <= slo.tpot_ms)

    harm = 0
    # The prefill engine's decodes lose the prefill's extra time.
    harm += _pushed_over(p, share, now, extra, _finite(pp.prefill_ms), 0.0, slo, feedback)
    # The decode engine's decodes step with one more sequence (a pd decode engine also takes
    # no prefill; a dp one was counted above).
    if pattern == PD:
        harm += _pushed_over(d, share, now, 0.0, 0.0, _finite(dp_.decode_step_ms)
                             - _finite(dp_.decode_step_now_ms), slo, feedback)
    outcome = PredictedOutcome(pattern, p.id, d.id, ttft, tpot, raw_ttft, raw_tpot,
                               _foreseen_prefill(d, d_share), meets=meets,
                               ttft_slo_ms=slo.ttft_ms)
    return Placement(pattern, p.id, d.id, ttft, tpot, meets, harm, bool(dp_.kv_ok),
                     _finite(pp.queue_ms), outcome, extra,
                     _finite(dp_.decode_step_now_ms) * feedback.correction(d.id, pattern, TPOT))


def at_chunk(p: Placement, e: EngineState, option: LcuOption, prompt_len: int, max_tokens: int,
             slo: Slo, share: PrefillShare, feedback: PredictionFeedback, now: float) -> Placement:
    """`p`, data parallel on `e`, with e's prefill chunk lowered to `option`'s LCU chunk: every
    step then stays within the TPOT SLO, so its prefill pushes none of e's decodes over theirs
    (no harm), while its queue and prefill take `cost_ratio` times as long (TTFT) and this
    request's own decode works off the queue at that step."""
    pred = e.pred
    ratio = option.cost_ratio
    ttft, raw_ttft = p.ttft_ms * ratio, p.outcome.raw_ttft_ms * ratio
    raw_tpot = _blended_tpot(_finite(pred.decode_step_ms), option.step_ms, share.share(e.id, now),
                             _finite(pred.queue_ms) * ratio, float(max_tokens))
    tpot = raw_tpot * feedback.correction(e.id, DP, TPOT)
    meets = ttft <= slo.ttft_ms and (max_tokens <= 1 or tpot <= slo.tpot_ms)
    extra = prefill_extra_ms(_finite(pred.prefill_ms) * ratio,
                             math.ceil(prompt_len / option.chunk),
                             _finite(pred.decode_step_now_ms))
    outcome = replace(p.outcome, ttft_ms=ttft, tpot_ms=tpot, raw_ttft_ms=raw_ttft,
                      raw_tpot_ms=raw_tpot, meets=meets)
    return replace(p, ttft_ms=ttft, tpot_ms=tpot, meets=meets, harm=0, outcome=outcome,
                   prefill_extra_ms=extra, chunk=option.chunk)


def _own_tpot(d: EngineState, share: float, max_tokens: int, starts_after_ms: float) -> float:
    """This request's TPOT decoding on `d`. Its own prefill is over before it decodes (a dp
    request also waited out the queue ahead of it); what slows it is the others' prefills: the
    backlog d still has when it starts (a pd request starts `starts_after_ms` from now), then
    the share of d's time later prefills take."""
    pred = d.pred
    backlog_ms = max(0.0, _finite(pred.queue_ms) - starts_after_ms)
    return _blended_tpot(_finite(pred.decode_step_ms), _finite(pred.backlog_step_ms), share,
                         backlog_ms, float(max_tokens))


def _foreseen_prefill(d: EngineState, share: float) -> float:
    """Per decoded token, the prefill work `_own_tpot` expects from prefills placed on `d` later
    (its share; the backlog was placed already) — what the closed loop does not count as
    unforeseen (prediction_feedback.py)."""
    step = _finite(d.pred.decode_step_ms)
    return max(0.0, _amortized_tpot(step, _finite(d.pred.backlog_step_ms), share) - step)


def _amortized_tpot(step_ms: float, backlog_step_ms: float, share: float) -> float:
    """Time per token while `share` of the engine's time goes to prefills as they come, at most
    a step that carries a full chunk every time."""
    cap = backlog_step_ms if backlog_step_ms > 0 else math.inf
    return min(tpot_under(step_ms, share), cap)


def _blended_tpot(step_ms: float, backlog_step_ms: float, share: float, backlog_ms: float,
                  tokens: float) -> float:
    """Mean time per token over `tokens` decode steps on an engine that first works off
    `backlog_ms` of queued prefill (every step then carries a full chunk: `backlog_step_ms`)
    and then spends `share` of its time on prefills as they come (interference.py)."""
    amortized = _amortized_tpot(step_ms, backlog_step_ms, share)
    if not (backlog_ms > 0 and backlog_step_ms > 0 and tokens > 1):
        return amortized
    in_backlog = min(tokens, backlog_ms / backlog_step_ms)
    return (in_backlog * backlog_step_ms + (tokens - in_backlog) * amortized) / tokens


def _pushed_over(e: EngineState, share: PrefillShare, now: float, extra_ms: float,
                 prefill_ms: float, extra_step_ms: float, slo: Slo,
                 feedback: PredictionFeedback) -> int:
    """Running decodes on `e` within their SLO now that would not be with this placement: a
    prefill placed on `e` joins its backlog (every step of which carries a chunk) and then its
    share of prefill time; a decode placed there makes every step a little longer. Over the
    running decodes' remaining life (about the horizon recent requests placed to meet their SLO
    decode for). Those known late (placed late, or late with their first token) are not
    counted: slowing them loses no request within SLO (under overload the engine taking the
    late requests would otherwise look too harmful to take more, and they would fill the queue
    kept short for the requests that can still fit)."""
    if not e.running_decodes or not math.isfinite(slo.tpot_ms):
        return 0
    pred = e.pred
    step, backlog_step = _finite(pred.decode_step_now_ms), _finite(pred.backlog_step_ms)
    queue = _finite(pred.queue_ms)
    corr = feedback.correction(e.id, DP, TPOT)
    life_ms = share.horizon_s * 1000.0
    before = _blended_tpot(step, backlog_step, share.share(e.id, now), queue,
                           life_ms / max(step, 1e-3))
    step_after = step + extra_step_ms
    after = _blended_tpot(step_after, backlog_step, share.share(e.id, now, extra_ms),
                          queue + prefill_ms, life_ms / max(step_after, 1e-3))
    if not before * corr <= slo.tpot_ms < after * corr:
        return 0
    return round(e.running_decodes * e.in_slo)


# Which of `choose`'s rules placed a request (the route's `why=`): placed to meet its SLO; late
# anyway, where it runs soonest; onto a queue already past the TTFT SLO; onto the engine whose
# decodes already step slower than the TPOT SLO.
FITS, SOONEST, QUEUE_SATURATED, STEP_SATURATED = "fits", "soonest", "queue_saturated", \
    "step_saturated"


def choose(placements: list[Placement], slo: Slo) -> Placement:
    """The placement with the most requests within SLO (module docstring)."""
    return choose_with_rule(placements, slo)[0]


def choose_with_rule(placements: list[Placement], slo: Slo) -> tuple[Placement, str]:
    """`choose`'s placement and the rule that picked it (FITS, SOONEST, QUEUE_SATURATED,
    STEP_SATURATED)."""
    if not placements:
        raise ValueError("no placement to choose from")
    fits_kv = [p for p in placements if p.kv_ok] or placements
    best_score = max(p.score for p in fits_kv)
    top = [p for p in fits_kv if p.score == best_score]
    least_ttft = min(top, key=lambda p: (p.ttft_ms, p.pattern != DP, p.prefill, p.decode))
    if least_ttft.meets:
        return least_ttft, FITS
    saturated = [p for p in fits_kv if p.prefill_queue_ms > slo.ttft_ms]
    if not saturated:
        slowest = max(top, key=lambda p: p.decode_step_now_ms)
        # Engines whose decodes step within the TPOT SLO and that this request pushes no
        # running decode over it on: placed there, it costs no other request its SLO.
        calm = [p for p in top if p.harm == 0 and p.decode_step_now_ms <= slo.tpot_ms]
        if slowest.decode_step_now_ms > slo.tpot_ms and not calm:
            # Saturated in decode steps instead: some engine's running decodes already step
            # slower than the TPOT SLO (the engine as it runs now, not this request's prediction:
            # a burst the engines absorb predicts late TPOTs without any engine being there),
            # and every other placement would push running decodes over theirs. Join the
            # slowest, so the others' decodes keep theirs. Where a calm engine is left, a late
            # request there harms nobody, while piling every late one onto the slowest engine
            # makes it slower still (4 engines, short chat at 0.6x: 56 requests onto one
            # engine, 56.7% within SLO where least_load kept 100%; docs/experiments.md
            # "A late request joins the slowest engine only when no calm one is left").
            return min(top, key=lambda p: (-p.decode_step_now_ms, p.pattern != DP, p.prefill,
                                           p.decode)), STEP_SATURATED
        if calm:
            return min(calm, key=lambda p: (p.ttft_ms, p.pattern != DP, p.prefill,
                                            p.decode)), SOONEST
        # No engine's queue is past the TTFT SLO yet: the engines still keep up, and a request
        # late anyway (too long, or unlucky) runs soonest, keeping every engine busy.
        return least_ttft, SOONEST
    # Saturated: some queue is already past the SLO. Join one (the least harm, then the longest
    # queue; data parallel: no bytes moved for a request late anyway), so the other engines stay
    # short enough for the requests that can still meet their SLO — instead of spreading
    # lateness to them all. Even where that harms running decodes and a shorter queue would
    # not: a late request there takes queue time from requests that could still fit, and its
    # engine drifts past the SLO too (then none is left for them).
    return min(saturated, key=lambda p: (p.harm, -p.prefill_queue_ms, p.pattern != DP,
                                         p.prefill, p.decode)), QUEUE_SATURATED


def commit(chosen: Placement, share: PrefillShare, feedback: PredictionFeedback, now: float,
           max_tokens: int, hindsight: bool) -> PredictedOutcome:
    """Record the chosen placement's prefill and, placed to meet its SLO, its decode time (the
    horizon); the prediction to attach to the request — with `hindsight`, stamped with the
    prefill work placed on its decode engine so far (its own included: the closed loop counts
    only what is placed after it); without, unstamped, so the loop learns TPOT's plain ratio."""
    share.add(chosen.prefill, now, chosen.prefill_extra_ms)
    if chosen.meets:
        # A late request's far slower predicted TPOT would stretch every engine's horizon (the
        # share then lags a change of load; docs/experiments.md "The decode horizon learns from
        # requests placed to meet their SLO").
        share.note_decode_time(max_tokens * chosen.tpot_ms / 1000.0)
    feedback.note_prefill(chosen.prefill, chosen.prefill_extra_ms)
    if not hindsight:
        return chosen.outcome
    return replace(chosen.outcome, placed_ms=feedback.placed(chosen.decode))
