"""The fake model's tokenizer: token id n reads " t<n>" (a byte-level BPE vocabulary with no
merges), so the router's front can parse, detokenise and match stop strings on a fake engine's
output without any model file, and a test reads the text it streams at a glance."""
from __future__ import annotations

import functools
import json

from router_core import DetokenizerVocab, RouterTokenizer
from switchyard_sim.fake.fake_engine import FAKE_VOCAB
from switchyard_tokenizer.tokenizer import EngineTokenizer

_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
               "use_regex": True}


def fake_tokenizer_json(vocab_size: int = FAKE_VOCAB) -> str:
    """tokenizer.json of a vocabulary of `vocab_size` tokens, id n being " t<n>" ("Ġ" is the
    byte-level alphabet's space)."""
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": _BYTE_LEVEL, "post_processor": None,
        "decoder": _BYTE_LEVEL,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {f"\u0120t{n}": n for n in range(vocab_size)}, "merges": []}})


@functools.cache
def fake_tokenizers() -> tuple[EngineTokenizer, RouterTokenizer, DetokenizerVocab]:
    """The fake model's tokenizer as the router's state, its front and its detokenizer take
    it; made once per process."""
    text = fake_tokenizer_json()
    return (EngineTokenizer(text, None, None, []), RouterTokenizer(text),
            DetokenizerVocab.from_tokenizer_json(text))
