"""OpenAI streaming chunks: router_core.SseEncoder when built, else this Python twin."""
from __future__ import annotations

import json
from typing import Any, Literal


class PySseEncoder:
    """Same API as router_core.SseEncoder (see router_core/__init__.pyi)."""

    def __init__(self, request_id: str, model: str, created: int,
                 kind: Literal["completion", "chat"]) -> None:
        self._chat = kind == "chat"
        obj = "chat.completion.chunk" if self._chat else "text_completion"
        self._head = {"id": request_id, "object": obj, "created": created, "model": model}

    def _event(self, choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> bytes:
        body = dict(self._head, choices=choices)
        if usage is not None:
            body["usage"] = usage
        return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"

    def role_chunk(self) -> bytes:
        return self._event([{"index": 0, "delta": {"role": "assistant", "content": ""},
                             "logprobs": None, "finish_reason": None}])

    def delta(self, text: str, finish_reason: str | None = None) -> bytes:
        if self._chat:
            delta = {"content": text} if text or finish_reason is None else {}
            choice: dict[str, Any] = {"index": 0, "delta": delta}
        else:
            choice = {"index": 0, "text": text}
        choice["logprobs"] = None
        choice["finish_reason"] = finish_reason
        return self._event([choice])

    def usage(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> bytes:
        return self._event([], usage_dict(prompt_tokens, completion_tokens, cached_tokens))

    @staticmethod
    def done() -> bytes:
        return b"data: [DONE]\n\n"


def usage_dict(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
               ) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def make_encoder(request_id: str, model: str, created: int,
                 kind: Literal["completion", "chat"]) -> Any:
    try:
        from router_core import SseEncoder  # type: ignore[attr-defined]
    except ImportError:
        return PySseEncoder(request_id, model, created, kind)
    return SseEncoder(request_id, model, created, kind)
