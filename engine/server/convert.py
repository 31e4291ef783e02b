"""Proto messages <-> engine core types (one place, so every verb converts the same way)."""
from __future__ import annotations

from collections.abc import Sequence

from engine.core.outputs import StepOutput
from engine.core.sampling_params import ResponseFormat, SamplingParams
from engine.core.stats import EngineStats
from engine.kvcache.events import KVEvent
from switchyard_rpc import engine_pb2 as pb

DEFAULT_MAX_TOKENS = 16  # a StartGenerate that leaves max_tokens unset (OpenAI's default)


def sampling_from_proto(msg: pb.SamplingParams) -> SamplingParams:
    """Raises InvalidRequest for out-of-range values (SamplingParams validates itself). A
    field proto3 leaves at 0 is unset: top_p 0 is off, and max_tokens 0 takes the default (a
    gRPC caller cannot send 0 itself, so the rule "max_tokens > 0" meets only negatives here)."""
    return SamplingParams(
        temperature=msg.temperature,
        top_p=msg.top_p or 1.0,
        top_k=msg.top_k,
        max_tokens=msg.max_tokens or DEFAULT_MAX_TOKENS,
        min_tokens=msg.min_tokens,
        seed=msg.seed if msg.HasField("seed") else None,
        stop_token_ids=list(msg.stop_token_ids),
        stop=list(msg.stop),
        ignore_eos=msg.ignore_eos,
        return_logprobs=msg.return_logprobs,
        response_format=(ResponseFormat(msg.response_format.type, msg.response_format.json_schema)
                         if msg.HasField("response_format") else None),
        priority=msg.priority,
    )


def sampling_to_proto(params: SamplingParams, max_tokens: int | None = None,
                      min_tokens: int | None = None) -> pb.SamplingParams:
    """The proto for `params`; a later segment passes what is left of max/min tokens. Stop
    strings stay with the caller (the router matches them on the text it streams)."""
    msg = pb.SamplingParams(
        temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
        max_tokens=params.max_tokens if max_tokens is None else max_tokens,
        min_tokens=params.min_tokens if min_tokens is None else min_tokens,
        stop_token_ids=params.stop_token_ids, ignore_eos=params.ignore_eos,
        return_logprobs=params.return_logprobs, priority=params.priority)
    if params.seed is not None:
        msg.seed = params.seed
    if params.response_format is not None:  # every segment carries the grammar
        msg.response_format.type = params.response_format.type
        msg.response_format.json_schema = params.response_format.json_schema
    return msg


def chunk_from_outputs(outputs: Sequence[StepOutput]) -> pb.GenerateChunk:
    """Coalesce consecutive outputs of one request (a slow reader gets fewer, larger chunks)."""
    chunk = pb.GenerateChunk()
    for out in outputs:
        chunk.token_ids.extend(out.new_token_ids)
        chunk.text += out.text
        chunk.logprobs.extend(out.logprobs)
        chunk.step_ms = out.timings.step_ms
        if out.first:
            chunk.queue_ms = out.timings.queue_ms
            chunk.prefill_ms = out.timings.prefill_ms
        if out.prompt_tokens:
            chunk.prompt_tokens = out.prompt_tokens
            chunk.cached_tokens = max(0, out.cached_tokens)
        if out.finish_reason:
            chunk.finish_reason = out.finish_reason
        if out.error:
            chunk.error = out.error
    return chunk


def stats_to_proto(stats: EngineStats, bytes_received: int, bytes_sent: int) -> pb.StatsResponse:
    return pb.StatsResponse(
        engine_id=stats.engine_id,
        role=stats.role,
        queued_requests=stats.queued_requests,
        queued_prefill_tokens=stats.queued_prefill_tokens,
        running_requests=stats.running_requests,
        unfinished_tokens=stats.unfinished_tokens,
        kv_pages_used=stats.kv_pages_used,
        kv_pages_total=stats.kv_pages_total,
        cached_blocks=stats.cached_blocks,
        kv_pages_evictable=stats.kv_pages_evictable,
        recent_step_ms=stats.recent_step_ms,
        decode_step_ms=stats.decode_step_ms,
        page_size=stats.page_size,
        leases=stats.leases,
        kv_event_seq=stats.kv_event_seq,
        kv_bytes_received=bytes_received,
        kv_bytes_sent=bytes_sent,
        latency_model=pb.StepTimeModel(
            version=stats.latency_model_version, coeffs_ms=stats.latency_model,
            source=stats.latency_model_source, samples=stats.latency_model_samples,
            fit_error=stats.latency_model_fit_error),
        prefill_chunk_size=stats.prefill_chunk_size,
        decode_requests=stats.decode_requests,
        decode_context_tokens=stats.decode_context_tokens,
    )


def event_batches(events: Sequence[KVEvent], max_per_batch: int = 256) -> list[pb.KVEventBatch]:
    """Consecutive events -> batches. A batch is applied as "add stored, then drop evicted", so a
    store that follows an eviction starts a new batch to keep the order meaningful."""
    batches: list[pb.KVEventBatch] = []
    current: pb.KVEventBatch | None = None
    count = 0
    for event in events:
        if (current is None or count >= max_per_batch
                or (event.kind == "stored" and len(current.evicted) > 0)):
            current = pb.KVEventBatch(first_seq=event.seq)
            batches.append(current)
            count = 0
        target = current.stored if event.kind == "stored" else current.evicted
        target.extend(event.hashes)
        current.last_seq = event.seq
        count += 1
    return batches
