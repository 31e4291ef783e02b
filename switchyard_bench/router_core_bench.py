"""`switchyard bench router-core`: router_core's per-request hot path timed through the Python
bindings, on the same workload as `cargo bench -p router_core`.

Cases: hash+match+score of a 2048-token prompt (a Python list, as the router has it) with 8, 64
and 256 engines over ~1M indexed blocks; KV event ingestion; detokenise+SSE-encode per token with
the real SmolLM2 tokenizer; tokenisation of completion and chat requests (Rust RouterTokenizer vs
the Python path). Each line prints p50/p99 (or a rate), the issue's target and the ratio to it;
the scoring lines also print the same run's floor (passing the prompt across the binding and
back, no work) and, at 64 engines, a pure-Python baseline of the same work.
"""
from __future__ import annotations

import argparse
import array
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

import router_core

BLOCK = 16
SEED = 0x5EED
# The same step-time model as router_core/benches/common/mod.rs (ms per unit of each term).
_LATENCY_MODEL = {"const": 2.0, "prefill_tokens": 0.05, "prefill_attention": 1e-6,
                  "decode_seqs": 0.5, "decode_context": 1e-4}
VOCAB = 49_152
SHARED_TOKENS = 512
TARGET_SCORE_P99_US = 20.0
TARGET_EVENTS_PER_S = 2.0e6
TARGET_NS_PER_TOKEN = 1000.0


@dataclass(slots=True)
class BenchConfig:
    engines: list[int]
    blocks: int
    requests: int
    prompt_tokens: int
    detok_tokens: int
    synthetic_vocab: bool
    baseline: bool
    tokenize: bool = True

    def __post_init__(self) -> None:
        if not self.engines or min(self.engines) < 1:
            raise ValueError("--engines needs positive counts")
        if self.prompt_tokens < 2 * SHARED_TOKENS or self.prompt_tokens % BLOCK:
            raise ValueError(f"--prompt-tokens must be a multiple of {BLOCK}, >= {2 * SHARED_TOKENS}")
        if self.blocks < 1000 or self.requests < 100 or self.detok_tokens < 100:
            raise ValueError("--blocks >= 1000, --requests >= 100, --detok-tokens >= 100")


def _parse(rest: Sequence[str]) -> BenchConfig:
    p = argparse.ArgumentParser(prog="switchyard bench router-core")
    p.add_argument("--engines", default="8,64,256", help="comma-separated engine counts")
    p.add_argument("--blocks", type=int, default=1_000_000, help="distinct indexed blocks")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--prompt-tokens", type=int, default=2048)
    p.add_argument("--detok-tokens", type=int, default=20_000)
    p.add_argument("--synthetic-vocab", action="store_true",
                   help="skip loading SmolLM2's tokenizer (about 12 s); use a byte-level toy vocab")
    p.add_argument("--no-baseline", action="store_true", help="skip the pure-Python baseline")
    p.add_argument("--no-tokenize", action="store_true",
                   help="skip tokenisation (Rust RouterTokenizer vs the Python path)")
    a = p.parse_args(list(rest))
    return BenchConfig([int(e) for e in a.engines.split(",")], a.blocks, a.requests,
                       a.prompt_tokens, a.detok_tokens, a.synthetic_vocab, not a.no_baseline,
                       not a.no_tokenize)


# ---- workload (mirrors router_core/benches/common/mod.rs in shape, not in exact ids) ----
def _tokens(stream: int, n: int) -> np.ndarray:
    return np.random.default_rng(stream).integers(0, VOCAB, size=n, dtype=np.uint32)


