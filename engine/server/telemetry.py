"""What the verbs report: one EngineTelemetry per engine (metrics + spans), one small watch per
call. The servicer calls these at a call's start and end and once per output chunk it already
handles; nothing here runs per step or per token."""
from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from opentelemetry.context import Context

from engine.core.outputs import StepOutput
from engine.core.reservations import HeldReservation
from engine.core.step_trace import StepTrace
from engine.server.metrics import EngineMetrics
from engine.server.spans import EngineSpans, send_attributes
from switchyard_rpc import engine_pb2 as pb

T = TypeVar("T")


async def reported(work: Awaitable[T], report: Callable[[T | None, str], None]) -> T:
    """Await a verb's work, then report how it ended: (result or None, error text — "" when
    it succeeded, "cancelled" when the caller went away)."""
    result: T | None = None
    error = "cancelled"
    try:
        result = await work
        error = ""
        return result
    except Exception as exc:
        error = str(exc) or type(exc).__name__
        raise
    finally:
        report(result, error)


class GenerationWatch:
    """One StartGenerate call: phase times for the metrics, its steps for the spans."""

    def __init__(self, telemetry: EngineTelemetry, parent: Context | None, request_id: str
                 ) -> None:
        self._t = telemetry
        self.parent = parent
        self.request_id = request_id
        self.started = time.perf_counter()
        self.steps = StepTrace() if parent is not None else None
        self.first: StepOutput | None = None
        self.first_token_at: float | None = None
        self.tokens = 0
        self.finish_reason = ""
        self.error = ""
        # Nothing to record without metrics or a trace: outputs() is then free per chunk.
        self._active = telemetry.metrics is not None or parent is not None

    def outputs(self, batch: Sequence[StepOutput]) -> None:
        if not self._active:
            return
        for out in batch:
            if out.first and self.first is None:
                self.first = out
            if out.new_token_ids:
                self.tokens += len(out.new_token_ids)
                if self.first_token_at is None:
                    self.first_token_at = time.perf_counter()
            if out.finish_reason:
                self.finish_reason, self.error = out.finish_reason, out.error or ""

    def done(self) -> None:
        """The call ended: finished, or cancelled (no finish reason)."""
        ended = time.perf_counter()
        first, metrics = self.first, self._t.metrics
        if metrics is not None and self.finish_reason and first is not None:
            decode = None if self.first_token_at is None else ended - self.first_token_at
            metrics.generation_done(first.timings.queue_ms / 1e3, first.timings.prefill_ms / 1e3,
                                    decode, first.prompt_tokens, first.cached_tokens, self.tokens)
        if self.parent is not None and self.steps is not None:
            error = self.error or ("" if self.finish_reason else "cancelled")
            if self.finish_reason == "error":
                error = error or "error"
            self._t.spans.generate(
                self.parent, self.started, ended, self.request_id, self.steps,
                first.prompt_tokens if first else 0, first.cached_tokens if first else 0,
                self.tokens, self.finish_reason or "cancelled", error)


class EngineTelemetry:
    def __init__(self, spans: EngineSpans, metrics: EngineMetrics | None) -> None:
        self.spans = spans
        self.metrics = metrics

    @classmethod
    def for_core(cls, core: Any, metrics_port: int | None, host: str) -> EngineTelemetry:
        """Spans from the OTEL_* / SWITCHYARD_TRACE_FILE environment, metrics on `metrics_port`
        (None: SWITCHYARD_METRICS_PORT, else none), and the core's receive hook."""
        engine_id, role = core.config.engine_id, core.config.role
        if metrics_port is None and os.environ.get("SWITCHYARD_METRICS_PORT"):
            metrics_port = int(os.environ["SWITCHYARD_METRICS_PORT"])
        metrics = None
        if metrics_port is not None:
            metrics = EngineMetrics(core, engine_id, role)
            metrics.serve(host, metrics_port)
        telemetry = cls(EngineSpans.from_env(engine_id, role), metrics)
        core.reservations.on_received = telemetry.kv_received
        return telemetry

    def generation(self, context: Any, request_id: str) -> GenerationWatch:
        return GenerationWatch(self, self.spans.parent(context), request_id)

    def kv_received(self, held: HeldReservation) -> None:
        """A reservation got KV (complete, or taken / released with part of it)."""
        received = held.received
        if self.metrics is not None:
            self.metrics.kv_transfer("received", "", received.bytes,
                                     received.last_at - received.first_at)
        if isinstance(held.trace, Context):
            self.spans.kv_received(held.trace, held.reservation.request_id, received,
                                   held.committed)

    def prep_recv(self, parent: Context | None, started: float, request_id: str,
                  resp: pb.PrepRecvResponse | None, error: str) -> None:
        if parent is not None:
            self.spans.prep_recv(parent, started, time.perf_counter(), request_id,
                                 resp.matched_len if resp else 0, resp.end if resp else 0, error)

    def remote_send(self, parent: Context | None, started: float, request_id: str,
                    steps: StepTrace | None, resp: pb.RemoteSendResponse | None, error: str,
                    num_layers: int) -> None:
        ended = time.perf_counter()
        if self.metrics is not None and resp is not None and resp.bytes_sent:
            self.metrics.kv_transfer("sent", resp.transport, resp.bytes_sent,
                                     resp.transfer_ms / 1e3)
        if parent is None or steps is None:
            return
        send: dict[str, Any] = {}
        kv_started = None
        if resp is not None and resp.bytes_sent:
            send = send_attributes(resp.bytes_sent, resp.transport, range(num_layers),
                                   resp.transfer_ms, resp.tail_ms, resp.compute_ms,
                                   resp.hidden_fraction)
            # transfer_ms runs from the first chunk committed to the last acknowledgement,
            # which came just before this call answered.
            kv_started = max(started, ended - resp.transfer_ms / 1e3)
        self.spans.remote_send(parent, started, ended, request_id, steps, send, kv_started,
                               ended, error)

    def error(self, verb: str, code: str) -> None:
        if self.metrics is not None:
            self.metrics.error(verb, code)
