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

import aiohttp

from switchyard_bench.serve.request_body import Slo, completion_body
from switchyard_bench.serve.stream_record import RequestRecord, StreamObserver
from switchyard_bench.workloads import WorkItem


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
                                json=completion_body(item.prompt, item.max_tokens, cfg.model,
                                                     cfg.temperature, cfg.slo), headers=cfg.headers(),
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

