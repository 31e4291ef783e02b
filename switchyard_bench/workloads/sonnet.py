"""LLMPerf-style sonnet prompts: an instruction, then shuffled lines of Shakespeare's sonnets
until the prompt holds a target number of tokens, counted with the served model's tokenizer.

Target input and output lengths are drawn per request from normal distributions (LLMPerf's
mean / stddev, defaults as LLMPerf's: 550 +- 150 in, 150 +- 80 out), at least 1. Each prompt
starts with four vocabulary tokens taken from the salt, so requests of one run share the
instruction prefix (as LLMPerf's do) while different runs share nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from switchyard_bench.workloads.base import RequestShape, Workload, WorkloadError, check_positive
from switchyard_bench.workloads.data_files import SONNET, data_path
from switchyard_bench.workloads.vocabulary import RealVocabulary

SALT_TOKENS = 4
_INSTRUCTION = ("Randomly stream lines from the following text with {n} output tokens. "
                "Don't generate eos tokens:\n\n")


@dataclass(frozen=True, slots=True)
class SonnetConfig:
    input_mean: float = 550.0
    input_std: float = 150.0
    output_mean: float = 150.0
    output_std: float = 80.0
    seed: int = 0
    path: str = SONNET

    def __post_init__(self) -> None:
        check_positive(input_mean=self.input_mean, output_mean=self.output_mean)
        if self.input_std < 0 or self.output_std < 0:
            raise WorkloadError("stddevs must be >= 0")


class SonnetWorkload(Workload):
    name = "sonnet"

    def __init__(self, vocab: RealVocabulary, config: SonnetConfig) -> None:
        self.config = config
        self._vocab = vocab
        with open(data_path(config.path), encoding="utf-8") as f:
            lines = [line for line in f if line.strip()]
        if not lines:
            raise WorkloadError(f"{config.path} has no lines")
        self._line_tokens = [vocab.tokenizer.encode(line, add_special_tokens=False)
                             for line in lines]
        shortest = SALT_TOKENS + len(self._instruction(1)) + 1
        if config.input_mean < shortest:
            raise WorkloadError(f"sonnet input mean must be >= {shortest} tokens (the salt and "
                                f"the instruction alone take {shortest - 1})")

    def _instruction(self, output_tokens: int) -> list[int]:
        return self._vocab.tokenizer.encode(_INSTRUCTION.format(n=output_tokens),
                                            add_special_tokens=False)

    def _draw(self, index: int) -> tuple[int, int, np.random.Generator]:
        """Request `index`'s target input and output lengths, and the generator that then
        shuffles its lines: a function of (seed, index) only."""
        cfg = self.config
        rng = np.random.default_rng((cfg.seed, index))
        n_in = max(1, round(rng.normal(cfg.input_mean, cfg.input_std)))
        n_out = max(1, round(rng.normal(cfg.output_mean, cfg.output_std)))
        return n_in, n_out, rng

    def target_lengths(self, index: int) -> tuple[int, int]:
        n_in, n_out, _ = self._draw(index)
        return n_in, n_out

    def shape(self, index: int, salt: int) -> RequestShape:
        n_in, n_out, rng = self._draw(index)
        prompt = self._vocab.block(SALT_TOKENS, "sonnet-salt", salt) + self._instruction(n_out)
        target = max(n_in, len(prompt) + 1)  # a draw below the fixed prefix keeps one line token
        order = rng.permutation(len(self._line_tokens))
        while len(prompt) < target:
            for i in order:
                prompt.extend(self._line_tokens[i])
                if len(prompt) >= target:
                    break
        return RequestShape(prompt[:target], n_out)

    def describe(self) -> dict[str, Any]:
        c = self.config
        return {"workload": self.name, "input_tokens": f"{c.input_mean:g}+-{c.input_std:g}",
                "output_tokens": f"{c.output_mean:g}+-{c.output_std:g}", "seed": c.seed}
