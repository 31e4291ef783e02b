"""EngineCore: the synchronous engine — verbs in, step outputs out — driven by one step thread.

The gRPC server calls add_request / prep_recv / add_send / abort / stats from its threads and
write_kv from transport threads; one thread calls step() in a loop. Bookkeeping (scheduler,
pool, cache, reservations) is guarded by one lock, which step() does not hold while the model
runs, so transfers land while the next batch computes. Pages of a request aborted mid-step are
released only after that step, so the running forward pass never writes into reused pages.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch

import router_core
from engine.attention.graph_buckets import capture_sizes
from engine.config import EngineConfig, EngineConfigError
from engine.core.grammar import GrammarCompiler
from engine.core.latency_model import VERSION as LATENCY_VERSION
from engine.core.latency_model import LatencyModel, decode_knee
from engine.core.outputs import Reservation, StepOutput, StepTimings
from engine.core.page_check import PageCheck
from engine.core.request import OnLayer, Request
from engine.core.reservations import ReservationTable
from engine.core.sampler import make_generator, request_seed
from engine.core.scheduler import Scheduler
from engine.core.stats import EngineStats, LoadKey
from engine.core.step_runner import StepRunner
from engine.core.step_trace import StepTrace
from engine.core.validation import (
    check_first_token_due_ms,
    check_range,
    check_request_id,
    check_tokens,
    resolve_end,
)
from engine.kvcache.events import KVEvent
from engine.kvcache.kv_storage import KVStorage
from engine.kvcache.page_pool import OutOfPages, PagePool
from engine.kvcache.radix_cache import RadixPrefixCache
from engine.model.loader import LoadedModel, load_model
from engine.model.runner import ModelRunner
from switchyard_engine_api.errors import InvalidRequest, UnknownRequest
from switchyard_engine_api.sampling_params import SamplingParams

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _detokenizer_vocab(tokenizer: Any) -> Any:
    """router_core.DetokenizerVocab for the model's tokenizer, or None if unavailable."""
    vocab_cls = getattr(router_core, "DetokenizerVocab", None)
    to_json = getattr(tokenizer, "to_json", None) or getattr(
        getattr(tokenizer, "tokenizer", None), "to_json", None)
    if vocab_cls is None or to_json is None:
        return None
    return vocab_cls.from_tokenizer_json(to_json())


