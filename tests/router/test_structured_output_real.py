"""Structured output through the router on real SmolLM2 engines in the fast CPU mode: under dp
(round_robin, the Rust fast path), pd and tandem (a hand-off after 3 tokens: the follow engine
replays them through the grammar), every constrained reply parses and validates, and its tokens
are exactly those one engine alone gives, with other requests beside it. Schemas the grammar
library rejects, or that are too large, and required tool calls are 400s, on both front paths;
the engines serve on after them. A streamed completion across a hand-off and a live migration
(/admin/migrate mid-stream) keep the grammar's state: one engine's text."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema
import pytest
import requests
from router_real_cluster import real_engines, router_over
from structured_output_cases import PERSON
from test_router_seed_patterns_real import ROUND_ROBIN_PY

pytestmark = [pytest.mark.procs, pytest.mark.timeout(900), pytest.mark.slow]

AS_PERSON = {"type": "json_schema", "json_schema": {"name": "person", "strict": True,
                                                    "schema": PERSON}}
AS_OBJECT = {"type": "json_object"}
PATTERNS = [("round_robin", {}, "dp"), ("pd", {}, "pd"), ("tandem", {"lead_tokens": 3}, "tandem")]


@pytest.fixture(scope="module")
def routers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(the router under test over two engines, the single-engine reference). The router under
    test also has round_robin as a Python policy (a live request moves only under one)."""
    policies = tmp_path_factory.mktemp("policies")
    (policies / "round_robin_py.py").write_text(ROUND_ROBIN_PY)
    with real_engines(["any", "any", "any"], mode="fast") as ports, \
            router_over(ports[2:]) as reference, \
            router_over(ports[:2], "--policy-dir", str(policies)) as under_test:
        yield under_test, reference


def _chat(base: str, text: str, response_format: dict[str, Any] | None
          ) -> tuple[str, list[int], str, str]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "max_tokens": 60,
                            "temperature": 0, "return_token_ids": True}
    if response_format is not None:
        body["response_format"] = response_format
    r = requests.post(f"{base}/v1/chat/completions", json=body, timeout=600)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return (choice["message"]["content"], choice["token_ids"], choice["finish_reason"],
            r.headers["X-Switchyard-Route"])


def _switch(base: str, policy: str, params: dict[str, Any]) -> None:
    r = requests.put(f"{base}/admin/policy", json={"policy": policy, "params": params})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(("policy", "params", "pattern"), PATTERNS)
def test_constrained_replies_validate_and_match_one_engine(
        routers: tuple[str, str], policy: str, params: dict[str, Any], pattern: str) -> None:
    under_test, reference = routers
    _switch(under_test, policy, params)
    asks = [(f"[{policy}] Invent a person: name, age and city.", AS_PERSON),
            (f"[{policy}] Invent a person who lives in Rome.", AS_PERSON),
            (f"[{policy}] Describe a retired teacher from Berlin.", AS_PERSON),
            (f"[{policy}] Who is the main character of your favourite book?", AS_PERSON),
            (f"[{policy}] What is 2+2? Answer in JSON.", AS_OBJECT),
            (f"[{policy}] What is the capital of France? Answer in JSON.", AS_OBJECT),
            (f"[{policy}] Write a haiku about rain.", None)]  # free text beside them
    with ThreadPoolExecutor(len(asks)) as pool:
        replies = list(pool.map(lambda ask: _chat(under_test, *ask), asks))
    for (text, fmt), (content, ids, finish, route) in zip(asks, replies, strict=True):
        assert route.startswith(pattern), route
        if fmt is not None:
            assert finish == "stop", (route, content)
            reply = json.loads(content)
            assert isinstance(reply, dict)
            if fmt is AS_PERSON:
                jsonschema.validate(reply, PERSON)
        ref_content, ref_ids, _, _ = _chat(reference, text, fmt)
        assert ids == ref_ids, route
        assert content == ref_content


