"""`switchyard bench soak`: `switchyard serve` under mixed traffic while engines are SIGKILLed at
random, for N minutes; then every engine must be back, answer a recovery batch, and hold no
request, lease or page beyond its prefix cache.

  switchyard bench soak --minutes 10 --policy pd --engines 2 --concurrency 6 --kill-every-s 45

Prints a markdown report (and writes JSON with --report): requests by outcome, errors by status
and code, requests lost silently (target 0), kills and restarts, pages leaked (target 0).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import psutil

from engine.server.launcher import REPO, free_port
from switchyard_bench.soak.audit import EngineAudit, audit_engine, router_inflight
from switchyard_bench.soak.outcome import Outcome
from switchyard_bench.soak.traffic import TrafficMix, send
from switchyard_engine_api.auth import TOKEN_ENV

_REQUEST_TIMEOUT_S = 300.0
_RECOVERY_REQUESTS = 20
_BUSY_BACKOFF_S = 1.0  # a client's pause after a 429/503


@dataclass
class SoakReport:
    command: str
    minutes: float
    policy: str
    engines: int
    mock: bool
    started: str = ""
    load_average: list[float] = field(default_factory=list)
    requests: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)      # ok / error / lost / abandoned
    errors: dict[str, int] = field(default_factory=dict)        # "status code" -> count
    lost: dict[str, int] = field(default_factory=dict)          # reason -> count
    bad_inputs: int = 0
    bad_inputs_refused: int = 0
    kills: list[dict[str, Any]] = field(default_factory=list)
    restarts_seen: int = 0
    recovery_ok: int = 0
    engines_audit: list[dict[str, Any]] = field(default_factory=list)
    leaked_pages: int = 0
    router_inflight_at_end: float = 0.0
    serve_exit_code: int | None = None
    orphans: int = 0

    @property
    def silently_lost(self) -> int:
        return self.outcomes.get("lost", 0)

    def markdown(self) -> str:
        rows = [f"- command: `{self.command}`",
                f"- started {self.started}, {self.minutes:g} min, policy `{self.policy}`, "
                f"{self.engines} {'mock' if self.mock else 'real'} engines; load average "
                f"{', '.join(f'{x:.2f}' for x in self.load_average)}",
                f"- requests: {self.requests} — " + ", ".join(
                    f"{k} {v}" for k, v in sorted(self.outcomes.items())),
                f"- **silently lost: {self.silently_lost}**"
                + (f" ({self.lost})" if self.lost else ""),
                "- errors by type: " + (", ".join(f"`{k}` {v}" for k, v in
                                                 sorted(self.errors.items())) or "none"),
                f"- bad inputs refused with a 400: {self.bad_inputs_refused}/{self.bad_inputs}",
                f"- engine kills (SIGKILL): {len(self.kills)}; restarts by serve: "
                f"{self.restarts_seen}",
                f"- recovery batch after the last kill: {self.recovery_ok}/{_RECOVERY_REQUESTS} "
                "answered",
                f"- **pages leaked: {self.leaked_pages}**; leases/running left: "
                + ", ".join(f"{a['address']} {a['leases']}/{a['running']}"
                            for a in self.engines_audit),
                f"- router requests in flight at the end: {self.router_inflight_at_end:g}; serve "
                f"exit code {self.serve_exit_code}, orphans {self.orphans}"]
        return "\n".join(rows)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="switchyard bench soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--policy", default="pd")
    p.add_argument("--engines", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=6, help="clients sending at once")
    p.add_argument("--kill-every-s", type=float, default=45.0,
                   help="mean seconds between engine kills (0 = none)")
    p.add_argument("--mock-engines", action="store_true", help="mock engines (no model)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--report", default=None, help="also write the report as JSON here")
    p.add_argument("serve_args", nargs="*", help="more `switchyard serve` flags (after --)")
    return p


def _engine_children(serve_pid: int) -> dict[int, psutil.Process]:
    out: dict[int, psutil.Process] = {}
    try:
        children = psutil.Process(serve_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return out
    for child in children:
        try:
            argv = child.cmdline()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if "engine.server.main" in argv and "--port" in argv:
            out[int(argv[argv.index("--port") + 1])] = child
    return out


async def _wait_ready(session: aiohttp.ClientSession, base: str, engines: int,
                      timeout_s: float, serve: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if serve.poll() is not None:
            raise RuntimeError(f"switchyard serve exited with {serve.returncode}")
        try:
            async with session.get(f"{base}/ready") as resp:
                body = await resp.json()
                if (resp.status == 200 and body["healthy_engines"] >= engines
                        and not body["missing_roles"]):
                    return
        except (aiohttp.ClientError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the deployment was not ready within {timeout_s:.0f} s")
        await asyncio.sleep(0.5)


class _Soak:
    def __init__(self, args: argparse.Namespace, base: str, serve: subprocess.Popen[bytes],
                 report: SoakReport) -> None:
        self.args = args
        self.base = base
        self.serve = serve
        self.report = report
        self.rng = random.Random(args.seed)
        self.mix = TrafficMix(rng=random.Random(self.rng.random()))
        self.stop = asyncio.Event()
        self.salt = 0

    def record(self, kind: str, outcome: Outcome) -> None:
        r = self.report
        r.requests += 1
        if kind == "bad":
            r.bad_inputs += 1
            if outcome.kind == "error" and outcome.detail.startswith(("400 ", "404 ")):
                r.bad_inputs_refused += 1
        r.outcomes[outcome.kind] = r.outcomes.get(outcome.kind, 0) + 1
        if outcome.kind == "error":
            r.errors[outcome.detail] = r.errors.get(outcome.detail, 0) + 1
        elif outcome.kind == "lost":
            r.lost[outcome.detail] = r.lost.get(outcome.detail, 0) + 1

    async def client(self, session: aiohttp.ClientSession) -> None:
        while not self.stop.is_set():
            self.salt += 1
            spec = self.mix.next(self.salt)
            outcome = await send(session, self.base, spec, _REQUEST_TIMEOUT_S, {})
            self.record(spec.kind, outcome)
            if outcome.kind == "error" and outcome.detail.startswith(("429 ", "503 ")):
                # As a real client does: wait before asking again, instead of counting
                # thousands of instant refusals while no engine is up.
                await asyncio.sleep(_BUSY_BACKOFF_S)

    async def killer(self, started: float) -> None:
        mean = self.args.kill_every_s
        if mean <= 0:
            return
        while not self.stop.is_set():
            try:
                await asyncio.wait_for(self.stop.wait(), self.rng.uniform(0.5 * mean, 1.5 * mean))
                return
            except TimeoutError:
                pass
            engines = _engine_children(self.serve.pid)
            if not engines:
                continue
            port = self.rng.choice(sorted(engines))
            try:
                engines[port].send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                continue
            self.report.kills.append({"at_s": round(time.monotonic() - started, 1),
                                      "port": port})
            print(f"[soak] t={time.monotonic() - started:.0f}s SIGKILL engine on port {port}",
                  flush=True)


async def _run(args: argparse.Namespace, report: SoakReport) -> int:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    os.environ.setdefault(TOKEN_ENV, secrets.token_urlsafe(24))  # our audit speaks to engines
    argv = [sys.executable, "-m", "pyrouter.cli", "serve", "--port", str(port), "--engines",
            str(args.engines), "--policy", args.policy, "--max-restarts", "1000",
            "--drain-s", "10", *(["--mock-engines"] if args.mock_engines else []),
            *args.serve_args]
    report.command = "switchyard " + " ".join(argv[3:])
    log = tempfile.NamedTemporaryFile(prefix="switchyard-soak-", suffix=".log", delete=False)
    print(f"[soak] serve log: {log.name}", flush=True)
    serve = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    children: list[psutil.Process] = []
    try:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            await _wait_ready(session, base, args.engines, 900, serve)
            soak = _Soak(args, base, serve, report)
            started = time.monotonic()
            tasks = [asyncio.create_task(soak.client(session)) for _ in range(args.concurrency)]
            killer = asyncio.create_task(soak.killer(started))
            await asyncio.sleep(args.minutes * 60)
            soak.stop.set()
            await asyncio.gather(killer, *tasks)
            print(f"[soak] traffic stopped after {report.requests} requests; waiting for every "
                  "engine to be back", flush=True)
            await _wait_ready(session, base, args.engines, 300, serve)
            recovery = [await send(session, base, soak.mix.next(10**9 + i), 120, {})
                        for i in range(_RECOVERY_REQUESTS)]
            report.recovery_ok = sum(o.kind in ("ok", "abandoned") or (
                o.kind == "error" and o.detail.startswith(("400 ", "404 "))) for o in recovery)
            audits: list[EngineAudit] = [await audit_engine(f"127.0.0.1:{p}")
                                         for p in sorted(_engine_children(serve.pid))]
            report.engines_audit = [asdict(a) | {"leaked_pages": a.leaked_pages} for a in audits]
            report.leaked_pages = sum(a.leaked_pages for a in audits)
            report.router_inflight_at_end = await router_inflight(base)
        text = open(log.name, encoding="utf-8", errors="replace").read()
        report.restarts_seen = text.count("restarting in")
        children = psutil.Process(serve.pid).children(recursive=True)
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            report.serve_exit_code = serve.wait(120)
        except subprocess.TimeoutExpired:
            serve.kill()
            report.serve_exit_code = serve.wait()
        _, alive = psutil.wait_procs(children, timeout=30)
        report.orphans = len(alive)
        for proc in alive:
            proc.kill()
    return 0


def run(args: argparse.Namespace) -> int:
    opts = build_parser().parse_args(args.rest)
    report = SoakReport(command="", minutes=opts.minutes, policy=opts.policy,
                        engines=opts.engines, mock=opts.mock_engines,
                        started=time.strftime("%Y-%m-%d %H:%M:%S"),
                        load_average=list(os.getloadavg()))
    code = asyncio.run(_run(opts, report))
    report.load_average += list(os.getloadavg())  # at the start, then at the end
    print(report.markdown(), flush=True)
    if opts.report:
        with open(opts.report, "w", encoding="utf-8") as f:
            json.dump(asdict(report) | {"silently_lost": report.silently_lost}, f, indent=2)
    clean = (report.silently_lost == 0 and report.leaked_pages == 0
             and report.recovery_ok == _RECOVERY_REQUESTS and report.orphans == 0)
    return code if clean else 1

