"""The engine checks sampling values with the router's rules (router_core/src/sampling.rs, through
`router_core.check_sampling`): building a SamplingParams, directly or from a StartGenerate's
proto, refuses a bad value with InvalidRequest naming the field and saying what is allowed, and
normalises the "off" spellings. The rules' own cases are Rust unit tests (`sampling::tests`);
these hold the engine's side of the binding to them."""
from __future__ import annotations

import math
from typing import Any

import pytest

import router_core
from switchyard_engine_api.errors import InvalidRequest
from switchyard_engine_api.sampling_params import SamplingParams
from switchyard_engine_api.sampling_proto import sampling_from_proto
from switchyard_rpc import engine_pb2 as pb

# (the values, the field refused, the message the engine gives)
REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"temperature": math.nan}, "temperature", "temperature must be in [0, 2], got nan"),
    ({"temperature": -1e-05}, "temperature", "temperature must be in [0, 2], got -1e-05"),
    ({"temperature": 3}, "temperature", "temperature must be in [0, 2], got 3.0"),
    ({"top_p": 1.5}, "top_p", "top_p must be in [0, 1], got 1.5"),
    ({"top_k": -2}, "top_k", "top_k must be -1, 0 (off) or > 0, got -2"),
    ({"max_tokens": -1}, "max_tokens", "max_tokens must be > 0, got -1"),
    ({"max_tokens": 4, "min_tokens": 5}, "min_tokens",
     "min_tokens must be in [0, max_tokens=4], got 5"),
    ({"seed": 2**63}, "seed", f"seed must be a signed 64-bit integer, got {2**63}"),
    ({"stop_token_ids": [3, -1]}, "stop_token_ids", "stop_token_ids must be non-negative"),
    ({"stop": ["a", 5]}, "stop", "stop must be up to 4 non-empty strings"),
    ({"priority": 101}, "priority",
     "priority must be an integer in [-100, 100] (lower first), got 101"),
    # Several broken: the first in the rules' order is reported.
    ({"top_k": -3, "max_tokens": -1, "stop": [""]}, "top_k",
     "top_k must be -1, 0 (off) or > 0, got -3"),
]


def _id(case: dict[str, Any]) -> str:
    return ",".join(f"{k}={v!r}"[:40] for k, v in case.items())


@pytest.mark.parametrize("values, param, message", REFUSED, ids=[_id(c[0]) for c in REFUSED])
def test_a_bad_value_is_an_invalid_request_naming_its_field(
        values: dict[str, Any], param: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        SamplingParams(**values)
    assert (raised.value.param, str(raised.value)) == (param, message)


def test_the_grpc_conversion_refuses_the_same_way() -> None:
    with pytest.raises(InvalidRequest) as raised:
        sampling_from_proto(pb.SamplingParams(max_tokens=8, top_k=-2))
    assert (raised.value.param, str(raised.value)) == (
        "top_k", "top_k must be -1, 0 (off) or > 0, got -2")
    # proto3's unset max_tokens (0) takes the default rather than meeting the rule.
    assert sampling_from_proto(pb.SamplingParams(max_tokens=0)).max_tokens == 16


def test_the_off_spellings_are_normalised() -> None:
    params = SamplingParams(top_k=-1, top_p=0.0)  # vLLM's and proto3's spellings of "off"
    assert (params.top_k, params.top_p) == (0, 1.0)
    kept = SamplingParams(temperature=2.0, top_p=1e-07, top_k=2**31 - 1, seed=-(2**63),
                          stop=["a", "b", "c", "d"], priority=-100)
    assert (kept.top_p, kept.top_k) == (1e-07, 2**31 - 1)


def test_a_value_of_the_wrong_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="top_k"):
        SamplingParams(top_k=1.5)  # type: ignore[arg-type]


def test_the_refusal_is_a_value_error_naming_its_field() -> None:
    """What the router's own callers (its configured defaults, pyrouter/state.py) catch."""
    with pytest.raises(router_core.SamplingRefused) as raised:
        router_core.check_sampling(0.0, 2.0, 0, 1, 0)
    assert isinstance(raised.value, ValueError) and raised.value.param == "top_p"
