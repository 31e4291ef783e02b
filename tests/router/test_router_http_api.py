"""The OpenAI HTTP surface against mock engines: shapes, streaming, usage, errors, headers."""
from __future__ import annotations

import json

import pytest
import requests

pytestmark = [pytest.mark.procs, pytest.mark.timeout(60)]


def _sse_events(resp: requests.Response) -> list[str]:
    return [line[len("data: "):] for line in resp.text.split("\n") if line.startswith("data: ")]


def test_completion_non_streaming(mock_cluster):
    r = requests.post(f"{mock_cluster.base}/v1/completions",
                      json={"model": "default", "prompt": "Hello", "max_tokens": 5,
                            "return_token_ids": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert len(choice["token_ids"]) == 5
    assert choice["text"].strip()
    assert body["usage"]["completion_tokens"] == 5
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 5
    assert r.headers["X-Switchyard-Route"].startswith("dp engine=e")
    assert r.headers["X-Request-Id"]


def test_chat_streaming_with_usage(mock_cluster):
    r = requests.post(f"{mock_cluster.base}/v1/chat/completions", stream=False, json={
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True,
        "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    events = _sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text.strip()
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 4
    assert r.headers["X-Switchyard-Route"].startswith("dp ")


def test_stream_and_non_stream_agree(mock_cluster):
    req = {"prompt": "The same prompt", "max_tokens": 7, "temperature": 0}
    plain = requests.post(f"{mock_cluster.base}/v1/completions", json=req).json()
    streamed = requests.post(f"{mock_cluster.base}/v1/completions", json={**req, "stream": True})
    events = [json.loads(e) for e in _sse_events(streamed)[:-1]]
    text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
    assert text == plain["choices"][0]["text"]
    assert not any("usage" in e for e in events)  # only with include_usage


def test_models_health_ready_metrics(mock_cluster):
    models = requests.get(f"{mock_cluster.base}/v1/models")
    assert models.json()["data"][0]["id"] == "SmolLM2-135M-Instruct.Q4_1"
    assert requests.get(f"{mock_cluster.base}/health").json()["status"] == "ok"
    ready = requests.get(f"{mock_cluster.base}/ready")
    assert ready.status_code == 200 and ready.json()["healthy_engines"] == 2
    metrics = requests.get(f"{mock_cluster.base}/metrics")
    assert "switchyard:requests_total" in metrics.text
    for resp in (models, ready, metrics):
        assert resp.headers["X-Request-Id"] and resp.headers["X-Switchyard-Route"]


def test_roles_come_from_the_engines(mock_cluster):
    engines = requests.get(f"{mock_cluster.base}/admin/engines").json()["engines"]
    assert [e["role"] for e in engines] == ["any", "any"]
    assert all(e["healthy"] and e["model"] == "mock" for e in engines)


def test_request_id_is_echoed(mock_cluster):
    r = requests.post(f"{mock_cluster.base}/v1/completions", headers={"X-Request-Id": "abc-123"},
                      json={"prompt": "x", "max_tokens": 1})
    assert r.headers["X-Request-Id"] == "abc-123"


@pytest.mark.parametrize("body, param", [
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "max_tokens": "ten"}, "max_tokens"),
    ({"prompt": "x", "temperature": -1}, "temperature"),
    ({"prompt": "x", "top_p": 2}, "top_p"),
    ({"prompt": 17}, "prompt"),
    ({"prompt": [1, 2, -5]}, "prompt"),
    ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": "x", "max_tokens": 10**9}, "max_tokens"),
    ({"prompt": "x", "presence_penalty": 0.5}, "presence_penalty"),
    ({"prompt": "x", "logprobs": 2}, "logprobs"),
    ({"prompt": "x", "n": 2}, "n"),
])
def test_bad_input_is_400_in_openai_shape(mock_cluster, body, param):
    r = requests.post(f"{mock_cluster.base}/v1/completions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["message"]
    assert err["code"]  # never null (issue 13, finding 9)
    assert r.headers["X-Switchyard-Route"] == "none" and r.headers["X-Request-Id"]


def test_unknown_model_is_404_model_not_found(mock_cluster):
    r = requests.post(f"{mock_cluster.base}/v1/completions",
                      json={"prompt": "x", "model": "gpt-9"})
    assert r.status_code == 404, r.text
    err = r.json()["error"]
    assert (err["code"], err["param"], err["type"]) == ("model_not_found", "model",
                                                       "not_found_error")


def test_bad_json_and_bad_chat(mock_cluster):
    r = requests.post(f"{mock_cluster.base}/v1/completions", data=b"{not json",
                      headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    r = requests.post(f"{mock_cluster.base}/v1/chat/completions",
                      json={"messages": [{"role": "wizard", "content": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0]"
    r = requests.post(f"{mock_cluster.base}/v1/chat/completions", json={"messages": []})
    assert r.status_code == 400


def test_unknown_route_is_404_json(mock_cluster):
    r = requests.get(f"{mock_cluster.base}/v1/nothing")
    assert r.status_code == 404
    assert r.json()["error"]["message"]
    assert r.headers["X-Switchyard-Route"] == "none"
