"""Drive an HTTP endpoint with `wrk` (closed loop, C connections) and parse its latency report;
falls back to switchyard_bench/open_loop.py's aiohttp generator when wrk is not installed."""
from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


@dataclass(slots=True)
class Measure:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    tool: str
    requests: int = 0  # completed requests (what CPU per request divides by)


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if not m:
        raise ValueError(f"cannot parse wrk latency {text!r}")
    return float(m.group(1)) * _UNITS_MS[m.group(2)]


def parse_wrk(output: str) -> Measure:
    # wrk pads latencies in seconds with a trailing space ("1.19s ").
    pct = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", output, flags=re.M))
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", output, flags=re.M)
    if not rps or "50" not in pct or "99" not in pct:
        raise ValueError(f"unexpected wrk output:\n{output}")
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", output))
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                     output)
    if sock:
        errors += sum(int(g) for g in sock.groups())
    done = re.search(r"^\s*(\d+) requests in ", output, flags=re.M)
    return Measure(float(rps.group(1)), _ms(pct["50"]), _ms(pct["99"]), errors, "wrk",
                   int(done.group(1)) if done else 0)


def ensure_wrk() -> str | None:
    """wrk's path; when it is missing and this is a root shell with apt-get (the benchmark
    machine), install Debian's package first. None: fall back to the Python load generator."""
    wrk = shutil.which("wrk")
    if wrk or os.geteuid() != 0 or not shutil.which("apt-get"):
        return wrk
    print("wrk not installed: apt-get install -y wrk", flush=True)
    for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "wrk"]):
        if subprocess.run(argv, capture_output=True, timeout=600).returncode != 0:
            return None
    return shutil.which("wrk")


def measure_http(url: str, body: dict[str, object], concurrency: int, duration_s: float
                 ) -> Measure:
    wrk = shutil.which("wrk")
    if wrk is None:
        return _measure_python(url, body, concurrency, duration_s)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write('wrk.method = "POST"\n'
                'wrk.headers["Content-Type"] = "application/json"\n'
                f"wrk.body = {json.dumps(json.dumps(body))}\n")
        script = f.name
    try:
        out = subprocess.run([wrk, "-t1", f"-c{concurrency}", f"-d{duration_s:g}s", "--latency",
                              "-s", script, url], capture_output=True, text=True, check=True,
                             timeout=duration_s + 60).stdout
    finally:
        os.unlink(script)
    return parse_wrk(out)


def _measure_python(url: str, body: dict[str, object], concurrency: int, duration_s: float
                    ) -> Measure:
    from switchyard_bench.open_loop import run_load

    res = asyncio.run(run_load(url, body, duration_s, concurrency=concurrency))
    return Measure(res.rps, res.percentile(50), res.percentile(99), res.errors, "aiohttp",
                   res.requests)
