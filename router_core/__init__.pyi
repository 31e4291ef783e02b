"""Type stubs for router_core (the Rust hot path). Kept in step with router_core/src/python/*.rs
by hand; mypy.stubtest fails when it is stale (docs/structures.md, "The binding's stub": what that
check catches, what it does not, and why this stub is not generated).

This file is the contract between router_core (Rust), engine/ and pyrouter/.
Engine ids are small non-negative ints chosen by the caller (pyrouter maps "e0" -> 0).
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, final

__version__: str

# ---- block hashing (the one implementation; engine KV events and the router both call it) ----
def block_hashes(tokens: Sequence[int], block_size: int, seed: int) -> list[int]:
    """Chained 64-bit hashes over the full blocks of `tokens` (len(tokens) // block_size of them).
    hash[i] depends on seed, hash[i-1] and tokens of block i. Deterministic across processes/platforms:
    hash[i] = xxh3_64(le_u64(hash[i-1] or 0) + le_u32(tokens of block i)..., seed).
    `tokens` may also be an array.array / numpy array of 4- or 8-byte ints (fastest: array('I')).
    Raises ValueError for block_size 0, OverflowError for ids outside u32 or seed outside u64."""

def model_seed(model_id: str) -> int:
    """A per-model hash seed derived from the model id (same model => same seed everywhere)."""

# ---- engine-side names (the one scheme both request paths use; front/engine_names.rs) ----
def engine_name(num: int) -> str:
    """Engine `num`'s id in routes, metrics, the admin API and policies ("e0", "e1", ...)."""

def first_engine_request_id(prefix: str) -> str:
    """A request's engine-side id for its first attempt: `prefix` + 128 random bits, router-made
    (nothing a client sends goes into it)."""

def retry_engine_request_id(first: str, attempt: int) -> str:
    """The engine-side id of a request's `attempt`-th retry or resumption (1, 2, ...):
    `{first}-r{attempt}`."""

# ---- sampling rules (router_core/src/sampling.rs: the front and the engine both apply them) ----
class SamplingRefused(ValueError):
    """A sampling rule the values break: the message, and `param` (the field it names)."""
    param: str

def check_sampling(temperature: float, top_p: float, top_k: int, max_tokens: int,
                   min_tokens: int, seed: int | None = None,
                   stop_token_ids: Sequence[int] | None = None,
                   stop: Sequence[object] | None = None,
                   priority: int = 0) -> tuple[float, int]:
    """The normalised (top_p, top_k) ("off" spelt 1.0 and 0) when the values meet every rule;
    otherwise raises SamplingRefused for the first rule broken, in the rules' order. A `stop`
    entry that is not a string breaks the stop rule. OverflowError for an int beyond 128 bits.
    switchyard_engine_api/sampling_params.py's SamplingParams is built through it."""

# The largest JSON schema (its JSON text) a request's response_format may carry.
MAX_SCHEMA_BYTES: int

# ---- prefix index ----
@final
class PrefixIndex:
    """Which engines hold which blocks. Event-driven engines are fed by KV events (a stale view
    keeps answering matches, best effort, until a snapshot); approximate engines by
    record_routed with TTL expiry. Bounded by max_blocks distinct hashes (extra blocks are not
    indexed and counted in dropped_blocks()). Unknown engine ids raise KeyError."""
    def __new__(cls, block_size: int, seed: int, max_blocks: int = 16_777_216,
                 approx_ttl_s: float = 120.0) -> PrefixIndex: ...
    @property
    def block_size(self) -> int: ...
    @property
    def seed(self) -> int: ...
    def add_engine(self, engine_id: int, approximate: bool = False) -> None:
        """No-op when the engine exists in the same mode (a mode change forgets its blocks)."""
    def remove_engine(self, engine_id: int) -> None:
        """Forgets the engine and its blocks; no-op when unknown."""
    def apply_events(self, engine_id: int, first_seq: int, last_seq: int,
                     stored: Sequence[int], evicted: Sequence[int]) -> bool:
        """False when first_seq != last seen + 1: the engine's view is stale until a snapshot.
        Batches already seen (last_seq <= last seen) are ignored; evictions apply before stores.
        ValueError for an approximate engine or first_seq > last_seq."""
    def apply_snapshot(self, engine_id: int, last_seq: int, stored: Sequence[int]) -> None: ...
    def is_stale(self, engine_id: int) -> bool: ...
    def last_seq(self, engine_id: int) -> int:
        """Last KV event sequence number applied (0 before any; 0 for approximate engines)."""
    def record_routed(self, engine_id: int, hashes: Sequence[int]) -> None:
        """Approximate mode: remember that these blocks were sent to engine_id (expire after TTL).
        A no-op for event-driven engines (their events are the truth)."""
    def match(self, hashes: Sequence[int]) -> dict[int, int]:
        """engine_id -> number of leading blocks of `hashes` that engine holds (engines with 0 omitted)."""
    def num_blocks(self) -> int: ...
    def engine_blocks(self, engine_id: int) -> int:
        """Blocks the index believes engine_id holds."""
    def dropped_blocks(self) -> int:
        """Blocks not indexed because the index was at max_blocks."""
    def memory_bytes(self) -> int: ...
    def engine_ids(self) -> list[int]: ...

# ---- engine table ----
# Step-time model terms (router_core/src/latency_model.rs; engines fit them in
# engine/core/latency_model.py). step_ms = Σ coeff[term] · feature[term], per step:
#   const 1 | prefill_tokens Σ n | prefill_seqs chunks | prefill_attention Σ n·ctx + n(n+1)/2
#   prefill_context Σ ctx + n | decode_seqs B | decode_context Σ decode context (incl. new token)
#   decode_context_over:K  max(0, decode_context - K)  (a hinge: KV read past the CPU's cache)
# for prefill chunks of n new tokens on top of ctx cached ones and B decodes.
@final
class EngineLoad:
    engine_id: int
    role: str
    healthy: bool
    queued_prefill_tokens: int    # prefill tokens not computed yet (waiting + still prefilling)
    running_decodes: int          # sequences decoding (one token per step)
    queued_requests: int          # requests waiting to be admitted (from Stats; 0 = not reported)
    decode_context_tokens: int    # KV positions those decodes read per step, summed
    unfinished_tokens: int
    kv_pages_used: int
    kv_pages_evictable: int       # of kv_pages_used, held only by the prefix cache (not pressure)
    kv_pages_total: int
    kv_pressure: float            # share of kv_pages_total that requests hold (evictable cache excluded)
    decode_step_ms: float         # engine-measured mean decode-only step (informational)
    latency_model: dict[str, float]  # term -> ms per unit of its feature; {} = no model yet
    prefill_chunk_size: int       # prefill token budget per step; 0 = not reported (one step)
    longest_queued_prefill: int   # most prefill one queued request has left (Stats, or a larger dispatch since)
    cached_blocks: int            # blocks its prefix cache holds (its last Stats)
    inflight: int                 # router-side: requests dispatched and not finished
    router_tokens: int            # router-side: tokens dispatched that the latest Stats can't include yet
    router_prefill_tokens: int    # router-side, as router_tokens: their prefill (also sends')
    router_seqs: int              # router-side, as router_tokens: generations (decodes to come)
    pending_prefill_tokens: int   # the queue predictions see: reported + dispatched, less what finished since

@final
class EngineTable:
    """Per-engine load. Unknown engine ids raise KeyError; bad values raise ValueError/OverflowError.
    `get`/`all` return copies (EngineLoad snapshots)."""
    def __init__(self) -> None: ...
    def upsert(self, engine_id: int, role: str) -> None:
        """Adds an engine (healthy, no load) or changes its role; role is 'any'|'prefill'|'decode'."""
    def remove(self, engine_id: int) -> None: ...
    def set_health(self, engine_id: int, healthy: bool) -> None: ...
    def update_stats(self, engine_id: int, queued_prefill_tokens: int, running_decodes: int,
                     unfinished_tokens: int, kv_pages_used: int, kv_pages_total: int,
                     decode_step_ms: float, *, latency_model: dict[str, float] | None = None,
                     prefill_chunk_size: int = 0, decode_context_tokens: int = 0,
                     kv_pages_evictable: int = 0, queued_requests: int = 0,
                     longest_queued_prefill_tokens: int = 0) -> None:
        """From an engine's Stats: latency_model = dict(stats.latency_model.coeffs_ms) (None or {}
        = no model yet: predicted times are NaN); queued_requests = stats.queued_requests (the
        requests waiting to be admitted; 0 = not reported). ValueError for an unknown or repeated term or a
        non-finite coefficient, or a non-finite/negative decode_step_ms."""
    def apply_stats(self, engine_id: int, stats: bytes) -> None:
        """A serialized StatsResponse, through the router's upkeep's own mapping (for engines
        whose answers are Python objects: the simulator's); ValueError when it is none."""
    def on_dispatch(self, engine_id: int, prefill_tokens: int, decode_tokens: int) -> int:
        """inflight += 1, router_tokens += prefill + decode, router_prefill_tokens += prefill,
        router_seqs += 1 when decode > 0. Returns the dispatch's stamp for on_prefill_done."""
    def on_prefill_dispatch(self, engine_id: int, prefill_tokens: int) -> int:
        """Prefill work that is no generation (a RemoteSend's K/V): router_prefill_tokens +=
        prefill_tokens until the next Stats covers it; nothing in flight. Returns the stamp."""
    def on_prefill_done(self, engine_id: int, prefill_tokens: int, stamp: int) -> None:
        """The prefill dispatched with `stamp` finished (first token seen, send answered): it
        leaves the queue the predictions see (router_prefilled_tokens, or the latest Stats'
        queue when that Stats was asked for after the dispatch)."""
    def on_complete(self, engine_id: int) -> None:
        """The request ended: inflight -= 1. Its tokens leave router_tokens with the engine's next
        Stats (which covers them), so no request is counted on both sides."""
    def stats_requested(self, engine_id: int) -> None:
        """Call right before asking the engine for Stats: the answer will include every token
        dispatched so far, so update_stats then drops them from router_tokens."""
    def get(self, engine_id: int) -> EngineLoad: ...
    def all(self) -> list[EngineLoad]: ...
    def predict_prefill_ms(self, engine_id: int, prefill_tokens: int, cached_tokens: int) -> float:
        """Prefill of prefill_tokens on top of cached_tokens (ms), chunked at the engine's chunk size
        with its running decodes in every step; no queue. NaN without a latency model."""
    def predict_step_ms(self, engine_id: int, prefill_chunks: Sequence[tuple[int, int]] | None = None,
                        decode_seqs: int = 0, decode_context_tokens: int = 0) -> float:
        """One step of this shape (ms): prefill chunks as (cached_before, new_tokens) pairs plus
        decode_seqs decodes reading decode_context_tokens KV positions in all. NaN without a model."""
    def __len__(self) -> int: ...

# ---- scoring: one call per request ----
@final
class ScoreWeights:
    """Scoring weights (finite, >= 0; ValueError otherwise), validated once and passed per call:
    `RouterCore.score(tokens, role, weights)`. ScoreWeights(**policy_params) works for the
    cache_aware parameter names."""
    def __new__(cls, prefill_weight: float = 1.0, queue_weight: float = 1.0,
                decode_weight: float = 1.0, kv_weight: float = 1.0) -> ScoreWeights: ...
    @property
    def prefill_weight(self) -> float: ...
    @property
    def queue_weight(self) -> float: ...
    @property
    def decode_weight(self) -> float: ...
    @property
    def kv_weight(self) -> float: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...

@final
class Candidate:
    """cost = prefill_cost + decode_cost + kv_cost, all in tokens:
    prefill_cost = prefill_weight * uncached_tokens + queue_weight * queued_prefill_tokens
    decode_cost = decode_weight * (unfinished_tokens + router_tokens)
    kv_cost = kv_weight * kv_pressure * uncached_tokens."""
    engine_id: int
    matched_tokens: int
    uncached_tokens: int  # prompt tokens this engine would have to prefill
    cost: float
    prefill_cost: float   # weight * uncached prefill tokens (+ queued prefill)
    decode_cost: float    # weight * decode load
    kv_cost: float        # weight * KV pressure
    kv_pressure: float    # fraction of KV pages used once this prompt's new pages are allocated
@final
class ScoreResult:
    best: int | None      # None when no healthy engine has the role
    hashes: list[int]
    candidates: list[Candidate]   # sorted by cost ascending (ties: fewer inflight, lower id)
    matches: dict[int, int]       # engine_id -> matched tokens, every engine (eligible or not)
    def matched(self, engine_id: int) -> int:
        """Matched prompt tokens on engine_id (0 when none), eligible or not."""

@final
class EnginePrediction:
    """One engine's predictions for one request (router_core/src/prediction.rs). Times in ms; NaN
    when the engine has sent no latency model (has_latency_model False), the rest still holds."""
    engine_id: int
    role: str                     # 'any' | 'prefill' | 'decode'
    healthy: bool
    has_latency_model: bool
    prefill_chunk_size: int       # the engine's prefill token budget per step (0 = unknown: one step)
    matched_tokens: int           # tokens of the request the engine holds (prefix index, block-aligned)
    prefill_tokens: int           # tokens it would compute: len - min(matched, len - 1)
    prefill_steps: int            # steps that prefill takes at prefill_chunk_size
    prefill_ms: float             # this request's prefill, chunked, running decodes riding along
    prefill_step_ms: float        # its longest step: the step time running decodes see meanwhile
    queued_prefill_tokens: int    # prefill tokens ahead of it on the engine (from Stats)
    kv_wait_ms: float             # KV full: until running requests have freed room for the waiting ones and this one
    queue_ms: float               # time to get through those (chunked, decodes riding along), or kv_wait_ms if longer
    ttft_ms: float                # queue_ms + prefill_ms
    decode_step_ms: float         # one decode step with this request added to the running decodes
    decode_step_now_ms: float     # one decode step of the running decodes alone
    backlog_step_ms: float        # a step with a full prefill chunk beside the decodes (+ this one)
    tpot_slack_ms: float          # tpot_slo_ms - decode_step_ms; inf without an SLO (may be < 0)
    new_pages: int                # KV pages this request allocates (prompt + 1 token, less cached)
    kv_use: float                 # (pages used + new_pages) / pages total (0 when total unknown)
    kv_ok: bool                   # kv_use <= kv_watermark

@final
class RouterCore:
    """Prefix index + engine table + scorer behind one lock-free-to-Python object."""
    index: PrefixIndex    # shared with the core: updates through it are what score sees
    table: EngineTable
    block_size: int
    seed: int
    weights: tuple[float, float, float, float]  # default (prefill, queue, decode, kv)
    def __new__(cls, block_size: int, seed: int, prefill_weight: float = 1.0,
                 queue_weight: float = 1.0, decode_weight: float = 1.0, kv_weight: float = 1.0,
                 max_blocks: int = 16_777_216, approx_ttl_s: float = 120.0) -> RouterCore: ...
    def set_weights(self, prefill_weight: float, queue_weight: float, decode_weight: float,
                    kv_weight: float) -> None:
        """Changes the default weights (calls without `weights`). Prefer per-call ScoreWeights."""
    def record_routed(self, engine_id: int, result: ScoreResult) -> None:
        """Approximate mode: remember that result's prompt blocks went to engine_id (TTL);
        same as index.record_routed(engine_id, result.hashes) without the round trip."""
    def score(self, tokens: Sequence[int], role: str | None = None,
              weights: ScoreWeights | None = None) -> ScoreResult:
        """Hash, match against every engine, score every healthy engine whose role is `role`
        (None or "any" = all; an engine with role "any" serves every role) with `weights` (None =
        the default weights). GIL released."""
    def predict(self, tokens: Sequence[int], tpot_slo_ms: float | None = None,
                kv_watermark: float = 1.0, engines: Sequence[int] | None = None,
                shortlist: int | None = None) -> list[EnginePrediction]:
        """Hash `tokens` (the request's current tokens: prompt + generated so far), match against
        every engine, and predict every engine's times for it, by engine id (healthy or not, any
        role). `engines`: only these (in their order; ids not in the table skipped). `shortlist`
        k: only the healthy engines a placement planner should weigh, the k with the soonest
        first token (role any/prefill) and the k that decode fastest (role any/decode, KV room
        first); every healthy one when there are no more than k. ValueError for empty tokens,
        tpot_slo_ms <= 0 or not finite, kv_watermark outside (0, 1], shortlist 0. GIL released;
        microseconds."""

# ---- session affinity (router_core/src/session_affinity.rs; the fast path uses the same) ----
def session_pick(core: RouterCore, session_id: str, engines: Sequence[int],
                 load_bound: float) -> tuple[int, bool] | None:
    """The engine for `session_id` among `engines` (ids; those healthy in `core`'s table) by
    consistent hashing with bounded load: its home on the ring unless the home's in-flight
    requests would pass ceil(load_bound × (total + 1) / n), then the next within it.
    (engine, overflowed), or None when none of `engines` is healthy. ValueError for
    load_bound < 1."""

# ---- detokenised streaming ----
@final
class DetokenizerVocab:
    @staticmethod
    def from_tokenizer_json(tokenizer_json: str) -> DetokenizerVocab:
        """Byte-level BPE (GPT-2 style) and SentencePiece (Metaspace, <0xNN> byte fallback).
        Added tokens go through the decoder as in `tokenizers`. ValueError for an unreadable file
        or an unsupported model/decoder (WordPiece, CTC). GIL released while parsing."""
    def token_bytes(self, token_id: int) -> bytes:
        """IndexError when out of range."""
    def is_special(self, token_id: int) -> bool: ...
    def __len__(self) -> int: ...

@final
class IncrementalDetokenizer:
    def __new__(cls, vocab: DetokenizerVocab, stop: Sequence[str] = (),
                 skip_special_tokens: bool = True) -> IncrementalDetokenizer: ...
    def push(self, token_ids: Sequence[int]) -> tuple[str, bool]:
        """Feed new ids; returns (text that is safe to emit, stopped). Never splits UTF-8; holds back
        text that could still become a stop string; on a stop match, text ends before the stop.
        The stop string that completes first wins, so output never depends on chunking. After a
        stop, returns ("", True). ValueError for ids outside the vocabulary (nothing consumed).
        Empty stop strings are ignored."""
    def flush(self) -> str:
        """End of stream: whatever was held back (invalid trailing bytes become U+FFFD)."""
    @property
    def text(self) -> str: ...
    @property
    def stopped(self) -> bool: ...
    @property
    def stop_string(self) -> str | None:
        """The stop string that ended the stream, if one did."""

@final
class SseEncoder:
    """OpenAI streaming chunks as ready-to-send `data: {...}\\n\\n` bytes."""
    def __new__(cls, request_id: str, model: str, created: int,
                 kind: Literal["completion", "chat"]) -> SseEncoder: ...
    def role_chunk(self) -> bytes: ...          # chat only: first delta with role=assistant
    def delta(self, text: str, finish_reason: str | None = None) -> bytes: ...
    def delta_tokens(self, detok: IncrementalDetokenizer, token_ids: Sequence[int],
                     finish_reason: str | None = None) -> tuple[bytes, bool]:
        """One call per engine chunk: push ids through `detok`, encode the new text. Returns (bytes
        to send, stopped); bytes are b"" when there is no text and no finish. A stop string sets
        finish_reason "stop" (even when a finish_reason is given for the same token); a given
        finish_reason flushes the detokenizer (end of stream)."""
    def usage(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> bytes:
        """Final chunk with "choices": [] and usage (incl. prompt_tokens_details.cached_tokens)."""
    @staticmethod
    def done() -> bytes: ...                    # b"data: [DONE]\n\n"

# ---- tokenisation (the engine's tokenizer.json and chat template, in Rust) ----
@final
class RouterTokenizer:
    """Text and chat messages to token ids, exactly as the engine's Python EngineTokenizer
    (switchyard_tokenizer/tokenizer.py) and the router's request parsing (pyrouter/http/parse.py) give them:
    the same tokenizer.json through the `tokenizers` crate, the chat template through minijinja
    (trim_blocks, lstrip_blocks, raise_exception, bos_token/eos_token, Python string methods).
    The arguments are EngineTokenizer.to_state()'s keys. Every call releases the GIL.
    ValueError for an unreadable tokenizer.json."""
    def __new__(cls, tokenizer_json: str, chat_template: str | None = None,
                bos_token_id: int | None = None,
                eos_token_ids: Sequence[int] = ...) -> RouterTokenizer: ...
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """A completion prompt's ids (add_special_tokens applies the post-processor, e.g. BOS)."""
    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]],
                            add_generation_prompt: bool = True) -> str:
        """messages: {"role", "content"} dicts, content a string or a list of content parts (the
        text parts are joined); role "developer" renders as "system". ValueError with the router's
        400 message for bad messages, a missing template or a template error."""
    def encode_chat(self, messages: Sequence[Mapping[str, Any]],
                    add_generation_prompt: bool = True) -> list[int]:
        """The chat prompt's ids: the template rendered, encoded without adding special tokens."""
    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """ValueError for ids outside [0, vocab_size)."""
    def token_to_id(self, token: str) -> int | None: ...
    def id_to_token(self, token_id: int) -> str | None: ...
    @property
    def vocab_size(self) -> int:
        """Ids are in [0, vocab_size) (added tokens included)."""
    @property
    def bos_token_id(self) -> int | None: ...
    @property
    def eos_token_ids(self) -> list[int]: ...
    @property
    def chat_template(self) -> str | None:
        """None when the model has none (an empty template counts as none)."""

