"""router_core.block_hashes / model_seed against the pure-Python reference, plus input checks."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from router_core_hash_reference import reference_block_hashes, reference_model_seed

import router_core

_U32 = st.integers(min_value=0, max_value=2**32 - 1)
_U64 = st.integers(min_value=0, max_value=2**64 - 1)


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(_U32, max_size=200), block_size=st.integers(1, 40), seed=_U64)
def test_block_hashes_match_reference(tokens: list[int], block_size: int, seed: int) -> None:
    assert router_core.block_hashes(tokens, block_size, seed) == reference_block_hashes(
        tokens, block_size, seed
    )


@settings(max_examples=100, deadline=None)
@given(model_id=st.text(max_size=60))
def test_model_seed_matches_reference(model_id: str) -> None:
    assert router_core.model_seed(model_id) == reference_model_seed(model_id)


def test_long_prompt_releases_gil_path_matches_reference() -> None:
    # 2k tokens takes the GIL-released path in the binding.
    tokens = [(i * 7919) % 49152 for i in range(2048)]
    seed = router_core.model_seed("SmolLM2-135M-Instruct")
    hashes = router_core.block_hashes(tokens, 16, seed)
    assert len(hashes) == 128
    assert hashes == reference_block_hashes(tokens, 16, seed)


def test_prefix_shares_hashes() -> None:
    tokens = list(range(100))
    full = router_core.block_hashes(tokens, 16, 1)
    assert router_core.block_hashes(tokens[:48], 16, 1) == full[:3]
    assert router_core.block_hashes(tokens[:15], 16, 1) == []


def test_accepts_tuples_and_ranges() -> None:
    assert router_core.block_hashes((1, 2, 3, 4), 2, 0) == router_core.block_hashes(
        range(1, 5), 2, 0
    )


@pytest.mark.parametrize("block_size", [0, -1])
def test_bad_block_size_raises(block_size: int) -> None:
    with pytest.raises((ValueError, OverflowError)):
        router_core.block_hashes([1, 2], block_size, 0)


@pytest.mark.parametrize("tokens", [[-1, 2], [2**32, 1], ["a", 1]])
def test_bad_tokens_raise(tokens: list[object]) -> None:
    with pytest.raises((ValueError, OverflowError, TypeError)):
        router_core.block_hashes(tokens, 2, 0)  # type: ignore[arg-type]


def test_bad_seed_raises() -> None:
    with pytest.raises(OverflowError):
        router_core.block_hashes([1, 2], 2, -1)
    with pytest.raises(OverflowError):
        router_core.block_hashes([1, 2], 2, 2**64)


def test_accepts_arrays_and_numpy_buffers() -> None:
    import array

    import numpy as np

    tokens = [(i * 31) % 49152 for i in range(64)]
    expected = reference_block_hashes(tokens, 16, 9)
    for buffer in (array.array("I", tokens), array.array("q", tokens),
                   np.array(tokens, dtype=np.int64), np.array(tokens, dtype=np.uint32)):
        assert router_core.block_hashes(buffer, 16, 9) == expected  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        router_core.block_hashes(np.array([-1] * 16), 16, 0)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        router_core.block_hashes(np.array([2**33] * 16), 16, 0)  # type: ignore[arg-type]


def test_accepts_int_like_scalars_in_lists() -> None:
    import numpy as np

    tokens = list(range(100, 132))
    expected = reference_block_hashes(tokens, 16, 0)
    assert router_core.block_hashes(list(np.array(tokens)), 16, 0) == expected
    assert router_core.block_hashes(tuple(np.array(tokens, dtype=np.uint32)), 16, 0) == expected
    with pytest.raises(TypeError):
        router_core.block_hashes([np.float64(1.0)] * 16, 16, 0)  # type: ignore[list-item]
