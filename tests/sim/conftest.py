"""The simulator tests' fixtures (helpers live in tests/sim/sim_helpers.py)."""
from __future__ import annotations

import pytest

from switchyard_sim.profile import HardwareProfile
from tests.sim.sim_helpers import tiny_profile


@pytest.fixture
def tiny() -> HardwareProfile:
    return tiny_profile()
