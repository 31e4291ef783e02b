"""A request's priority on a real engine (SmolLM2, fast mode): with the engine saturated by
queued long prompts at priority 10, a priority-0 request that arrives after them is admitted as
soon as the running prefill leaves budget — ahead of every long prompt still queued — and the
tokens each request gets are those it gets with no priorities at all (the fast mode is batch
invariant, so a different order changes no token). The control run gives every request
priority 0 and shows the same late request served last: the order is the priority's doing.
Order is read from the engine's outputs (which request produced its first token at which step),
never from time."""
from __future__ import annotations

import pytest
from test_core_support import greedy, make_engine

from engine.core.engine_core import EngineCore
from engine.model.loader import LoadedModel

pytestmark = pytest.mark.model

LONG_PROMPTS = 5
CHUNK = 64
MAX_TOKENS = 3


def _long_prompt(core: EngineCore, i: int) -> list[int]:
    """~130 tokens (three prefill chunks), each distinct so no prefix is shared."""
    text = (f"Report {i}: the freight yard sorted {i * 7 + 3} wagons today. " * 9)
    return core.loaded.tokenizer.encode(text)


def _serve(core: EngineCore, late_priority: int) -> tuple[list[str], dict[str, list[int]]]:
    """Queue the long prompts at priority 10, run one step (the first starts its prefill), then
    add the late request; the order of first tokens and every request's tokens."""
    for i in range(LONG_PROMPTS):
        core.add_request(f"long{i}", _long_prompt(core, i), greedy(MAX_TOKENS, priority=10))
    first_order: list[str] = []
    tokens: dict[str, list[int]] = {}

    def collect() -> None:
        for out in core.step():
            if out.first:
                first_order.append(out.request_id)
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)

    collect()
    assert len(core.scheduler.waiting) == LONG_PROMPTS - 1, "saturated: the rest still queued"
    late = core.loaded.tokenizer.encode("The capital of France is")
    core.add_request("late", late, greedy(MAX_TOKENS, priority=late_priority))
    for _ in range(500):
        if not core.has_work():
            return first_order, tokens
        collect()
    raise AssertionError("the engine did not finish")


@pytest.mark.timeout(600)
def test_a_priority_0_request_passes_queued_priority_10_prompts(
        loaded_model_fast: LoadedModel) -> None:
    def engine() -> EngineCore:
        return make_engine(loaded_model_fast, mode="fast", chunk_size=CHUNK, max_running=16)

    order, tokens = _serve(engine(), late_priority=0)
    # Only the prompt whose prefill was running when it arrived is ahead of it.
    assert order == ["long0", "late", *(f"long{i}" for i in range(1, LONG_PROMPTS))], order

    fifo_order, fifo_tokens = _serve(engine(), late_priority=10)
    assert fifo_order[-1] == "late", fifo_order  # the control: same priority, served last
    assert tokens == fifo_tokens  # the order changed no token
