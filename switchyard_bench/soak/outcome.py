"""What one HTTP request's result counts as: answered, a declared error, or silently lost.

A client must always learn how its request ended. `ok`: a complete answer (a finish reason of
`stop` or `length`, and for a stream `data: [DONE]`). `error`: an OpenAI error body with a code,
as the HTTP response or as a stream's error event followed by `[DONE]`. `lost`: anything else —
a dropped connection, a stream cut without its end, a timeout (a hang), an uncoded error, an
internal finish reason. The fault suite and the soak runner both judge with these functions.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["ok", "error", "lost", "abandoned"]
_CLIENT_FINISH = ("stop", "length")


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: Kind
    detail: str = ""  # the error's "status code" / the loss's reason
    completion_tokens: int = 0

    @property
    def lost(self) -> bool:
        return self.kind == "lost"


def _error(status: int, body: Any) -> Outcome:
    try:
        code = body["error"]["code"]
    except (TypeError, KeyError):
        return Outcome("lost", f"{status} without an OpenAI error body")
    if not code:
        return Outcome("lost", f"{status} error without a code")
    return Outcome("error", f"{status} {code}")


def judge_json(status: int, text: str) -> Outcome:
    try:
        body = json.loads(text)
    except ValueError:
        return Outcome("lost", f"{status} with a body that is not JSON")
    if status != 200:
        return _error(status, body)
    try:
        finish = body["choices"][0]["finish_reason"]
        tokens = int(body["usage"]["completion_tokens"])
    except (TypeError, KeyError, IndexError, ValueError):
        return Outcome("lost", "200 without choices/usage")
    if finish not in _CLIENT_FINISH:
        return Outcome("lost", f"finish_reason {finish!r}")
    return Outcome("ok", finish, tokens)


def judge_stream(status: int, text: str) -> Outcome:
    """`text`: the whole SSE body as received (its end included or not)."""
    if status != 200:
        try:
            return _error(status, json.loads(text))
        except ValueError:
            return Outcome("lost", f"{status} with a body that is not JSON")
    events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return Outcome("lost", "stream ended without [DONE]")
    finish, tokens = None, 0
    for raw in events[:-1]:
        event = json.loads(raw)
        if "error" in event:
            return _error(status, event)
        for choice in event.get("choices", []):
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
        tokens = int((event.get("usage") or {}).get("completion_tokens", tokens))
    if finish not in _CLIENT_FINISH:
        return Outcome("lost", f"stream without a client finish reason ({finish!r})")
    return Outcome("ok", str(finish), tokens)