class Workload:
    def __init__(self, cfg: BenchConfig) -> None:
        self.cfg = cfg
        self.shared = _tokens(0, SHARED_TOKENS)
        per_doc = (cfg.prompt_tokens - SHARED_TOKENS) // BLOCK
        self.docs = -(-(cfg.blocks - SHARED_TOKENS // BLOCK) // per_doc)
        self.doc_hashes = [router_core.block_hashes(self.document(d).tolist(), BLOCK, SEED)
                           for d in range(self.docs)]

    def document(self, doc: int) -> np.ndarray:
        return np.concatenate([self.shared, _tokens(doc + 1, self.cfg.prompt_tokens - SHARED_TOKENS)])

    def request(self, i: int) -> list[int]:
        half = self.cfg.prompt_tokens // 2
        doc = self.document((i * 7919) % self.docs)[:half]
        return [int(t) for t in np.concatenate([doc, _tokens(1_000_000 + i, half)])]

    def core(self, engines: int) -> router_core.RouterCore:
        core = router_core.RouterCore(BLOCK, SEED)
        for e in range(engines):
            core.table.upsert(e, "any")
            core.table.update_stats(e, (e % 7) * 100, e % 5, (e % 11) * 50, (e % 13) * 100,
                                    4096, 10.0, latency_model=_LATENCY_MODEL,
                                    prefill_chunk_size=512, decode_context_tokens=(e % 5) * 1500)
            core.index.add_engine(e)
        seq = [0] * engines
        for doc, hashes in enumerate(self.doc_hashes):
            e = doc % engines
            seq[e] += 1
            core.index.apply_events(e, seq[e], seq[e], hashes, [])
        shared = self.doc_hashes[0][: SHARED_TOKENS // BLOCK]
        for e in range(engines):
            core.index.apply_events(e, seq[e] + 1, seq[e] + 1, shared, [])
        return core


# ---- timing ----
def _percentiles_us(fn: Callable[[int], object], n: int) -> tuple[float, float]:
    for i in range(min(200, n)):
        fn(i)
    samples = []
    for i in range(n):
        t = time.perf_counter_ns()
        fn(i)
        samples.append(time.perf_counter_ns() - t)
    samples.sort()
    return samples[len(samples) // 2] / 1e3, samples[int((len(samples) - 1) * 0.99)] / 1e3


def _ratio_line(name: str, p50: float, p99: float, floor_p50: float) -> None:
    print(f"  {name:<38} p50 {p50:8.2f} us  p99 {p99:8.2f} us  "
          f"p99/target {p99 / TARGET_SCORE_P99_US:5.2f}x  p50/floor {p50 / floor_p50:5.1f}x")


def _python_baseline(work: Workload, engines: int, prompts: list[list[int]]) -> tuple[float, float]:
    """The same hash+match+score in pure Python (xxhash + dict of engine bitmasks)."""
    import struct

    import xxhash

    holders: dict[int, int] = {}
    for doc, hashes in enumerate(work.doc_hashes):
        for h in hashes:
            holders[h] = holders.get(h, 0) | (1 << (doc % engines))
    for h in work.doc_hashes[0][: SHARED_TOKENS // BLOCK]:
        holders[h] = (1 << engines) - 1
    loads = [((e % 7) * 100, (e % 11) * 50) for e in range(engines)]

    def run(i: int) -> int:
        tokens = prompts[i % len(prompts)]
        parent, active, depth = 0, (1 << engines) - 1, [0] * engines
        for b in range(len(tokens) // BLOCK):
            block = tokens[b * BLOCK:(b + 1) * BLOCK]
            parent = xxhash.xxh3_64_intdigest(struct.pack("<Q", parent) +
                                              struct.pack(f"<{BLOCK}I", *block), seed=SEED)
            active &= holders.get(parent, 0)
            if not active:
                break
            for e in range(engines):
                if active >> e & 1:
                    depth[e] = b + 1
        costs = [(len(tokens) - depth[e] * BLOCK + q + u, e) for e, (q, u) in enumerate(loads)]
        return min(costs)[1]

    return _percentiles_us(run, min(len(prompts), 500))


def _bench_scoring(cfg: BenchConfig, work: Workload) -> None:
    prompts = [work.request(i) for i in range(min(cfg.requests, 1000))]
    print(f"hash+match+score, {cfg.prompt_tokens}-token prompts as Python lists, "
          f"{cfg.blocks} indexed blocks ({work.docs} documents)")
    floor = _percentiles_us(lambda i: router_core.block_hashes(prompts[i % len(prompts)], 1 << 20, 0),
                            cfg.requests)
    print(f"  {'floor: pass the prompt in, no work':<38} p50 {floor[0]:8.2f} us  p99 {floor[1]:8.2f} us")
    for engines in cfg.engines:
        _bench_scoring_at(cfg, work, engines, prompts, floor[0])


def _bench_scoring_at(cfg: BenchConfig, work: Workload, engines: int, prompts: list[list[int]],
                      floor_p50: float) -> None:
    core = work.core(engines)
    p50, p99 = _percentiles_us(lambda i: core.score(prompts[i % len(prompts)]), cfg.requests)
    _ratio_line(f"{engines} engines: score()", p50, p99, floor_p50)
    p50c, p99c = _percentiles_us(lambda i: core.score(prompts[i % len(prompts)]).candidates,
                                 cfg.requests)
    _ratio_line(f"{engines} engines: score().candidates", p50c, p99c, floor_p50)
    arrays = [array.array("I", p) for p in prompts[:200]]
    p50a, p99a = _percentiles_us(lambda i: core.score(arrays[i % len(arrays)]), cfg.requests)
    _ratio_line(f"{engines} engines: score(array('I'))", p50a, p99a, floor_p50)
    if engines == 64 and cfg.baseline:
        base = _python_baseline(work, engines, prompts)
        print(f"  {'64 engines: pure-Python baseline':<38} p50 {base[0]:8.2f} us  "
              f"p99 {base[1]:8.2f} us  (router_core score() is {base[0] / p50:.0f}x faster at p50)")
    print(f"    index memory {core.index.memory_bytes() / 2**20:.0f} MiB, "
          f"{core.index.num_blocks()} blocks")


def _bench_ingestion(work: Workload) -> None:
    """Steady state: batch i stores 32 new blocks on engine i % 64 and evicts that engine's
    blocks from 64 batches earlier; an event is one stored or evicted block."""
    core = work.core(64)
    rng = np.random.default_rng(99)
    batches = [rng.integers(1, 2**63, size=32, dtype=np.int64).tolist() for _ in range(20_000)]
    start = time.perf_counter()
    events = 0
    for i, stored in enumerate(batches):
        evicted = batches[i - 64] if i >= 64 else []
        seq = 1_000_000 + i // 64
        core.index.apply_events(i % 64, seq, seq, stored, evicted)
        events += len(stored) + len(evicted)
    rate = events / (time.perf_counter() - start)
    print(f"KV event ingestion through apply_events (32 stored + 32 evicted per batch, 64 engines, "
          f"{core.index.num_blocks()} blocks): {rate / 1e6:.2f}M events/s  "
          f"(target > 2M/s on one core: {rate / TARGET_EVENTS_PER_S:.2f}x)")


def _tokenizer_json(cfg: BenchConfig) -> tuple[str, str]:
    if cfg.synthetic_vocab:
        import json

        vocab = {chr(c): c - 33 for c in range(33, 127)}
        for i in range(5000):
            vocab.setdefault("Ġw" + format(i, "x"), len(vocab))
        return json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": []},
                           "decoder": {"type": "ByteLevel"}}), "synthetic byte-level vocab"
    from switchyard_tokenizer.default_model import default_model_path
    from switchyard_tokenizer.tokenizer import EngineTokenizer

    return EngineTokenizer.from_gguf(default_model_path()).to_json(), "SmolLM2 tokenizer"


def _bench_detok(cfg: BenchConfig) -> None:
    text, name = _tokenizer_json(cfg)
    vocab = router_core.DetokenizerVocab.from_tokenizer_json(text)
    rng = np.random.default_rng(5)
    ids = [int(t) for t in rng.integers(100, len(vocab), size=cfg.detok_tokens)]
    for chunk in (1, 4):
        enc = router_core.SseEncoder("chatcmpl-bench", "SmolLM2-135M-Instruct", 0, "chat")
        detok = router_core.IncrementalDetokenizer(vocab, ["\n\nUser:"])
        chunks = [ids[i:i + chunk] for i in range(0, len(ids), chunk)]
        timings = []
        for part in chunks:
            t = time.perf_counter_ns()
            enc.delta_tokens(detok, part)
            timings.append((time.perf_counter_ns() - t) / len(part))
        ns = statistics.median(timings)
        print(f"detokenise+SSE encode via delta_tokens ({name}, {chunk}-token chunks): "
              f"{ns:.0f} ns/token median  (target < 1000 ns: {ns / TARGET_NS_PER_TOKEN:.2f}x)")


def run(args: argparse.Namespace) -> int:
    cfg = _parse(getattr(args, "rest", []) or [])
    print(f"router_core {router_core.__version__} through the Python bindings")
    work = Workload(cfg)
    _bench_scoring(cfg, work)
    _bench_ingestion(work)
    _bench_detok(cfg)
    if cfg.tokenize:
        from switchyard_bench.tokenize_bench import bench_tokenize

        bench_tokenize()
    return 0
