"""Sampler: one token per logits row — greedy, temperature, top-k, top-p, per-request seed, and
a grammar's mask for structured output (applied first, on the row alone: engine/core/grammar.py).

Each random row draws from its own request's torch.Generator, and every row is processed on its
own, so a seeded request yields the same tokens whatever else shares its batch. The engine reseeds
that generator before each draw from (request seed, output index) — `draw_seed` — so the n-th
token of a request does not depend on which engine drew the ones before it: a request continued
elsewhere (tandem hand-off, migration) samples exactly the sequence it would have on one engine.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from switchyard_engine_api.sampling_params import SamplingParams

if TYPE_CHECKING:
    from engine.core.grammar import RequestGrammar

_GOLDEN_GAMMA = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1


def draw_seed(base_seed: int, output_index: int) -> int:
    """Seed of a request's output_index-th draw: splitmix64 of (seed, index), well spread even
    for neighbouring seeds and indices."""
    z = (base_seed + (output_index + 1) * _GOLDEN_GAMMA) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def request_seed(seed: int | None) -> int:
    """A request's base seed: its own, or a fresh random one when it has none."""
    return random.getrandbits(63) if seed is None else seed % 2**64


def make_generator(seed: int | None) -> torch.Generator:
    """CPU generator for one request; unseeded requests get a fresh random seed."""
    generator = torch.Generator(device="cpu")
    generator.manual_seed(random.getrandbits(63) if seed is None else seed % 2**64)
    return generator


@dataclass(slots=True)
class SampleRow:
    params: SamplingParams
    generator: torch.Generator
    # Token ids that must not be chosen now (stop/EOS ids while min_tokens is not reached).
    banned_ids: list[int]
    # Reseed the generator with this before drawing (draw_seed); None = draw on from its state.
    seed_now: int | None = None
    # Structured output: the tokens its grammar allows next (masked before any choice is made).
    grammar: RequestGrammar | None = None


def _filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k / nucleus to -inf (logits: 1-D float32)."""
    if 0 < top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        # Drop a token when the tokens ranked above it already reach top_p (keeps at least one).
        drop_sorted = (cumulative - torch.softmax(sorted_logits, dim=-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _allowed_logits(logits: torch.Tensor, row: SampleRow) -> torch.Tensor:
    """The row's logits with what it may not pick now at -inf. Where min_tokens' ban and the
    grammar leave nothing (the grammar allows only its stop token), the grammar wins: the
    output must stay valid."""
    if not row.banned_ids and row.grammar is None:
        return logits
    allowed = logits.clone()
    if row.grammar is not None:
        row.grammar.mask(allowed)
    if row.banned_ids:
        constrained = allowed.clone() if row.grammar is not None else allowed
        constrained[row.banned_ids] = float("-inf")
        if row.grammar is None or bool(torch.isfinite(constrained).any()):
            return constrained
    return allowed


def _sample_row(logits: torch.Tensor, row: SampleRow) -> int:
    logits = _allowed_logits(logits, row)
    params = row.params
    if params.greedy:
        return int(torch.argmax(logits))
    scaled = _filter_top_k_top_p(logits / params.temperature, params.top_k, params.top_p)
    probs = torch.softmax(scaled, dim=-1)
    if row.seed_now is not None:
        row.generator.manual_seed(row.seed_now)
    return int(torch.multinomial(probs, 1, generator=row.generator))


def sample(logits: torch.Tensor, rows: list[SampleRow]) -> tuple[list[int], list[float]]:
    """Tokens for each row of `logits` [N, vocab] and their log-probabilities (under the raw
    distribution, as OpenAI reports them)."""
    assert logits.shape[0] == len(rows), "one SampleRow per logits row"
    logits = logits.float()
    plain_greedy = [i for i, row in enumerate(rows)
                    if row.params.greedy and not row.banned_ids and row.grammar is None]
    tokens = [0] * len(rows)
    if plain_greedy:  # one argmax for all of them (per-row calls cost ~50 us each)
        picked = logits if len(plain_greedy) == len(rows) else logits[plain_greedy]
        for i, token in zip(plain_greedy, picked.argmax(dim=-1).tolist(), strict=True):
            tokens[i] = token
    done = set(plain_greedy)
    for i, row in enumerate(rows):
        if i not in done:
            tokens[i] = _sample_row(logits[i], row)
    logprobs: list[float] = []
    if any(row.params.return_logprobs for row in rows):
        log_softmax = torch.log_softmax(logits, dim=-1)
        logprobs = [float(log_softmax[i, t]) for i, t in enumerate(tokens)]
    return tokens, logprobs
