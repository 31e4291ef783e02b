"""Admission by predicted outcome through the router's own front, in virtual time against
simulated engines: a burst past capacity is admitted while its requests can make their TTFT
objective, queued while they could once the work ahead drains, and refused at once (503
`slo_unattainable`, Retry-After) when they cannot — and a refused request never reached an engine.
"""
from __future__ import annotations

from pyrouter.request import SloSpec
from tests.sim.sim_helpers import Outcome, assert_clean, run_requests, tiny_profile

SLO_MS = 600.0
# 40 prompts of 200 tokens at once on 2 engines: each prefill takes about 140 ms on the tiny
# profile (4 chunks of 64 tokens at 10 ms + 0.5 ms a token), so about 8 can start in 600 ms.
PROMPTS = [[(7 * i + k) % 500 + 1 for k in range(200)] for i in range(40)]


def _burst(admission: bool) -> Outcome:
    return run_requests(tiny_profile(), "round_robin", PROMPTS, max_tokens=4,
                        slo=SloSpec(ttft_ms=SLO_MS), admission=admission)


def _sustained(admission: bool) -> Outcome:
    """One request every 34 ms: twice what the two engines prefill (one per ~135 ms each)."""
    return run_requests(tiny_profile(), "round_robin", PROMPTS, max_tokens=4,
                        arrivals_ms=[34.0 * i for i in range(len(PROMPTS))],
                        slo=SloSpec(ttft_ms=SLO_MS), admission=admission)


def _ttft_ms(out: Outcome, i: int) -> float:
    return out.token_times_ms[i][0]


def test_a_burst_past_capacity_is_admitted_queued_or_shed_by_predicted_ttft() -> None:
    out = _burst(admission=True)
    shed = [i for i, r in enumerate(out.runs) if r.error is not None]
    served = [i for i, r in enumerate(out.runs) if r.error is None]
    assert shed and served
    for i in shed:
        run = out.runs[i]
        assert run.error is not None
        assert (run.error.status, run.error.code) in {(503, "slo_unattainable"),
                                                      (503, "queue_timeout")}, run.error
        assert run.route == "none admitted=shed"
        assert run.verbs == [], "a refused request never reaches an engine"
        assert not out.token_times_ms[i]
    assert sum(out.runs[i].error.code == "slo_unattainable" for i in shed) > len(shed) // 2
    hows = {out.runs[i].route.split("admitted=")[1].split()[0] for i in served}
    assert hows <= {"predicted", "queued"} and "predicted" in hows, hows
    # What was admitted made its objective (within the default 10% margin), nearly all of it.
    met = [i for i in served if _ttft_ms(out, i) <= SLO_MS * 1.1]
    assert len(met) >= 0.9 * len(served), [_ttft_ms(out, i) for i in served]
    assert_clean(out)


def test_past_capacity_admission_keeps_more_requests_within_their_objective_than_none() -> None:
    on, off = _sustained(admission=True), _sustained(admission=False)
    assert all(r.error is None for r in off.runs)  # off: every request is let through...
    met_off = sum(_ttft_ms(off, i) <= SLO_MS for i in range(len(PROMPTS)))
    met_on = sum(r.error is None and _ttft_ms(on, i) <= SLO_MS for i, r in enumerate(on.runs))
    assert met_on > met_off, (met_on, met_off)
    # ...and the engines spent time on every one of them; on, only on those admitted.
    assert sum(1 for r in on.runs if r.verbs) < sum(1 for r in off.runs if r.verbs)
