"""Policy parameters are declared with type and range (`@policy(params=...)` with `Param`) and
checked when PUT /admin/policy sets them, so a value that would break every request is a 400
naming the parameter; a policy whose requests keep failing falls back to the one before it."""
from __future__ import annotations

from typing import Any

import pytest

from pyrouter.errors import BadRequest
from pyrouter.runtime.dispatch import PolicySlot
from pyrouter.runtime.policy_fallback import PolicyFallback
from pyrouter.runtime.policy_registry import ActivePolicy, Param, get_policy, policy


def _refused(name: str, params: dict[str, Any]) -> BadRequest:
    with pytest.raises(BadRequest) as info:
        get_policy(name).check_params(params)
    return info.value


@pytest.mark.parametrize(("name", "params", "bad"), [
    ("tandem", {"align": 0}, "align"),            # every request: ZeroDivisionError
    ("tandem", {"k_max": "8"}, "k_max"),
    ("tandem", {"tpot_ms": -1}, "tpot_ms"),
    ("tandem", {"split_ratio": 1.5}, "split_ratio"),
    ("tandem", {"chunk_control": 1}, "chunk_control"),
    ("pd", {"local_prefill_ratio": -0.1}, "local_prefill_ratio"),
    ("balanced_pd", {"align": -16}, "align"),
    ("cache_aware", {"kv_weight": True}, "kv_weight"),
    ("slo_mux", {"tpot_ms": -1}, "tpot_ms"),
    ("slo_mux", {"switch_interval_s": "soon"}, "switch_interval_s"),
    ("adaptive", {"patterns": "nope,zzz"}, "patterns"),
    ("adaptive", {"tpot_ms": 0}, "tpot_ms"),
])
def test_known_bad_values_are_400s_naming_the_parameter(name: str, params: dict[str, Any],
                                                          bad: str) -> None:
    error = _refused(name, params)
    assert error.param == f"params.{bad}" and bad in error.message
    assert error.code == "invalid_policy_param"


def test_good_values_pass_and_ints_stand_for_floats() -> None:
    merged = get_policy("tandem").check_params({"align": 1, "tpot_ms": 50, "split_ratio": None,
                                                "lead_tokens": 2})
    assert merged["align"] == 1 and merged["tpot_ms"] == 50 and merged["lead_tokens"] == 2
    assert get_policy("adaptive").check_params({"patterns": "pd"})["patterns"] == "pd"


def test_plain_defaults_still_declare_their_type() -> None:
    @policy("params_plain_test", params={"n": 3, "label": "x", "anything": None,
                                         "ratio": Param(0.5, ge=0, le=1)})
    async def route(req, cluster):  # type: ignore[no-untyped-def]
        raise AssertionError("not run")

    spec = get_policy("params_plain_test")
    assert spec.defaults == {"n": 3, "label": "x", "anything": None, "ratio": 0.5}
    assert spec.check_params({"anything": [1], "n": 4})["n"] == 4
    assert _refused("params_plain_test", {"n": "4"}).param == "params.n"
    assert _refused("params_plain_test", {"n": True}).param == "params.n"
    assert _refused("params_plain_test", {"ratio": 2}).param == "params.ratio"
    assert _refused("params_plain_test", {"nope": 1}).param == "params"


def test_a_policy_failing_n_in_a_row_falls_back_once() -> None:
    first = ActivePolicy(get_policy("round_robin"), {})
    slot = PolicySlot(first)
    events: list[tuple[str, str]] = []
    guard = PolicyFallback(slot, limit=3, events=lambda k, d: events.append((k, d)))
    broken = ActivePolicy(get_policy("tandem"), get_policy("tandem").check_params({}))
    slot.current = broken
    guard.record(broken, policy_failed=True)
    guard.record(broken, policy_failed=True)
    guard.record(broken, policy_failed=False)  # a success breaks the streak
    guard.record(broken, policy_failed=True)
    guard.record(broken, policy_failed=True)
    assert slot.current is broken and not events
    guard.record(broken, policy_failed=True)
    assert slot.current.name == "round_robin" and slot.current is not first  # fresh state
    assert guard.fallbacks == 1
    assert events == [("policy_fallback", "tandem->round_robin (3 failed in a row)")]
    for _ in range(5):  # the policy it fell back to has nothing to fall back to
        guard.record(slot.current, policy_failed=True)
    assert slot.current.name == "round_robin" and guard.fallbacks == 1
