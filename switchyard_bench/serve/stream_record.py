"""One streamed request as the client saw it: the bytes of an OpenAI SSE stream, timestamped as
they arrive, turned into TTFT, every token's arrival time, ITL, TPOT, JCT and usage.

The one implementation of per-request measurement: `switchyard bench serve` (aiohttp) and the
Locust file (requests) both feed it. A token is an SSE event carrying text: the router sends one
event per token, except when a token's text is held back (part of a UTF-8 character or a
possible stop string) and rides on the next event, so one ITL gap may then span two tokens.
TPOT uses usage.completion_tokens, not the event count (docs/benchmarking.md).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from itertools import pairwise
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    """One JSONL row of `switchyard bench serve`; times in ms from the request's send."""

    index: int
    prompt_len: int  # tokens sent
    max_tokens: int
    scheduled_s: float = 0.0  # planned send offset from the run's start
    sent_s: float = 0.0  # actual send offset
    ok: bool = False
    status: int = 0
    error: str = ""
    interrupted: bool = False  # cut short by Ctrl-C: neither completed nor failed
    request_id: str = ""
    route: str = ""
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    jct_ms: float | None = None
    token_times_ms: list[float] = field(default_factory=list)
    itl_ms: list[float] = field(default_factory=list)
    prompt_tokens: int = 0  # from usage
    completion_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str = ""
    slo_met: bool | None = None

    def to_json(self) -> dict[str, Any]:
        """Every field, the lists copied (flat: no deep copy of each float, as asdict would
        make; a simulated sweep writes a million token times)."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), list) else v)
                for f in fields(self)}


class StreamObserver:
    """Feed it the response body as it arrives (`feed(bytes, now)`), then `finish`."""

    def __init__(self, sent_at: float) -> None:
        self.sent_at = sent_at
        self._buffer = b""
        self.token_times: list[float] = []
        self.done = False
        self.error = ""
        self.finish_reason = ""
        self.usage: dict[str, Any] = {}

    def feed(self, data: bytes, now: float) -> None:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._line(line.strip(), now)

    def _line(self, line: bytes, now: float) -> None:
        if not line.startswith(b"data:"):
            return  # blank separators, comments, event names
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            event = json.loads(payload)
        except (json.JSONDecodeError, UnicodeDecodeError):
            self.error = self.error or f"unparseable SSE event: {payload[:80]!r}"
            return
        if not isinstance(event, dict):
            return
        if "error" in event:  # the router's mid-stream error event
            err = event["error"]
            self.error = str(err.get("message", err) if isinstance(err, dict) else err)
            return
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        for choice in event.get("choices") or []:
            text = choice.get("text")
            if text is None:
                text = (choice.get("delta") or {}).get("content")
            if text:
                self.token_times.append(now)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def finish(self, record: RequestRecord, status: int, now: float) -> None:
        """Fill `record` from what arrived; the request is ok only with HTTP 200, a stream that
        ended with [DONE], no error event and at least one token."""
        if self._buffer.strip():
            self._line(self._buffer.strip(), now)
            self._buffer = b""
        record.status = status
        record.completion_tokens = int(self.usage.get("completion_tokens", len(self.token_times)))
        record.prompt_tokens = int(self.usage.get("prompt_tokens", record.prompt_len))
        details = self.usage.get("prompt_tokens_details") or {}
        record.cached_tokens = int(details.get("cached_tokens", 0) or 0)
        record.finish_reason = self.finish_reason
        record.token_times_ms = [(t - self.sent_at) * 1000.0 for t in self.token_times]
        record.itl_ms = [b - a for a, b in pairwise(record.token_times_ms)]
        record.jct_ms = (now - self.sent_at) * 1000.0
        if record.token_times_ms:
            record.ttft_ms = record.token_times_ms[0]
            if record.completion_tokens > 1:
                record.tpot_ms = (record.jct_ms - record.ttft_ms) / (record.completion_tokens - 1)
        if self.error:
            record.error = self.error
        elif not self.done:
            record.error = "stream ended without data: [DONE]"
        elif not self.token_times:
            record.error = "stream carried no tokens"
        record.ok = status == 200 and not record.error