class EngineCore:
    # Unchecked unless the config asks (__init__); a simulated engine (switchyard_sim), built
    # without __init__, keeps this one, which never runs.
    page_check = PageCheck(enabled=False)

    def __init__(self, config: EngineConfig, loaded: LoadedModel | None = None) -> None:
        if loaded is None:
            loaded = load_model(config.model_path, _DTYPES[config.dtype],
                                torch.device(config.device), mode=config.mode)
        if loaded.is_fast != (config.mode == "fast"):
            raise EngineConfigError(f"engine mode {config.mode!r} does not match the loaded "
                                    f"model ({'fast' if loaded.is_fast else 'exact'})")
        self.loaded = loaded
        self.model_config = loaded.config
        mc = self.model_config
        kv_dtype = _DTYPES[config.resolved_kv_dtype]
        if config.num_pages is None:  # size the pool from the memory budget
            per_page = KVStorage.bytes_per_token_for(mc.num_layers, mc.num_kv_heads, mc.head_dim,
                                                     kv_dtype) * config.page_size
            config = dataclasses.replace(config, num_pages=max(1, config.kv_memory // per_page))
        assert config.num_pages is not None
        self.config = config
        self.max_context = min(config.max_context or mc.max_position_embeddings,
                               mc.max_position_embeddings)
        backend = config.resolved_backend
        # A step never holds more than max_running decodes: no graph above that.
        graph_sizes = (capture_sizes(min(config.cuda_graph_max_batch, config.max_running))
                       if backend == "flashinfer" else [])
        # CUDA graphs pad decode steps onto one extra page that the pool never hands out.
        self.kv = KVStorage(mc.num_layers, config.num_pages + (1 if graph_sizes else 0),
                            config.page_size, mc.num_kv_heads, mc.head_dim, kv_dtype,
                            config.device)
        self.pool = PagePool(config.num_pages)
        self.block_hash_seed = router_core.model_seed(mc.model_id)
        self.cache = RadixPrefixCache(self.pool, config.page_size, self.block_hash_seed,
                                      config.max_kv_events)
        self.scheduler = Scheduler(self.cache, config.chunk_size, config.max_running)
        self.reservations = ReservationTable(self.cache, mc.num_layers)
        self.page_check = PageCheck(config.check_pages)
        # On CPU, fit CPU time and scale by live contention; on a GPU, host CPU time says nothing.
        on_cpu = config.device == "cpu"
        kv_bytes = 2 * mc.num_kv_heads * mc.head_dim * _DTYPES[config.dtype].itemsize
        self.latency = LatencyModel(config.latency_window, clock="cpu" if on_cpu else "wall",
                                    knee=decode_knee(kv_bytes) if on_cpu else None)
        self.detokenizer_vocab = _detokenizer_vocab(loaded.tokenizer)
        self.grammars = GrammarCompiler(loaded.tokenizer, mc.vocab_size, mc.eos_token_ids)
        self._lock = threading.RLock()
        self._requests: dict[str, Request] = {}
        runner = ModelRunner(loaded, self.kv, backend)
        if graph_sizes:
            runner.capture_decode_graphs(graph_sizes, scratch_page=config.num_pages,
                                         max_context=self.max_context)
        self._steps = StepRunner(self, runner)

    # ---- verbs ----------------------------------------------------------------------------

    def _check_new_id(self, request_id: str, allow_reservation: bool) -> None:
        check_request_id(request_id)
        if request_id in self._requests or (
                not allow_reservation and request_id in self.reservations):
            raise InvalidRequest(f"duplicate request id {request_id!r}")

    def _check_fits(self, num_tokens: int) -> None:
        pages = -(-num_tokens // self.config.page_size)
        if pages > self.pool.num_pages:
            raise InvalidRequest(
                f"{num_tokens} tokens need {pages} KV pages; this engine has "
                f"{self.pool.num_pages}")

    def _new_detokenizer(self, sampling: SamplingParams) -> Any:
        if self.detokenizer_vocab is None:
            if sampling.stop:
                raise InvalidRequest("stop strings are not supported by this build")
            return None
        return router_core.IncrementalDetokenizer(self.detokenizer_vocab, stop=sampling.stop)

    def now(self) -> float:
        """The engine's clock (seconds; only differences mean anything): what a call's relative
        first-token deadline is turned into a time on. A simulated engine's is virtual."""
        return time.monotonic()

    def _due_at(self, first_token_due_ms: float) -> float | None:
        """A call's relative first-token deadline as a time on this engine's clock (None: none)."""
        due_ms = check_first_token_due_ms(first_token_due_ms)
        return None if due_ms is None else self.now() + due_ms / 1e3

    def add_request(self, request_id: str, tokens: Sequence[int], sampling: SamplingParams,
                    begin: int = 0, max_new_tokens_here: int = 0, output_offset: int = 0,
                    trace: StepTrace | None = None, first_token_due_ms: float = 0.0) -> None:
        """Generate after tokens; KV of tokens[:begin] comes from a prep_recv reservation under
        the same id and/or the prefix cache (whatever is missing is recomputed). The last
        `output_offset` tokens were generated earlier (elsewhere): sampling continues from there.
        `trace`: record this request's steps into it (a traced request). `first_token_due_ms`:
        its first token is due this many ms from now (0: no deadline); the waiting queue goes
        by it within a priority (engine/core/waiting_queue.py)."""
        if not isinstance(sampling, SamplingParams):
            raise InvalidRequest("sampling must be SamplingParams")
        if max_new_tokens_here < 0:
            raise InvalidRequest(f"max_new_tokens_here must be >= 0, got {max_new_tokens_here}")
        first_token_due = self._due_at(first_token_due_ms)
        # Compiled outside the lock (a new schema takes milliseconds; the server compiles it
        # off the step loop first, so this finds it cached).
        grammar = (None if sampling.response_format is None
                   else self.grammars.request_grammar(sampling.response_format))
        with self._lock:
            self._check_new_id(request_id, allow_reservation=True)
            prompt = check_tokens(tokens, self.model_config.vocab_size, self.max_context)
            check_range(begin, len(prompt), len(prompt), "add_request")
            if not 0 <= output_offset < len(prompt):
                raise InvalidRequest(f"output_offset must be in [0, len(tokens)), got "
                                     f"{output_offset}")
            self._check_fits(len(prompt) + 1)
            if grammar is not None and output_offset:
                grammar.replay(prompt[len(prompt) - output_offset:])
            request = Request(request_id, "generate", prompt, len(prompt), sampling, begin=begin,
                              max_new_tokens_here=max_new_tokens_here,
                              generator=make_generator(sampling.seed),
                              sample_seed=request_seed(sampling.seed),
                              output_offset=output_offset,
                              detokenizer=self._new_detokenizer(sampling), trace=trace,
                              grammar=grammar, first_token_due=first_token_due)
            held = self.reservations.get(request_id) if request_id in self.reservations else None
            if held is not None:
                res = held.reservation
                if begin > res.end or held.tokens[:begin] != prompt[:begin]:
                    raise InvalidRequest(
                        f"begin={begin} does not match reservation {request_id!r} "
                        f"(end={res.end}, tokens differ or too short)")
                self.reservations.take(request_id)
                # Trust only what arrived for every layer; anything else is recomputed.
                request.page_table = res.page_table
                request.num_computed = min(begin, held.written_upto(), len(prompt) - 1)
                request.needs_prefix_match = False
                self._own_pages_to_write(request)
                request.cached_tokens = -1 if request.needs_prefix_match else request.num_computed
            self._requests[request_id] = request
            self.scheduler.add(request)
            if trace is not None:
                trace.queued = time.perf_counter()
            self.check_pages("add_request")

    def _own_pages_to_write(self, request: Request) -> None:
        """Copy-on-write: pages the request will write into must not be shared with the prefix
        cache (a reservation's cached prefix, or its pages once committed). If no page is free
        for the copy, drop the reservation's pages and start like a fresh request."""
        first = request.num_computed // self.config.page_size
        for idx in range(first, len(request.page_table)):
            old = request.page_table[idx]
            if self.pool.refcount(old) == 1:
                continue
            try:
                (new,) = self.cache.alloc(1)
            except OutOfPages:
                self.pool.decref(request.page_table)
                request.page_table, request.num_computed = [], 0
                request.needs_prefix_match = True
                return
            self._copy_page(old, new)
            request.page_table[idx] = new
            self.pool.decref([old])

    def _copy_page(self, old: int, new: int) -> None:
        """Copy one KV page's contents, every layer (copy-on-write)."""
        for layer in range(self.model_config.num_layers):
            self.kv.layer(layer)[new].copy_(self.kv.layer(layer)[old])

    def prep_recv(self, request_id: str, tokens: Sequence[int], end: int,
                  lease_s: float | None = None, trace: Any = None) -> Reservation:
        """Pin the cached prefix of tokens[:end] and hold pages for the rest under a lease.
        `trace` is kept with the reservation for `reservations.on_received`."""
        with self._lock:
            self._check_new_id(request_id, allow_reservation=False)
            prompt = check_tokens(tokens, self.model_config.vocab_size, self.max_context + 1)
            resolved = resolve_end(end, len(prompt))
            self._check_fits(resolved)
            lease = self.config.lease_s if not lease_s else lease_s
            if not lease > 0:
                raise InvalidRequest(f"lease_s must be positive, got {lease_s}")
            reservation = self.reservations.create(request_id, prompt, resolved, lease, trace)
            self.check_pages("prep_recv")
            return reservation

    def add_send(self, request_id: str, tokens: Sequence[int], begin: int, end: int,
                 on_layer: OnLayer, trace: StepTrace | None = None,
                 first_token_due_ms: float = 0.0) -> None:
        """Prefill tokens[:end] (reusing the prefix cache) and report K/V of [begin, end) layer
        by layer through on_layer; the final StepOutput has finish_reason "sent".
        `first_token_due_ms`: as add_request's (the first token of the request it sends for)."""
        first_token_due = self._due_at(first_token_due_ms)
        with self._lock:
            self._check_new_id(request_id, allow_reservation=True)
            prompt = check_tokens(tokens, self.model_config.vocab_size, self.max_context + 1)
            resolved = resolve_end(end, len(prompt))
            check_range(begin, resolved, len(prompt), "add_send")
            self._check_fits(resolved)
            request = Request(request_id, "send", prompt[:resolved], len(prompt), begin=begin,
                              send_end=resolved, on_layer=on_layer, trace=trace,
                              first_token_due=first_token_due)
            self._requests[request_id] = request
            self.scheduler.add(request)
            if trace is not None:
                trace.queued = time.perf_counter()

    def write_kv(self, request_id: str, layer: int, start: int, k: torch.Tensor,
                 v: torch.Tensor) -> None:
        """Store received K/V [n, kv_heads, head_dim] for positions [start, start + n)."""
        with self._lock:
            held = self.reservations.get(request_id)
            res = held.reservation
            stop = start + int(k.shape[0])
            if not 0 <= layer < self.model_config.num_layers:
                raise InvalidRequest(f"layer {layer} out of range")
            if not res.matched_len <= start <= stop <= res.end:
                raise InvalidRequest(
                    f"write of [{start}, {stop}) outside reservation {request_id!r}'s "
                    f"[{res.matched_len}, {res.end})")
            self.kv.write(layer, res.page_table, start, k, v)
            completes = not held.committed
            self.reservations.mark_written(held, layer, start, stop,
                                           (k.numel() + v.numel()) * k.element_size())
            if completes and held.committed:  # its pages went to the prefix cache
                self.check_pages("write_kv")

    def abort(self, request_id: str, handoff: bool = False) -> bool:
        """Abort a request, send or reservation. `handoff=True`: a generation ends with finish
        reason "handoff" (to be continued on another engine) rather than "abort"."""
        with self._lock:
            if self.reservations.release(request_id):
                self.check_pages("abort")
                return True
            request = self._requests.get(request_id)
            if request is None or request.aborted:
                return False
            request.aborted = True
            if handoff and request.kind == "generate":
                request.abort_reason = "handoff"
            self._steps.on_abort(request)
            self.check_pages("abort")
            return True

    def step(self) -> list[StepOutput]:
        return self._steps.step()

    def has_work(self) -> bool:
        with self._lock:
            return self.scheduler.has_work() or self._steps.has_pending_outputs()

    def expire_leases(self, now: float | None = None) -> list[str]:
        with self._lock:
            expired = self.reservations.expire(time.monotonic() if now is None else now)
            if expired:
                self.check_pages("expire_leases")
            return expired

    def check_pages(self, where: str) -> None:
        """Audit page ownership (under the lock) when the config asks for it (page_check.py)."""
        self.page_check.run(where, self.cache, self._requests.values(), self.reservations.held())

    # ---- state ----------------------------------------------------------------------------

    def match_prefix(self, tokens: Sequence[int]) -> int:
        with self._lock:
            return self.cache.match_len([int(t) for t in tokens])

    def kv_events_since(self, seq: int) -> list[KVEvent]:
        with self._lock:
            return self.cache.events_since(seq)

    def kv_snapshot(self) -> tuple[int, list[int]]:
        with self._lock:
            return self.cache.snapshot()

    def request(self, request_id: str) -> Request:
        with self._lock:
            found = self._requests.get(request_id)
            if found is None:
                raise UnknownRequest(f"no request {request_id!r}")
            return found

    def set_chunk_size(self, chunk_size: int) -> int:
        """Set the prefill token budget per step (DynaServe's C_i) from the next step on; returns
        the previous one. Raises InvalidRequest outside [1, max_context]."""
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or not (
                1 <= chunk_size <= self.max_context):
            raise InvalidRequest(
                f"prefill chunk size must be an int in [1, {self.max_context}], got {chunk_size!r}")
        with self._lock:
            previous, self.scheduler.chunk_size = self.scheduler.chunk_size, chunk_size
            return previous

    def load_key(self) -> LoadKey:
        """The load a router routes by (engine/core/stats.py LoadKey), without the step-model fit
        that stats() computes: the KV event stream compares it every tick to push on change."""
        with self._lock:
            waiting = list(self.scheduler.waiting)
            running = self.scheduler.running
            decodes, decode_context = self.scheduler.decode_load()
            return LoadKey(
                queued_requests=len(waiting),
                queued_prefill_tokens=self.scheduler.queued_prefill_tokens(),
                running_requests=len(running),
                unfinished_tokens=sum(r.remaining_tokens() for r in (*waiting, *running)),
                kv_pages_used=self.pool.num_used, kv_pages_total=self.pool.num_pages,
                cached_blocks=len(self.cache), leases=len(self.reservations),
                latency_model_source=self.latency.source,
                latency_model_samples=len(self.latency),
                prefill_chunk_size=self.scheduler.chunk_size,
                decode_requests=decodes, decode_context_tokens=decode_context,
                kv_pages_evictable=self.cache.num_evictable(),
                kv_pages_reserved=self.reservations.num_pages,
                longest_queued_prefill_tokens=self.scheduler.longest_queued_prefill_tokens())

    def stats(self) -> EngineStats:
        with self._lock:
            latency = self.latency
            coefficients = latency.coefficients()  # first: a first fit names its source
            return EngineStats(
                engine_id=self.config.engine_id, role=self.config.role,
                **self.load_key()._asdict(),
                recent_step_ms=latency.recent_step_ms(),
                decode_step_ms=latency.decode_step_ms(),
                page_size=self.config.page_size,
                kv_event_seq=self.cache.events.last_seq,
                latency_model=coefficients, latency_model_version=LATENCY_VERSION,
                latency_model_fit_error=latency.fit_error(),
                kv_page_audits=self.page_check.audits,
                kv_page_audit_failures=self.page_check.failures)

    def _forget(self, request: Request) -> None:
        self._requests.pop(request.request_id, None)

    def _timings(self, request: Request, step_ms: float) -> StepTimings:
        if request.timings_sent:
            return StepTimings(step_ms=step_ms)
        request.timings_sent = True
        start = request.first_scheduled or request.arrival
        done = request.first_token_at or time.monotonic()
        return StepTimings((start - request.arrival) * 1e3, (done - start) * 1e3, step_ms)