# ---- mock servers: ONLY for router-overhead benchmarks and fault-injection tests ----
@final
class MockEngineServer:
    """Only in builds with the `mocks` Cargo feature (`make install`; not the wheel users install).
    The mock engine: the real engine proto (switchyard.v1.Engine + grpc.health.v1) served
    with synthetic tokens and no model, by tonic on a tokio runtime thread (never holding the
    GIL). Constructing it binds and starts it (port 0 = any free port); `shutdown` stops it.
    Token ids depend only on the prompt and the position; a pretend prefix cache of block hashes
    (block_hashes with page_size and seed) answers PrepRecv/MatchPrefix and feeds KVEvents.
    Knobs: tokens_per_chunk / chunk_delay_ms (a decode step), coalesce (one message carries every
    token produced so far), fail_rate (UNAVAILABLE before any token), fail_after_tokens (INTERNAL
    mid-stream), abort_after_tokens (finish_reason "abort" mid-stream), fail_remote_send,
    unhealthy_file (NOT_SERVING while it exists), engine_token (Engine RPCs without
    `authorization: Bearer <token>` get UNAUTHENTICATED; "" = open; health stays open),
    push_stats (its load pushed on the KVEvents stream; False plays an engine that does not),
    cache_blocks (its prefix cache evicts the blocks it stored first beyond this many, and
    KVEvents says so; 0 = never evicts). ValueError for bad knobs, OSError when the address cannot
    be bound."""
    def __new__(cls, port: int, host: str = "127.0.0.1", *, threads: int = 1,
                engine_id: str = "mock", role: Literal["any", "prefill", "decode"] = "any",
                served_model: str = "", tokens_per_chunk: int = 1, chunk_delay_ms: float = 0.0,
                coalesce: bool = True,
                fail_rate: float = 0.0, fail_after_tokens: int = 0,
                abort_after_tokens: int = 0, fail_remote_send: bool = False,
                unhealthy_file: str = "", page_size: int = 16, vocab_size: int = 49152,
                seed: int = 0, engine_token: str = "",
                push_stats: bool = True, cache_blocks: int = 0) -> MockEngineServer: ...
    @property
    def port(self) -> int: ...
    def is_running(self) -> bool: ...
    def shutdown(self, grace_s: float = 1.0) -> None:
        """Health NOT_SERVING, new connections refused, open streams get grace_s; then joined.
        A second call is a no-op."""
    def __enter__(self) -> MockEngineServer: ...
    def __exit__(self, *_exc: object) -> None: ...

