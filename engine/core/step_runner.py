"""StepRunner: one engine step — schedule, run the model, sample, finish — for EngineCore.

Split from EngineCore so the verbs and the step loop each stay readable. It reaches into the
engine's scheduler and lock on purpose: they are one component, cut in two files.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from engine.batch import LayerHook, ScheduledChunk
from engine.core.latency_model import StepShape
from engine.core.outputs import SendChunk, StepOutput
from engine.core.request import Request
from engine.core.sampler import SampleRow, draw_seed, sample
from engine.core.scheduler import ScheduledWork, SchedulerOutput
from engine.core.step_trace import StepRecord
from engine.core.stopping import banned_ids, finish_reason_after, grammar_reason

if TYPE_CHECKING:
    from engine.core.engine_core import EngineCore


_BLOCKED_BACKOFF_S = 0.002


class StepModel(Protocol):
    """What runs a step's chunks: engine/model/runner.py's ModelRunner (logits of the chunks
    that need them), or a simulated engine's stand-in."""

    def run(self, chunks: list[ScheduledChunk], layer_hook: LayerHook | None = None) -> Any: ...


@dataclass(slots=True)
class StepPlan:
    """A scheduled step: the scheduler's output, its shape, outputs already due (too long,
    aborted earlier), when it started (wall and CPU clocks) and its traced requests."""

    sched: SchedulerOutput
    shape: StepShape
    outputs: list[StepOutput]
    started: float
    started_cpu: float
    traced: list[tuple[ScheduledWork, bool]]  # traced requests' work, and whether it decodes


