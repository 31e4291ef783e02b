"""Typed errors a request meets at an engine: what the engine core raises and its gRPC server maps
to a status (engine/server/errors.py), and what the router raises for a client's bad sampling
rules (SamplingParams raises InvalidRequest) and simulated engines for the engine's faults.

`InvalidRequest` is the caller's fault (HTTP 400 / gRPC INVALID_ARGUMENT); the engine keeps
serving after raising it. `EngineError` is the common base so a server can catch them all.
"""
from __future__ import annotations


class EngineError(Exception):
    """Base of every error the engine core raises on purpose."""


class InvalidRequest(EngineError, ValueError):
    """Bad input: empty prompt, out-of-vocabulary ids, NaN temperature, bad range, duplicate id…

    `param` names the offending request field where there is one (the router's 400 body)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class UnknownRequest(EngineError, KeyError):
    """No request, reservation or send with this id is known to the engine."""

    def __str__(self) -> str:  # KeyError's str() quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "unknown request"


class LeaseExpired(EngineError):
    """A prep_recv reservation's lease ran out (or it was aborted) before the KV arrived."""


class NoCapacity(EngineError):
    """The engine cannot take this work now (e.g. no free KV pages for a reservation)."""
