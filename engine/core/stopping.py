"""When a generation stops, and which tokens it may not pick yet (min_tokens)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from engine.core.request import Request

if TYPE_CHECKING:
    from engine.core.grammar import RequestGrammar


def banned_ids(request: Request, eos_token_ids: list[int]) -> list[int]:
    """Stop/EOS ids are masked until min_tokens tokens have been generated (vLLM semantics)."""
    params = request.sampling
    if len(request.output_ids) >= params.min_tokens:
        return []
    banned = list(params.stop_token_ids)
    if not params.ignore_eos:
        banned += eos_token_ids
    return banned


def finish_reason_after(request: Request, token: int, stop_string_hit: bool,
                        eos_token_ids: list[int], max_context: int) -> str | None:
    """The finish reason once `token` has been appended to the request's output, or None."""
    params = request.sampling
    produced = len(request.output_ids)
    if produced >= params.min_tokens:
        if token in params.stop_token_ids or (not params.ignore_eos and token in eos_token_ids):
            return "stop"
        if stop_string_hit:
            return "stop"
    if produced >= params.max_tokens or len(request.tokens) >= max_context:
        return "length"
    if request.max_new_tokens_here and produced >= request.max_new_tokens_here:
        return "handoff"
    return None


def grammar_reason(grammar: RequestGrammar, token: int, reason: str | None) -> str | None:
    """The finish reason under structured output, once the grammar has taken `token`: "stop" when
    the grammar is complete (its stop token taken, even under ignore_eos: nothing valid may
    follow), "error" if the token broke it (the sampler's mask makes that impossible)."""
    if not grammar.accept(token):
        return "error"
    if grammar.finished:
        return "stop"
    return reason
