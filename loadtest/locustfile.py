"""Locust load test against Switchyard's OpenAI endpoint (chat and completions, streamed).

  .venv/bin/locust -f loadtest/locustfile.py --host http://127.0.0.1:8000 --headless -u 16 -r 4 -t 60s
Environment: SWITCHYARD_MAX_TOKENS (default 32), SWITCHYARD_API_KEY (sent as a bearer token).
"""
from __future__ import annotations

import json
import os
import random

from locust import HttpUser, between, task

_PROMPTS = [
    "Explain in two sentences why the sky is blue.",
    "Write a haiku about a lighthouse.",
    "What is the capital of France?",
    "List three uses of a paperclip.",
]
_MAX_TOKENS = int(os.environ.get("SWITCHYARD_MAX_TOKENS", "32"))


class OpenAIUser(HttpUser):
    wait_time = between(0.0, 0.5)

    def on_start(self) -> None:
        key = os.environ.get("SWITCHYARD_API_KEY")
        if key:
            self.client.headers["Authorization"] = f"Bearer {key}"

    @task(3)
    def chat_stream(self) -> None:
        body = {"model": "default", "stream": True, "max_tokens": _MAX_TOKENS,
                "messages": [{"role": "user", "content": random.choice(_PROMPTS)}]}
        with self.client.post("/v1/chat/completions", json=body, stream=True,
                              catch_response=True, name="chat (stream)") as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {r.text[:200]}")
                return
            lines = [ln for ln in r.iter_lines() if ln]
            if not lines or lines[-1] != b"data: [DONE]":
                r.failure("stream did not end with data: [DONE]")

    @task(1)
    def completion(self) -> None:
        body = {"model": "default", "prompt": random.choice(_PROMPTS), "max_tokens": _MAX_TOKENS}
        with self.client.post("/v1/completions", json=body, catch_response=True,
                              name="completion") as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {r.text[:200]}")
            elif "usage" not in json.loads(r.text):
                r.failure("no usage in response")
