"""IncrementalDetokenizer against `tokenizers`' decode of the whole sequence: the real SmolLM2
tokenizer (byte-level BPE, from the GGUF) and SentencePiece-style tokenizers built here."""
from __future__ import annotations

import json
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import router_core

TEXTS = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "Ünïcödé: naïve café — 日本語のテキスト, 中文, 한국어, emoji 🚀🎉👩‍👩‍👧 and ∑∫√.",
    "def f(x):\n    return x ** 2  # tabs\tand\n\n  spaces   \r\n",
    "   leading spaces and trailing   ",
    "12345 67.89 0x1F",
]


@pytest.fixture(scope="module")
def smollm2_tokenizer() -> Tokenizer:
    from switchyard_tokenizer.default_model import default_model_path
    from switchyard_tokenizer.tokenizer import EngineTokenizer

    return Tokenizer.from_str(EngineTokenizer.from_gguf(default_model_path()).to_json())


@pytest.fixture(scope="module")
def smollm2_vocab(smollm2_tokenizer: Tokenizer) -> router_core.DetokenizerVocab:
    return router_core.DetokenizerVocab.from_tokenizer_json(smollm2_tokenizer.to_str())


def _stream(vocab: router_core.DetokenizerVocab, ids: Sequence[int], chunk_sizes: Sequence[int],
            stop: Sequence[str] = (), skip_special_tokens: bool = True) -> str:
    detok = router_core.IncrementalDetokenizer(vocab, stop, skip_special_tokens)
    out, start, i = [], 0, 0
    while start < len(ids):
        size = chunk_sizes[i % len(chunk_sizes)]
        text, stopped = detok.push(ids[start:start + size])
        out.append(text)
        start, i = start + size, i + 1
        if stopped:
            break
    out.append(detok.flush())
    assert "".join(out) == detok.text
    return detok.text


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """Text before the stop string that completes first (smallest end, then earliest start)."""
    hits = [(text.find(s) + len(s), text.find(s)) for s in stop if s in text]
    return text[: min(hits)[1]] if hits else text


def test_vocab_covers_every_id(smollm2_tokenizer: Tokenizer,
                               smollm2_vocab: router_core.DetokenizerVocab) -> None:
    assert len(smollm2_vocab) == smollm2_tokenizer.get_vocab_size(with_added_tokens=True)
    ids = smollm2_tokenizer.encode(" hello").ids
    assert smollm2_vocab.token_bytes(ids[0]) == b" hello"
    im_end = smollm2_tokenizer.token_to_id("<|im_end|>")
    assert im_end is not None and smollm2_vocab.is_special(im_end)


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("chunks", [[1], [3], [2, 5, 1], [1000]])
def test_smollm2_streaming_equals_full_decode(smollm2_tokenizer: Tokenizer,
                                              smollm2_vocab: router_core.DetokenizerVocab,
                                              text: str, chunks: list[int]) -> None:
    ids = smollm2_tokenizer.encode(text).ids
    assert _stream(smollm2_vocab, ids, chunks) == smollm2_tokenizer.decode(ids) == text


def test_special_tokens_kept_or_skipped(smollm2_tokenizer: Tokenizer,
                                        smollm2_vocab: router_core.DetokenizerVocab) -> None:
    ids = smollm2_tokenizer.encode("<|im_start|>assistant\nHi there<|im_end|>").ids
    for skip in (True, False):
        assert _stream(smollm2_vocab, ids, [1], skip_special_tokens=skip) == \
            smollm2_tokenizer.decode(ids, skip_special_tokens=skip)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_smollm2_random_ids_match_lossy_decode(smollm2_tokenizer: Tokenizer,
                                               smollm2_vocab: router_core.DetokenizerVocab,
                                               data: st.DataObject) -> None:
    # Random ids split characters mid-byte-sequence and produce invalid UTF-8.
    n = len(smollm2_vocab)
    ids = data.draw(st.lists(st.integers(0, n - 1), max_size=40))
    chunks = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=5))
    assert _stream(smollm2_vocab, ids, chunks) == smollm2_tokenizer.decode(ids)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_stop_strings_across_chunk_boundaries(smollm2_tokenizer: Tokenizer,
                                              smollm2_vocab: router_core.DetokenizerVocab,
                                              data: st.DataObject) -> None:
    text = data.draw(st.sampled_from(TEXTS))
    full = smollm2_tokenizer.decode(smollm2_tokenizer.encode(text).ids)
    # Stop strings drawn from the text itself (so they hit), plus one that never occurs.
    stops = []
    for _ in range(data.draw(st.integers(1, 3))):
        start = data.draw(st.integers(0, len(full) - 1))
        stops.append(full[start:start + data.draw(st.integers(1, 6))])
    stops.append("\x00never")
    chunks = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    ids = smollm2_tokenizer.encode(text).ids
    assert _stream(smollm2_vocab, ids, chunks, stop=stops) == _cut_at_stop(full, stops)


def _sentencepiece_tokenizer(metaspace_decoder: bool) -> Tokenizer:
    """A Llama-2-style tokenizer: Metaspace pre-tokenizer, BPE with <0xNN> byte fallback."""
    corpus = [t for t in TEXTS if t.isascii()] * 20
    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer_tok.train_from_iterator(
        corpus, trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"]))
    model = json.loads(trainer_tok.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    merges: list[tuple[str, str]] = [
        (m.split(" ")[0], m.split(" ")[1]) if isinstance(m, str) else (m[0], m[1])
        for m in model["merges"]
    ]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    if metaspace_decoder:
        tok.decoder = decoders.Metaspace()
    else:
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                         decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<s>", "</s>"])
    return tok


@pytest.mark.parametrize("metaspace_decoder", [False, True])
def test_sentencepiece_streaming_equals_full_decode(metaspace_decoder: bool) -> None:
    tok = _sentencepiece_tokenizer(metaspace_decoder)
    vocab = router_core.DetokenizerVocab.from_tokenizer_json(tok.to_str())
    rng = random.Random(4)
    for text in TEXTS:
        if metaspace_decoder and not text.isascii():
            continue  # the Metaspace decoder alone cannot turn <0xNN> back into bytes
        bos = tok.token_to_id("<s>")
        assert bos is not None
        ids = [bos, *tok.encode(text).ids]
        for chunks in ([1], [2, 3], [rng.randint(1, 5) for _ in range(4)]):
            got = _stream(vocab, ids, chunks)
            assert got == tok.decode(ids), (text, chunks)
        assert _stream(vocab, ids, [1], skip_special_tokens=False) == \
            tok.decode(ids, skip_special_tokens=False)


def test_bad_input_raises(smollm2_vocab: router_core.DetokenizerVocab) -> None:
    with pytest.raises(ValueError):
        router_core.DetokenizerVocab.from_tokenizer_json("{not json")
    with pytest.raises(ValueError):
        router_core.DetokenizerVocab.from_tokenizer_json('{"model": {"type": "WordPiece", "vocab": {}}}')
    detok = router_core.IncrementalDetokenizer(smollm2_vocab, ["x"])
    with pytest.raises(ValueError):
        detok.push([len(smollm2_vocab)])
    with pytest.raises(OverflowError):
        detok.push([-1])
    # Empty stop strings are ignored (they would match everywhere).
    assert router_core.IncrementalDetokenizer(smollm2_vocab, [""]).push([17]) == ("!", False)
    with pytest.raises(IndexError):
        smollm2_vocab.token_bytes(len(smollm2_vocab))
