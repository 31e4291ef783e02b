"""The Rust front runs Python once per request and once per segment, never per token.

In-process: the router's state (the default model's tokenizer, round_robin), the Rust front and
a mock engine that sends one gRPC message per token. Every call into the policy bridge and every
chunk Python reads is counted while one 32-token response streams.
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
from pyrouter.server import build_state, start_rust_front
from router_core import MockEngineServer

pytestmark = pytest.mark.timeout(120)
TOKENS = 32


def _counting(calls: Counter[str], name: str, method: Any) -> Any:
    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return await method(*args, **kwargs)
    return counted


async def test_python_runs_once_per_request_not_per_token(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    calls: Counter[str] = Counter()
    for name in ("admit", "next_segment", "close"):
        monkeypatch.setattr(FrontBridge, name, _counting(calls, name, getattr(FrontBridge, name)))
    monkeypatch.setattr(FrontCall, "read", _counting(calls, "chunk read in Python",
                                                     FrontCall.read))
    with MockEngineServer(0, coalesce=False) as engine:
        args = argparse.Namespace(engine=[f"127.0.0.1:{engine.port}"], policy="round_robin",
                                  policy_file=None, model=None, host="127.0.0.1", port=0,
                                  poll_s=0.05)
        state = await build_state(args)
        front, bridge = start_rust_front(state, args, ops_port=1)
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
            # close() runs once the response has ended; give the loop a moment to run it.
            for _ in range(100):
                if calls["close"]:
                    break
                await asyncio.sleep(0.01)
            assert calls == Counter({"admit": 1, "chunk read in Python": 1, "close": 1})
        finally:
            front.shutdown(0.0)
            await bridge.aclose()
            await state.engines.close()
