"""What the scheduler hands the model runner for one step.

The scheduler decides *which* tokens run; the runner (engine/model/runner.py) turns that into a
ForwardContext and logits. Keeping this type tiny is what lets the two evolve separately. It sits
at the engine package's top, below core/, model/ and attention/, so that the model and attention
code never import the engine core that drives them (tests/repo/test_package_cycles.py).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class ScheduledChunk:
    """One sequence's share of a step: new tokens at positions [start_pos, start_pos + len(token_ids))."""

    seq_key: str
    token_ids: list[int]
    start_pos: int
    # Pages holding this sequence's KV for positions [0, start_pos + len(token_ids)); the runner
    # writes the new tokens' K/V into them.
    page_table: list[int]
    # Whether the runner returns a logits row for this chunk's last token (decodes and the final
    # prefill chunk do; intermediate prefill chunks and KV-only sends don't).
    need_logits: bool


# Called with the layer index after that layer has written K/V for every chunk of the step.
LayerHook = Callable[[int], None]
