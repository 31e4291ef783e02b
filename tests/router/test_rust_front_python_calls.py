"""The Rust front runs Python once per request and once per segment, never per token — and not
at all under a pure-selection built-in (its fast path).

In-process: the router's state (the default model's tokenizer), the Rust front and a mock engine
that sends one gRPC message per token. Every call into the policy bridge and every chunk Python
reads is counted while one 32-token response streams: under round_robin (the fast path) and
under the same policy registered as a Python policy of another name (the bridge).
"""
from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from typing import Any

import aiohttp
import pytest

from pyrouter.engines.front_call import FrontCall
from pyrouter.front_bridge import FrontBridge
from pyrouter.policies import round_robin
from pyrouter.policy_registry import ActivePolicy, get_policy, policy
from pyrouter.router_command import build_state, start_front
from router_core import MockEngineServer

pytestmark = pytest.mark.timeout(120)
TOKENS = 32


def _counting(calls: Counter[str], name: str, method: Any) -> Any:
    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return await method(*args, **kwargs)
    return counted


policy("python_round_robin")(round_robin.route)  # no fast path: its name is not a built-in's


@pytest.mark.parametrize(("policy_name", "python_calls"), [
    ("round_robin", Counter()),
    ("python_round_robin", Counter({"admit": 1, "chunk read in Python": 1, "close": 1})),
])
async def test_python_runs_once_per_request_not_per_token(
        monkeypatch: pytest.MonkeyPatch, policy_name: str, python_calls: Counter[str]) -> None:
    calls: Counter[str] = Counter()
    for name in ("admit", "next_segment", "close"):
        monkeypatch.setattr(FrontBridge, name, _counting(calls, name, getattr(FrontBridge, name)))
    monkeypatch.setattr(FrontCall, "read", _counting(calls, "chunk read in Python",
                                                     FrontCall.read))
    with MockEngineServer(0, coalesce=False) as engine:
        args = argparse.Namespace(engine=[f"127.0.0.1:{engine.port}"], policy=policy_name,
                                  policy_file=None, model=None, host="127.0.0.1", port=0,
                                  poll_s=0.05)
        state = await build_state(args)
        front = start_front(state, args)
        try:
            assert await state.engines.wait_ready(1, timeout_s=30)
            body = {"prompt": "hello", "max_tokens": TOKENS, "ignore_eos": True,
                    "stream": True, "return_token_ids": True}
            async with aiohttp.ClientSession() as http, http.post(
                    f"http://127.0.0.1:{front.port}/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                text = await resp.text()
            events = [json.loads(line[6:]) for line in text.split("\n")
                      if line.startswith("data: ") and line != "data: [DONE]"]
            assert len(events) == TOKENS  # one SSE event per token, each from its own message
            assert events[-1]["choices"][0]["finish_reason"] == "length"
            assert front.fast_policy == (None if python_calls else "round_robin")
            # close() (or the fast path's record) comes once the response has ended.
            for _ in range(100):
                if calls["close"] or (state.fast_recorder and state.fast_recorder.record()):
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the request was never closed nor recorded")
            assert calls == python_calls
            finished = state.metrics.requests.labels(policy_name, "dp", "ok")._value.get()
            assert finished == 1
            # The front follows every policy switch (PUT /admin/policy, policy files).
            for name, fast in (("cache_aware", "cache_aware"), ("pd", None),
                               ("python_round_robin", None), ("least_load", "least_load")):
                state.slot.current = ActivePolicy(get_policy(name), {})
                assert front.fast_policy == fast, name
        finally:
            front.shutdown(0.0)
            await state.engines.close()
