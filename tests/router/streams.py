"""A streaming completion run on a thread, recording what arrived, for tests that kill a process
while streams are in flight: whether it ended whole (every token, then `data: [DONE]`) or broke
off (the connection died with the router that carried it)."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

import requests


@dataclass
class Stream:
    base: str
    max_tokens: int
    prompt: str = "replica"
    tokens: int = 0  # the usage's completion tokens (an event can carry several: a character
    # split across tokens is sent whole, and sampling here is random)
    events: int = 0  # content events so far
    done: bool = False  # `data: [DONE]` arrived
    error: str | None = None
    status: int | None = None
    started: threading.Event = field(default_factory=threading.Event)  # first token (or end)
    ended: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Stream:
        threading.Thread(target=self.run, daemon=True).start()
        return self

    @property
    def whole(self) -> bool:
        return self.done and self.error is None and self.tokens == self.max_tokens

    def run(self) -> None:
        try:
            with requests.post(f"{self.base}/v1/completions", stream=True, timeout=120,
                               json={"prompt": self.prompt, "max_tokens": self.max_tokens,
                                     "ignore_eos": True, "stream": True,
                                     "stream_options": {"include_usage": True}}) as r:
                self.status = r.status_code
                if r.status_code != 200:
                    self.error = r.text
                    return
                for line in r.iter_lines():
                    if line == b"data: [DONE]":
                        self.done = True
                    elif line.startswith(b"data: "):
                        event = json.loads(line[6:])
                        if "error" in event:
                            self.error = line.decode()
                        elif event.get("usage"):
                            self.tokens = event["usage"]["completion_tokens"]
                        else:
                            self.events += 1
                            self.started.set()
        except Exception as exc:  # the connection a killed router had dies with it
            self.error = repr(exc)
        finally:
            self.started.set()
            self.ended.set()
