"""SamplingParams <-> the proto's SamplingParams: the router sends a request's sampling rules with
each segment (sampling_to_proto), the engine reads them back (sampling_from_proto)."""
from __future__ import annotations

from switchyard_engine_api.sampling_params import ResponseFormat, SamplingParams
from switchyard_rpc import engine_pb2 as pb

DEFAULT_MAX_TOKENS = 16  # a StartGenerate that leaves max_tokens unset (OpenAI's default)


def sampling_from_proto(msg: pb.SamplingParams) -> SamplingParams:
    """Raises InvalidRequest for out-of-range values (SamplingParams validates itself). A
    field proto3 leaves at 0 is unset: top_p 0 is off, and max_tokens 0 takes the default (a
    gRPC caller cannot send 0 itself, so the rule "max_tokens > 0" meets only negatives here)."""
    return SamplingParams(
        temperature=msg.temperature,
        top_p=msg.top_p or 1.0,
        top_k=msg.top_k,
        max_tokens=msg.max_tokens or DEFAULT_MAX_TOKENS,
        min_tokens=msg.min_tokens,
        seed=msg.seed if msg.HasField("seed") else None,
        stop_token_ids=list(msg.stop_token_ids),
        stop=list(msg.stop),
        ignore_eos=msg.ignore_eos,
        return_logprobs=msg.return_logprobs,
        response_format=(ResponseFormat(msg.response_format.type, msg.response_format.json_schema)
                         if msg.HasField("response_format") else None),
        priority=msg.priority,
    )


def sampling_to_proto(params: SamplingParams, max_tokens: int | None = None,
                      min_tokens: int | None = None) -> pb.SamplingParams:
    """The proto for `params`; a later segment passes what is left of max/min tokens. Stop
    strings stay with the caller (the router matches them on the text it streams)."""
    msg = pb.SamplingParams(
        temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
        max_tokens=params.max_tokens if max_tokens is None else max_tokens,
        min_tokens=params.min_tokens if min_tokens is None else min_tokens,
        stop_token_ids=params.stop_token_ids, ignore_eos=params.ignore_eos,
        return_logprobs=params.return_logprobs, priority=params.priority)
    if params.seed is not None:
        msg.seed = params.seed
    if params.response_format is not None:  # every segment carries the grammar
        msg.response_format.type = params.response_format.type
        msg.response_format.json_schema = params.response_format.json_schema
    return msg
