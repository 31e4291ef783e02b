"""Policies x rates against one running router: for each run, switch the policy
(`PUT /admin/policy`), wait until the engines are idle, send the workload with a fresh salt (so
no run inherits another's prefix cache), summarise, write the run's JSONL. The policy that was
active before the sweep is restored at the end, whatever happened."""
from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from switchyard_bench.serve.client import ClientConfig
from switchyard_bench.serve.router_admin import RouterAdmin, RouterUnavailable
from switchyard_bench.serve.runner import run_open_loop
from switchyard_bench.serve.summary import summarize
from switchyard_bench.workloads import ArrivalProcess, Workload, WorkloadError, schedule


@dataclass(slots=True)
class SweepConfig:
    client: ClientConfig
    num_prompts: int
    policies: list[str] = field(default_factory=list)  # empty: keep the router's policy
    rates: list[float] = field(default_factory=list)  # empty: the trace's own timestamps
    burstiness: float = 1.0
    time_scale: float = 1.0
    seed: int = 0
    salt: int = 0  # run k uses salt + k
    idle_timeout_s: float = 600.0
    result_dir: str = ""
    progress: bool = True


@dataclass(slots=True)
class SweepResult:
    runs: list[dict[str, Any]]
    interrupted: bool = False
    error: str = ""


def rate_label(rate: float | None, time_scale: float) -> str:
    if rate is None:
        return f"trace x{time_scale:g}"
    return "inf" if math.isinf(rate) else f"{rate:g}"


def write_jsonl(path: str, records: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in records:
            f.write(json.dumps(row) + "\n")


async def run_sweep(cfg: SweepConfig, workload: Workload, stop: asyncio.Event,
                    on_run: Callable[[dict[str, Any]], None] = lambda _: None) -> SweepResult:
    result = SweepResult([])
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        admin = RouterAdmin(session, cfg.client.base_url, cfg.client.headers())
        try:
            before = await admin.policy()
        except RouterUnavailable as exc:
            result.error = str(exc)
            return result
        unknown = [p for p in cfg.policies if p not in before.get("available", [])]
        if unknown:
            result.error = (f"policies {unknown} are not registered on the router (available: "
                            f"{before.get('available')})")
            return result
        try:
            await _runs(cfg, workload, stop, admin, session, before["policy"], result, on_run)
        except (RouterUnavailable, WorkloadError) as exc:
            result.error = str(exc)
        finally:
            if cfg.policies:
                try:
                    await admin.set_policy(before["policy"], before.get("params"))
                except RouterUnavailable as exc:
                    result.error = result.error or f"could not restore the policy: {exc}"
    return result


async def _runs(cfg: SweepConfig, workload: Workload, stop: asyncio.Event, admin: RouterAdmin,
                session: aiohttp.ClientSession, current_policy: str, result: SweepResult,
                on_run: Callable[[dict[str, Any]], None]) -> None:
    rates: list[float | None] = list(cfg.rates) or [None]
    for policy in cfg.policies or [current_policy]:
        for rate in rates:
            if stop.is_set():
                result.interrupted = True
                return
            run_no = len(result.runs)
            salt = cfg.salt + run_no
            arrivals = None if rate is None else ArrivalProcess(rate, cfg.burstiness)
            items = schedule(workload, cfg.num_prompts, salt, arrivals, cfg.time_scale,
                             cfg.seed)
            if cfg.policies:
                await admin.set_policy(policy)
            await admin.wait_idle(cfg.idle_timeout_s)
            label = f"{policy}@{rate_label(rate, cfg.time_scale)}"
            loadavg_before = os.getloadavg()
            run = await run_open_loop(session, cfg.client, items, stop, label, cfg.progress)
            summary = {"label": label, "policy": policy, "rate": rate,
                       "burstiness": cfg.burstiness if rate is not None else None,
                       "time_scale": cfg.time_scale if rate is None else None, "salt": salt,
                       "interrupted": run.interrupted, "loadavg_before": loadavg_before,
                       "loadavg_after": os.getloadavg(),
                       **summarize(run.records, run.duration_s, bool(cfg.client.slo))}
            if cfg.result_dir:
                name = label.replace("@", "_at_").replace(" ", "_")
                summary["records_file"] = os.path.join(cfg.result_dir, f"{name}.jsonl")
                write_jsonl(summary["records_file"], [r.to_json() for r in run.records])
            result.runs.append(summary)
            on_run(summary)
            if run.interrupted:
                result.interrupted = True
                return
