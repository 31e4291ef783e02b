"""The official `openai` client works against the router unchanged."""
from __future__ import annotations

import openai
import pytest

pytestmark = [pytest.mark.procs, pytest.mark.timeout(60)]


def _client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)


def test_openai_chat_and_completion(mock_cluster):
    client = _client(mock_cluster.base)
    chat = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hello"}], max_tokens=6)
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content
    assert chat.usage is not None and chat.usage.completion_tokens == 6
    comp = client.completions.create(model="default", prompt="Once upon", max_tokens=3)
    assert comp.choices[0].text and comp.usage is not None
    assert [m.id for m in client.models.list().data] == ["SmolLM2-135M-Instruct.Q4_1"]


def test_openai_streaming_with_usage(mock_cluster):
    client = _client(mock_cluster.base)
    stream = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hello"}], max_tokens=5,
        stream=True, stream_options={"include_usage": True}, seed=3, temperature=0.5, top_p=0.9,
        stop=["never-appears"])
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5


def test_openai_error_surfaces_as_typed_exception(mock_cluster):
    client = _client(mock_cluster.base)
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="default", prompt="x", max_tokens=-3)
    assert "max_tokens" in str(info.value)
