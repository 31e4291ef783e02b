"""Structured output on the real SmolLM2 engine (greedy, fast CPU mode): json_object gives a JSON
object, json_schema gives JSON valid against the schema, the constrained tokens do not depend on
what shares the batch, a request continued on a second engine (its tokens so far replayed through
the grammar) gives the tokens of one uninterrupted run, and schemas the grammar library rejects
are InvalidRequest with nothing held."""
from __future__ import annotations

import json

import jsonschema
import pytest
from structured_output_cases import PERSON
from test_core_support import assert_pool_idle, drain, greedy, make_engine

from engine.core.engine_core import EngineCore
from engine.model.loader import LoadedModel
from switchyard_engine_api.errors import InvalidRequest
from switchyard_engine_api.sampling_params import ResponseFormat, SamplingParams

pytestmark = [pytest.mark.model, pytest.mark.timeout(300)]

AS_PERSON = ResponseFormat("json_schema", json.dumps(PERSON))
AS_OBJECT = ResponseFormat("json_object")


def _chat(loaded: LoadedModel, text: str) -> list[int]:
    tok = loaded.tokenizer
    return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))


def _fast_engine(loaded: LoadedModel) -> EngineCore:
    return make_engine(loaded, mode="fast")


def _constrained(max_tokens: int, response_format: ResponseFormat, **kw: object
                 ) -> SamplingParams:
    return greedy(max_tokens, response_format=response_format, **kw)


def test_json_object_output_parses(loaded_model_fast: LoadedModel) -> None:
    core = _fast_engine(loaded_model_fast)
    prompt = _chat(loaded_model_fast, "What is 2+2? Answer in JSON.")
    core.add_request("obj", prompt, _constrained(80, AS_OBJECT))
    run = drain(core)
    assert run.finish["obj"] == "stop", run.text["obj"]
    assert isinstance(json.loads(run.text["obj"]), dict)
    free = drain_one(core, prompt, greedy(80))
    assert free != run.tokens["obj"], "the mask changed nothing: the test proves nothing"
    assert_pool_idle(core)


def drain_one(core: EngineCore, prompt: list[int], params: SamplingParams) -> list[int]:
    core.add_request("free", prompt, params)
    return drain(core).tokens["free"]


# Deliberately spelled out like test_json_object_output_parses: one response_format per test,
# each with the check that proves its output (json.loads vs the schema).
def test_json_schema_output_validates(loaded_model_fast: LoadedModel) -> None:
    core = _fast_engine(loaded_model_fast)
    prompt = _chat(loaded_model_fast, "Invent a person: name, age and city.")
    core.add_request("person", prompt, _constrained(80, AS_PERSON))
    run = drain(core)
    assert run.finish["person"] == "stop", run.text["person"]
    jsonschema.validate(json.loads(run.text["person"]), PERSON)


def test_constrained_tokens_do_not_depend_on_the_batch(loaded_model_fast: LoadedModel) -> None:
    prompt = _chat(loaded_model_fast, "Invent a person: name, age and city.")
    alone_core = _fast_engine(loaded_model_fast)
    alone_core.add_request("person", prompt, _constrained(60, AS_PERSON))
    alone = drain(alone_core).tokens["person"]
    core = _fast_engine(loaded_model_fast)
    core.add_request("free", _chat(loaded_model_fast, "Write a haiku about rain."), greedy(40))
    core.add_request("person", prompt, _constrained(60, AS_PERSON))
    core.add_request("object", _chat(loaded_model_fast, "A dog as JSON."),
                     _constrained(40, AS_OBJECT))
    core.add_request("seeded", _chat(loaded_model_fast, "Count to ten."),
                     SamplingParams(temperature=0.8, seed=5, max_tokens=30))
    run = drain(core)
    assert run.tokens["person"] == alone
    assert len(run.tokens["free"]) > 1 and len(run.tokens["object"]) > 1


def test_a_continued_request_keeps_its_grammar(loaded_model_fast: LoadedModel) -> None:
    """Three tokens on one engine, the rest on another with output_offset=3 (a tandem hand-off):
    the second engine replays the three through the grammar and ends where one engine would."""
    prompt = _chat(loaded_model_fast, "Invent a person: name, age and city.")
    whole_core = _fast_engine(loaded_model_fast)
    whole_core.add_request("whole", prompt, _constrained(60, AS_PERSON))
    whole = drain(whole_core).tokens["whole"]
    lead = _fast_engine(loaded_model_fast)
    lead.add_request("lead", prompt, _constrained(60, AS_PERSON), max_new_tokens_here=3)
    first = drain(lead)
    assert first.finish["lead"] == "handoff" and first.tokens["lead"] == whole[:3]
    follow = _fast_engine(loaded_model_fast)
    follow.add_request("follow", prompt + whole[:3], _constrained(57, AS_PERSON),
                       output_offset=3)
    assert drain(follow).tokens["follow"] == whole[3:]
    # Tokens that the grammar never allowed are the caller's mistake, refused before any work.
    free = _chat(loaded_model_fast, "hello")[-3:]
    with pytest.raises(InvalidRequest, match="does not follow the request's grammar"):
        follow.add_request("bad", prompt + free, _constrained(10, AS_PERSON), output_offset=3)
    assert_pool_idle(follow)


@pytest.mark.parametrize("schema", [
    '{"type": "bogus"}',
    '{"type": "object", "properties": 3}',
    '{"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}',
    "not json",
])
def test_a_schema_the_library_rejects_is_invalid_request(loaded_model_fast: LoadedModel,
                                                         schema: str) -> None:
    core = _fast_engine(loaded_model_fast)
    with pytest.raises(InvalidRequest, match="cannot be compiled") as err:
        core.add_request("bad", _chat(loaded_model_fast, "hi"),
                         _constrained(10, ResponseFormat("json_schema", schema)))
    assert err.value.param == "response_format"
    assert not core.has_work()
    assert_pool_idle(core)


def test_response_format_checks_its_own_shape() -> None:
    with pytest.raises(InvalidRequest, match="at most"):
        ResponseFormat("json_schema", " " * (32 * 1024 + 1))
    with pytest.raises(InvalidRequest, match="must be one of"):
        ResponseFormat("yaml")
    with pytest.raises(InvalidRequest, match="needs a schema"):
        ResponseFormat("json_schema")


def test_min_tokens_cannot_force_invalid_output(loaded_model_fast: LoadedModel) -> None:
    """min_tokens bans EOS, but once the JSON is complete only EOS is valid: the grammar wins,
    the output stays valid JSON and the request stops."""
    core = _fast_engine(loaded_model_fast)
    prompt = _chat(loaded_model_fast, "Invent a person: name, age and city.")
    core.add_request("min", prompt, _constrained(80, AS_PERSON, min_tokens=79))
    run = drain(core)
    assert run.finish["min"] == "stop"
    jsonschema.validate(json.loads(run.text["min"]), PERSON)
