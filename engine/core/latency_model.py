"""LatencyModel: step time fitted on recent steps, for the router's slack and TTFT predictions.

step_ms ≈ c0 + c_prefill·prefill_tokens + c_decode·decode_seqs + c_ctx·context_tokens, fitted by
least squares (with a tiny ridge term, so few or collinear samples still give finite numbers).
"""
from __future__ import annotations

from collections import deque

import numpy as np

_RIDGE = 1e-6


class LatencyModel:
    def __init__(self, window: int = 256) -> None:
        self._rows: deque[tuple[float, float, float, float]] = deque(maxlen=window)
        self._step_ms: deque[float] = deque(maxlen=window)
        self._decode_only_ms: deque[float] = deque(maxlen=window)

    def __len__(self) -> int:
        return len(self._rows)

    def record(self, step_ms: float, prefill_tokens: int, decode_seqs: int,
               context_tokens: int) -> None:
        self._rows.append((1.0, float(prefill_tokens), float(decode_seqs), float(context_tokens)))
        self._step_ms.append(step_ms)
        if prefill_tokens == 0 and decode_seqs > 0:
            self._decode_only_ms.append(step_ms)

    def coefficients(self) -> list[float]:
        """[c0, c_prefill_tok, c_decode_seq, c_ctx_tok] in ms; zeros before any step."""
        if not self._rows:
            return [0.0, 0.0, 0.0, 0.0]
        x = np.asarray(self._rows)
        y = np.asarray(self._step_ms)
        # Scale columns so the ridge term treats them alike, then solve the normal equations.
        scale = np.maximum(np.abs(x).max(axis=0), 1.0)
        xs = x / scale
        gram = xs.T @ xs + _RIDGE * len(y) * np.eye(4)
        coeffs = np.linalg.solve(gram, xs.T @ y) / scale
        return [float(c) for c in coeffs]

    def predict(self, prefill_tokens: int, decode_seqs: int, context_tokens: int) -> float:
        c = self.coefficients()
        return c[0] + c[1] * prefill_tokens + c[2] * decode_seqs + c[3] * context_tokens

    def recent_step_ms(self, n: int = 32) -> list[float]:
        return list(self._step_ms)[-n:]

    def decode_step_ms(self, n: int = 32) -> float:
        recent = list(self._decode_only_ms)[-n:]
        return float(np.mean(recent)) if recent else 0.0
