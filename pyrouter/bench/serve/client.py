"""Send one streamed completion to the router with aiohttp and fill its RequestRecord.

Token-id prompts go to /v1/completions (the router takes a list of ids) with `ignore_eos` so the
output length is the workload's `max_tokens`; `slo` rides along when SLOs are given. Every
outcome fills the record: HTTP errors, error events, timeouts and dropped connections are
failures with a message, never exceptions.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from pyrouter.bench.serve.stream_record import RequestRecord, StreamObserver
from pyrouter.bench.workloads import WorkItem


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_ms: float | None = None
    tpot_ms: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "tpot_ms"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"slo {name} must be > 0, got {value}")

    def __bool__(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None

    def body(self) -> dict[str, float]:
        return {k: v for k, v in (("ttft_ms", self.ttft_ms), ("tpot_ms", self.tpot_ms))
                if v is not None}

    def met_by(self, record: RequestRecord) -> bool:
        """A completed request meets the SLO when TTFT <= ttft_ms and TPOT <= tpot_ms (a
        one-token output has no TPOT and meets that half); a failed one never does."""
        if not record.ok or record.ttft_ms is None:
            return False
        if self.ttft_ms is not None and record.ttft_ms > self.ttft_ms:
            return False
        return self.tpot_ms is None or record.tpot_ms is None or record.tpot_ms <= self.tpot_ms


@dataclass(frozen=True, slots=True)
class ClientConfig:
    base_url: str
    model: str = "default"
    timeout_s: float = 600.0
    temperature: float = 0.0
    slo: Slo = Slo()
    api_key: str | None = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def completion_body(item: WorkItem, cfg: ClientConfig) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": cfg.model, "prompt": item.prompt, "max_tokens": item.max_tokens,
        "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True,
        "temperature": cfg.temperature}
    if cfg.slo:
        body["slo"] = cfg.slo.body()
    return body


def _error_message(text: str) -> str:
    try:
        err = json.loads(text)["error"]
        return str(err.get("message", err))
    except (ValueError, KeyError, TypeError, AttributeError):
        return text[:200]


async def send_request(session: aiohttp.ClientSession, cfg: ClientConfig, item: WorkItem,
                       record: RequestRecord) -> None:
    """Stream `item` and fill `record`. Cancellation propagates (the caller marks the record
    interrupted); everything else ends in the record."""
    sent_at = time.perf_counter()
    observer = StreamObserver(sent_at)
    try:
        async with session.post(f"{cfg.base_url}/v1/completions",
                                json=completion_body(item, cfg), headers=cfg.headers(),
                                timeout=aiohttp.ClientTimeout(total=cfg.timeout_s)) as resp:
            record.request_id = resp.headers.get("X-Request-Id", "")
            record.route = resp.headers.get("X-Switchyard-Route", "")
            if resp.status != 200:
                record.status = resp.status
                record.error = f"HTTP {resp.status}: {_error_message(await resp.text())}"
                record.jct_ms = (time.perf_counter() - sent_at) * 1000.0
                return
            async for data in resp.content.iter_any():
                observer.feed(data, time.perf_counter())
            observer.finish(record, resp.status, time.perf_counter())
    except TimeoutError:
        observer.finish(record, record.status, time.perf_counter())
        record.ok, record.error = False, f"timeout after {cfg.timeout_s:g} s"
    except aiohttp.ClientError as exc:
        observer.finish(record, record.status, time.perf_counter())
        record.ok, record.error = False, f"connection error: {exc.__class__.__name__}: {exc}"
    finally:
        record.slo_met = cfg.slo.met_by(record) if cfg.slo else None

