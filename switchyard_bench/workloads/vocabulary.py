"""Deterministic token blocks over the model's real vocabulary.

Synthetic prompts (trace replays, the shifting workload) are token ids drawn from the model's
ordinary vocabulary: every id the tokenizer knows except its added/special tokens (BOS, EOS, the
chat markers), so no prompt ends a turn or starts a message by accident. A block's ids depend
only on its key (a salt and an id), so equal keys give equal blocks in any process: that is what
makes equal Mooncake `hash_ids` real prefix-cache hits.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from switchyard_tokenizer.tokenizer import EngineTokenizer


def _seed_of(*key: object) -> int:
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class RealVocabulary:
    def __init__(self, tokenizer: EngineTokenizer) -> None:
        document = json.loads(tokenizer.to_json())
        special = {int(t["id"]) for t in document.get("added_tokens", [])}
        special.update(tokenizer.eos_token_ids)
        if tokenizer.bos_token_id is not None:
            special.add(tokenizer.bos_token_id)
        ids = np.arange(tokenizer.vocab_size, dtype=np.int64)
        self.ids = ids[~np.isin(ids, sorted(special))]
        self.tokenizer = tokenizer

    def block(self, length: int, *key: object) -> list[int]:
        """`length` ids determined by `key` alone."""
        rng = np.random.default_rng(_seed_of(*key))
        picked: list[int] = self.ids[rng.integers(0, len(self.ids), size=length)].tolist()
        return picked
