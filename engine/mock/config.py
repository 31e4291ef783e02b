"""Settings of the mock engine (synthetic tokens, no model).

Read from the parsed `switchyard engine --mock` namespace when it carries them, else from
`SWITCHYARD_MOCK_*` environment variables, so the shared CLI needs no mock-specific flags.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass


class MockConfigError(ValueError):
    """A mock-engine setting is out of range."""


@dataclass(slots=True)
class MockConfig:
    port: int
    host: str = "127.0.0.1"
    engine_id: str = "mock"
    role: str = "any"
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
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise MockConfigError(f"port must be in 1..65535, got {self.port}")
        if self.role not in ("any", "prefill", "decode"):
            raise MockConfigError(f"role must be any|prefill|decode, got {self.role!r}")
        if self.tokens_per_chunk < 1:
            raise MockConfigError("tokens_per_chunk must be >= 1")
        if self.chunk_delay_ms < 0:
            raise MockConfigError("chunk_delay_ms must be >= 0")
        if not 0.0 <= self.fail_rate <= 1.0:
            raise MockConfigError("fail_rate must be in [0, 1]")
        if self.fail_after_tokens < 0 or self.abort_after_tokens < 0:
            raise MockConfigError("fail_after_tokens and abort_after_tokens must be >= 0")
        if self.page_size < 1 or self.vocab_size < 256:
            raise MockConfigError("page_size must be >= 1 and vocab_size >= 256")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MockConfig:
        def pick(name: str, cast: type, default: object) -> object:
            value = getattr(args, name, None)
            if value is None:
                value = os.environ.get(f"SWITCHYARD_MOCK_{name.upper()}")
            return default if value is None else cast(value)

        return cls(
            port=int(args.port),
            host=str(getattr(args, "host", None) or "127.0.0.1"),
            engine_id=str(getattr(args, "engine_id", None) or f"mock-{args.port}"),
            role=str(getattr(args, "role", None) or "any"),
            tokens_per_chunk=int(pick("tokens_per_chunk", int, 1)),  # type: ignore[call-overload]
            chunk_delay_ms=float(pick("chunk_delay_ms", float, 0.0)),  # type: ignore[arg-type]
            fail_rate=float(pick("fail_rate", float, 0.0)),  # type: ignore[arg-type]
            fail_after_tokens=int(pick("fail_after_tokens", int, 0)),  # type: ignore[call-overload]
            abort_after_tokens=int(pick("abort_after_tokens", int, 0)),  # type: ignore[call-overload]
            unhealthy_file=str(pick("unhealthy_file", str, "")),
            fail_remote_send=str(pick("fail_remote_send", str, "")).lower() in ("1", "true"),
            coalesce=str(pick("coalesce", str, "1")).lower() not in ("0", "false", "no"),
            page_size=int(getattr(args, "page_size", None) or 16),
        )
