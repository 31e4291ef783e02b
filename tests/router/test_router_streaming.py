"""Streaming shape when the engine packs several tokens into one message: still one SSE event per
token, finish reason on the last, stop strings cut inside a packed message."""
from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import pytest
import requests
from router_procs import free_port, start_mock

from switchyard_bench.grpc_direct import count_messages

pytestmark = [pytest.mark.procs, pytest.mark.timeout(60)]


def _events(resp: requests.Response) -> list[dict]:
    lines = [line[len("data: "):] for line in resp.text.split("\n") if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


@pytest.fixture(scope="module")
def mock_engines() -> Iterator[dict[str, str]]:
    ports = {"packed": free_port(), "single": free_port()}
    procs = [start_mock(ports["packed"]), start_mock(ports["single"], "--no-coalesce")]
    addresses = {k: f"127.0.0.1:{p}" for k, p in ports.items()}
    try:
        for address in addresses.values():
            with grpc.insecure_channel(address) as channel:
                grpc.channel_ready_future(channel).result(timeout=30)
        yield addresses
    finally:
        for p in procs:
            p.stop()


def test_mock_engine_packs_produced_tokens_unless_told_not_to(mock_engines):
    # A mock step costs nothing, so every token exists at once: one message carries them all.
    assert count_messages(mock_engines["packed"], 8) == 1
    assert count_messages(mock_engines["single"], 8) == 8


def test_one_sse_event_per_token(mock_cluster):
    body = {"prompt": "Count these", "max_tokens": 9, "temperature": 0, "stream": True}
    events = _events(requests.post(f"{mock_cluster.base}/v1/completions", json=body))
    assert len(events) == 9
    assert [e["choices"][0]["finish_reason"] for e in events] == [None] * 8 + ["length"]


def test_stop_string_inside_a_packed_message(mock_cluster):
    req = {"prompt": "Stop somewhere", "max_tokens": 12, "temperature": 0}
    plain = requests.post(f"{mock_cluster.base}/v1/completions", json=req).json()
    pieces = [e["choices"][0]["text"] for e in _events(requests.post(
        f"{mock_cluster.base}/v1/completions", json={**req, "stream": True}))]
    stop = pieces[5].strip() or pieces[5]
    full = plain["choices"][0]["text"]
    assert "".join(pieces) == full
    events = _events(requests.post(f"{mock_cluster.base}/v1/completions",
                                   json={**req, "stream": True, "stop": [stop]}))
    assert "".join(e["choices"][0]["text"] for e in events) == full[:full.find(stop)]
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
