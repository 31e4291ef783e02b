"""Checks on caller input, each raising InvalidRequest with a message a user can act on."""
from __future__ import annotations

import math
from collections.abc import Sequence

from switchyard_engine_api.errors import InvalidRequest


def check_request_id(request_id: object) -> str:
    if not isinstance(request_id, str) or not request_id:
        raise InvalidRequest(f"request_id must be a non-empty string, got {request_id!r}")
    return request_id


def check_tokens(tokens: Sequence[int], vocab_size: int, max_context: int) -> list[int]:
    """A prompt as a fresh list of in-vocabulary ints that leaves room to generate."""
    if len(tokens) == 0:
        raise InvalidRequest("prompt is empty")
    out = list(map(int, tokens))
    if min(out) < 0 or max(out) >= vocab_size:  # at C speed: prompts run to many thousands
        bad = [t for t in out if not 0 <= t < vocab_size]
        raise InvalidRequest(
            f"token ids out of vocabulary [0, {vocab_size}): {bad[:5]}"
            + (" …" if len(bad) > 5 else ""))
    if len(out) >= max_context:
        raise InvalidRequest(
            f"prompt has {len(out)} tokens; the context holds {max_context} "
            f"(prompt + at least one generated token)")
    return out


def resolve_end(end: int, num_tokens: int) -> int:
    """Negative `end` counts from the end of tokens (the proto's convention)."""
    resolved = end + num_tokens if end < 0 else end
    if not 0 <= resolved <= num_tokens:
        raise InvalidRequest(f"end={end} is out of range for {num_tokens} tokens")
    return resolved


def check_range(begin: int, end: int, num_tokens: int, what: str) -> None:
    if not 0 <= begin <= end <= num_tokens:
        raise InvalidRequest(
            f"{what}: need 0 <= begin ({begin}) <= end ({end}) <= len(tokens) ({num_tokens})")


def check_first_token_due_ms(due_ms: float) -> float | None:
    """A call's first_token_due_ms as ms from now, or None for 0 (no deadline). NaN, infinite
    and negative values are refused: the router sends a positive one even for an overdue
    request (it sorts first), so anything else is a caller's mistake, not a wish to wait."""
    due = float(due_ms)
    if not math.isfinite(due) or due < 0:
        raise InvalidRequest(
            f"first_token_due_ms must be a finite number of ms >= 0 (0 = no deadline), "
            f"got {due_ms!r}")
    return due or None