class StepRunner:
    def __init__(self, engine: EngineCore, runner: StepModel) -> None:
        self.engine = engine
        self.runner = runner
        self.num_layers = engine.model_config.num_layers
        self.eos_token_ids = list(engine.model_config.eos_token_ids)
        self._pending: list[StepOutput] = []
        self._inflight: set[str] = set()

    def has_pending_outputs(self) -> bool:
        return bool(self._pending)

    def on_abort(self, request: Request) -> None:
        """Called under the engine lock. A request in the running step is ended after it."""
        if request.request_id not in self._inflight:
            self._pending.append(self._end(request, request.abort_reason, 0.0))

    def _end(self, request: Request, reason: str, step_ms: float,
             new_ids: list[int] | None = None, text: str = "",
             logprobs: list[float] | None = None) -> StepOutput:
        """Finish `request`: its computed full pages go to the prefix cache, the rest is freed."""
        engine = self.engine
        engine.scheduler.remove(request)
        engine.scheduler.release(request)
        engine._forget(request)
        return self._output(request, new_ids or [], reason, step_ms, text, logprobs)

    def _output(self, request: Request, new_ids: list[int], reason: str | None, step_ms: float,
                text: str = "", logprobs: list[float] | None = None) -> StepOutput:
        first = not request.timings_sent
        return StepOutput(request.request_id, new_ids, reason,
                          self.engine._timings(request, step_ms), text, logprobs or [],
                          request.prompt_len, max(request.cached_tokens, 0),
                          request.error if reason == "error" else None, first)

    # ---- the step -------------------------------------------------------------------------

    def step(self) -> list[StepOutput]:
        plan = self.plan()
        logits, failure = self.run_model(plan)
        outputs = self.finish(plan, logits, failure)
        if not outputs and not plan.sched.work and not plan.sched.no_compute:
            # Work is queued but nothing can run (pages held by leases): don't let a step loop
            # spin on the lock; a lease expiring or a request finishing unblocks it soon.
            time.sleep(_BLOCKED_BACKOFF_S)
        return outputs

    # The step in three parts, so a simulated engine (switchyard_sim) can let its step's time
    # pass between planning and finishing while running exactly this bookkeeping.
    def plan(self) -> StepPlan:
        """Schedule the step (under the engine lock): what runs, and its shape."""
        engine = self.engine
        with engine._lock:
            # The step's time runs from scheduling to its outputs: what a decode token costs, and
            # what the latency model predicts.
            started, started_cpu = time.perf_counter(), time.process_time()
            outputs, self._pending = self._pending, []
            sched = engine.scheduler.schedule()
            outputs += [self._end(r, "length", 0.0) for r in sched.too_long]
            now = time.monotonic()
            for request in (*(w.request for w in sched.work), *sched.no_compute):
                if request.first_scheduled is None:
                    request.first_scheduled = now
                if request.cached_tokens < 0:
                    request.cached_tokens = request.num_computed
            self._inflight = {w.request.request_id for w in sched.work}
            self._inflight |= {r.request_id for r in sched.no_compute}
            # Traced requests and whether this step decodes for them (before the step changes it).
            traced = [(w, w.request.is_decode) for w in sched.work if w.request.trace is not None]
            return StepPlan(sched, sched.shape(), outputs, started, started_cpu, traced)

    def run_model(self, plan: StepPlan) -> tuple[Any, Exception | None]:
        """Report cached sends' K/V and run the forward pass (outside the lock): (logits,
        failure)."""
        sched = plan.sched
        for request in sched.no_compute:
            for layer in range(self.num_layers):
                self._report(request, layer, None)
        logits: Any = None
        failure: Exception | None = None
        if sched.work:
            sends = [w for w in sched.work if w.request.kind == "send"]
            try:
                logits = self.runner.run([w.chunk for w in sched.work],
                                         self._hook(sends) if sends else None)
            except Exception as exc:  # a failed step fails its requests, not the engine
                failure = exc
        return logits, failure

    def finish(self, plan: StepPlan, logits: Any, failure: Exception | None
               ) -> list[StepOutput]:
        """Apply the step's results (under the lock): tokens, finished requests, the latency
        model's sample."""
        engine = self.engine
        sched = plan.sched
        run_ms = (time.perf_counter() - plan.started) * 1e3
        with engine._lock:
            self._inflight = set()
            outputs = plan.outputs + self._after_run(sched, logits, failure, run_ms)
            engine.check_pages("step")
            if sched.work and failure is None:
                engine.latency.record((time.perf_counter() - plan.started) * 1e3, plan.shape,
                                      (time.process_time() - plan.started_cpu) * 1e3)
        if plan.traced:
            _record_steps(plan.traced, plan.shape, plan.started, time.perf_counter(),
                          len(sched.work))
        return outputs

    def _hook(self, sends: list[ScheduledWork]) -> LayerHook:
        def after_layer(layer: int) -> None:
            for work in sends:
                self._report(work.request, layer, work)
        return after_layer

    def _report(self, request: Request, layer: int, work: ScheduledWork | None) -> None:
        """Tell a send which positions' K/V this layer now holds (cached ones included)."""
        if request.error is not None or request.aborted or request.on_layer is None:
            return
        try:
            if request.unreported_cached is not None:
                start, stop = request.unreported_cached
                request.on_layer(SendChunk(layer, start, stop, list(request.page_table)))
            if work is not None:
                chunk = work.chunk
                start = max(request.begin, chunk.start_pos)
                stop = min(request.send_end, chunk.start_pos + len(chunk.token_ids))
                if start < stop:
                    request.on_layer(SendChunk(layer, start, stop, list(request.page_table)))
        except Exception as exc:  # the receiver side failed; end this send, keep serving
            request.error = f"on_layer failed at layer {layer}: {exc!r}"

    def _after_run(self, sched: SchedulerOutput, logits: Any,
                   failure: Exception | None, step_ms: float) -> list[StepOutput]:
        outputs: list[StepOutput] = []
        to_sample: list[tuple[Request, int]] = []
        row = 0
        for work in sched.work:
            request = work.request
            logits_row = row if work.chunk.need_logits else None
            row += int(work.chunk.need_logits)
            if request.aborted:
                outputs.append(self._end(request, request.abort_reason, step_ms))
            elif failure is not None:
                request.error = f"model step failed: {failure!r}"
                outputs.append(self._end(request, "error", step_ms))
            elif request.error is not None:
                outputs.append(self._end(request, "error", step_ms))
            else:
                request.num_computed += len(work.chunk.token_ids)
                if request.kind == "send":
                    request.unreported_cached = None
                    if request.pending == 0:
                        outputs.append(self._end(request, "sent", step_ms))
                elif logits_row is not None:
                    to_sample.append((request, logits_row))
        for request in sched.no_compute:
            reason = request.abort_reason if request.aborted else "error" if request.error else "sent"
            outputs.append(self._end(request, reason, step_ms))
        if to_sample and logits is not None:
            outputs += self._sample(to_sample, logits, step_ms)
        return outputs

    def _pick(self, to_sample: list[tuple[Request, int]], logits: Any
              ) -> tuple[list[int], list[float]]:
        """Each request's next token (and its logprob) from its logits row."""
        rows = [SampleRow(r.sampling, r.generator or torch.Generator(),
                          banned_ids(r, self.eos_token_ids),
                          None if r.sampling.greedy
                          else draw_seed(r.sample_seed, r.output_offset + len(r.output_ids)),
                          r.grammar)
                for r, _ in to_sample]
        picked = [i for _, i in to_sample]
        if picked != list(range(logits.shape[0])):  # usually every row, in order: no copy
            logits = logits.index_select(0, torch.tensor(picked, dtype=torch.long))
        return sample(logits, rows)

    def _sample(self, to_sample: list[tuple[Request, int]], logits: Any,
                step_ms: float) -> list[StepOutput]:
        engine = self.engine
        tokens, logprobs = self._pick(to_sample, logits)
        now = time.monotonic()
        outputs: list[StepOutput] = []
        for n, ((request, _), token) in enumerate(zip(to_sample, tokens, strict=True)):
            if not request.output_ids:
                request.first_token_at = now
                engine.scheduler.cache_computed(request)  # share the prompt's pages at once
            request.tokens.append(token)
            request.output_ids.append(token)
            text, stop_hit = "", False
            if request.detokenizer is not None:
                text, stop_hit = request.detokenizer.push([token])
            reason = finish_reason_after(request, token, stop_hit, self.eos_token_ids,
                                         engine.max_context)
            if request.grammar is not None:
                reason = grammar_reason(request.grammar, token, reason)
                if reason == "error":
                    request.error = f"token {token} does not follow the response_format"
            if reason is not None and request.detokenizer is not None and not stop_hit:
                text += request.detokenizer.flush()
            token_logprobs = [logprobs[n]] if request.sampling.return_logprobs else None
            if reason is None:
                outputs.append(self._output(request, [token], None, step_ms, text,
                                            token_logprobs))
            else:
                outputs.append(self._end(request, reason, step_ms, [token], text,
                                         token_logprobs))
        return outputs


def _record_steps(traced: list[tuple[ScheduledWork, bool]], shape: StepShape, started: float,
                  ended: float, seqs: int) -> None:
    """One StepRecord per traced request in the step: its chunk and the batch around it."""
    prefill_tokens = shape.prefill_tokens
    for work, decode in traced:
        trace = work.request.trace
        if trace is not None:
            trace.steps.append(StepRecord(started, ended, work.chunk.start_pos,
                                          len(work.chunk.token_ids), decode, seqs,
                                          prefill_tokens, shape.decode_seqs))
