"""First-token deadlines on a real engine (SmolLM2, fast mode): with the engine saturated by
queued long prompts that carry no deadline, three requests that arrive after them with deadlines
— in the reverse of their deadlines' order — are admitted earliest deadline first, ahead of every
long prompt still queued, and every request gets the tokens it gets with no deadlines at all
(the fast mode is batch invariant: a different order changes no token). The control run gives
no request a deadline and serves the late ones last, in arrival order.

Order is read from the engine's outputs (which request produced its first token at which step),
never from time: the deadlines are tens of seconds apart, so the microseconds between two calls
cannot reorder them."""
from __future__ import annotations

import pytest
from test_core_support import greedy, make_engine

from engine.core.engine_core import EngineCore
from engine.model.loader import LoadedModel

pytestmark = pytest.mark.model

LONG_PROMPTS = 4
CHUNK = 64
MAX_TOKENS = 3
# Arrival order, with each one's first-token deadline (ms from its receipt).
LATE = (("c", 30_000.0), ("b", 20_000.0), ("a", 10_000.0))


def _prompt(core: EngineCore, name: str, repeats: int) -> list[int]:
    """Distinct text (no shared prefix) of about 15 tokens per repeat."""
    text = f"Report {name}: the freight yard sorted {len(name) * 7 + 3} wagons today. " * repeats
    return core.loaded.tokenizer.encode(text)


def _serve(core: EngineCore, deadlines: bool) -> tuple[list[str], dict[str, list[int]]]:
    """Queue the long prompts (no deadline), run one step (the first starts its prefill), then
    add the late requests (each longer than a chunk, so each prefills over steps of its own);
    the order of first tokens and every request's tokens."""
    for i in range(LONG_PROMPTS):
        core.add_request(f"long{i}", _prompt(core, f"long{i}", 9), greedy(MAX_TOKENS))
    first_order: list[str] = []
    tokens: dict[str, list[int]] = {}

    def collect() -> None:
        for out in core.step():
            if out.first:
                first_order.append(out.request_id)
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)

    collect()
    assert len(core.scheduler.waiting) == LONG_PROMPTS - 1, "saturated: the rest still queued"
    for name, due_ms in LATE:
        core.add_request(name, _prompt(core, name, 6), greedy(MAX_TOKENS),
                         first_token_due_ms=due_ms if deadlines else 0.0)
    for _ in range(500):
        if not core.has_work():
            return first_order, tokens
        collect()
    raise AssertionError("the engine did not finish")


@pytest.mark.timeout(600)
def test_queued_requests_with_deadlines_are_admitted_earliest_deadline_first(
        loaded_model_fast: LoadedModel) -> None:
    def engine() -> EngineCore:
        return make_engine(loaded_model_fast, mode="fast", chunk_size=CHUNK, max_running=16)

    order, tokens = _serve(engine(), deadlines=True)
    # Only the prompt whose prefill was running when they arrived is ahead of them.
    assert order == ["long0", "a", "b", "c", *(f"long{i}" for i in range(1, LONG_PROMPTS))], order

    fifo_order, fifo_tokens = _serve(engine(), deadlines=False)
    assert fifo_order == [*(f"long{i}" for i in range(LONG_PROMPTS)), "c", "b", "a"], fifo_order
    assert tokens == fifo_tokens  # the order changed no token
