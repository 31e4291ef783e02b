"""Settings of the mock engine (synthetic tokens, no model), parsed from the command line.

Read from the parsed `switchyard engine --mock` / `python -m engine.mock` namespace when it
carries them, else from `SWITCHYARD_MOCK_*` environment variables, so the shared CLI needs no
mock-specific flags. The values are checked once, by the Rust mock engine
(router_core/src/mock_engine/config.rs): a bad one raises ValueError when the server starts.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from switchyard_engine_api.auth import engine_token

T = TypeVar("T")

_TRUE = ("1", "true", "yes", "on")


def _flag(value: str) -> bool:
    return value.strip().lower() in _TRUE


@dataclass(slots=True)
class MockConfig:
    port: int
    host: str = "127.0.0.1"
    # Runtime threads serving requests (1 is plenty for a backend that computes nothing).
    threads: int = 1
    engine_id: str = "mock"
    role: str = "any"
    served_model: str = ""  # ModelInfo.served_model (--served-model-name; "" = none)
    # The mock's decode step: it produces `tokens_per_chunk` tokens per request and takes
    # `chunk_delay_ms` (0 = costs nothing: every token of a request exists at once).
    tokens_per_chunk: int = 1
    chunk_delay_ms: float = 0.0
    # Each StartGenerate message carries every token produced so far, as the real engine's
    # servicer does (engine/server/servicer.py); False = one step's tokens per message.
    coalesce: bool = True
    # Fraction of StartGenerate calls that fail with UNAVAILABLE before any token.
    fail_rate: float = 0.0
    # Fail every StartGenerate mid-stream after this many tokens (0 = never).
    fail_after_tokens: int = 0
    # End every StartGenerate with finish_reason "abort" after this many tokens (0 = never): an
    # engine that gave up on the request itself (shutting down, evicted).
    abort_after_tokens: int = 0
    # Every RemoteSend fails with UNAVAILABLE (a broken KV transfer).
    fail_remote_send: bool = False
    # While this file exists the gRPC health service reports NOT_SERVING.
    unhealthy_file: str = ""
    page_size: int = 16
    vocab_size: int = 49152
    # Block hash seed (ModelInfo.block_hash_seed) and the fail_rate generator's seed.
    seed: int = 0
    # The deployment's engine token (switchyard_engine_api/auth.py): Engine RPCs without it are refused
    # with UNAUTHENTICATED, as a real engine refuses them ("" = open).
    engine_token: str = ""
    # Push the load on the KV event stream as a current engine does (engine.proto,
    # KVEventBatch.stats); False plays an older engine that only answers Stats polls.
    push_stats: bool = True

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MockConfig:
        def pick(name: str, cast: Callable[[str], T], default: T) -> T:
            value = getattr(args, name, None)
            if value is None:
                value = os.environ.get(f"SWITCHYARD_MOCK_{name.upper()}")
            return default if value is None else cast(str(value))

        return cls(
            port=int(args.port),
            host=str(getattr(args, "host", None) or "127.0.0.1"),
            threads=pick("threads", int, 1),
            engine_id=str(getattr(args, "engine_id", None) or f"mock-{args.port}"),
            role=str(getattr(args, "role", None) or "any"),
            served_model=str(getattr(args, "served_model_name", None) or ""),
            tokens_per_chunk=pick("tokens_per_chunk", int, 1),
            chunk_delay_ms=pick("chunk_delay_ms", float, 0.0),
            coalesce=pick("coalesce", _flag, True),
            fail_rate=pick("fail_rate", float, 0.0),
            fail_after_tokens=pick("fail_after_tokens", int, 0),
            abort_after_tokens=pick("abort_after_tokens", int, 0),
            fail_remote_send=pick("fail_remote_send", _flag, False),
            unhealthy_file=pick("unhealthy_file", str, ""),
            page_size=int(getattr(args, "page_size", None) or 16),
            vocab_size=pick("vocab_size", int, 49152),
            seed=pick("seed", int, 0),
            engine_token=engine_token() or "",
            push_stats=pick("push_stats", _flag, True),
        )

    def server_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of router_core.MockEngineServer."""
        return asdict(self)
