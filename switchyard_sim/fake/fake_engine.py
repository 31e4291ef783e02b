"""FakeEngineClient: an engine's gRPC client surface, simulated in-process, for policy tests.

It keeps an engine's bookkeeping — prefix cache over full blocks, prep_recv reservations filled
by remote_send from another fake engine, running generations — so tests can assert what a
policy made the engines do and that nothing is left behind. Its "model" is a deterministic
function of the whole context (the next token is a hash of every token before it), so any
correct pattern yields exactly the tokens a single engine yields, as on real engines; KV an
engine lacks is recomputed and counted, as the real engine does.

Not a mock engine for benchmarks: no processes, no timing. Faults are injected per verb.
"""
from __future__ import annotations

import asyncio
import zlib
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

import router_core
from switchyard_rpc import engine_pb2 as pb

if TYPE_CHECKING:
    from switchyard_sim.fake.fake_cluster import FakeCluster

FAKE_VOCAB = 49152


def next_token(context: list[int]) -> int:
    """The fake model: greedy next token of `context` (never an EOS: fakes stop on length)."""
    return 1 + zlib.crc32(array("I", context).tobytes()) % (FAKE_VOCAB - 1)


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@dataclass(slots=True)
class Fault:
    """Make the `nth` call (0-based) of `verb` on this engine fail; `after=True` fails it after
    the engine did the work (the caller never learns it succeeded). kind: "rpc" (a gRPC error
    with `code`), "cancel" (the client goes away while the call is in flight), "raise" (a bug
    surfacing in the policy there), "hang" (the call never returns)."""

    verb: str
    nth: int = 0
    code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    after: bool = False
    kind: str = "rpc"

    async def fire(self, where: str) -> None:
        if self.kind == "cancel":
            raise asyncio.CancelledError
        if self.kind == "raise":
            raise RuntimeError(f"injected bug at {where}")
        if self.kind == "hang":
            await asyncio.sleep(3600)
        raise rpc_error(self.code, f"injected fault at {where}")


@dataclass(slots=True)
class _Reservation:
    tokens: list[int]
    matched: int
    end: int
    filled_upto: int  # positions [matched, filled_upto) received


@dataclass(slots=True)
class FakeGeneration:
    request_id: str
    tokens: list[int]
    begin: int
    max_tokens: int
    max_new_tokens_here: int
    prefilled: int          # tokens this engine computed before the first output
    produced: list[int] = field(default_factory=list)
    done: bool = False
    handoff_requested: bool = False


