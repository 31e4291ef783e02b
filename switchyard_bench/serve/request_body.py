"""The body of one benchmark request and the SLO it carries: a streamed /v1/completions with a
token-id (or text) prompt, `ignore_eos` so the output length is the workload's `max_tokens`,
usage in the stream, and the optional `slo` field SLO-aware policies read (docs/api.md).
Shared by `switchyard bench serve` and loadtest/locustfile.py."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from switchyard_bench.serve.stream_record import RequestRecord


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

    def miss(self, record: RequestRecord) -> str | None:
        """Why `record` misses the SLO, or None when it meets it: a completed request meets it
        when TTFT <= ttft_ms and TPOT <= tpot_ms (a one-token output has no TPOT and meets that
        half); a failed one never does."""
        if not record.ok or record.ttft_ms is None:
            return "request failed"
        if self.ttft_ms is not None and record.ttft_ms > self.ttft_ms:
            return f"TTFT > {self.ttft_ms:g} ms"
        if self.tpot_ms is not None and record.tpot_ms is not None and \
                record.tpot_ms > self.tpot_ms:
            return f"TPOT > {self.tpot_ms:g} ms"
        return None

    def met_by(self, record: RequestRecord) -> bool:
        return self.miss(record) is None

def completion_body(prompt: list[int] | str, max_tokens: int, model: str = "default",
                    temperature: float = 0.0, slo: Slo | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
        "stream_options": {"include_usage": True}, "ignore_eos": True,
        "temperature": temperature}
    if slo:
        body["slo"] = slo.body()
    return body
