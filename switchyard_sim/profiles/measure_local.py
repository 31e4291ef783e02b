"""Measure the simulator's link, contention and receiver constants on THIS machine
(switchyard_sim/send_cost.py, transfer.py, cores.py), and print them as profile fields.

  python -m switchyard_sim.profiles.measure_local [--reps 5] [--json FILE]

1. The shm link, in this process, with the engine's own code (LayerPump's gather into the
   staging ring, SocketLink, TransferListener writing a KVStorage of the default model's
   layout): the sender's step-thread time per chunk (`send_chunk_ms`: 1-token chunks) and per
   byte (`gather_gbps`: 512-4096-token chunks), and the receiver's (`link_chunk_ms`,
   `link_gbps`: its time writing each chunk into its pages).
2. Two real engines (fast mode, one torch thread each, as `switchyard serve --engines 2` on two
   cores): a 512-token prefill and 32 decode steps on engine A (the engine's own step_ms), alone
   and while engine B prefills without pause, interleaved: `contention` = together / alone.
   Then engine B's decode steps alone and while A prefills and sends it K/V without pause:
   `recv_step_share` = B's step time beyond the contention / the link work that landed
   meanwhile (from 1.).
   And the per-transfer latency: a 16-token transfer-only send's time less the chunk model's.
Medians over --reps; the load average is printed with the figures (the machine may be shared).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

LAYERS, HEADS, HEAD_DIM = 30, 3, 64  # SmolLM2-135M (the default model), bf16 KV (fast mode)
PAGE = 16
SEND_TOKENS, SEND_PROMPTS = 512, 16  # the receiver measurement's cached prompts on engine A


def measure_link(reps: int) -> dict[str, Any]:
    from engine.core.outputs import SendChunk
    from engine.kvcache.kv_storage import KVStorage
    from engine.server.kv_sender import LayerPump
    from engine.transfer import KVLayout, TransferListener
    from engine.transfer.link import SocketLink

    layout = KVLayout(LAYERS, HEADS, HEAD_DIM, "bfloat16")
    pages = 1024
    src = KVStorage(LAYERS, pages, PAGE, HEADS, HEAD_DIM, torch.bfloat16)
    dst = KVStorage(LAYERS, pages, PAGE, HEADS, HEAD_DIM, torch.bfloat16)
    table = list(range(pages))
    busy: list[float] = []

    class Sink:
        def write_kv(self, request_id: str, layer: int, start: int, k: torch.Tensor,
                     v: torch.Tensor) -> None:
            t0 = time.perf_counter()
            dst.write(layer, table, start, k, v)
            busy.append(time.perf_counter() - t0)

    listener = TransferListener(Sink(), layout)
    link = SocketLink("127.0.0.1", listener.port, layout, staging_bytes=64 << 20)
    per_token_layer = layout.bytes_per_token_layer
    sizes = [1, 64, 512, 1024, 2048, 4096]
    send_ms: dict[int, list[float]] = {n: [] for n in sizes}
    link_ms: dict[int, list[float]] = {n: [] for n in sizes}
    recv_ms: dict[int, list[float]] = {n: [] for n in sizes}
    try:
        for _ in range(reps):
            for n in sizes:
                count = max(2 * LAYERS, 4 * LAYERS * 64 // n)  # enough to time
                session = link.open_session(f"m{n}")
                pump = LayerPump(session, src, layout, 0, 16384, lambda: None)
                busy.clear()
                t0 = time.perf_counter()
                for i in range(count):
                    start = (i * n) % (pages * PAGE - n)
                    pump.on_layer(SendChunk(i % LAYERS, start, start + n, table))
                t_sent = time.perf_counter()
                result = session.finish()
                if pump.error is not None:
                    raise pump.error
                send_ms[n].append((t_sent - t0) * 1e3 / count)
                link_ms[n].append(result.transfer_ms / count)
                recv_ms[n].append(sum(busy) * 1e3 / count)
    finally:
        link.close()
        listener.close()
    med = {n: (statistics.median(send_ms[n]), statistics.median(link_ms[n]),
               statistics.median(recv_ms[n])) for n in sizes}
    for n, (s, lk, r) in med.items():
        print(f"  chunk of {n:5d} tokens ({n * per_token_layer:8d} B): sender {s:.4f} ms, "
              f"link {lk:.4f} ms, receiver writes {r:.4f} ms per chunk", flush=True)
    # Per chunk: the cheaper of the 1- and 64-token chunks (their bytes are next to nothing);
    # per byte: what the large chunks take beyond that, as a rate (the median over them).
    def fixed(column: int) -> float:
        return min(med[1][column], med[64][column])

    def rate(column: int) -> float:
        return statistics.median(n * per_token_layer / ((med[n][column] - fixed(column)) * 1e6)
                                 for n in sizes if n >= 512 and med[n][column] > fixed(column))

    # The link's own time is the receiver's (taking a chunk in and writing it into pages):
    # first commit -> last acknowledgement is bound by the sender's gathers here, which the
    # simulator charges to the sender's step instead.
    return {"send_chunk_ms": round(fixed(0), 4), "gather_gbps": round(rate(0), 3),
            "link_chunk_ms": round(fixed(2), 4), "link_gbps": round(rate(2), 3),
            "sender_bound_link_gbps": round(rate(1), 3),
            "chunks": [{"tokens": n, "bytes": n * per_token_layer, "sender_ms": round(m[0], 4),
                        "receiver_ms": round(m[2], 4)} for n, m in med.items()]}


async def _prefill_and_decode(client: Any, rng: random.Random, vocab: int, prompt: int,
                              decodes: int) -> tuple[float, float]:
    """One fresh request: (its prefill ms, its median decode step ms), as the engine timed them."""
    from switchyard_engine_api.client import sampling

    tokens = [rng.randrange(100, vocab) for _ in range(prompt)]
    prefill, steps = 0.0, []
    call = client.start_generate(f"m-{rng.random()}", tokens,
                                 params=sampling(decodes + 1, ignore_eos=True))
    async for chunk in call:
        if chunk.prefill_ms:
            prefill = chunk.prefill_ms
        elif chunk.token_ids:
            steps.append(chunk.step_ms)
    return prefill, statistics.median(steps) if steps else 0.0


async def _keep_prefilling(client: Any, rng: random.Random, vocab: int, stop: asyncio.Event
                           ) -> None:
    from switchyard_engine_api.client import sampling

    while not stop.is_set():
        tokens = [rng.randrange(100, vocab) for _ in range(1024)]
        await client.generate(f"busy-{rng.random()}", tokens, params=sampling(1))


async def _keep_sending(src: Any, dst: Any, prompts: list[list[int]], stop: asyncio.Event,
                        sent: list[int]) -> None:
    """Cached prompts round the sender's set (the receiver's small pool has evicted them by
    the time they come round again): the sender only gathers, the link's work dominates."""
    n = 0
    while not stop.is_set():
        tokens = prompts[n % len(prompts)]
        n += 1
        rid = f"recv-{n}-{random.random()}"
        kv = await dst.prep_recv(rid, tokens, end=len(tokens), lease_s=600)
        resp = await src.remote_send(rid, tokens, kv.kv_addr, dst.address, kv.matched_len,
                                     kv.end, transport="shm")
        await dst.abort(rid)
        sent.append(resp.bytes_sent)


