"""SseEncoder: OpenAI completion and chat.completion.chunk events, ready to send."""
from __future__ import annotations

import json
from typing import Any

import pytest

import router_core

VOCAB_JSON = json.dumps({
    "model": {"type": "BPE", "vocab": {"Hi": 0, "Ġthere": 1, "!": 2, "Ã": 3, "©": 4}, "merges": []},
    "decoder": {"type": "ByteLevel"},
    "added_tokens": [{"id": 5, "content": "<|im_end|>", "special": True}],
})


def _event(chunk: bytes) -> Any:
    assert chunk.startswith(b"data: ") and chunk.endswith(b"\n\n")
    return json.loads(chunk[len(b"data: "):-2])


def test_completion_chunks() -> None:
    enc = router_core.SseEncoder("cmpl-7", "smol\"lm", 1700000000, "completion")
    event = _event(enc.delta('a "quoted"\nline ✓'))
    assert event == {
        "id": "cmpl-7", "object": "text_completion", "created": 1700000000, "model": "smol\"lm",
        "choices": [{"index": 0, "text": 'a "quoted"\nline ✓', "logprobs": None,
                     "finish_reason": None}],
    }
    assert _event(enc.delta("", "length"))["choices"][0]["finish_reason"] == "length"
    with pytest.raises(ValueError):
        enc.role_chunk()


def test_chat_chunks_usage_and_done() -> None:
    enc = router_core.SseEncoder("chatcmpl-1", "m", 5, "chat")
    first = _event(enc.role_chunk())
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert _event(enc.delta("hé"))["choices"][0]["delta"] == {"content": "hé"}
    last = _event(enc.delta("", "stop"))
    assert last["choices"][0]["delta"] == {} and last["choices"][0]["finish_reason"] == "stop"
    usage = _event(enc.usage(12, 4, cached_tokens=8))
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16,
                              "prompt_tokens_details": {"cached_tokens": 8}}
    assert router_core.SseEncoder.done() == b"data: [DONE]\n\n"
    with pytest.raises(ValueError):
        router_core.SseEncoder("x", "m", 0, "embeddings")  # type: ignore[arg-type]


def test_delta_tokens_relays_engine_chunks() -> None:
    vocab = router_core.DetokenizerVocab.from_tokenizer_json(VOCAB_JSON)
    detok = router_core.IncrementalDetokenizer(vocab, stop=["e!"])
    enc = router_core.SseEncoder("chatcmpl-2", "m", 0, "chat")
    chunk, stopped = enc.delta_tokens(detok, [0, 3])  # "Hi" + half of "é"
    assert not stopped and _event(chunk)["choices"][0]["delta"] == {"content": "Hi"}
    chunk, stopped = enc.delta_tokens(detok, [4])
    assert _event(chunk)["choices"][0]["delta"] == {"content": "é"}
    chunk, stopped = enc.delta_tokens(detok, [1])  # " there": "e" held (could start "e!")
    assert _event(chunk)["choices"][0]["delta"] == {"content": " ther"}
    chunk, stopped = enc.delta_tokens(detok, [2])
    assert stopped
    event = _event(chunk)
    assert event["choices"][0]["finish_reason"] == "stop" and event["choices"][0]["delta"] == {}
    assert detok.text == "Hié ther" and detok.stop_string == "e!"


def test_delta_tokens_without_text_sends_nothing_and_finish_flushes() -> None:
    vocab = router_core.DetokenizerVocab.from_tokenizer_json(VOCAB_JSON)
    detok = router_core.IncrementalDetokenizer(vocab)
    enc = router_core.SseEncoder("cmpl-3", "m", 0, "completion")
    assert enc.delta_tokens(detok, [5]) == (b"", False)  # special token skipped
    assert enc.delta_tokens(detok, [3]) == (b"", False)  # incomplete character held
    chunk, stopped = enc.delta_tokens(detok, [], "length")
    event = _event(chunk)
    assert not stopped
    assert event["choices"][0] == {"index": 0, "text": "\ufffd", "logprobs": None,
                                   "finish_reason": "length"}


def test_stop_string_on_the_last_token_wins_over_the_engines_reason() -> None:
    # The engine ends on max_tokens ("length") with the very token that completes a stop string:
    # the client must see "stop" and no stop text.
    vocab = router_core.DetokenizerVocab.from_tokenizer_json(VOCAB_JSON)
    detok = router_core.IncrementalDetokenizer(vocab, stop=["e!"])
    enc = router_core.SseEncoder("cmpl-4", "m", 0, "completion")
    enc.delta_tokens(detok, [1])
    chunk, stopped = enc.delta_tokens(detok, [2], "length")
    assert stopped
    assert _event(chunk)["choices"][0]["finish_reason"] == "stop"
    assert detok.text == " ther"
