"""EngineTokenizer: text <-> token ids and the chat template, from GGUF metadata or tokenizer.json.

Backed by the `tokenizers` package; the chat template is rendered by a sandboxed jinja2
environment because templates ship inside model files and must not reach Python internals.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

# Texts longer than this are tokenised through encode_batch, which releases the GIL.
_GIL_FREE_CHARS = 4096


class TokenizerError(ValueError):
    """The tokenizer files are missing/invalid, or a chat template could not be rendered."""


def _raise_exception(message: str) -> None:
    raise TokenizerError(f"chat template error: {message}")


class EngineTokenizer:
    def __init__(self, tokenizer_json: str, chat_template: str | None, bos_token_id: int | None,
                 eos_token_ids: Sequence[int]) -> None:
        try:
            self._tokenizer = Tokenizer.from_str(tokenizer_json)
        except Exception as err:  # the tokenizers package raises a bare Exception
            raise TokenizerError(f"invalid tokenizer.json: {err}") from err
        self._json = tokenizer_json
        self.chat_template = chat_template
        self.bos_token_id = bos_token_id
        self.eos_token_ids = list(eos_token_ids)
        self._template_env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self._template_env.globals["raise_exception"] = _raise_exception
        self._compiled_template: Any = None

    # ---- construction ----
    @classmethod
    def from_gguf(cls, path: str) -> EngineTokenizer:
        from switchyard_tokenizer.gguf_metadata import open_gguf

        return cls.from_gguf_reader(open_gguf(path))

    @classmethod
    def from_gguf_reader(cls, reader: Any) -> EngineTokenizer:
        from switchyard_tokenizer.gguf_metadata import field_value
        from switchyard_tokenizer.gguf_tokenizer import tokenizer_json_from_gguf

        document = tokenizer_json_from_gguf(reader)
        bos = field_value(reader, "tokenizer.ggml.bos_token_id")
        eos = [field_value(reader, f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot")]
        eos_ids = list(dict.fromkeys(int(e) for e in eos if e is not None))
        return cls(json.dumps(document, ensure_ascii=False),
                   field_value(reader, "tokenizer.chat_template"),
                   None if bos is None else int(bos), eos_ids)

    @classmethod
    def from_hf_dir(cls, directory: str, eos_token_ids: Sequence[int] = ()) -> EngineTokenizer:
        """tokenizer.json plus (optional) tokenizer_config.json for the chat template and the
        bos/eos token strings."""
        json_path = os.path.join(directory, "tokenizer.json")
        if not os.path.isfile(json_path):
            raise TokenizerError(f"{directory} has no tokenizer.json")
        with open(json_path, encoding="utf-8") as f:
            text = f.read()
        config: dict[str, Any] = {}
        config_path = os.path.join(directory, "tokenizer_config.json")
        if os.path.isfile(config_path):
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
        made = cls(text, config.get("chat_template"), None, eos_token_ids)
        made.bos_token_id = made._special_id(config.get("bos_token"))
        eos = made._special_id(config.get("eos_token"))
        if eos is not None and eos not in made.eos_token_ids:
            made.eos_token_ids.append(eos)
        return made

    def _special_id(self, token: Any) -> int | None:
        if isinstance(token, dict):
            token = token.get("content")
        if not isinstance(token, str):
            return None
        return self._tokenizer.token_to_id(token)

    # ---- serialisation (the weight cache keeps tokenizers next to weights) ----
    def to_state(self) -> dict[str, Any]:
        return {"tokenizer_json": self._json, "chat_template": self.chat_template,
                "bos_token_id": self.bos_token_id, "eos_token_ids": self.eos_token_ids}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> EngineTokenizer:
        return cls(state["tokenizer_json"], state.get("chat_template"),
                   state.get("bos_token_id"), state.get("eos_token_ids", []))

    def to_json(self) -> str:
        """The tokenizer.json text (what router_core.DetokenizerVocab.from_tokenizer_json reads)."""
        return self._json

    # ---- use ----
    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise TokenizerError(f"encode expects str, got {type(text).__name__}")
        if len(text) > _GIL_FREE_CHARS:
            # `encode` holds the GIL for the whole text; `encode_batch` (same ids) releases it,
            # so a long prompt tokenised on a worker thread does not stall the caller's loop.
            batch = self._tokenizer.encode_batch([text], add_special_tokens=add_special_tokens)
            return list(batch[0].ids)
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        vocab = self.vocab_size
        bad = [i for i in ids if not 0 <= int(i) < vocab]
        if bad:
            raise TokenizerError(f"token ids out of range [0, {vocab}): {bad[:5]}")
        return str(self._tokenizer.decode([int(i) for i in ids],
                                          skip_special_tokens=skip_special_tokens))

    def token_text(self, token_id: int) -> str | None:
        return self._tokenizer.id_to_token(token_id)

    def _chat_template(self) -> Any:
        # Compiling the Jinja template costs milliseconds; do it once per tokenizer.
        assert self.chat_template is not None
        if self._compiled_template is None:
            self._compiled_template = self._template_env.from_string(self.chat_template)
        return self._compiled_template

    def apply_chat_template(self, messages: Sequence[dict[str, Any]],
                            add_generation_prompt: bool = True) -> str:
        if not self.chat_template:
            raise TokenizerError("this model has no chat template")
        bos = self.token_text(self.bos_token_id) if self.bos_token_id is not None else ""
        eos = self.token_text(self.eos_token_ids[0]) if self.eos_token_ids else ""
        try:
            return self._chat_template().render(messages=list(messages),
                                   add_generation_prompt=add_generation_prompt,
                                   bos_token=bos or "", eos_token=eos or "")
        except (TemplateError, TypeError) as err:
            raise TokenizerError(f"chat template failed: {err}") from err
