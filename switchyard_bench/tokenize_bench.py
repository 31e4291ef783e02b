"""Tokenisation in `switchyard bench router-core`: router_core.RouterTokenizer (Rust: tokenizers
crate + minijinja) against the engine's Python path (EngineTokenizer: the `tokenizers` package,
jinja2, and pyrouter/http/parse.py for chat), on the default model, per request as the router
does it. Both sides are checked to give the same ids before they are timed."""
from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

SONNETS = Path("/work/shared/data/sonnet.txt")


def _p50_us(fn: Callable[[], object], seconds: float = 0.5) -> float:
    for _ in range(20):
        fn()
    samples: list[int] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < 50:
        t = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t)
    samples.sort()
    return samples[len(samples) // 2] / 1e3


def _cases() -> list[tuple[str, str, Any]]:
    text = SONNETS.read_text(encoding="utf-8") if SONNETS.is_file() else "Shall I compare thee? " * 400
    long_text = text[:8000]
    turns: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(4):
        turns += [{"role": "user", "content": f"Question {i}: {text[i * 300:(i + 1) * 300]}"},
                  {"role": "assistant", "content": f"Answer {i}: {text[2000 + i * 200:2200 + i * 200]}"}]
    turns.append({"role": "user", "content": "Summarise our conversation."})
    return [("completion, 5 words", "completion", "Hello, my name is Ada"),
            (f"completion, {len(long_text)} chars", "completion", long_text),
            ("chat, 1 short message", "chat", [{"role": "user", "content": "What is 2+2?"}]),
            ("chat, 10 messages", "chat", turns)]


def bench_tokenize() -> None:
    from pyrouter.tokenizer import load_router_tokenizer
    from router_core import RouterTokenizer

    py = load_router_tokenizer(None)
    rs = RouterTokenizer(**py.to_state())
    print("tokenise a request (default SmolLM2 tokenizer), p50 per call: Rust RouterTokenizer vs "
          "the engine's Python path (tokenizers package + jinja2)")
    for name, kind, prompt in _cases():
        rust: Callable[[], list[int]]
        python: Callable[[], list[int]]
        if kind == "completion":
            rust, python = partial(rs.encode, prompt), partial(py.encode, prompt)
        else:
            rust = partial(rs.encode_chat, prompt)

            def python(messages: list[dict[str, str]] = prompt) -> list[int]:
                text = py.apply_chat_template(messages, add_generation_prompt=True)
                return py.encode(text, add_special_tokens=False)
        ids = rust()
        if ids != python():
            raise AssertionError(f"{name}: Rust and Python token ids differ")
        r, p = _p50_us(rust), _p50_us(python)
        print(f"  {name:<28} {len(ids):5d} tokens  Rust {r:8.1f} us  Python {p:8.1f} us  "
              f"({p / r:.1f}x faster)")
