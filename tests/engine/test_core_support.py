"""Helpers shared by the engine-core tests (imported as `test_core_support`; holds no tests)."""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.core.outputs import StepOutput
from engine.model.loader import LoadedModel
from switchyard_engine_api.sampling_params import SamplingParams

PROMPTS = [
    "The capital of France is",
    "Write a haiku about the sea.",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "List three colors:",
    "The quick brown fox",
    "What is 12 times 7? Answer:",
    "import numpy as np\n",
    "The mitochondria is",
    "Dear Sir or Madam,",
]


def make_engine(loaded: LoadedModel, **overrides: object) -> EngineCore:
    settings: dict[str, object] = {"num_pages": 256, "chunk_size": 64, "max_running": 16}
    settings.update(overrides)
    return EngineCore(EngineConfig(**settings), loaded=loaded)  # type: ignore[arg-type]


def greedy(max_tokens: int = 12, **kw: object) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)  # type: ignore[arg-type]


@dataclass
class Run:
    tokens: dict[str, list[int]] = field(default_factory=dict)
    finish: dict[str, str] = field(default_factory=dict)
    text: dict[str, str] = field(default_factory=dict)
    outputs: list[StepOutput] = field(default_factory=list)


def drain(core: EngineCore, max_steps: int = 2000) -> Run:
    """Step until the engine is idle; collect every request's tokens and finish reason."""
    run = Run()
    for _ in range(max_steps):
        if not core.has_work():
            return run
        for out in core.step():
            run.outputs.append(out)
            run.tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
            run.text[out.request_id] = run.text.get(out.request_id, "") + out.text
            if out.finish_reason is not None:
                run.finish[out.request_id] = out.finish_reason
    raise AssertionError(f"engine still busy after {max_steps} steps")


def generate(core: EngineCore, prompt: list[int], params: SamplingParams,
             request_id: str = "solo") -> list[int]:
    core.add_request(request_id, prompt, params)
    return drain(core).tokens[request_id]


def assert_pool_idle(core: EngineCore) -> None:
    """Every page is owned by the prefix cache; clearing the cache frees them all."""
    assert not core.has_work()
    assert core.pool.num_used == len(core.cache)
    assert all(core.pool.refcount(node_page) == 1 for node_page in _cached_pages(core))
    core.cache.clear()
    assert core.pool.num_used == 0 and core.pool.num_free == core.pool.num_pages


def _cached_pages(core: EngineCore) -> list[int]:
    pages: list[int] = []
    for block_hash in core.kv_snapshot()[1]:
        pages.append(core.cache._nodes[block_hash].page)
    return pages
