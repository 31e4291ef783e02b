"""Proto messages <-> the engine core's own types (one place, so every verb converts the same way).

SamplingParams' conversion is shared with the router: switchyard_engine_api/sampling_proto.py."""
from __future__ import annotations

from collections.abc import Sequence

from engine.core.outputs import StepOutput
from engine.core.stats import EngineStats
from engine.kvcache.events import KVEvent
from switchyard_rpc import engine_pb2 as pb


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
        kv_pages_reserved=stats.kv_pages_reserved,
        kv_page_audits=stats.kv_page_audits,
        kv_page_audit_failures=stats.kv_page_audit_failures,
        longest_queued_prefill_tokens=stats.longest_queued_prefill_tokens,
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
