"""`switchyard bench transfer`: KV transfer bandwidth per transport and how much of it hides
behind the sender's prefill, between real engine processes on this machine.

Three engines: a sender and two receivers. Per range size and transport:
  pipelined   RemoteSend of fresh tokens to receiver 1: the sender prefills while layers stream
              out (compute_ms, and tail_ms = transfer time still exposed after compute ended);
  transfer    RemoteSend of the same, now cached, tokens to receiver 2: no compute, so its
              transfer_ms is the pure cost of moving the bytes (GB/s);
  hidden      1 - tail_ms / transfer-only ms: the share of the transfer the layer pipelining hid.
memcpy GB/s (single-threaded torch copy, measured in this run) is the floor `shm` is compared to.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.server.launcher import start_engines, stop_engines
from switchyard_engine_api.client import EngineClient


@dataclass(slots=True)
class Row:
    tokens: int
    transport: str
    bytes: int
    transfer_ms: float
    compute_ms: float
    tail_ms: float
    memcpy_gbps: float  # measured right before this row's transfers (the machine's load drifts)

    @property
    def gbps(self) -> float:
        return self.bytes / (self.transfer_ms * 1e6) if self.transfer_ms > 0 else 0.0

    @property
    def hidden(self) -> float:
        return max(0.0, min(1.0, 1 - self.tail_ms / self.transfer_ms)) if self.transfer_ms else 0.0


def memcpy_gbps(nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """Best-of-n single-threaded copy bandwidth (read + write of nbytes counts as nbytes moved)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        src = torch.ones(nbytes, dtype=torch.uint8)
        dst = torch.zeros_like(src)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            dst.copy_(src)
            best = min(best, time.perf_counter() - t0)
        return nbytes / best / 1e9
    finally:
        torch.set_num_threads(threads)


async def _send(src: EngineClient, dst: EngineClient, rid: str, tokens: list[int],
                transport: str) -> tuple[int, float, float, float]:
    # A long lease: an 8192-token prefill on one CPU thread can take longer than the default.
    kv = await dst.prep_recv(rid, tokens, end=len(tokens), lease_s=3600)
    resp = await src.remote_send(rid, tokens, kv.kv_addr, dst.address, kv.matched_len, kv.end,
                                 transport=transport)
    await dst.abort(rid)  # release the lease; the received KV stays in dst's cache
    assert resp.bytes_sent == resp.bytes_expected, resp
    return resp.bytes_sent, resp.transfer_ms, resp.compute_ms, resp.tail_ms


async def _measure(addrs: list[str], sizes: list[int], transports: list[str],
                   repeats: int, vocab: int) -> list[Row]:
    rng = random.Random(0)
    rows: list[Row] = []
    async with EngineClient(addrs[0], 900) as s, EngineClient(addrs[1], 900) as r1, \
            EngineClient(addrs[2], 900) as r2:
        for n in sizes:
            for transport in transports:
                tokens = [rng.randrange(100, vocab) for _ in range(n)]
                tag = f"{n}-{transport}"
                nbytes, _x, compute_ms, tail_ms = await _send(s, r1, f"pipe-{tag}", tokens,
                                                              transport)
                floor = memcpy_gbps()
                best = float("inf")
                for rep in range(repeats):
                    # A fresh receiver request each time; receiver 2 must not hold the range yet.
                    fresh = [rng.randrange(100, vocab)] + tokens[1:] if rep else tokens
                    if rep:
                        await _send(s, r1, f"warm-{tag}-{rep}", fresh, transport)
                    _b, transfer_ms, _c, _t = await _send(s, r2, f"x-{tag}-{rep}", fresh, transport)
                    best = min(best, transfer_ms)
                rows.append(Row(n, transport, nbytes, best, compute_ms, tail_ms, floor))
                print(f"  {rows[-1]}", flush=True)
    return rows


def _table(rows: list[Row], floor: float) -> str:
    lines = [f"memcpy floor (1 thread) before starting the engines: {floor:.2f} GB/s; each row's "
             "own floor is measured right before its transfers", "",
             "| tokens | transport | bytes moved | transfer ms | GB/s | memcpy GB/s | vs memcpy | "
             "sender prefill ms | exposed tail ms | hidden by pipelining |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r.tokens} | {r.transport} | {r.bytes:,} | {r.transfer_ms:.1f} | {r.gbps:.2f} | "
            f"{r.memcpy_gbps:.2f} | {r.gbps / r.memcpy_gbps:.0%} | {r.compute_ms:.0f} | "
            f"{r.tail_ms:.1f} | {r.hidden:.0%} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    p = argparse.ArgumentParser(prog="switchyard bench transfer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="512,2048,8192", help="token ranges to move")
    p.add_argument("--transports", default="shm,tcp")
    p.add_argument("--repeats", type=int, default=2, help="transfer-only repeats (best is kept)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per engine")
    p.add_argument("--num-pages", type=int, default=2048)
    p.add_argument("--mode", default="exact", choices=["exact", "fast"],
                   help="engines' mode: exact = float32 KV (the figures so far), fast = bf16 KV")
    opts = p.parse_args(getattr(args, "rest", None) or [])
    sizes = [int(x) for x in opts.sizes.split(",")]
    transports = [t for t in opts.transports.split(",") if t]
    if min(sizes) <= 0 or opts.repeats <= 0 or not set(transports) <= {"shm", "tcp"}:
        p.error("sizes and repeats must be positive; transports are shm and/or tcp")
    if opts.num_pages * 16 < 2 * max(sizes) + 32:
        p.error(f"--num-pages {opts.num_pages} is too small for {max(sizes)}-token ranges")

    floor = memcpy_gbps()
    log_dir = Path(tempfile.mkdtemp(prefix="switchyard-bench-"))
    print(f"starting 3 engines (logs in {log_dir}) ...", flush=True)
    engines = start_engines(["sender", "recv-1", "recv-2"], log_dir, opts.num_pages, opts.threads,
                            mode=opts.mode)
    try:
        async def go() -> list[Row]:
            async with engines[0].client() as c:
                vocab = (await c.model_info()).vocab_size
            return await _measure([e.address for e in engines], sizes, transports, opts.repeats,
                                  vocab)

        rows = asyncio.run(go())
    finally:
        stop_engines(engines)
    print(_table(rows, floor))
    return 0