async def measure_engines(addrs: list[str], reps: int, link: dict[str, Any]
                          ) -> dict[str, Any]:
    from switchyard_engine_api.client import EngineClient, sampling

    rng = random.Random(0)
    out: dict[str, Any] = {}
    async with EngineClient(addrs[0], 900) as a, EngineClient(addrs[1], 900) as b:
        vocab = (await a.model_info()).vocab_size
        await _prefill_and_decode(a, rng, vocab, 64, 4)  # warm both
        await _prefill_and_decode(b, rng, vocab, 64, 4)
        alone: list[tuple[float, float]] = []
        together: list[tuple[float, float]] = []
        for _ in range(reps):
            alone.append(await _prefill_and_decode(a, rng, vocab, 512, 32))
            stop = asyncio.Event()
            busy = asyncio.create_task(_keep_prefilling(b, rng, vocab, stop))
            await asyncio.sleep(0.3)
            together.append(await _prefill_and_decode(a, rng, vocab, 512, 32))
            stop.set()
            await busy
        pre = statistics.median(t[0] for t in together) / statistics.median(t[0] for t in alone)
        dec = statistics.median(t[1] for t in together) / statistics.median(t[1] for t in alone)
        print(f"  engine A alone: prefill {[round(x[0]) for x in alone]} ms, decode step "
              f"{[round(x[1], 1) for x in alone]} ms", flush=True)
        print(f"  engine A while B prefills: prefill {[round(x[0]) for x in together]} ms, "
              f"decode step {[round(x[1], 1) for x in together]} ms", flush=True)
        out["contention_prefill"], out["contention_decode"] = round(pre, 3), round(dec, 3)
        out["steps"] = {"prefill_512_ms": {"alone": [round(x[0], 1) for x in alone],
                                           "together": [round(x[0], 1) for x in together]},
                        "decode_ms": {"alone": [round(x[1], 2) for x in alone],
                                      "together": [round(x[1], 2) for x in together]}}

        # Receiver: B decodes while A sends it cached K/V without pause; what B loses beyond
        # the contention with a busy A (measured above) is its share of the link work.
        prompts = [[rng.randrange(100, vocab) for _ in range(SEND_TOKENS)]
                   for _ in range(SEND_PROMPTS)]
        for i, tokens in enumerate(prompts):
            await a.generate(f"warm-{i}", tokens, params=sampling(1))
        quiet, loaded, shares = list[float](), list[float](), list[float]()
        per_layer = 2 * HEADS * HEAD_DIM * 2
        for _ in range(reps):
            quiet.append((await _prefill_and_decode(b, rng, vocab, 64, 256))[1])
            stop, sent = asyncio.Event(), list[int]()
            sender = asyncio.create_task(_keep_sending(a, b, prompts, stop, sent))
            t0 = time.perf_counter()
            step = (await _prefill_and_decode(b, rng, vocab, 64, 256))[1]
            window = time.perf_counter() - t0
            stop.set()
            await sender
            loaded.append(step)
            landed = sum(sent)
            work_s = (landed / (link["link_gbps"] * 1e9)
                      + len(sent) * LAYERS * link["link_chunk_ms"] / 1e3) if landed else 0.0
            steps = window / (step / 1e3) if step else 0.0
            extra_s = (step - quiet[-1] * dec) / 1e3 * steps
            shares.append(extra_s / work_s if work_s else 0.0)
            print(f"  engine B decode step alone {quiet[-1]:.1f} ms, receiving {step:.1f} ms "
                  f"({len(sent)} sends of {landed // max(1, len(sent)):,} B in {window:.1f} s, "
                  f"{work_s * 1e3:.0f} ms of link work)", flush=True)
        out["recv_step_share"] = round(min(1.0, max(0.0, statistics.median(shares))), 3)

        # Per-transfer latency: a tiny transfer-only send less its chunks' modelled time.
        fixed = []
        for rep in range(reps):
            small = [rng.randrange(100, vocab) for _ in range(16)]
            await a.generate(f"warm-small-{rep}", small, params=sampling(1))
            rid = f"small-{rep}"
            kv = await b.prep_recv(rid, small, end=len(small), lease_s=60)
            resp = await a.remote_send(rid, small, kv.kv_addr, b.address, kv.matched_len,
                                       kv.end, transport="shm")
            await b.abort(rid)
            chunks_ms = LAYERS * (link["link_chunk_ms"] + 16 * per_layer
                                  / (link["link_gbps"] * 1e6))
            fixed.append(resp.total_ms - chunks_ms)
        out["link_latency_ms"] = round(max(0.0, statistics.median(fixed)), 3)
        print(f"  16-token transfer-only send: total {resp.total_ms:.2f} ms; per-transfer "
              f"latency {[round(x, 2) for x in fixed]} ms", flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--skip-engines", action="store_true", help="the in-process link only")
    a = p.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    print("1. the shm link, in process:", flush=True)
    link = measure_link(a.reps)
    figures: dict[str, Any] = dict(link)
    if not a.skip_engines:
        from engine.server.launcher import EngineSpec, start_engines, stop_engines

        log_dir = Path(tempfile.mkdtemp(prefix="switchyard-measure-"))
        print(f"2. two engines (logs in {log_dir}):", flush=True)
        # B's pool holds a few of A's cached prompts at most (see _keep_sending).
        specs = [EngineSpec(name, num_pages=pages, threads=1, mode="fast",
                            env={"SWITCHYARD_LOG_LEVEL": "WARNING"})
                 for name, pages in (("engine-a", 2048), ("engine-b", 256))]
        engines = start_engines(specs, log_dir)
        try:
            figures.update(asyncio.run(measure_engines([e.address for e in engines], a.reps,
                                                       link)))
        finally:
            stop_engines(engines)
        figures["contention"] = round(
            (figures["contention_prefill"] + figures["contention_decode"]) / 2, 3)
        figures["cores"] = os.cpu_count() or 1
    figures["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(figures, indent=1))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
