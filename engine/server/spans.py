"""The engine's spans, through the OpenTelemetry SDK: only under a sampled trace context that
came with the call (the router's verb span), built once when the work ends from what the core
recorded (engine/core/step_trace.py).

    engine.generate   (under verb.start_generate)   engine.queue, engine.prefill_chunk..., engine.decode
    engine.remote_send (under verb.remote_send)     engine.queue, engine.prefill_chunk..., engine.kv_send
    engine.prep_recv  (under verb.prep_recv)
    engine.kv_receive (under the router's decision: `switchyard-kv-parent`)
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from engine.core.step_trace import ReceiveStats, StepTrace
from switchyard_telemetry import attributes as A
from switchyard_telemetry.clock import perf_to_wall_ns, wall_offset_ns
from switchyard_telemetry.propagation import KV_PARENT, TRACEPARENT, metadata_value, sampled_parent
from switchyard_telemetry.provider import tracer_from_env


def parent_context(context: Any, key: str = TRACEPARENT) -> Context | None:
    """The sampled trace context a gRPC call carries under `key`, else None."""
    try:
        metadata = context.invocation_metadata()
    except (AttributeError, RuntimeError):
        return None
    return sampled_parent(metadata_value(metadata, key))


class EngineSpans:
    def __init__(self, tracer: Tracer | None, engine_id: str, role: str) -> None:
        self.tracer = tracer
        self.engine_id = engine_id
        self.role = role

    @classmethod
    def from_env(cls, engine_id: str, role: str) -> EngineSpans:
        tracer = tracer_from_env("switchyard-engine", {"service.instance.id": engine_id,
                                                       A.ENGINE_ROLE: role})
        return cls(tracer, engine_id, role)

    def parent(self, context: Any, key: str = TRACEPARENT) -> Context | None:
        return None if self.tracer is None else parent_context(context, key)

    def kv_parent(self, context: Any) -> Context | None:
        """Where a reservation's receive span goes: the router's decision, else the call's."""
        return self.parent(context, KV_PARENT) or self.parent(context)

    # Every method below builds one tree of spans, converting its times with one offset read
    # (`offset_ns`), so edges that share a monotonic instant share a wall-clock one.
    def _span(self, name: str, parent: Context | Span, start_s: float, offset_ns: int,
              attrs: Mapping[str, Any] | None = None) -> Span:
        assert self.tracer is not None
        ctx = parent if isinstance(parent, Context) else trace.set_span_in_context(parent)
        return self.tracer.start_span(name, context=ctx,
                                      start_time=perf_to_wall_ns(start_s, offset_ns),
                                      attributes=attrs)

    def _root(self, name: str, parent: Context, start_s: float, offset_ns: int, request_id: str,
              attrs: Mapping[str, Any]) -> Span:
        return self._span(name, parent, start_s, offset_ns, {
            A.ENGINE: self.engine_id, A.ENGINE_ROLE: self.role, A.ENGINE_REQUEST_ID: request_id,
            A.GENAI_SYSTEM: "switchyard", **attrs})

    @staticmethod
    def _end(span: Span, end_s: float, offset_ns: int, error: str = "") -> None:
        if error:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=perf_to_wall_ns(end_s, offset_ns))

    def _steps(self, root: Span, steps: StepTrace, end_s: float, offset_ns: int,
               tokens_out: int) -> None:
        """engine.queue, one engine.prefill_chunk per prefill step, engine.decode."""
        first = steps.steps[0].started if steps.steps else end_s
        self._end(self._span("engine.queue", root, steps.queued, offset_ns),
                  max(first, steps.queued), offset_ns)
        decodes = [s for s in steps.steps if s.decode]
        for step in steps.steps:
            if not step.decode:
                chunk = self._span("engine.prefill_chunk", root, step.started, offset_ns, {
                    A.CHUNK_START: step.start_pos, A.CHUNK_TOKENS: step.tokens,
                    A.BATCH_SEQS: step.batch_seqs, A.BATCH_PREFILL_TOKENS: step.batch_prefill_tokens,
                    A.BATCH_DECODE_SEQS: step.batch_decode_seqs})
                self._end(chunk, step.ended, offset_ns)
        if decodes:
            decode = self._span("engine.decode", root, decodes[0].started, offset_ns, {
                A.DECODE_TOKENS: tokens_out, A.DECODE_STEPS: len(decodes),
                A.PREEMPTIONS: len(steps.preempted_at),
                A.BATCH_SEQS: max(s.batch_seqs for s in decodes)})
            for at in steps.preempted_at:
                decode.add_event("preempted", timestamp=perf_to_wall_ns(at, offset_ns))
            self._end(decode, decodes[-1].ended, offset_ns)

    # ---- one method per verb, called when its work has ended ----
    def generate(self, parent: Context, started_s: float, ended_s: float, request_id: str,
                 steps: StepTrace, prompt_tokens: int, cached_tokens: int, output_tokens: int,
                 finish_reason: str, error: str) -> None:
        offset_ns = wall_offset_ns()
        root = self._root("engine.generate", parent, started_s, offset_ns, request_id, {
            A.RPC_SYSTEM: "grpc", A.RPC_METHOD: "StartGenerate",
            A.GENAI_INPUT_TOKENS: prompt_tokens, A.GENAI_OUTPUT_TOKENS: output_tokens,
            A.CACHED_TOKENS: cached_tokens, A.GENAI_RESPONSE_FINISH_REASONS: [finish_reason]})
        self._steps(root, steps, ended_s, offset_ns, output_tokens)
        self._end(root, ended_s, offset_ns, error)

    def remote_send(self, parent: Context, started_s: float, ended_s: float, request_id: str,
                    steps: StepTrace, send: Mapping[str, Any], kv_started_s: float | None,
                    kv_ended_s: float, error: str) -> None:
        offset_ns = wall_offset_ns()
        root = self._root("engine.remote_send", parent, started_s, offset_ns, request_id,
                          {A.RPC_SYSTEM: "grpc", A.RPC_METHOD: "RemoteSend"})
        self._steps(root, steps, ended_s, offset_ns, 0)
        if kv_started_s is not None:
            self._end(self._span("engine.kv_send", root, kv_started_s, offset_ns, send), kv_ended_s,
                      offset_ns, error)
        self._end(root, ended_s, offset_ns, error)

    def prep_recv(self, parent: Context, started_s: float, ended_s: float, request_id: str,
                  matched: int, end: int, error: str) -> None:
        offset_ns = wall_offset_ns()
        root = self._root("engine.prep_recv", parent, started_s, offset_ns, request_id, {
            A.RPC_SYSTEM: "grpc", A.RPC_METHOD: "PrepRecv", A.KV_MATCHED: matched,
            A.KV_END: end})
        self._end(root, ended_s, offset_ns, error)

    def kv_received(self, parent: Context, request_id: str, received: ReceiveStats,
                    complete: bool) -> None:
        offset_ns = wall_offset_ns()
        span = self._root("engine.kv_receive", parent, received.first_at, offset_ns, request_id, {
            A.KV_BYTES: received.bytes, A.KV_LAYERS: len(received.layers),
            A.KV_TRANSFER_MS: round((received.last_at - received.first_at) * 1e3, 3),
            "switchyard.kv.complete": complete})
        self._end(span, received.last_at, offset_ns)


def send_attributes(bytes_sent: int, transport: str, layers: Iterable[int], transfer_ms: float,
                    tail_ms: float, compute_ms: float, hidden_fraction: float) -> dict[str, Any]:
    return {A.KV_BYTES: bytes_sent, A.KV_TRANSPORT: transport, A.KV_LAYERS: len(set(layers)),
            A.KV_TRANSFER_MS: round(transfer_ms, 3), A.KV_TAIL_MS: round(tail_ms, 3),
            A.KV_COMPUTE_MS: round(compute_ms, 3),
            A.KV_HIDDEN_FRACTION: round(hidden_fraction, 4)}
