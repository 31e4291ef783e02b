"""What a KV send costs besides moving its bytes: chunks, the sender's step-thread time, and
the receiver's work per chunk — as engine/server/kv_sender.py and engine/transfer/ do it.

A real send hands its K/V to the link one chunk per layer and step (a range longer than
MAX_CHUNK_BYTES per layer is cut into several): the sender's step thread gathers each chunk out
of its pages into the link's buffer and commits it (`send_chunk_ms` per chunk + bytes at
`gather_gbps`, so the step lasts that much longer), and the receiver takes each chunk in and
writes it into its pages (`link_chunk_ms` per chunk + bytes at `link_gbps`: the link's time).
"""
from __future__ import annotations

from engine.core.scheduler import SchedulerOutput
from engine.server.kv_sender import MAX_CHUNK_BYTES
from switchyard_sim.profile import HardwareProfile


def chunks_per_layer(tokens: int, profile: HardwareProfile) -> int:
    """Chunks one layer's slice of `tokens` positions is cut into."""
    if tokens <= 0:
        return 0
    per_layer = profile.model.kv_bytes_per_token // profile.model.num_layers
    max_tokens = max(1, MAX_CHUNK_BYTES // max(1, per_layer))
    return -(-tokens // max_tokens)


def reported_ranges(sched: SchedulerOutput) -> list[int]:
    """Positions each of the step's sends reports (one entry per range handed to the link:
    the cached positions not yet reported, then the chunk computed), as StepRunner._report."""
    spans: list[int] = []
    for work in sched.work:
        request = work.request
        if request.kind != "send":
            continue
        if request.unreported_cached is not None:
            spans.append(request.unreported_cached[1] - request.unreported_cached[0])
        chunk = work.chunk
        start = max(request.begin, chunk.start_pos)
        stop = min(request.send_end, chunk.start_pos + len(chunk.token_ids))
        spans.append(max(0, stop - start))
    for request in sched.no_compute:
        if request.unreported_cached is not None:
            spans.append(request.unreported_cached[1] - request.unreported_cached[0])
    return [n for n in spans if n > 0]


def send_overhead_s(profile: HardwareProfile, sched: SchedulerOutput) -> float:
    """Seconds the step thread spends gathering and staging the step's sends."""
    if not (profile.send_chunk_ms or profile.gather_gbps):
        return 0.0
    total = 0.0
    layers = profile.model.num_layers
    for tokens in reported_ranges(sched):
        total += layers * chunks_per_layer(tokens, profile) * profile.send_chunk_ms / 1e3
        if profile.gather_gbps:
            total += tokens * profile.model.kv_bytes_per_token / (profile.gather_gbps * 1e9)
    return total
