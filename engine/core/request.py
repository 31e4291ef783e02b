"""Request: the state of one unit of work in the scheduler — a generation or a KV send.

A generation's `tokens` grows as it decodes (prompt + generated), which is also what makes
preemption by recompute simple: drop the pages, keep the tokens, prefill them all again.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from engine.core.outputs import SendChunk
from engine.core.step_trace import StepTrace
from switchyard_engine_api.sampling_params import SamplingParams

if TYPE_CHECKING:
    import torch

    from engine.core.grammar import RequestGrammar

RequestKind = Literal["generate", "send"]
OnLayer = Callable[[SendChunk], None]


@dataclass(slots=True, eq=False)
class Request:
    request_id: str
    kind: RequestKind
    tokens: list[int]
    prompt_len: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    # generate: KV of tokens[:begin] was provided; send: report positions [begin, send_end).
    begin: int = 0
    send_end: int = 0
    on_layer: OnLayer | None = None
    max_new_tokens_here: int = 0
    generator: torch.Generator | None = None
    # Base seed of the request's draws (its own or a random one) and how many of its tokens were
    # generated before this call (by another engine): draw n uses draw_seed(seed, offset + n).
    sample_seed: int = 0
    output_offset: int = 0
    # router_core.IncrementalDetokenizer when the engine detokenises (stop strings, text deltas).
    detokenizer: Any = None
    # Structured output: the request's place in its response_format's grammar (None: free text).
    grammar: RequestGrammar | None = None
    trace: StepTrace | None = None  # steps recorded for a traced request (engine/core/step_trace.py)

    num_computed: int = 0  # positions [0, num_computed) have KV in page_table's pages
    page_table: list[int] = field(default_factory=list)
    # True until the prefix cache has been consulted (again, after a preemption).
    needs_prefix_match: bool = True
    output_ids: list[int] = field(default_factory=list)
    cached_tokens: int = -1  # prompt tokens whose KV was present at first admission
    num_preemptions: int = 0
    aborted: bool = False
    abort_reason: str = "abort"  # "handoff" when aborted to continue elsewhere (migration)
    # send: cached positions [begin, matched) not yet reported to on_layer
    unreported_cached: tuple[int, int] | None = None
    error: str | None = None

    # When its first token is due, on the engine's clock (EngineCore.now; None: no deadline):
    # the call's relative first_token_due_ms from its receipt. Orders the waiting queue.
    first_token_due: float | None = None
    arrival: float = field(default_factory=time.monotonic)
    first_scheduled: float | None = None
    first_token_at: float | None = None
    timings_sent: bool = False

    @property
    def target_len(self) -> int:
        """Positions whose KV this request needs computed before it can produce output."""
        return self.send_end if self.kind == "send" else len(self.tokens)

    @property
    def priority(self) -> int:
        """Scheduling priority, lower first (a send's sampling is the default: 0)."""
        return self.sampling.priority

    @property
    def has_streamed(self) -> bool:
        """Its client has seen tokens: produced here, or by an earlier segment elsewhere."""
        return self.first_token_at is not None or self.output_offset > 0

    @property
    def pending(self) -> int:
        return self.target_len - self.num_computed

    @property
    def is_decode(self) -> bool:
        return self.kind == "generate" and bool(self.output_ids) and self.pending == 1

    @property
    def match_limit(self) -> int:
        """How much of tokens the prefix cache may supply: a generation must compute at least its
        last token to get logits."""
        return self.send_end if self.kind == "send" else len(self.tokens) - 1

    def remaining_tokens(self) -> int:
        """Prefill tokens still to compute plus tokens still to generate (Stats' unfinished)."""
        if self.kind == "send":
            return self.pending
        limit = self.sampling.max_tokens
        if self.max_new_tokens_here:
            limit = min(limit, self.max_new_tokens_here)
        return max(self.pending - 1, 0) + max(limit - len(self.output_ids), 0)
