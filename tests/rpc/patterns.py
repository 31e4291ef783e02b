"""The orchestration patterns, composed from the three verbs exactly as a router policy would."""
from __future__ import annotations

from dataclasses import dataclass, field

from switchyard_engine_api.client import EngineClient, Generation, sampling
from switchyard_rpc import engine_pb2 as pb

MAX_TOKENS = 8


@dataclass
class PatternRun:
    tokens: list[int]
    sends: list[pb.RemoteSendResponse] = field(default_factory=list)
    matched: int = 0


async def reference(engine: EngineClient, rid: str, prompt: list[int]) -> list[int]:
    gen = await engine.generate(rid, prompt, params=sampling(MAX_TOKENS, ignore_eos=True))
    assert gen.finish_reason == "length", gen
    return gen.token_ids


async def transfer(src: EngineClient, dst: EngineClient, rid: str, tokens: list[int], end: int,
                   run: PatternRun, transport: str = "", lease_s: float = 0.0) -> int:
    """PrepRecv on dst + RemoteSend from src of whatever dst lacks; returns the resolved end."""
    kv = await dst.prep_recv(rid, tokens, end=end, lease_s=lease_s)
    run.matched = kv.matched_len
    if kv.matched_len < kv.end:
        run.sends.append(await src.remote_send(rid, tokens, kv.kv_addr, dst.address,
                                               begin=kv.matched_len, end=kv.end,
                                               transport=transport))
    return int(kv.end)


async def generate_rest(engine: EngineClient, rid: str, tokens: list[int], begin: int,
                        max_tokens: int = MAX_TOKENS) -> Generation:
    gen = await engine.generate(rid, tokens, begin=begin,
                                params=sampling(max_tokens, ignore_eos=True))
    assert gen.finish_reason == "length", gen
    return gen


async def pd(p: EngineClient, d: EngineClient, rid: str, prompt: list[int],
             transport: str = "") -> PatternRun:
    run = PatternRun([])
    end = await transfer(p, d, rid, prompt, -1, run, transport)
    run.tokens = (await generate_rest(d, rid, prompt, end)).token_ids
    return run


async def balanced_pd(p: EngineClient, d: EngineClient, rid: str, prompt: list[int],
                      fraction: float) -> PatternRun:
    decode_start = min(len(prompt) - 1, max(1, int(len(prompt) * fraction)))
    run = PatternRun([])
    await transfer(p, d, rid, prompt, decode_start, run)
    run.tokens = (await generate_rest(d, rid, prompt, decode_start)).token_ids
    return run


async def tandem(lead: EngineClient, follow: EngineClient, rid: str, prompt: list[int],
                 k: int) -> PatternRun:
    """Lead generates k tokens, then prompt + those k move to the follow engine, which goes on."""
    first = await lead.generate(rid, prompt, params=sampling(MAX_TOKENS, ignore_eos=True),
                                max_new_tokens_here=k)
    assert first.finish_reason == "handoff" and len(first.token_ids) == k, first
    tokens = prompt + first.token_ids
    run = PatternRun([])
    end = await transfer(lead, follow, rid, tokens, -1, run)
    rest = await generate_rest(follow, rid, tokens, end, MAX_TOKENS - k)
    run.tokens = first.token_ids + rest.token_ids
    return run


async def migrate(src: EngineClient, dst: EngineClient, rid: str, prefix: list[int]) -> PatternRun:
    """Context migration: move a prefix into dst's cache, no generation; release the lease."""
    run = PatternRun([])
    await transfer(src, dst, rid, prefix, len(prefix), run)
    await dst.abort(rid)  # the KV stays in dst's prefix cache; only the reservation goes
    return run
