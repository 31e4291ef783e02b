"""Fixtures for the RPC tests: real engine processes (started once per module) and prompts."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.server.launcher import EngineProcess, start_engines, stop_engines

_BASE_TEXTS = [
    "Hello!",
    "The capital of France is",
    "Write a haiku about the sea, the wind and the long grey evening light.",
    "Explain, step by step, why the sky looks blue during the day but red at sunset, "
    "and what role the atmosphere plays in scattering sunlight of different wavelengths.",
    "Once upon a time, in a small village at the edge of a great forest, there lived an old "
    "clockmaker who had never once left his workshop. Every morning he wound the town clock, "
    "every evening he repaired the watches the villagers brought him, and every night he "
    "worked on a secret machine that nobody had ever seen. One day a young girl knocked",
    "List the planets of the solar system in order from the Sun, give one interesting fact "
    "about each of them, and then summarise which ones could in principle be visited by a "
    "crewed mission within the next fifty years, considering distance, radiation, gravity, "
    "surface conditions, the energy needed to get there and back, and how long the crew "
    "would need to stay in space. Finish with a short recommendation for which planet a "
    "space agency should target first, with reasons, written for a general audience.",
]


@pytest.fixture(scope="session")
def tokenizer():  # type: ignore[no-untyped-def]
    from switchyard_tokenizer.default_model import default_model_path
    from switchyard_tokenizer.tokenizer import EngineTokenizer

    return EngineTokenizer.from_gguf(default_model_path())


@pytest.fixture(scope="session")
def make_prompts(tokenizer):  # type: ignore[no-untyped-def]
    """variant -> six prompts of different lengths; each variant shares no prefix with another,
    so one pattern's cached KV never helps the next."""

    def make(variant: str) -> list[list[int]]:
        return [tokenizer.encode(f"[{variant}] {text}") for text in _BASE_TEXTS]

    return make


@pytest.fixture(scope="module")
def engine_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engine-logs")


@pytest.fixture(scope="module")
def trio(engine_logs: Path) -> Iterator[list[EngineProcess]]:
    """Three engines: a reference (one engine does everything), a prefill and a decode engine."""
    engines = start_engines(["ref", "prefill", "decode"], engine_logs)
    yield engines
    stop_engines(engines)