@final
class MockOpenAIWorker:
    """Only in builds with the `mocks` Cargo feature. An OpenAI-style HTTP worker (axum) for the
    benchmark's anchor routers: /v1/completions,
    /v1/chat/completions (streamed: max_tokens SSE events " w0", " w1", ... then [DONE], in one
    body chunk), health and model-info routes. Same lifecycle as MockEngineServer."""
    def __new__(cls, port: int, host: str = "127.0.0.1", *,
                threads: int = 1) -> MockOpenAIWorker: ...
    @property
    def port(self) -> int: ...
    def is_running(self) -> bool: ...
    def shutdown(self, grace_s: float = 1.0) -> None: ...
    def __enter__(self) -> MockOpenAIWorker: ...
    def __exit__(self, *_exc: object) -> None: ...

# ---- the verbs' errors and answers (router_core/src/python/verb_values.rs) ----
class EngineCallError(Exception):
    """An engine failed a call (or it was cancelled); args are (code, details) too."""
    code: str     # the gRPC status code's name ("UNAVAILABLE", "CANCELLED", ...)
    details: str

class TransferFailed(RuntimeError):
    """RemoteSend failed on the engines' side: a policy may fall back to local prefill."""

class VerbOrderError(RuntimeError):
    """The verbs used in an order the contract forbids (the policy's failure)."""

