"""A tournament run's policy label: `P`, or `P+admit` for policy P behind the router's admission
by predicted outcome (`--admission on|both`; the simulator runs it as a router does)."""
from __future__ import annotations

from collections.abc import Sequence

ADMIT = "+admit"
ADMISSION_CHOICES = ("off", "on", "both")


def policy_of(label: str) -> tuple[str, bool]:
    """(policy, admission on) for a run's label."""
    if label.endswith(ADMIT):
        return label[: -len(ADMIT)], True
    return label, False


def labels(policies: Sequence[str], admission: str) -> list[str]:
    """The run labels for `--admission off|on|both`."""
    if admission == "off":
        return list(policies)
    if admission == "on":
        return [p + ADMIT for p in policies]
    return [label for p in policies for label in (p, p + ADMIT)]
