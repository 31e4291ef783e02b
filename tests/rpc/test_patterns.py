"""Every orchestration pattern over real engine processes gives the single-engine greedy tokens.

Three `engine.server.main` processes with the real SmolLM2 (fp32): `ref` runs each prompt alone,
`prefill` and `decode` run the composition. Each pattern uses its own prompt variant so no
pattern benefits from another's cache. After each pattern both engines' pools are accounted.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from engine.server.launcher import EngineProcess
from switchyard_engine_api.client import EngineClient
from tests.rpc import patterns
from tests.rpc.accounting import assert_accounted, kv_bytes_per_token
from tests.rpc.patterns import PatternRun

pytestmark = [pytest.mark.procs, pytest.mark.timeout(300)]

Pattern = Callable[[EngineClient, EngineClient, str, list[int]], Awaitable[PatternRun]]


async def _run_pattern(trio: list[EngineProcess], prompts: list[list[int]], variant: str,
                       pattern: Pattern) -> list[PatternRun]:
    ref_proc, p_proc, d_proc = trio
    runs = []
    async with ref_proc.client() as ref, p_proc.client() as p, d_proc.client() as d:
        per_token = kv_bytes_per_token(await d.model_info())
        for i, prompt in enumerate(prompts):
            expected, run = await asyncio.gather(
                patterns.reference(ref, f"{variant}-ref-{i}", prompt),
                pattern(p, d, f"{variant}-{i}", prompt))
            assert run.tokens == expected, f"prompt {i} ({len(prompt)} tokens) diverged"
            for send in run.sends:
                assert send.bytes_sent == send.bytes_expected == per_token * (send.end - send.begin)
            runs.append(run)
        await assert_accounted(p)
        await assert_accounted(d)
    return runs


async def test_pd_over_shm(trio, make_prompts) -> None:
    runs = await _run_pattern(trio, make_prompts("pd-shm"), "pd-shm", patterns.pd)
    for run in runs:
        assert [s.transport for s in run.sends] == ["shm"]
        send = run.sends[0]
        assert (send.begin, send.cached_on_sender) == (0, 0)


async def test_pd_over_tcp(trio, make_prompts) -> None:
    async def pd_tcp(p: EngineClient, d: EngineClient, rid: str, prompt: list[int]) -> PatternRun:
        return await patterns.pd(p, d, rid, prompt, transport="tcp")

    runs = await _run_pattern(trio, make_prompts("pd-tcp"), "pd-tcp", pd_tcp)
    assert all([s.transport for s in run.sends] == ["tcp"] for run in runs)


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
async def test_balanced_pd(trio, make_prompts, fraction: float) -> None:
    async def balanced(p: EngineClient, d: EngineClient, rid: str, prompt: list[int]) -> PatternRun:
        return await patterns.balanced_pd(p, d, rid, prompt, fraction)

    variant = f"bpd-{fraction}"
    runs = await _run_pattern(trio, make_prompts(variant), variant, balanced)
    for run, prompt in zip(runs, make_prompts(variant), strict=True):
        assert run.sends[0].end == min(len(prompt) - 1, max(1, int(len(prompt) * fraction)))


async def test_cache_aware_pd_sends_only_the_missing_range(trio, make_prompts) -> None:
    prompts = make_prompts("cache-aware")
    # The decode engine already serves the first half of each prompt (a shared system prompt).
    async with trio[2].client() as d:
        for i, prompt in enumerate(prompts):
            await patterns.generate_rest(d, f"warm-{i}", prompt[: len(prompt) // 2 + 1], 0, 1)
    runs = await _run_pattern(trio, prompts, "cache-aware", patterns.pd)
    page = 16
    for run, prompt in zip(runs, prompts, strict=True):
        assert run.matched == (len(prompt) // 2 + 1) // page * page
        if run.matched:
            assert run.sends[0].begin == run.matched
    assert any(run.matched for run in runs)


@pytest.mark.parametrize("k", [1, 5])
async def test_tandem_handoff(trio, make_prompts, k: int) -> None:
    async def tandem(p: EngineClient, d: EngineClient, rid: str, prompt: list[int]) -> PatternRun:
        return await patterns.tandem(p, d, rid, prompt, k)

    await _run_pattern(trio, make_prompts(f"tandem-{k}"), f"tandem-{k}", tandem)


async def test_migration_then_generation_on_target(trio, make_prompts) -> None:
    async def migrate_then_generate(p: EngineClient, d: EngineClient, rid: str,
                                    prompt: list[int]) -> PatternRun:
        prefix = prompt[: max(1, len(prompt) - 3)]
        run = await patterns.migrate(p, d, rid, prefix)
        held = await d.match_prefix(prompt)
        assert held == len(prefix) // 16 * 16  # the migrated full pages are in d's cache
        gen = await patterns.generate_rest(d, f"{rid}-gen", prompt, 0)
        assert gen.cached_tokens >= held
        run.tokens = gen.token_ids
        return run

    await _run_pattern(trio, make_prompts("migrate"), "migrate", migrate_then_generate)
