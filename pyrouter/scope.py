"""RequestScope: the one owner of everything a request holds, released exactly once.

A request may touch several engines — a KV reservation here, a send from there, one generation
per segment — and raises router-side counts (requests in flight; router_core's dispatched
tokens, through each GenerationStream). Each is recorded here when it is taken, before the RPC
that takes it (a call cancelled half-way may still have left it on the engine), and cleared
only when the engine is known to have let go of it. `close` releases whatever is left, once,
on every path a request can end: finished, stop string, client gone, policy error or timeout,
engine failure, router shutdown.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyrouter.engines.handle import EngineHandle, GenerationStream

log = logging.getLogger("switchyard.router")

# Abort RPCs run in the background (the request is over); keep them referenced until done.
_aborts: set[asyncio.Task[bool]] = set()


@dataclass(slots=True)
class RouterCounters:
    """Router-wide counts a request holds while it lives (admission control, /metrics)."""

    inflight: int = 0


@dataclass(slots=True, eq=False)
class _EngineHold:
    """What one engine may still hold for one engine-side request id."""

    engine: EngineHandle
    engine_request_id: str
    reservations: int = 0   # prep_recv issued, not consumed by a finished generation here
    sends: int = 0          # remote_send issued from here, not answered
    generations: int = 0    # StartGenerate streams here that have not delivered their finish

    @property
    def live(self) -> bool:
        return bool(self.reservations or self.sends or self.generations)

    def settle(self) -> None:
        """Something here ended: once nothing is left, the engine no longer counts this
        request as active (a drain stops waiting for it, e.g. after a migration)."""
        if not self.live:
            self.engine.active.discard(self.engine_request_id)


@dataclass(slots=True, eq=False)
class RequestScope:
    counters: RouterCounters | None = None
    # (verb, engine id) in issue order: the default route header and error reports use it.
    verbs: list[tuple[str, str]] = field(default_factory=list)
    # [verb, engine id, start, end] in perf_counter seconds; end 0.0 while running (tracing).
    verb_times: list[list[Any]] = field(default_factory=list)
    _holds: dict[tuple[str, str], _EngineHold] = field(default_factory=dict)
    _streams: list[GenerationStream] = field(default_factory=list)
    _engines: dict[str, EngineHandle] = field(default_factory=dict)
    _counted: bool = False
    closed: bool = False

    def open(self, counters: RouterCounters) -> None:
        """Count the request in flight until close()."""
        assert not self._counted, "a scope is opened once"
        self.counters, self._counted = counters, True
        counters.inflight += 1

    # ---- recording (called by the verbs in pyrouter/engines/handle.py) ----
    def enter(self, engine: EngineHandle, verb: str, engine_request_id: str) -> list[Any]:
        if self.closed:
            raise RuntimeError("request already ended")  # a policy still running after close
        self.verbs.append((verb, engine.id))
        self._engines[engine.id] = engine
        engine.active.add(engine_request_id)
        timing: list[Any] = [verb, engine.id, time.perf_counter(), 0.0]
        self.verb_times.append(timing)
        return timing

    def hold(self, engine: EngineHandle, engine_request_id: str) -> _EngineHold:
        key = (engine.id, engine_request_id)
        found = self._holds.get(key)
        if found is None:
            found = self._holds[key] = _EngineHold(engine, engine_request_id)
        return found

    def add_stream(self, stream: GenerationStream) -> None:
        self._streams.append(stream)

    def waiting_on(self) -> tuple[str, str] | None:
        """(verb, engine id) of the newest verb call still unanswered, or None."""
        return next(((t[0], t[1]) for t in reversed(self.verb_times) if not t[3]), None)

    @property
    def touched(self) -> list[EngineHandle]:
        return list(self._engines.values())

    def generating(self) -> bool:
        """A segment is running: a stream that has neither delivered its finish nor ended."""
        return any(not s.finished for s in self._streams)

    def holds_anything(self) -> bool:
        return any(h.live for h in self._holds.values()) or self.generating()

    # ---- release ----
    def abandon(self) -> None:
        """Give back everything held on engines now (a failure, a retry, a stop string): cancel
        open streams, and tell each engine that may still hold something to abort it."""
        for stream in self._streams:
            stream.cancel()
        for hold in self._holds.values():
            if hold.live:
                hold.reservations = hold.sends = hold.generations = 0
                task = asyncio.get_running_loop().create_task(
                    hold.engine.abort(hold.engine_request_id))
                _aborts.add(task)
                task.add_done_callback(_aborts.discard)
        for hold in self._holds.values():
            hold.engine.active.discard(hold.engine_request_id)
        self._holds.clear()

    def close(self) -> None:
        """End of the request, however it ended: release what is left (idempotent)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.abandon()
        except RuntimeError:  # no running loop (interpreter shutdown): nothing to send on
            log.warning("request closed outside the event loop; engines free it on their own")
        if self._counted and self.counters is not None:
            self.counters.inflight -= 1
            self._counted = False
