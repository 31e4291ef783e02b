"""The soak's request mix and one client: streaming and plain, completions and chat, short and
long prompts (long ones make pd move KV), stop strings, clients that walk away mid-stream, and
bad inputs that must be refused with a 400.
"""
from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from switchyard_bench.soak.outcome import Outcome, judge_json, judge_stream

_WORDS = ("the river carried old lanterns past quiet houses while a patient clockmaker counted "
          "every bell that rang across the valley before morning light reached the hills").split()
BAD_BODIES: tuple[bytes, ...] = (
    b'{"prompt": "a\\ud800"}', b'{"prompt": "x", "max_tokens": -3}',
    b'{"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}',
    b"[" * 5000 + b"]" * 5000, b'{"prompt": "x", "model": "no-such-model"}', b"not json")


@dataclass(frozen=True, slots=True)
class RequestSpec:
    kind: str  # "completion" | "chat" | "abandon" | "bad"
    body: bytes
    stream: bool
    path: str


@dataclass(slots=True)
class TrafficMix:
    long_share: float = 0.15
    chat_share: float = 0.3
    stream_share: float = 0.6
    abandon_share: float = 0.08
    bad_share: float = 0.05
    max_tokens: tuple[int, int] = (4, 48)
    rng: random.Random = field(default_factory=random.Random)

    def _text(self, words: int, salt: int) -> str:
        rng = self.rng
        shared = " ".join(_WORDS[:12])  # a prefix many requests share (prefix cache hits)
        body = " ".join(rng.choice(_WORDS) for _ in range(words))
        return f"{shared} [{salt}] {body}"

    def next(self, salt: int) -> RequestSpec:
        rng = self.rng
        roll = rng.random()
        if roll < self.bad_share:
            return RequestSpec("bad", rng.choice(BAD_BODIES), False, "/v1/completions")
        words = rng.randint(600, 1000) if rng.random() < self.long_share else rng.randint(5, 120)
        body: dict[str, Any] = {"max_tokens": rng.randint(*self.max_tokens), "temperature": 0,
                                "ignore_eos": rng.random() < 0.7}
        if rng.random() < 0.1:
            body["stop"] = [rng.choice(_WORDS)]
        abandon = roll < self.bad_share + self.abandon_share
        stream = abandon or rng.random() < self.stream_share
        body["stream"] = stream
        if rng.random() < self.chat_share:
            body["messages"] = [{"role": "user", "content": self._text(words, salt)}]
            path = "/v1/chat/completions"
        else:
            body["prompt"] = self._text(words, salt)
            path = "/v1/completions"
        return RequestSpec("abandon" if abandon else "chat" if "messages" in body
                           else "completion", json.dumps(body).encode(), stream, path)


async def send(session: aiohttp.ClientSession, base: str, spec: RequestSpec,
               timeout_s: float, headers: dict[str, str]) -> Outcome:
    """One request; every way it can end becomes an Outcome (never an exception)."""
    hdrs = {"Content-Type": "application/json", **headers}
    try:
        async with session.post(f"{base}{spec.path}", data=spec.body, headers=hdrs,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if spec.kind == "abandon" and resp.status == 200:
                async for line in resp.content:
                    if line.startswith(b"data: "):
                        break  # walk away after the first event: the router must clean up
                resp.close()
                return Outcome("abandoned", "client left mid-stream")
            raw = await resp.read()
            text = raw.decode("utf-8", "replace")
            return judge_stream(resp.status, text) if spec.stream else judge_json(resp.status,
                                                                                  text)
    except TimeoutError:
        return Outcome("lost", f"no answer within {timeout_s:g} s")
    except aiohttp.ClientPayloadError as exc:
        return Outcome("lost", f"body cut: {type(exc).__name__}")
    except (aiohttp.ClientError, ConnectionError) as exc:
        return Outcome("lost", f"connection: {type(exc).__name__}")
    except asyncio.CancelledError:
        raise
