"""Structured output: a request's response_format as a grammar, and the per-request matcher whose
token mask the sampler applies before it chooses (engine/core/sampler.py).

The grammar library is xgrammar (docs/api.md says why): it compiles a JSON schema against the
model's vocabulary once (cached by schema text) and answers each step's allowed tokens as a
bitmask in microseconds on the CPU. A matcher belongs to one request and advances only on that
request's own tokens, so the mask — and with it every token — does not depend on what else is in
the batch. A request continued on another engine (tandem hand-off, migration) rebuilds its
matcher there and replays the tokens it generated so far (`RequestGrammar.replay`) before it
samples: the constraint holds across segments.
"""
from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from typing import Any

import torch

from switchyard_engine_api.errors import InvalidRequest
from switchyard_engine_api.sampling_params import RESPONSE_FORMAT_REFUSED, ResponseFormat

# Compiled grammars kept for reuse (by schema text): enough for many distinct schemas, bounded
# so that a stream of one-off schemas cannot grow the engine's memory without limit.
_CACHE_LIMIT_BYTES = 64 * 1024 * 1024
# json_object: any JSON object (OpenAI's JSON mode).
_ANY_OBJECT = '{"type": "object"}'


def _library_message(exc: Exception) -> str:
    """The library's reason without its log prefix ("[time] file.cc:line: ")."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return repr(exc)
    return re.sub(r"^\[[^\]]*\]\s*\S+:\d+:\s*", "", lines[0]).strip()


def _vocab_type(document: dict[str, Any]) -> tuple[Any, bool]:
    """How tokenizer.json's token strings map to bytes (xgrammar's VocabType) and whether a
    space is prefixed: byte-level BPE (GPT-2 style: SmolLM2, Llama 3, Qwen2) or SentencePiece's
    byte fallback (Llama 2, Mistral)."""
    import xgrammar as xgr

    decoder = document.get("decoder") or {}
    parts = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
    kinds = {part.get("type") for part in parts if isinstance(part, dict)}
    if "ByteLevel" in kinds:
        return xgr.VocabType.BYTE_LEVEL, False
    if "ByteFallback" in kinds:
        return xgr.VocabType.BYTE_FALLBACK, "Metaspace" in kinds or "Strip" in kinds
    return xgr.VocabType.RAW, False


class RequestGrammar:
    """One request's place in its grammar: the mask of the tokens allowed next, advanced by each
    token the request takes."""

    def __init__(self, matcher: Any, vocab_size: int) -> None:
        import xgrammar as xgr

        self._matcher = matcher
        self._vocab_size = vocab_size
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)

    def replay(self, tokens: Sequence[int]) -> None:
        """Advance over tokens generated earlier (by another engine). A token the grammar does
        not allow there means the caller's tokens were not made under this response_format."""
        for position, token in enumerate(tokens):
            if not self._matcher.accept_token(int(token)):
                raise InvalidRequest(
                    f"{RESPONSE_FORMAT_REFUSED}generated token {token} (output position "
                    f"{position}) does not follow the request's grammar", param="response_format")

    def mask(self, logits: torch.Tensor) -> None:
        """Set the logits of tokens the grammar does not allow next to -inf (1-D, in place)."""
        import xgrammar as xgr

        self._matcher.fill_next_token_bitmask(self._bitmask)
        # The matcher fills a CPU bitmask; on a GPU the mask is applied where the logits are.
        bitmask = self._bitmask if logits.device.type == "cpu" else self._bitmask.to(logits.device)
        xgr.apply_token_bitmask_inplace(logits.view(1, -1), bitmask,
                                        vocab_size=self._vocab_size)

    def accept(self, token: int) -> bool:
        return bool(self._matcher.accept_token(int(token)))

    @property
    def finished(self) -> bool:
        """The grammar is complete and has taken its stop token: nothing more may follow."""
        return bool(self._matcher.is_terminated())


class GrammarCompiler:
    """The engine's compiler for response formats, against its model's vocabulary. Built on first
    use (reading the vocabulary costs ~100 ms); thread-safe, so the server compiles a new schema
    off the step loop and the step loop then finds it cached."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int]) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._stop_token_ids = list(stop_token_ids)
        self._compiler: Any = None
        self._lock = threading.Lock()

    def _library(self) -> Any:
        with self._lock:
            if self._compiler is None:
                import xgrammar as xgr

                document = json.loads(self._tokenizer.to_json())
                vocab = [""] * self._vocab_size
                for text, token in document["model"]["vocab"].items():
                    if 0 <= token < self._vocab_size:
                        vocab[token] = text
                for added in document.get("added_tokens", []):
                    if 0 <= added["id"] < self._vocab_size:
                        vocab[added["id"]] = added["content"]
                vocab_type, prefix_space = _vocab_type(document)
                info = xgr.TokenizerInfo(vocab, vocab_type, vocab_size=self._vocab_size,
                                         stop_token_ids=self._stop_token_ids,
                                         add_prefix_space=prefix_space)
                self._compiler = xgr.GrammarCompiler(info, max_threads=1,
                                                     cache_limit_bytes=_CACHE_LIMIT_BYTES)
            return self._compiler

    def compile(self, response_format: ResponseFormat) -> Any:
        """The compiled grammar (cached by schema text). InvalidRequest when the library rejects
        the schema, naming its reason. No free whitespace between JSON tokens: a small model
        otherwise may spend its whole budget on blanks inside valid JSON."""
        compiler = self._library()
        try:
            if response_format.type == "json_object":
                return compiler.compile_json_schema(_ANY_OBJECT, any_whitespace=False,
                                                    strict_mode=False)
            return compiler.compile_json_schema(response_format.json_schema,
                                                any_whitespace=False, strict_mode=True)
        except (RuntimeError, ValueError, TypeError) as exc:
            reason = _library_message(exc)
            raise InvalidRequest(f"{RESPONSE_FORMAT_REFUSED}the JSON schema cannot be compiled to "
                                 f"a grammar: {reason}", param="response_format") from exc

    def request_grammar(self, response_format: ResponseFormat) -> RequestGrammar:
        import xgrammar as xgr

        return RequestGrammar(xgr.GrammarMatcher(self.compile(response_format)),
                              self._vocab_size)