@final
class KvReservation:
    """PrepRecv's answer: pages reserved on `engine_id` for tokens[matched:end]."""
    @property
    def engine_id(self) -> str: ...
    @property
    def request_id(self) -> str: ...
    @property
    def kv_addr(self) -> bytes: ...
    @property
    def matched(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def page_size(self) -> int: ...
    @property
    def dst_address(self) -> str: ...

@final
class SendResult:
    """RemoteSend's answer, once every byte has landed."""
    bytes_sent: int
    transport: str
    total_ms: float
    cached_on_sender: int
    tail_ms: float

@final
class PendingCall:
    """A Rust future driven from the asyncio loop (pyrouter/runtime/pollable.py)."""
    def poll(self, wake: Callable[[], None]) -> tuple[bool, Any]: ...

@final
class RequestVerbs:
    """One request's executor as a verb-API policy reaches it (each verb: one call into Rust,
    one answer back; the executor records what it takes and does the table's accounting)."""
    def prep_recv(self, engine: int, end: int | None = None) -> PendingCall:
        """Answers a KvReservation."""
    def remote_send(self, engine: int, kv: KvReservation, begin: int | None = None,
                    end: int | None = None) -> PendingCall:
        """Answers a SendResult; raises TransferFailed, VerbOrderError, EngineCallError."""
    @property
    def engine_request_id(self) -> str: ...
    @property
    def generated(self) -> int: ...
    def waiting_on(self) -> tuple[str, str] | None: ...
    @property
    def verbs(self) -> list[tuple[str, str]]: ...

# ---- the placements a policy returns (router_core/src/python/placements.rs) ----
@final
class Dp:
    """The whole request on one engine (data parallel)."""
    def __new__(cls, engine: Any) -> Dp: ...
    @property
    def engine(self) -> str: ...

@final
class Segment:
    """One segment: prefill tokens[begin:], decode at most `max_tokens` (None: to the end);
    the policy decides again after it, or after `control_after_s`."""
    def __new__(cls, engine: Any, max_tokens: int | None = None, *, begin: int = 0,
                control_after_s: float | None = None) -> Segment: ...
    @property
    def engine(self) -> str: ...
    @property
    def begin(self) -> int: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def control_after_s(self) -> float | None: ...

@final
class Pd:
    """Prefill on `prefill` (None: the decode engine prefills), decode on `decode`."""
    def __new__(cls, prefill: Any | None, decode: Any, *, end: int | None = None,
                local_prefill_ratio: float | None = None) -> Pd: ...
    @property
    def prefill(self) -> str | None: ...
    @property
    def decode(self) -> str: ...

@final
class Split:
    """Tandem: `lead` computes `at` prompt tokens (or all of it and `lead_tokens` tokens),
    `follow` the rest."""
    def __new__(cls, lead: Any, follow: Any, at: int = 0, lead_tokens: int = 0) -> Split: ...
    @property
    def lead(self) -> str: ...
    @property
    def follow(self) -> str: ...
    @property
    def at(self) -> int: ...
    @property
    def lead_tokens(self) -> int: ...

@final
class Decision:
    """What the policy runtime answers a decision with; made with `verbs`, it places the request
    in the engine table at once."""
    def __new__(cls, placement: Dp | Segment | Pd | Split, pattern: str,
                params: Sequence[tuple[str, str]], degraded: Sequence[str], policy: str, *,
                run: object | None = None, observer: object | None = None,
                explanation: Mapping[str, object] | None = None,
                verbs: RequestVerbs | None = None) -> Decision: ...

# ---- the values crossing the policy bridge (router_core/src/python/bridge_values.rs) ----
@final
class DecideSpec:
    """A parsed request the front hands the policy runtime's `decide`."""
    @property
    def request_id(self) -> str: ...
    @property
    def engine_request_id(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def retries(self) -> int: ...
    @property
    def traced(self) -> bool: ...
    @property
    def model(self) -> str: ...
    @property
    def kind(self) -> Literal["completion", "chat"]: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def prompt_len(self) -> int: ...
    @property
    def stream(self) -> bool: ...
    @property
    def include_usage(self) -> bool: ...
    @property
    def return_token_ids(self) -> bool: ...
    @property
    def slo_ttft_ms(self) -> float | None: ...
    @property
    def slo_tpot_ms(self) -> float | None: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def session_load_bound(self) -> float | None: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def temperature(self) -> float: ...
    @property
    def top_p(self) -> float: ...
    @property
    def top_k(self) -> int: ...
    @property
    def min_tokens(self) -> int: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def stop(self) -> list[str]: ...
    @property
    def ignore_eos(self) -> bool: ...
    @property
    def response_format(self) -> str: ...
    @property
    def json_schema(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def authorization(self) -> str: ...
    @property
    def client_host(self) -> str: ...

@final
class RequestFailure:
    """The HTTP status and OpenAI error body a failing request answers."""
    def __new__(cls, status: int, body: bytes, retry_after_s: float = 0.0) -> RequestFailure: ...
    @property
    def status(self) -> int: ...
    @property
    def body(self) -> bytes: ...
    @property
    def retry_after_s(self) -> float: ...

@final
class VerbFailed:
    """The policy let a verb's failure through: router_core maps the failure it recorded."""
    def __new__(cls, policy: str) -> VerbFailed: ...

@final
class UseBuiltin:
    """`decide`'s answer when the active policy is a Rust built-in (switched in meanwhile)."""
    def __new__(cls) -> UseBuiltin: ...

@final
class SegmentEnd:
    """A segment ended: the policy's next decision gets it."""
    @property
    def engine_id(self) -> str: ...
    @property
    def reason(self) -> Literal["handoff", "interrupted"]: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def detail(self) -> list[tuple[str, float]]: ...

@final
class Observation:
    """How a placement went, for its observer."""
    kind: Literal["started", "sent", "first_token", "ended"]
    tokens: int
    tail_ms: float
    ttft_s: float
    attempt_s: float
    ok: bool
    tpot_s: float | None
    completion_tokens: int

@final
class OpsCall:
    """A request to a route the policy runtime answers (`ops`)."""
    @property
    def plane(self) -> str: ...  # "public" | "admin"
    @property
    def method(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def query(self) -> str: ...
    @property
    def body(self) -> bytes: ...
    @property
    def authorization(self) -> str: ...
    @property
    def client_host(self) -> str: ...

@final
class OpsReply:
    """`ops`'s answer."""
    def __new__(cls, status: int, content_type: str, body: bytes,
                headers: Sequence[tuple[str, str]] = ...) -> OpsReply: ...
    @property
    def status(self) -> int: ...
    @property
    def content_type(self) -> str: ...
    @property
    def headers(self) -> list[tuple[str, str]]: ...
    @property
    def body(self) -> bytes: ...

# ---- the router's one client per engine (router_core/src/python/engine_client.rs) ----
@final
class EngineRpcClient:
    """One engine's gRPC client (tonic: one lazily opened HTTP/2 connection): the front's
    executor reaches the engine through it (RouterFront.set_engine), and so does the engine's
    upkeep (EngineUpkeep); failures raise EngineCallError; cancelling an awaitable cancels its
    call. pyrouter/engines/rust_client.py wraps it."""
    def __new__(cls, address: str, timeout_s: float, engine_token: str = "",
                tls_ca: bytes | None = None, tls_cert: bytes | None = None,
                tls_key: bytes | None = None, tls_server_name: str | None = None
                ) -> EngineRpcClient: ...
    @property
    def address(self) -> str: ...
    @property
    def timeout_s(self) -> float:
        """The unary calls' deadline when they name none."""
    def model_info(self, timeout_s: float | None = None) -> Awaitable[ModelInfo]: ...
    def configure(self, prefill_chunk_size: int | None = None,
                  timeout_s: float | None = None) -> Awaitable[Configured]:
        """The setting now in force; EngineCallError INVALID_ARGUMENT for a value out of range."""
    def healthy(self, timeout_s: float = 2.0) -> Awaitable[bool]:
        """grpc.health.v1 answers SERVING; False for anything else (never raises for that)."""

@final
class ModelInfo:
    """An engine's ModelInfoResponse (proto/switchyard_rpc/engine.proto), field for field."""
    @property
    def model_id(self) -> str: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def num_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def page_size(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def block_hash_seed(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def max_context(self) -> int: ...
    @property
    def host_id(self) -> str: ...
    @property
    def transfer_addr(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def engine_id(self) -> str: ...
    @property
    def served_model(self) -> str: ...

@final
class Configured:
    """An engine's ConfigureResponse: the value now in force and the one before."""
    @property
    def prefill_chunk_size(self) -> int: ...
    @property
    def previous_prefill_chunk_size(self) -> int: ...

@final
class UpkeepPace:
    """How often each engine is polled: every poll_s for its load, or only every liveness_s
    while it pushes its load on its KV event stream; every interval stretched alike once the
    fleet would poll more than polls_per_s a second (0: no bound)."""
    def __new__(cls, poll_s: float, polls_per_s: float,
                liveness_s: float = ...) -> UpkeepPace: ...
    @property
    def poll_s(self) -> float: ...
    @property
    def liveness_s(self) -> float: ...
    @property
    def polls_per_s(self) -> float: ...
    @property
    def interval_s(self) -> float:
        """Seconds between the polls of an engine that does not push its load, for the fleet now."""
    @property
    def liveness_interval_s(self) -> float:
        """Seconds between the liveness polls of an engine that pushes its load, for the fleet now."""
    @property
    def pushing(self) -> int:
        """Engines whose KV event stream pushes their load now."""
    def set_engines(self, engines: int) -> None: ...

UPKEEP_LIVENESS_S: float

@final
class EngineUpkeep:
    """One engine's upkeep in Rust, from construction until stop(): health and Stats polled at
    `pace` into core's table, KV events followed into core's index. Make it on the client's loop."""
    def __new__(cls, client: EngineRpcClient, core: RouterCore, engine_id: int,
                pace: UpkeepPace) -> EngineUpkeep: ...
    @property
    def healthy(self) -> bool:
        """As of the latest poll (False until the first answers)."""
    @property
    def reason(self) -> str:
        """Why it is unhealthy ("" while healthy)."""
    @property
    def polls(self) -> int: ...
    @property
    def pushes(self) -> int:
        """Stats the engine pushed on its KV event stream, applied so far."""
    @property
    def pushing(self) -> bool:
        """Its KV event stream is open and pushing its load (polled only for liveness then)."""
    def next_change(self, known: bool) -> Awaitable[tuple[bool, str]]:
        """(healthy, reason) once its health differs from `known` (at once if it already does)."""
    def set_core(self, core: RouterCore) -> None:
        """Apply to `core` from now on; the KV view starts over there from a snapshot."""
    def set_draining(self, draining: bool) -> None: ...
    def mark_unhealthy(self, reason: str) -> bool:
        """Out of rotation, its load forgotten, until a poll finds it serving; False when it was
        unhealthy already."""
    def stop(self) -> None: ...

# ---- router replicas (router_core/src/python/peer.rs; pyrouter/replicas/peer_exchange.py) ----
@final
class RouterPeerExchange:
    """The dispatch deltas between router replicas: the RouterPeer service on host:port and a
    stream to every peer (addresses are the peers' RouterPeer ports)."""
    def __new__(cls, core: RouterCore, host: str, port: int, *, peers: Sequence[str],
                peers_dns: str | None = None, engine_token: str = "", flush_s: float = 0.005,
                dns_every_s: float = 5.0) -> RouterPeerExchange: ...
    @property
    def port(self) -> int: ...
    def set_engine(self, num: int, address: str) -> None: ...
    def remove_engine(self, num: int) -> None: ...
    def set_core(self, core: RouterCore) -> None:
        """The router replaced its core: record and apply on this one's engine table."""
    def counters(self) -> tuple[int, int, int, int, int]:
        """(streams up, streams in, deltas received, deltas for unknown engines, batches
        sent)"""
    def shutdown(self) -> None: ...

# ---- the admission queue (router_core/src/front/admission.rs; pyrouter/admission.py) ----
@final
class AdmissionWait:
    """One request's time at the admission gate."""
    priority: int
    wait_s: float
    outcome: Literal["admitted", "queue_full", "timeout", "gone"]

@final
class AdmissionQueueLength:
    """Requests of one priority waiting in the admission queue."""
    priority: int
    length: int

def set_admission(front: RouterFront | InProcessFront, *, max_inflight_per_engine: int,
                  max_queued_prefill_tokens: int, max_queue_len: int, queue_timeout_s: float,
                  weights: Mapping[str, float], default_weight: float = 1.0,
                  predicted: bool = True, margin: float = 0.1, slo_ttft_ms: float | None = None,
                  slo_tpot_ms: float | None = None) -> None:
    """The front's admission gate takes these for requests from now on: the engines are
    saturated when the router's unfinished requests reach max_inflight_per_engine per open engine
    (healthy, under max_queued_prefill_tokens queued); 0 = that limit off, both off = nothing
    queues by count; weights by API key. `predicted`: requests with a TTFT objective (their own,
    else slo_ttft_ms) are admitted by their predicted outcome, `margin` the share a prediction
    may pass its budget by. ValueError for a queue of 0, a non-positive timeout, weight or
    objective, or a margin outside (-1, 10]."""

# The default share a prediction may pass its TTFT budget by and still count as in time.
ADMISSION_DEFAULT_MARGIN: float

def admission_corrections(front: RouterFront | InProcessFront) -> tuple[float, float]:
    """The gate's closed-loop (TTFT, TPOT) corrections now (1: nothing learnt yet)."""

def admission_queue_lengths(front: RouterFront | InProcessFront
                            ) -> list[AdmissionQueueLength]:
    """Requests waiting now, per priority (lowest number first; empty priorities absent)."""

def drain_admission_waits(front: RouterFront | InProcessFront) -> list[AdmissionWait]:
    """Every request's time at the gate since the last call, oldest first."""

@final
class SegmentRecord:
    """One segment of a finished request: its engine, tokens and mean gap between them."""
    engine: int
    tokens: int
    gap_s: float | None

@final
class RequestRecord:
    """A finished request, as the router records it (pyrouter/runtime/records.py)."""
    age_s: float  # seconds since it ended, when drained
    model: str  # the served model it asked for
    policy: str
    pattern: str  # "dp", "pd", an adaptive policy's choice; "none" when no engine took it
    segments: list[SegmentRecord]
    ok: bool
    error_type: str
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float
    prompt_tokens: int
    completion_tokens: int
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None


class _FrontControls:
    """What RouterFront and InProcessFront share."""
    @property
    def inflight(self) -> int: ...
    def set_core(self, core: RouterCore) -> None: ...
    def remove_engine(self, num: int) -> None: ...
    def set_fast_policy(self, name: str | None,
                        weights: tuple[float, float, float, float] | None = None,
                        model: str | None = None) -> None: ...
    def set_session_affinity(self, load_bound: float, from_user: bool) -> None:
        """Session affinity's bound c (>= 1, else ValueError) and whether the body's `user`
        names a session when no X-Session-Id does; for requests from now on."""
    def engine_active(self, num: int) -> int:
        """Requests with work on engine `num` now."""
    def drain_records(self) -> tuple[list[RequestRecord], int]: ...
    def deliver_observations(self) -> None: ...
    def migrate(self, request_id: str, target: int) -> PendingCall:
        """Answers {from, to, outcome, moved_tokens, error}; ValueError for no such request."""
    def copy_context(self, tokens: Sequence[int], source: int, target: int) -> PendingCall:
        """Answers {matched, copied, bytes_sent, transport}."""
    def crossings(self) -> dict[str, int]:
        """Crossings between requests and the policy runtime so far, by kind."""
    def set_retry_budget(self, per_request: int = 2, ratio: float = 0.2,
                         reserve: float = 100.0) -> None: ...


@final
class RouterFront(_FrontControls):
    """The OpenAI routes, /health and /v1/models served in Rust on all cores, and every request
    carried out by router_core's executor; a policy's decisions and every other route go to
    `bridge` (a PolicyRuntime) on the asyncio loop the front was constructed on — once per
    decision, never per token. With `admin_port` a second listener (the admin plane) serves
    /health and hands the rest to the bridge's `ops` with plane "admin"."""
    def __new__(cls, bridge: Any, host: str, port: int, *, tokenizer_json: str,
                chat_template: str | None = None, bos_token_id: int | None = None,
                eos_token_ids: Sequence[int] = ..., served_model: str, max_context: int,
                max_inflight: int, api_keys: Sequence[str] = ...,
                default_temperature: float = 1.0, default_top_p: float = 1.0,
                first_chunk_timeout_s: float = 300.0,
                max_body_bytes: int = 64 << 20, body_timeout_s: float = 30.0,
                idle_timeout_s: float = 30.0, admin_host: str | None = None,
                admin_port: int | None = None) -> RouterFront: ...
    @property
    def port(self) -> int: ...
    @property
    def admin_port(self) -> int | None: ...
    def set_engine(self, num: int, client: EngineRpcClient) -> None: ...
    def set_engine_max_context(self, tokens: int) -> None: ...
    def add_served_model(self, name: str, *, tokenizer_json: str,
                         chat_template: str | None = None, bos_token_id: int | None = None,
                         eos_token_ids: Sequence[int] = ...) -> None: ...
    @property
    def served_models(self) -> list[str]: ...
    def set_engine_model(self, num: int, model: str | None) -> None: ...
    @property
    def fast_policy(self) -> str | None: ...
    def set_draining(self, draining: bool) -> None: ...
    def end_requests(self) -> None: ...
    def set_caller_limits(self, rps: float, burst: int, max_inflight: int) -> None: ...
    def evacuate(self, from_num: int, target: int) -> int: ...
    def retry_budget(self) -> tuple[int, int, float]: ...
    def shutdown(self, grace_s: float = 1.0) -> None: ...


@final
class InProcessFront(_FrontControls):
    """The HTTP front with no listener (tests, the simulator): a request's body runs through
    the parsing, admission gate, request task and executor a client's request runs, with
    `bridge` (a PolicyRuntime) on the loop it was made on, timed by that loop's clock; its spans
    go to `tracer` (None: the process's router tracer). Drive requests with
    switchyard_sim.fake.in_process."""
    def __new__(cls, bridge: Any, tokenizer: RouterTokenizer, vocab: DetokenizerVocab, *,
                served_model: str, max_context: int, max_inflight: int = 4096,
                default_temperature: float = 1.0, default_top_p: float = 1.0,
                first_chunk_timeout_s: float = 300.0,
                tracer: RouterTracer | None = None) -> InProcessFront: ...
    def request(self, kind: Literal["completion", "chat"], body: bytes,
                headers: Sequence[tuple[str, str]] = ...) -> InProcessRequest: ...
    def set_engine(self, num: int, client: EngineRpcClient) -> None: ...
    def set_engine_double(self, num: int, double: Any, address: str) -> None: ...

@final
class InProcessRequest:
    """One in-process request; each poll runs it as far as it can go and answers (ready,
    value), calling `wake` (thread-safely) when it can go further."""
    @property
    def engine_request_id(self) -> str: ...
    def poll_task(self, wake: Callable[[], None]) -> bool: ...
    def poll_head(self, wake: Callable[[], None]
                  ) -> tuple[bool, tuple[int, list[tuple[str, str]]] | None]: ...
    def poll_body(self, wake: Callable[[], None]) -> tuple[bool, bytes | None]: ...
    def outcome(self) -> tuple[list[tuple[str, str]], str, str, int, str]:
        """(verbs, route, policy, segments, last engine-side id), once its task has ended."""
    def disconnect(self) -> None: ...

@final
class RouterTracer:
    """The router's tracer (router_core/src/otel): every span of the router's requests."""

    @staticmethod
    def from_env() -> RouterTracer | None: ...
    @staticmethod
    def to_file(path: str) -> RouterTracer: ...
    def start_span(self, name: str, parent: str, start_ns: int,
                   attributes: Mapping[str, object] | None = None) -> RouterSpan | None: ...
    def flush(self) -> None: ...
    def shutdown(self) -> None: ...


@final
class RouterSpan:
    @property
    def traceparent(self) -> str: ...
    def set_attributes(self, attributes: Mapping[str, object]) -> None: ...
    def set_error(self, description: str) -> None: ...
    def end(self, end_ns: int | None = None) -> None: ...