@dataclass(eq=False)
class FakeEngineClient:
    """An engine as router_core's executor reaches it in-process (switchyard_sim/fake/
    engine_double.py's EngineDouble: the verbs, in the engine's messages)."""

    cluster: FakeCluster
    name: str
    address: str
    num: int
    block_size: int = 16
    faults: list[Fault] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)  # (verb, request id)
    # (verb, request id, first_token_due_ms) of each remote_send and start_generate: the
    # first-token deadline the router sent with it (0: none).
    deadlines: list[tuple[str, str, float]] = field(default_factory=list)
    cached: set[tuple[int, ...]] = field(default_factory=set)   # full-block prefixes held
    reservations: dict[str, _Reservation] = field(default_factory=dict)
    generations: dict[str, FakeGeneration] = field(default_factory=dict)
    finished: list[FakeGeneration] = field(default_factory=list)
    aborts: int = 0
    prefill_chunk_size: int = 0
    _counts: dict[str, int] = field(default_factory=dict)
    _kv_seq: int = 0

    # ---- fault injection ----
    def fault(self, verb: str, nth: int, after: bool) -> Fault | None:
        for fault in self.faults:
            if fault.verb == verb and fault.nth == nth and fault.after == after:
                return fault
        return None

    async def _fail_if(self, verb: str, nth: int, after: bool) -> None:
        fault = self.fault(verb, nth, after)
        if fault is not None:
            await fault.fire(f"{verb}#{nth} on {self.name}")

    def _count(self, verb: str, request_id: str) -> int:
        """Record the call; returns its index among this verb's calls."""
        self.calls.append((verb, request_id))
        nth = self._counts.get(verb, 0)
        self._counts[verb] = nth + 1
        return nth

    async def _enter(self, verb: str, request_id: str) -> int:
        nth = self._count(verb, request_id)
        await self._fail_if(verb, nth, after=False)
        return nth

    # ---- prefix cache ----
    def matched(self, tokens: list[int], limit: int) -> int:
        best = 0
        for n in range(self.block_size, limit + 1, self.block_size):
            if tuple(tokens[:n]) not in self.cached:
                break
            best = n
        return best

    def cache(self, tokens: list[int]) -> None:
        """Hold every full block of `tokens`; tell the cluster's prefix index (KV events)."""
        new = [tuple(tokens[:n]) for n in range(self.block_size, len(tokens) + 1,
                                                  self.block_size)]
        self.cached.update(new)
        hashes = router_core.block_hashes(tokens, self.block_size, self.cluster.core.seed)
        self._kv_seq += 1
        self.cluster.core.index.apply_events(self.num, self._kv_seq, self._kv_seq, hashes, [])

    @property
    def holds_nothing(self) -> bool:
        """No reservation and no running generation left (what a finished request leaves)."""
        return not self.reservations and not any(not g.done for g in self.generations.values())

    # ---- the verbs ----
    async def prep_recv(self, request_id: str, tokens: list[int], end: int = -1,
                        lease_s: float = 0.0, metadata: Any = None) -> pb.PrepRecvResponse:
        nth = await self._enter("prep_recv", request_id)
        resolved = end + len(tokens) if end < 0 else end
        if not 0 <= resolved <= len(tokens) or request_id in self.reservations:
            raise rpc_error(grpc.StatusCode.INVALID_ARGUMENT, f"bad prep_recv {request_id}")
        matched = self.matched(tokens, resolved)
        self.reservations[request_id] = _Reservation(list(tokens), matched, resolved, matched)
        await self._fail_if("prep_recv", nth, after=True)
        return pb.PrepRecvResponse(kv_addr=f"{self.name}/{request_id}".encode(),
                                   matched_len=matched, end=resolved, page_size=self.block_size)

    async def remote_send(self, request_id: str, tokens: list[int], kv_addr: bytes, dst: str,
                          begin: int, end: int, transport: str = "", metadata: Any = None,
                          first_token_due_ms: float = 0.0) -> pb.RemoteSendResponse:
        nth = await self._enter("remote_send", request_id)
        self.deadlines.append(("remote_send", request_id, first_token_due_ms))
        target_name, _, target_rid = kv_addr.decode().partition("/")
        target = self.cluster.client(target_name)
        res = target.reservations.get(target_rid)
        if res is None:
            raise rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "reservation gone")
        if res.tokens[:end] != tokens[:end] or not res.matched <= begin <= end <= res.end:
            raise rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "range outside the reservation")
        cached_here = self.matched(tokens, end)
        self.cache(tokens[:end])  # the sender's prefill stays in its prefix cache
        if begin <= res.filled_upto:
            res.filled_upto = max(res.filled_upto, end)
        await self._fail_if("remote_send", nth, after=True)
        return pb.RemoteSendResponse(bytes_sent=(end - begin) * 64, transport="fake",
                                     cached_on_sender=max(0, cached_here - begin), begin=begin,
                                     end=end)

    def start_generate_request(self, request: pb.StartGenerateRequest,
                               timeout_s: float | None = None, metadata: Any = None) -> FakeCall:
        self.deadlines.append(("start_generate", request.request_id, request.first_token_due_ms))
        return FakeCall(self, request)

    async def abort(self, request_id: str, handoff: bool = False) -> bool:
        self.calls.append(("abort", request_id))
        found = self.reservations.pop(request_id, None) is not None
        gen = self.generations.get(request_id)
        if gen is not None and not gen.done:
            found = True
            if handoff:
                gen.handoff_requested = True  # ends at its next read, as the engine's next step
            else:
                gen.done = True
        self.aborts += int(not handoff)
        return found

    async def configure(self, prefill_chunk_size: int | None = None,
                        timeout_s: float | None = None) -> pb.ConfigureResponse:
        previous = self.prefill_chunk_size
        if prefill_chunk_size is not None:
            self.calls.append(("configure", str(prefill_chunk_size)))
            self.prefill_chunk_size = prefill_chunk_size
        return pb.ConfigureResponse(prefill_chunk_size=self.prefill_chunk_size,
                                    previous_prefill_chunk_size=previous)

    async def close(self) -> None:
        return None

    # ---- generation (driven by FakeCall) ----
    def begin_generation(self, request: pb.StartGenerateRequest, nth: int) -> FakeGeneration:
        rid, tokens = request.request_id, list(request.tokens)
        running = self.generations.get(rid)
        if running is not None and not running.done:
            raise rpc_error(grpc.StatusCode.INVALID_ARGUMENT, f"duplicate request id {rid}")
        present = self.matched(tokens, len(tokens) - 1)
        res = self.reservations.pop(rid, None)
        if res is not None and res.tokens[:request.begin] == tokens[:request.begin]:
            present = max(present, min(res.filled_upto, len(tokens) - 1))
        gen = FakeGeneration(rid, tokens, request.begin, request.sampling.max_tokens or 16,
                             request.max_new_tokens_here, prefilled=len(tokens) - present)
        self.generations[rid] = gen
        return gen

    def step(self, gen: FakeGeneration) -> pb.GenerateChunk:
        if gen.handoff_requested:  # Abort(handoff): end after what it produced, KV kept
            gen.done = True
            self.finished.append(gen)
            self.cache((gen.tokens + gen.produced)[:-1])
            return pb.GenerateChunk(finish_reason="handoff")
        token = next_token(gen.tokens + gen.produced)
        gen.produced.append(token)
        chunk = pb.GenerateChunk(token_ids=[token])
        if len(gen.produced) == 1:
            chunk.prompt_tokens = len(gen.tokens)
            chunk.cached_tokens = len(gen.tokens) - gen.prefilled
        if len(gen.produced) >= gen.max_tokens:
            chunk.finish_reason = "length"
        elif gen.max_new_tokens_here and len(gen.produced) >= gen.max_new_tokens_here:
            chunk.finish_reason = "handoff"
        if chunk.finish_reason:
            gen.done = True
            self.finished.append(gen)
            self.cache((gen.tokens + gen.produced)[:-1])  # the last token has no KV yet
        return chunk


class FakeCall:
    """A StartGenerate stream: `read()` yields one token per chunk, then None."""

    def __init__(self, client: FakeEngineClient, request: pb.StartGenerateRequest) -> None:
        self._client = client
        self._request = request
        self._nth = client._count("start_generate", request.request_id)
        self._gen: FakeGeneration | None = None
        self._cancelled = False

    async def read(self) -> pb.GenerateChunk | None:
        await asyncio.sleep(0)  # a real read waits for the engine's step: others run meanwhile
        # The call starts at once but, as with gRPC, its outcome surfaces on the first read.
        if self._gen is None:
            if self._cancelled:
                raise rpc_error(grpc.StatusCode.CANCELLED, "cancelled")
            await self._client._fail_if("start_generate", self._nth, after=False)
            self._gen = self._client.begin_generation(self._request, self._nth)
            await self._client._fail_if("start_generate", self._nth, after=True)
        gen = self._gen
        assert gen is not None
        if gen.done:
            return None
        return self._client.step(gen)

    def cancel(self) -> bool:
        self._cancelled = True
        if self._gen is not None and not self._gen.done:
            self._gen.done = True  # the engine aborts a generation whose stream is cancelled
            return True
        return False
