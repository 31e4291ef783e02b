"""The membership's upkeep rate: each engine is polled every poll_s until the fleet is larger
than poll_s x the upkeep's polls per second; then every engine is polled less often, so the
fleet's polls per second stay bounded (idle router CPU independent of the fleet's size)."""
from __future__ import annotations

import pytest

from pyrouter.engines.membership import UPKEEP_POLLS_PER_S, EngineMembership


def _fleet(size: int, poll_s: float, polls_per_s: float = UPKEEP_POLLS_PER_S
           ) -> EngineMembership:
    m = EngineMembership(poll_s=poll_s, polls_per_s=polls_per_s)
    m.pace.set_engines(size)  # as add() and drain_and_remove() keep it
    return m


@pytest.mark.parametrize(("size", "interval"), [(1, 0.5), (128, 0.5), (256, 1.0), (1024, 4.0)])
def test_the_fleets_polls_per_second_stay_bounded(size: int, interval: float) -> None:
    m = _fleet(size, poll_s=0.5)
    assert m.poll_interval_s() == pytest.approx(interval)
    assert size / m.poll_interval_s() <= UPKEEP_POLLS_PER_S


def test_zero_means_no_bound_and_bad_settings_are_refused() -> None:
    assert _fleet(1024, poll_s=0.5, polls_per_s=0).poll_interval_s() == 0.5
    for poll_s, polls_per_s in ((0.0, 1.0), (-1.0, 1.0), (0.5, -1.0)):
        with pytest.raises(ValueError):
            EngineMembership(poll_s=poll_s, polls_per_s=polls_per_s)
