"""The sampling rules exist as a source of truth and one copy: router_core/src/sampling.rs, which
the router's HTTP front applies to every client request, and the engine's SamplingParams
(switchyard_proto/sampling_params.py), which checks what reaches an engine over gRPC (the engine is a
separate package and must not import the router). For the same values both must refuse the same
field with the same message, or both accept. The front leaves every range to the Rust rules
(router_core/src/front/openai_request_tests.rs, `sampling_ranges_are_the_rules_own`), so what a
client is told is what an engine would say.

What only one side checks, on purpose, is not compared here:
- penalties (presence / frequency / repetition), `min_p`, `logprobs` / `top_logprobs`, `n`,
  `echo`, forced tools: the router refuses them as unsupported (400); the engine's proto has no
  such fields (`return_logprobs` is a flag the router never sets), so an engine cannot be asked
  for them;
- `response_format`: the router checks its JSON shape (router_core/src/front/response_format.rs),
  the engine whether its grammar library compiles the schema (engine/core/grammar.py); both hold
  the same 32 KiB limit on the schema (MAX_SCHEMA_BYTES), tested on each side
  (`malformed_response_formats_are_400s`, tests/engine/test_structured_output.py);
- prompt + max_tokens against the context: the router checks it with the model's context length
  and the engine checks it on the tokens it is given (engine/core/validation.py), with messages
  that speak of different things (text the client sent, token ids an engine got);
- `max_tokens` 0 over gRPC: proto3 cannot tell 0 from unset, so the engine takes its default
  (engine/server/convert.py) and only negatives meet the rule there.
"""
from __future__ import annotations

import math
from typing import Any

import pytest

import router_core
from switchyard_proto.errors import InvalidRequest
from switchyard_proto.sampling_params import SamplingParams
from switchyard_proto.sampling_proto import sampling_from_proto
from switchyard_rpc import engine_pb2 as pb

VALID: dict[str, Any] = {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "max_tokens": 16,
                         "min_tokens": 0, "seed": None, "stop_token_ids": [], "stop": []}

BAD: list[dict[str, Any]] = [
    {"temperature": -0.1}, {"temperature": 2.5}, {"temperature": math.nan},
    {"temperature": math.inf}, {"temperature": -1e-05}, {"temperature": 1e16},
    {"temperature": 3},  # an int: both write it as the float it becomes
    {"top_p": -0.5}, {"top_p": 1.5}, {"top_p": -math.inf}, {"top_p": -1.5e-07},
    {"top_k": -2}, {"top_k": -(2**31)},
    {"max_tokens": 0}, {"max_tokens": -1},
    {"min_tokens": -1}, {"min_tokens": 17}, {"max_tokens": 4, "min_tokens": 5},
    {"seed": 2**63}, {"seed": -(2**63) - 1}, {"seed": 2**64},
    {"stop_token_ids": [3, -1]},
    {"stop": [""]}, {"stop": ["a"] * 5}, {"stop": ["a", 5]},
    # Several broken rules: both report the first in the same order.
    {"temperature": -1.0, "top_p": 2.0, "top_k": -5},
    {"top_k": -3, "max_tokens": 0, "stop": [""]},
    {"min_tokens": 99, "seed": 2**70},
    {"priority": 101}, {"priority": -101}, {"priority": 2**40}, {"stop": [""], "priority": 500},
]
GOOD: list[dict[str, Any]] = [
    {}, {"temperature": 0.0}, {"temperature": 2.0}, {"top_p": 0.0}, {"top_p": 1e-07},
    {"top_k": -1}, {"top_k": 2**31 - 1}, {"max_tokens": 1}, {"min_tokens": 16},
    {"seed": -(2**63)}, {"seed": 2**63 - 1}, {"stop_token_ids": [0, 2]},
    {"stop": ["a", "b", "c", "d"]}, {"priority": -100}, {"priority": 100}, {"priority": 7},
]


def _id(case: dict[str, Any]) -> str:
    return ",".join(f"{k}={v!r}"[:40] for k, v in case.items()) or "defaults"


def _rust(case: dict[str, Any]) -> tuple[str, str] | None:
    return router_core.sampling_error(**{**VALID, **case})


def _engine(case: dict[str, Any]) -> tuple[str, str] | None:
    try:
        SamplingParams(**{**VALID, **case})
    except InvalidRequest as exc:
        assert exc.param is not None
        return exc.param, str(exc)
    return None


def _proto(case: dict[str, Any]) -> pb.SamplingParams | None:
    """The case as a StartGenerate's sampling, or None where the proto cannot carry it (an
    int64 seed out of range, a stop entry that is no string, max_tokens 0 = unset)."""
    fields = {**VALID, **case}
    if fields["max_tokens"] == 0:
        return None
    try:
        msg = pb.SamplingParams(
            temperature=fields["temperature"], top_p=fields["top_p"], top_k=fields["top_k"],
            max_tokens=fields["max_tokens"], min_tokens=fields["min_tokens"],
            stop_token_ids=fields["stop_token_ids"], stop=fields["stop"],
            priority=fields.get("priority", 0))
        if fields["seed"] is not None:
            msg.seed = fields["seed"]
    except (TypeError, ValueError):
        return None
    return msg


@pytest.mark.parametrize("case", BAD, ids=_id)
def test_both_refuse_with_the_same_field_and_message(case: dict[str, Any]) -> None:
    rust = _rust(case)
    assert rust is not None, f"the router's rules accept {case}"
    assert _engine(case) == rust
    msg = _proto(case)
    if msg is not None:  # and the engine's gRPC conversion says it too
        with pytest.raises(InvalidRequest) as raised:
            sampling_from_proto(msg)
        assert (raised.value.param, str(raised.value)) == rust


@pytest.mark.parametrize("case", GOOD, ids=_id)
def test_both_accept(case: dict[str, Any]) -> None:
    assert _rust(case) is None
    assert _engine(case) is None


def test_the_proto_cannot_carry_what_only_the_rules_refuse() -> None:
    """Why some cases skip the gRPC conversion above: the proto's types refuse them first."""
    assert _proto({"seed": 2**63}) is None and _proto({"stop": ["a", 5]}) is None
    assert sampling_from_proto(pb.SamplingParams(max_tokens=0)).max_tokens == 16
