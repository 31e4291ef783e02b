"""The mock engine's gRPC Engine service: every verb answered at (almost) no cost.

Token ids depend only on the full prompt and the position, never on `begin` or which engine
prefilled what, so any orchestration pattern yields the same tokens as one engine, as with real
engines under greedy sampling.
"""
from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import grpc

from engine.mock.cache import MockPrefixCache
from engine.mock.config import MockConfig
from switchyard_rpc import engine_pb2 as pb
from switchyard_rpc import engine_pb2_grpc as pb_grpc

_TOKEN_BASE = 1000  # synthetic ids stay in a range of ordinary vocabulary entries
_TOKEN_SPAN = 1000


def _resolve_end(end: int, n: int) -> int:
    return n + end if end < 0 else min(end, n)


def synthetic_token(tokens: list[int], position: int) -> int:
    """The mock's 'model': a deterministic id from the prompt and the output position."""
    return _TOKEN_BASE + (sum(tokens) * 31 + len(tokens) * 7 + position) % _TOKEN_SPAN


class _StepClock:
    """When the mock's decode steps have produced each token: a step takes `step_s` and yields
    `per_step` tokens; with step_s = 0 every token exists at once (an engine that costs nothing)."""

    def __init__(self, step_s: float, per_step: int, total: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._start = self._loop.time()
        self._step_s, self._per_step, self._total = step_s, per_step, total

    def _produced(self) -> int:
        if not self._step_s:
            return self._total
        steps = int((self._loop.time() - self._start) / self._step_s)
        return min(self._total, steps * self._per_step)

    async def ready_after(self, sent: int) -> int:
        """Wait until more than `sent` tokens exist; returns how many exist."""
        produced = self._produced()
        if produced <= sent:
            next_step = sent // self._per_step + 1
            await asyncio.sleep(self._start + next_step * self._step_s - self._loop.time())
            produced = max(self._produced(), min(self._total, next_step * self._per_step))
        return produced


class MockEngineServicer(pb_grpc.EngineServicer):
    def __init__(self, config: MockConfig) -> None:
        self.config = config
        self.cache = MockPrefixCache(block_size=config.page_size, seed=config.seed)
        self.running: dict[str, int] = {}  # request id -> tokens still to generate
        self.aborted: set[str] = set()
        self.rng = random.Random(config.seed)
        self.prefill_chunk_size = 512  # reported and settable; the mock has no chunked prefill

    async def PrepRecv(self, request: pb.PrepRecvRequest, context: grpc.aio.ServicerContext
                       ) -> pb.PrepRecvResponse:
        tokens = list(request.tokens)
        end = _resolve_end(request.end, len(tokens))
        if end < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"end {request.end} out of range")
        matched = self.cache.matched_len(tokens, end)
        return pb.PrepRecvResponse(kv_addr=f"mock:{request.request_id}".encode(),
                                   matched_len=matched, end=end, page_size=self.config.page_size)

    async def RemoteSend(self, request: pb.RemoteSendRequest, context: grpc.aio.ServicerContext
                         ) -> pb.RemoteSendResponse:
        if self.config.fail_remote_send:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "mock: injected transfer failure")
        tokens = list(request.tokens)
        end = _resolve_end(request.end, len(tokens))
        if not 0 <= request.begin <= end:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"bad range [{request.begin}, {request.end})")
        cached = min(self.cache.matched_len(tokens, end), end) - request.begin
        self.cache.store(tokens[:end])
        return pb.RemoteSendResponse(bytes_sent=0, transport="mock", total_ms=0.0,
                                     cached_on_sender=max(0, cached))

    async def StartGenerate(self, request: pb.StartGenerateRequest,
                            context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GenerateChunk]:
        cfg = self.config
        tokens = list(request.tokens)
        if not tokens or not 0 <= request.begin <= len(tokens):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "empty tokens or bad begin")
        if request.sampling.max_tokens <= 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "max_tokens must be > 0")
        if cfg.fail_rate and self.rng.random() < cfg.fail_rate:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "mock: injected failure")
        total = request.sampling.max_tokens
        if request.max_new_tokens_here:
            total = min(total, request.max_new_tokens_here)
        rid = request.request_id
        cached = max(request.begin, self.cache.matched_len(tokens, len(tokens)))
        self.running[rid] = total
        clock = _StepClock(cfg.chunk_delay_ms / 1000, cfg.tokens_per_chunk, total)
        try:
            sent = 0
            while sent < total:
                ready = await clock.ready_after(sent)
                if rid in self.aborted or (cfg.abort_after_tokens
                                           and sent >= cfg.abort_after_tokens):
                    yield pb.GenerateChunk(finish_reason="abort")
                    return
                # Like engine/server/servicer.py: one message carries every token already
                # produced (coalesce), or exactly one step's tokens per message (no coalescing).
                n = ready - sent if cfg.coalesce else min(cfg.tokens_per_chunk, ready - sent)
                if cfg.fail_after_tokens and sent + n > cfg.fail_after_tokens:
                    n = cfg.fail_after_tokens - sent
                    if n <= 0:
                        await context.abort(grpc.StatusCode.INTERNAL,
                                            "mock: injected mid-stream failure")
                ids = [synthetic_token(tokens, sent + i) for i in range(n)]
                first = sent == 0
                sent += n
                self.running[rid] = total - sent
                finish = ""
                if sent >= total:
                    finish = "handoff" if total < request.sampling.max_tokens else "length"
                yield pb.GenerateChunk(
                    token_ids=ids, text="".join(f" w{t}" for t in ids), finish_reason=finish,
                    prompt_tokens=len(tokens) if first else 0,
                    cached_tokens=cached if first else 0, step_ms=cfg.chunk_delay_ms)
            self.cache.store(tokens)
        finally:
            self.running.pop(rid, None)
            self.aborted.discard(rid)

    async def Abort(self, request: pb.AbortRequest, context: grpc.aio.ServicerContext
                    ) -> pb.AbortResponse:
        found = request.request_id in self.running
        if found:
            self.aborted.add(request.request_id)
        return pb.AbortResponse(found=found)

    async def MatchPrefix(self, request: pb.MatchPrefixRequest, context: grpc.aio.ServicerContext
                          ) -> pb.MatchPrefixResponse:
        tokens = list(request.tokens)
        return pb.MatchPrefixResponse(matched_len=self.cache.matched_len(tokens, len(tokens)))

    async def Stats(self, request: pb.StatsRequest, context: grpc.aio.ServicerContext
                    ) -> pb.StatsResponse:
        return pb.StatsResponse(
            engine_id=self.config.engine_id, role=self.config.role,
            running_requests=len(self.running), decode_requests=len(self.running),
            unfinished_tokens=sum(self.running.values()),
            kv_pages_used=len(self.cache.held), kv_pages_total=1 << 20,
            cached_blocks=len(self.cache.held), page_size=self.config.page_size,
            decode_step_ms=self.config.chunk_delay_ms, kv_event_seq=self.cache.last_seq,
            prefill_chunk_size=self.prefill_chunk_size,
            latency_model=pb.StepTimeModel(source="none"))  # no model: router predicts NaN

    async def Configure(self, request: pb.ConfigureRequest, context: grpc.aio.ServicerContext
                        ) -> pb.ConfigureResponse:
        previous = self.prefill_chunk_size
        if request.HasField("prefill_chunk_size"):
            if request.prefill_chunk_size < 1:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"prefill chunk size must be >= 1, got "
                                    f"{request.prefill_chunk_size}")
            self.prefill_chunk_size = request.prefill_chunk_size
        return pb.ConfigureResponse(prefill_chunk_size=self.prefill_chunk_size,
                                    previous_prefill_chunk_size=previous)

    async def KVEvents(self, request: pb.KVEventsRequest, context: grpc.aio.ServicerContext
                       ) -> AsyncIterator[pb.KVEventBatch]:
        cache = self.cache
        seq = cache.last_seq
        yield pb.KVEventBatch(first_seq=seq, last_seq=seq, snapshot=True, stored=sorted(cache.held))
        while True:
            await cache.changed.wait()
            events = cache.events_after(seq)
            if events is None:  # fell behind the retained window: resend the whole set
                seq = cache.last_seq
                yield pb.KVEventBatch(first_seq=seq, last_seq=seq, snapshot=True,
                                      stored=sorted(cache.held))
                continue
            for event_seq, stored in events:
                yield pb.KVEventBatch(first_seq=event_seq, last_seq=event_seq, stored=stored)
                seq = event_seq

    async def ModelInfo(self, request: pb.ModelInfoRequest, context: grpc.aio.ServicerContext
                        ) -> pb.ModelInfoResponse:
        return pb.ModelInfoResponse(model_id="mock", page_size=self.config.page_size,
                                    block_hash_seed=self.config.seed,
                                    vocab_size=self.config.vocab_size, max_context=1 << 20,
                                    host_id="mock", role=self.config.role,
                                    engine_id=self.config.engine_id)
