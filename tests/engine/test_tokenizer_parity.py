"""EngineTokenizer (built from GGUF metadata) == transformers' tokenizer loaded from the same GGUF."""
from __future__ import annotations

from typing import Any

import pytest

from engine.model.loader import LoadedModel
from switchyard_tokenizer.tokenizer import EngineTokenizer, TokenizerError

pytestmark = pytest.mark.model

TEXTS = [
    "Hello, world!",
    "  leading and trailing spaces  ",
    "Numbers: 3.14159, 2026-11-29, 1,000,000 and 42nd.",
    "Unicode: naïve café, Straße, Ωμέγα, 日本語のテキスト, 한국어, עברית, العربية",
    "Emoji: 🙂🚀👩‍💻🇫🇷 and a family 👨‍👩‍👧‍👦",
    "def add(a: int, b: int) -> int:\n\treturn a + b  # tabs\n\n\n    indented\r\nwindows",
    "<|im_start|>user\nspecial tokens inline<|im_end|>\n",
    "It's they're we've I'm you'll he'd",
    "",
    "a" * 300,
    "\u200b zero width \ufeff bom \x00 nul",
]


@pytest.fixture(scope="module")
def tok(loaded_model_fp32: LoadedModel) -> EngineTokenizer:
    return loaded_model_fp32.tokenizer


@pytest.mark.parametrize("text", TEXTS)
def test_encode_matches_transformers(tok: EngineTokenizer, hf_smollm2_tokenizer: Any,
                                     text: str) -> None:
    ours = tok.encode(text, add_special_tokens=False)
    theirs = hf_smollm2_tokenizer.encode(text, add_special_tokens=False)
    assert ours == theirs
    assert tok.encode(text) == hf_smollm2_tokenizer.encode(text)


@pytest.mark.parametrize("text", TEXTS)
def test_decode_round_trips(tok: EngineTokenizer, hf_smollm2_tokenizer: Any, text: str) -> None:
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert tok.decode(ids) == hf_smollm2_tokenizer.decode(ids)


def test_digits_are_split_individually(tok: EngineTokenizer) -> None:
    # tokenizer.ggml.pre == "smollm": SmolLM's tokenizer splits every digit.
    digits = [tok.decode([i]) for i in tok.encode("12345", add_special_tokens=False)]
    assert digits == ["1", "2", "3", "4", "5"]


def test_special_tokens_and_ids(tok: EngineTokenizer) -> None:
    assert tok.eos_token_ids == [2]
    assert tok.bos_token_id == 1
    assert tok.encode("<|im_end|>", add_special_tokens=False) == [2]
    assert tok.decode([1, 2], skip_special_tokens=True) == ""
    assert tok.vocab_size == 49152


def test_chat_template_matches_transformers(tok: EngineTokenizer,
                                            hf_smollm2_tokenizer: Any) -> None:
    conversations = [
        [{"role": "user", "content": "Hi there"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
         {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}],
    ]
    for messages in conversations:
        for add_prompt in (True, False):
            ours = tok.apply_chat_template(messages, add_generation_prompt=add_prompt)
            theirs = hf_smollm2_tokenizer.apply_chat_template(
                messages, add_generation_prompt=add_prompt, tokenize=False)
            assert ours == theirs
    assert ours.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")


def test_chat_template_is_sandboxed(tok: EngineTokenizer) -> None:
    evil = EngineTokenizer(tok.to_json(), "{{ ''.__class__.__mro__[1].__subclasses__() }}",
                           tok.bos_token_id, tok.eos_token_ids)
    with pytest.raises(TokenizerError):
        evil.apply_chat_template([{"role": "user", "content": "x"}])


def test_bad_input_is_a_clear_error(tok: EngineTokenizer) -> None:
    with pytest.raises(TokenizerError):
        tok.decode([10**9])
    with pytest.raises(TokenizerError):
        tok.encode(123)  # type: ignore[arg-type]
    with pytest.raises(TokenizerError):
        tok.apply_chat_template([{"role": "user", "content": ["not", "text"]}])
    with pytest.raises(TokenizerError):
        EngineTokenizer("{not json", None, None, [])


def test_tokenizer_json_round_trips(tok: EngineTokenizer) -> None:
    again = EngineTokenizer.from_state(tok.to_state())
    assert again.encode(TEXTS[4]) == tok.encode(TEXTS[4])
    assert again.to_json() == tok.to_json()
