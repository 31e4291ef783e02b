"""What a request costs in crossings between router_core and Python, counted by the front
(router_core's `crossings()`): none under a Rust built-in; under a policy that returns a
placement, two — the request to the policy and the placement back — whatever the placement
(Dp, Pd, Split); under a verb-API policy, two more per verb it awaits. Never one per token.

In-process: the router's state (the default model's tokenizer), the Rust front over the HTTP
socket and mock engines that send one gRPC message per token (the mock engine's verbs answer as
an engine's do, so a disaggregated placement runs its PrepRecv and RemoteSend).
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

import aiohttp
import pytest

from pyrouter import policy
from pyrouter.router_command import build_state, start_front
from pyrouter.runtime.policy_registry import ActivePolicy, get_policy
from router_core import MockEngineServer
from switchyard_bench.policies import round_robin_py

pytestmark = pytest.mark.timeout(120)
TOKENS = 32


@policy("verb_pd")
async def verb_pd(req: Any, cluster: Any) -> Any:
    """pd written with the verbs: a reservation awaited, a send awaited, the generation."""
    decode, prefill = cluster.engines()[:2]
    kv = await decode.prep_recv(req)
    if kv.matched < kv.end:
        await prefill.remote_send(req, kv)
    return decode.start_generate(req, begin=kv.end)


async def _one_request(port: int) -> None:
    body = {"prompt": "hello there, a prompt long enough", "max_tokens": TOKENS,
            "ignore_eos": True, "stream": True, "return_token_ids": True}
    async with aiohttp.ClientSession() as http, http.post(
            f"http://127.0.0.1:{port}/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        text = await resp.text()
    events = [json.loads(line[6:]) for line in text.split("\n")
              if line.startswith("data: ") and line != "data: [DONE]"]
    assert len(events) == TOKENS  # one SSE event per token, each from its own message
    assert events[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(("policy_name", "crossings"), [
    ("round_robin", Counter()),
    (round_robin_py.NAME, Counter({"decide": 1, "decision": 1})),
    ("pd", Counter({"decide": 1, "decision": 1})),
    ("tandem", Counter({"decide": 1, "decision": 1})),
    ("verb_pd", Counter({"decide": 1, "decision": 1, "verb_call": 2, "verb_answer": 2})),
])
async def test_a_request_crosses_twice_per_decision_and_twice_per_verb(
        policy_name: str, crossings: Counter[str]) -> None:
    with MockEngineServer(0, coalesce=False) as e0, MockEngineServer(0, coalesce=False) as e1:
        args = argparse.Namespace(engine=[f"127.0.0.1:{e0.port}", f"127.0.0.1:{e1.port}"],
                                  policy=policy_name, policy_file=None, model=None,
                                  host="127.0.0.1", port=0, poll_s=0.05)
        state = await build_state(args)
        front = start_front(state, args)
        try:
            assert await state.engines.wait_ready(2, timeout_s=30)
            await _one_request(front.port)
            seen = Counter({k: v for k, v in front.crossings().items() if v})
            assert seen == crossings
            assert front.fast_policy == ("round_robin" if not crossings else None)
            assert state.recorder is not None and state.recorder.record() == 1
            # The front follows every policy switch (PUT /admin/policy, policy files).
            for name, fast in (("cache_aware", "cache_aware"), ("pd", None),
                               (round_robin_py.NAME, None), ("least_load", "least_load")):
                state.slot.current = ActivePolicy(get_policy(name), {})
                assert front.fast_policy == fast, name
        finally:
            front.shutdown(0.0)
            await state.engines.close()
