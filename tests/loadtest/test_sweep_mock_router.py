"""`switchyard bench serve` sweeps against a real router over two mock engines (router-side
behaviour only): the policy really switches between runs (the route headers say so) and is
restored after, the sweep waits for idle engines, each run's fresh salt means no run inherits
another's prefix cache, and the files and plots a user reads are written."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Iterator

import aiohttp
import pytest
import requests

from engine.server.launcher import EngineSpec, launch
from switchyard_bench.serve.client import ClientConfig
from switchyard_bench.serve.main import run as bench_serve
from switchyard_bench.serve.router_admin import RouterAdmin
from switchyard_bench.serve.sweep import SweepConfig, run_sweep
from switchyard_bench.workloads import RealVocabulary
from switchyard_bench.workloads.shifting import ShiftingConfig, ShiftingWorkload

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "router"))
from router_procs import LOG_DIR, free_port, start_router, wait_ready  # noqa: E402

pytestmark = [pytest.mark.procs, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def router() -> Iterator[str]:
    # 1 ms per token, so requests take time and the sweep's idle wait has something to wait for
    engines = [launch(EngineSpec(f"mock{i}", mock=True, port=free_port(),
                                 env={"SWITCHYARD_MOCK_CHUNK_DELAY_MS": "1"}), LOG_DIR)
               for i in range(2)]
    port = free_port()
    proc = start_router(port, [e.port for e in engines])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, proc, want_engines=2)
        yield base
    finally:
        proc.stop()
        for e in engines:
            e.stop()


def _read_jsonl(path: str) -> list[dict[str, object]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_cli_sweep_switches_policy_per_run_and_restores_it(router: str, tmp_path):
    requests.put(f"{router}/admin/policy", json={"policy": "least_load"}).raise_for_status()
    out = tmp_path / "res"
    argv = ["--url", router, "--workload", "shifting", "--phase-requests", "3",
            "--prefill-heavy", "64,3", "--decode-heavy", "16,12", "--num-prompts", "6",
            "--policies", "round_robin,pd", "--rates", "40,80", "--slo-ttft-ms", "5000",
            "--slo-tpot-ms", "500", "--result-dir", str(out), "--no-progress", "--plot"]
    assert bench_serve(argparse.Namespace(rest=argv)) == 0
    assert requests.get(f"{router}/admin/policy").json()["policy"] == "least_load"
    summary = json.loads((out / "summary.json").read_text())
    runs = summary["runs"]
    assert [r["label"] for r in runs] == ["round_robin@40", "round_robin@80", "pd@40", "pd@80"]
    assert len({r["salt"] for r in runs}) == 4
    assert summary["workload"]["workload"] == "shifting"
    assert summary["slo_capacity"] == {"round_robin": 80.0, "pd": 80.0}
    for r in runs:
        assert (r["requests"], r["completed"], r["failed"]) == (6, 6, 0)
        assert r["slo_attainment"] == 1.0 and r["mean_ttft_ms"] > 0
        records = _read_jsonl(r["records_file"])
        assert [rec["max_tokens"] for rec in records] == [3, 3, 3, 12, 12, 12]
        assert all(rec["completion_tokens"] == rec["max_tokens"] for rec in records)
        pattern = "dp" if r["policy"] == "round_robin" else "pd"
        assert all(str(rec["route"]).startswith(pattern + " ") for rec in records), records
        assert all(rec["request_id"] for rec in records)
    assert (out / "latency_vs_rate.png").stat().st_size > 10_000
    assert (out / "slo_attainment_vs_rate.png").stat().st_size > 5_000


def test_unknown_policy_and_unreachable_router_are_clear_errors(router: str, tmp_path, capsys):
    base = ["--workload", "shifting", "--num-prompts", "2", "--rates", "10", "--no-progress",
            "--result-dir", str(tmp_path)]
    assert bench_serve(argparse.Namespace(rest=["--url", router, "--policies", "nope",
                                                *base])) == 1
    assert "not registered" in capsys.readouterr().err
    dead = f"http://127.0.0.1:{free_port()}"
    assert bench_serve(argparse.Namespace(rest=["--url", dead, *base])) == 1
    assert "is the router running?" in capsys.readouterr().err
    assert bench_serve(argparse.Namespace(rest=["--url", router, "--burstiness", "0",
                                                *base])) == 2
    assert "burstiness" in capsys.readouterr().err
    assert bench_serve(argparse.Namespace(rest=["--url", router, "--workload", "azure-code",
                                                "--trace-start", "8800", "--num-prompts",
                                                "50", "--no-progress"])) == 2
    assert "num-prompts must be in 1..19" in capsys.readouterr().err


async def _sweep(router: str, vocab: RealVocabulary, salt: int) -> list[dict[str, object]]:
    workload = ShiftingWorkload(vocab, ShiftingConfig(phase_requests=4, prefill_heavy_input=64,
                                                      prefill_heavy_output=2))
    cfg = SweepConfig(ClientConfig(router), num_prompts=8, policies=["cache_aware"] * 2,
                      rates=[100.0], salt=salt, progress=False)
    result = await run_sweep(cfg, workload, asyncio.Event())
    assert not result.error, result.error
    return result.runs


async def test_fresh_salt_per_run_inherits_no_prefix_cache(router: str, vocab: RealVocabulary):
    first = await _sweep(router, vocab, salt=1000)
    # each run's prompts are new to the engines: nothing cached (shifting prompts share nothing)
    assert [r["cached_tokens"] for r in first] == [0, 0]
    # the control: the same salt again finds the first run's prompts in the prefix cache
    again = await _sweep(router, vocab, salt=1000)
    assert again[0]["cached_tokens"] > 0


async def test_wait_idle_waits_for_running_requests(router: str):
    body = {"prompt": [100, 200, 300], "max_tokens": 1500, "ignore_eos": True}
    finished: list[float] = []
    worker = threading.Thread(target=lambda: (requests.post(
        f"{router}/v1/completions", json=body, timeout=60), finished.append(time.monotonic())))
    worker.start()
    async with aiohttp.ClientSession() as session:
        admin = RouterAdmin(session, router)
        deadline = time.monotonic() + 10
        while not await admin.busy_engines():
            assert time.monotonic() < deadline, "the running request never showed as busy"
            await asyncio.sleep(0.02)
        await admin.wait_idle(timeout_s=60, poll_s=0.05)
        idle_at = time.monotonic()
    worker.join(timeout=60)
    assert finished and finished[0] <= idle_at + 0.05
