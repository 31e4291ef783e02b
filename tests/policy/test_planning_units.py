"""Unit tests of the decision arithmetic: SLO checks over outcomes, hysteresis, role switches."""
from __future__ import annotations

from pyrouter.outcomes import Outcome, RecentOutcomes, slo_met
from pyrouter.planning.adaptive_rules import Hysteresis
from pyrouter.planning.slo_fit import MUX, PREFILL, MuxRoles


def test_slo_met_needs_every_given_objective() -> None:
    assert slo_met(0.5, 0.05, None, None) is None
    assert slo_met(0.5, 0.05, 1000, 100) is True
    assert slo_met(1.5, 0.05, 1000, 100) is False
    assert slo_met(0.5, 0.15, 1000, 100) is False
    assert slo_met(None, None, 1000, None) is False  # failed before a first token
    assert slo_met(0.5, None, 1000, 100) is True     # one token: no TPOT to miss


def test_outcome_window_by_pattern_and_age() -> None:
    window = RecentOutcomes(max_age_s=10)
    for i, (pattern, met) in enumerate([("pd", True), ("pd", False), ("tandem", True)]):
        window.record(Outcome(100.0 + i, pattern, True, 0.1, 0.01, met))
    window.record(Outcome(80.0, "pd", False, 9.0, 1.0, False))  # too old at t=105
    assert window.summary("pd", now=105).attainment == 0.5
    assert window.summary(now=105).requests == 3
    assert window.patterns() == []  # relative to the real clock: all long gone


def test_hysteresis_needs_consecutive_votes_and_dwell() -> None:
    h = Hysteresis("pd", needed=2, min_dwell_s=10)
    assert h.vote("tandem", "r", now=0) is None
    assert h.vote("slo_mux", "r", now=1) is None      # a different proposal restarts the count
    assert h.vote("slo_mux", "r", now=2) == "pd->slo_mux (r)"
    assert h.vote("tandem", "r", now=3) is None
    assert h.vote("tandem", "r", now=4) is None       # won twice, but within the dwell time
    assert h.vote("tandem", "r", now=13) == "slo_mux->tandem (r)"


def test_role_switch_rules_and_interval() -> None:
    roles = MuxRoles()
    roles.sync({"e0": "prefill", "e1": "decode", "e2": "any"})
    assert roles.of(PREFILL) == ["e0"] and roles.of(MUX) == ["e1", "e2"]
    full = {"e1": True, "e2": True}
    assert roles.maybe_switch(full, {}, {}, 5.0, 0.5, now=10) == \
        "e0:prefill->mux (decode_kv_over_watermark)"
    assert roles.maybe_switch(full, {}, {}, 5.0, 0.5, now=12) is None  # within the interval
    roles.late.extend([True] * 10)
    assert roles.maybe_switch({}, {"e0": 5, "e1": 1, "e2": 3}, {}, 5.0, 0.5, now=20) == \
        "e1:mux->prefill (prefill_waiting)"
    roles.sync({"e0": "prefill", "e2": "any"})  # e1 left the cluster
    assert "e1" not in roles.roles
    undeclared = MuxRoles()
    undeclared.sync({"e0": "any", "e1": "any", "e2": "any"})  # someone must prefill
    assert undeclared.of(PREFILL) == ["e0"] and undeclared.of(MUX) == ["e1", "e2"]
