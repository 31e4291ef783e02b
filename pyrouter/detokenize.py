"""Token ids -> text deltas for the response, with stop strings cut off the output.

router_core.IncrementalDetokenizer does this in Rust when built; until then this module's Python
version (vLLM-style prefix/read offsets, so each step decodes a few tokens, not the whole
output) keeps the same push/flush contract.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.tokenizer import EngineTokenizer


class PyIncrementalDetokenizer:
    """Same contract as router_core.IncrementalDetokenizer (router_core/__init__.pyi)."""

    def __init__(self, tokenizer: EngineTokenizer, stop: Sequence[str] = (),
                 skip_special_tokens: bool = True) -> None:
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._ids: list[int] = []
        self._prefix = 0   # decode window start (context so leading spaces decode right)
        self._read = 0     # ids before this are already in _decoded
        self._decoded = ""  # all stable text so far
        self._emitted = 0   # chars of _decoded already returned
        self._stopped = False

    def _decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=self._skip)

    def push(self, token_ids: Sequence[int]) -> tuple[str, bool]:
        if self._stopped:
            return "", True
        self._ids.extend(token_ids)
        before = self._decode(self._ids[self._prefix:self._read])
        after = self._decode(self._ids[self._prefix:])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._decoded += after[len(before):]
            self._prefix, self._read = self._read, len(self._ids)
        return self._release(final=False)

    def _release(self, final: bool) -> tuple[str, bool]:
        text = self._decoded
        if self._stop:
            scan_from = max(0, self._emitted - self._hold)
            hits = [i for i in (text.find(s, scan_from) for s in self._stop) if i >= 0]
            if hits:
                self._stopped = True
                out = text[self._emitted:min(hits)]
                self._emitted = min(hits)
                return out, True
            safe = len(text) if final else max(self._emitted, len(text) - self._hold)
        else:
            safe = len(text)
        out = text[self._emitted:safe]
        self._emitted = safe
        return out, False

    def flush(self) -> str:
        if self._stopped:
            return ""
        tail = self._decode(self._ids[self._prefix:])
        head = self._decode(self._ids[self._prefix:self._read])
        if len(tail) > len(head):
            self._decoded += tail[len(head):]
            self._read = len(self._ids)
        out, _ = self._release(final=True)
        return out

    @property
    def text(self) -> str:
        return self._decoded[:self._emitted]


_vocab_cache: dict[int, Any] = {}


def make_detokenizer(tokenizer: EngineTokenizer, stop: Sequence[str]) -> Any:
    try:
        from router_core import (  # type: ignore[attr-defined]
            DetokenizerVocab,
            IncrementalDetokenizer,
        )
    except ImportError:
        return PyIncrementalDetokenizer(tokenizer, stop)
    vocab = _vocab_cache.get(id(tokenizer))
    if vocab is None:
        vocab = _vocab_cache[id(tokenizer)] = DetokenizerVocab.from_tokenizer_json(
            tokenizer.to_json())
    return IncrementalDetokenizer(vocab, list(stop))