@pytest.mark.parametrize("policy", ["round_robin", "pd"])  # the Rust fast path; Python's path
def test_what_cannot_be_honoured_is_a_400(routers: tuple[str, str], policy: str) -> None:
    under_test, _ = routers
    _switch(under_test, policy, {})
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    huge = {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(3000)}}
    cases = [
        ({"response_format": {"type": "json_schema",
                              "json_schema": {"name": "x", "schema": {"type": "bogus"}}}},
         "response_format", "cannot be compiled"),
        ({"response_format": {"type": "json_schema",
                              "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}}}},
         "response_format", "cannot be compiled"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": huge}}},
         "response_format", "at most"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
         "response_format", "schema"),
        ({"tools": tools, "tool_choice": "required"}, "tool_choice", "not supported"),
        ({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
         "messages[0].content[0]", ""),
    ]
    for extra, param, words in cases:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}
        r = requests.post(f"{under_test}/v1/chat/completions", json=body, timeout=300)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert words in error["message"] and error["param"] == param, error
    # Nothing was left behind: a constrained request is served at once after them.
    content, _, finish, _ = _chat(under_test, "Invent a person: name, age and city.", AS_PERSON)
    assert finish == "stop"
    jsonschema.validate(json.loads(content), PERSON)


def test_a_streamed_completion_across_a_hand_off(routers: tuple[str, str]) -> None:
    """/v1/completions, streamed, under tandem: the text deltas join into the JSON one engine
    gives in one piece."""
    under_test, reference = routers
    _switch(under_test, "tandem", {"lead_tokens": 5})
    body = {"prompt": "A person, as JSON with name, age and city:", "max_tokens": 60,
            "temperature": 0, "response_format": AS_PERSON}
    r = requests.post(f"{under_test}/v1/completions", json={**body, "stream": True}, timeout=600)
    assert r.status_code == 200, r.text
    assert r.headers["X-Switchyard-Route"].startswith("tandem"), r.headers
    events = [json.loads(line[6:]) for line in r.text.split("\n")
              if line.startswith("data: ") and line != "data: [DONE]"]
    streamed = "".join(e["choices"][0]["text"] for e in events if e["choices"])
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "stop"
    jsonschema.validate(json.loads(streamed), PERSON)
    whole = requests.post(f"{reference}/v1/completions", json=body, timeout=600)
    assert whole.status_code == 200 and whole.json()["choices"][0]["text"] == streamed


def test_a_live_migration_keeps_the_grammar(routers: tuple[str, str]) -> None:
    """/admin/migrate moves a running constrained request to the other engine mid-stream: the
    target replays the tokens so far through the grammar, and the client's tokens are one
    engine's."""
    under_test, reference = routers
    _switch(under_test, "round_robin_py", {})
    body = {"prompt": "The first 50 prime numbers as JSON:",
            "max_tokens": 150, "temperature": 0, "response_format": AS_OBJECT,
            "return_token_ids": True}
    got: dict[str, Any] = {}
    streaming = threading.Event()

    def stream() -> None:
        with requests.post(f"{under_test}/v1/completions", json={**body, "stream": True},
                           stream=True, timeout=600) as r:
            got["id"], got["route"] = r.headers["X-Request-Id"], r.headers["X-Switchyard-Route"]
            streaming.set()
            events = [json.loads(line[6:]) for line in r.iter_lines(decode_unicode=True)
                      if line.startswith("data: ") and line != "data: [DONE]"]
            got["ids"] = [t for e in events if e["choices"]
                          for t in e["choices"][0].get("token_ids") or []]
            got["text"] = "".join(e["choices"][0]["text"] for e in events if e["choices"])

    thread = threading.Thread(target=stream)
    thread.start()
    assert streaming.wait(120), "the stream never started"
    engines = dict(kv.split("=") for kv in got["route"].split()[1:])
    to = {"e0": "e1", "e1": "e0"}[engines["engine"]]
    moved = requests.post(f"{under_test}/admin/migrate", json={"request_id": got["id"], "to": to},
                          timeout=300).json()
    thread.join(600)
    assert moved.get("outcome") == "migrated" and moved["moved_tokens"] > 0, (moved, got)
    whole = requests.post(f"{reference}/v1/completions", json=body, timeout=600)
    assert whole.status_code == 200, whole.text
    assert got["text"] == whole.json()["choices"][0]["text"]
    if got["ids"]:
        assert got["ids"] == whole.json()["choices"][0]["token_ids"]
