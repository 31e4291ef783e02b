"""Turn a GGUF file's `tokenizer.ggml.*` metadata into a Hugging Face tokenizer.json document.

Only byte-level BPE (`tokenizer.ggml.model == "gpt2"`) is supported, which covers SmolLM2,
Llama 3, Qwen2 and most GPT-style models. The pre-tokenizer is chosen by `tokenizer.ggml.pre`,
mirroring what llama.cpp does for the same value.
"""
from __future__ import annotations

from typing import Any

from gguf import GGUFReader

from switchyard_tokenizer.gguf_metadata import GGUFFormatError, field_value

_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

_BYTE_LEVEL_REGEX = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                     "use_regex": True}
_BYTE_LEVEL_PLAIN = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                     "use_regex": False}


def _split(pattern: str) -> dict[str, Any]:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
            "invert": False}


def pre_tokenizer_for(pre: str | None) -> dict[str, Any]:
    """The tokenizers pre-tokenizer llama.cpp's `tokenizer.ggml.pre` value stands for."""
    if pre in (None, "default", "gpt2", "gpt-2"):
        return _BYTE_LEVEL_REGEX
    if pre == "smollm":
        # SmolLM's own tokenizer.json: every digit on its own, then GPT-2 byte-level splitting.
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, _BYTE_LEVEL_REGEX]}
    if pre in ("llama-bpe", "llama3", "smaug-bpe"):
        return {"type": "Sequence", "pretokenizers": [_split(_LLAMA3_SPLIT), _BYTE_LEVEL_PLAIN]}
    if pre == "qwen2":
        return {"type": "Sequence", "pretokenizers": [_split(_QWEN2_SPLIT), _BYTE_LEVEL_PLAIN]}
    raise GGUFFormatError(f"unsupported tokenizer.ggml.pre {pre!r}")


# llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
_CONTROL = 3
_USER_DEFINED = 4


def tokenizer_json_from_gguf(reader: GGUFReader) -> dict[str, Any]:
    kind = field_value(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise GGUFFormatError(f"unsupported tokenizer.ggml.model {kind!r} (only 'gpt2' BPE)")
    tokens: list[str] = field_value(reader, "tokenizer.ggml.tokens") or []
    merges: list[str] = field_value(reader, "tokenizer.ggml.merges") or []
    types: list[int] = field_value(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
    if not tokens or len(types) != len(tokens):
        raise GGUFFormatError("GGUF tokenizer metadata is missing or inconsistent")
    added = [
        {"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": types[i] == _CONTROL}
        for i in range(len(tokens)) if types[i] in (_CONTROL, _USER_DEFINED)
    ]
    bos = field_value(reader, "tokenizer.ggml.bos_token_id")
    add_bos = bool(field_value(reader, "tokenizer.ggml.add_bos_token", False))
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer_for(field_value(reader, "tokenizer.ggml.pre")),
        "post_processor": _bos_post_processor(tokens[bos], int(bos)) if add_bos and bos is not None
        else None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None,
            "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
            "byte_fallback": False, "ignore_merges": False,
            "vocab": {token: i for i, token in enumerate(tokens)},
            "merges": merges,
        },
    }


def _bos_post_processor(bos: str, bos_id: int) -> dict[str, Any]:
    bos_piece = {"SpecialToken": {"id": bos, "type_id": 0}}
    seq_a = {"Sequence": {"id": "A", "type_id": 0}}
    seq_b = {"Sequence": {"id": "B", "type_id": 1}}
    return {
        "type": "TemplateProcessing",
        "single": [bos_piece, seq_a],
        "pair": [bos_piece, seq_a, bos_piece, seq_b],
        "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
    }
