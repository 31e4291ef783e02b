"""Admission: run the active policy for one request and hand back its first output chunk.

The policy instance is captured at admission, so a switch never touches in-flight requests.
Every failure is typed: a policy bug -> PolicyFailed (500, logged with the policy's name), an
engine fault -> EngineFailed (502), no engine -> NoCapacity (503). Whatever fails, every engine
the request touched is told to abort, so no KV reservation or generation is left behind.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import grpc

from pyrouter.cluster import ActivePolicy, ClusterView
from pyrouter.engines.handle import CALLER_MISTAKES, GenerationStream
from pyrouter.engines.membership import EngineSet
from pyrouter.errors import (
    BadRequest,
    EngineFailed,
    PolicyFailed,
    RouterError,
    TransferFailed,
    VerbOrderError,
)
from pyrouter.request import RouterRequest
from switchyard_rpc import engine_pb2 as pb

log = logging.getLogger("switchyard.router")



@dataclass(slots=True)
class Admitted:
    policy_name: str
    first: pb.GenerateChunk
    stream: GenerationStream


class PolicySlot:
    """The policy new requests get; replaced atomically by PUT /admin/policy."""

    def __init__(self, active: ActivePolicy) -> None:
        self.current = active


def _engine_error(req: RouterRequest, policy_name: str, exc: grpc.aio.AioRpcError,
                  verb_stage: str) -> RouterError:
    detail = f"{exc.code().name}: {exc.details()}"
    if exc.code() in CALLER_MISTAKES:
        only_plain_generate = [v for v, _ in req.verbs] == ["start_generate"]
        if only_plain_generate and verb_stage == "generate":
            return BadRequest(f"engine rejected the request: {exc.details()}")
        log.error("policy %r: engine rejected a verb for %s: %s", policy_name,
                  req.request_id, detail)
        return PolicyFailed(policy_name, f"engine rejected a verb ({detail})")
    if exc.code() == grpc.StatusCode.UNAVAILABLE:
        return EngineUnavailable(f"engine unavailable during {verb_stage}: {detail}",
                                 code="engine_unavailable")
    return EngineFailed(f"engine error during {verb_stage}: {detail}", code="engine_error")


class EngineUnavailable(EngineFailed):
    """The engine could not be reached or went away before streaming anything: retryable."""

    status = 503
    error_type = "service_unavailable"


class Dispatcher:
    def __init__(self, engines: EngineSet, slot: PolicySlot, retries: int = 1,
                 policy_timeout_s: float = 300.0) -> None:
        self.engines = engines
        self.slot = slot
        self.retries = retries
        # A policy that never returns must not hold its client forever (PD on a long prompt
        # on CPU can legitimately take a while, hence minutes, not seconds).
        self.policy_timeout_s = policy_timeout_s
        self._background: set[asyncio.Task[bool]] = set()

    async def admit_with_retry(self, req: RouterRequest) -> Admitted:
        """Admit; if an engine was unreachable before any output, take it out of rotation and
        run the policy again (nothing has reached the client yet, so this is invisible)."""
        base_id = req.request_id
        for attempt in range(self.retries + 1):
            try:
                return await self.admit(req)
            except EngineUnavailable as exc:
                if attempt == self.retries:
                    raise
                for engine in list(req.touched.values()):
                    self.engines.mark_unhealthy(engine.id)
                log.warning("request %s: %s; retrying on another engine", base_id, exc.message)
                req.request_id = f"{base_id}-retry{attempt + 1}"
                req.verbs.clear()
                req.touched.clear()
                req.route.pattern, req.route.params = "", {}
                req.matched_by_engine = None
        raise AssertionError("unreachable")

    async def admit(self, req: RouterRequest) -> Admitted:
        active = self.slot.current
        name = active.name
        try:
            try:
                # asyncio.timeout, not wait_for: no extra task (and loop turn) per request.
                async with asyncio.timeout(self.policy_timeout_s):
                    result = await active.spec.route(req, ClusterView(self.engines, active))
            except TimeoutError:
                raise PolicyFailed(name, f"did not return a stream within "
                                   f"{self.policy_timeout_s:g} s") from None
            if not isinstance(result, GenerationStream):
                raise PolicyFailed(name, "a policy must return the stream from start_generate, "
                                   f"got {type(result).__name__}")
            if not req.route.pattern:
                req.note_route(name, engine=result.engine.id)
            try:
                first = await result.next_chunk()
            except grpc.aio.AioRpcError as exc:
                raise _engine_error(req, name, exc, "generate") from exc
            if first is None:
                raise EngineFailed("engine closed the stream without output")
            if first.finish_reason == "error":
                raise EngineFailed(f"engine error: {first.error or 'unknown'}")
            return Admitted(name, first, result)
        except RouterError:
            self.abandon(req)
            raise
        except TransferFailed as exc:
            self.abandon(req)
            raise EngineFailed(f"KV transfer failed: {exc}", code="transfer_failed") from exc
        except VerbOrderError as exc:
            self.abandon(req)
            log.error("policy %r used the verbs wrongly for %s: %s", name, req.request_id, exc)
            raise PolicyFailed(name, f"wrong verb order: {exc}") from exc
        except grpc.aio.AioRpcError as exc:
            self.abandon(req)
            raise _engine_error(req, name, exc, "policy verbs") from exc
        except Exception as exc:  # a bug in a (user) policy: fail this request only
            self.abandon(req)
            log.exception("policy %r raised for request %s", name, req.request_id)
            raise PolicyFailed(name, f"{type(exc).__name__}: {exc}") from exc

    def abandon(self, req: RouterRequest) -> None:
        """Abort the request on every engine it touched (client gone, error) and release them."""
        for engine in req.touched.values():
            task = asyncio.create_task(engine.abort(req.request_id))
            self._background.add(task)  # keep a reference until done (no GC mid-flight)
            task.add_done_callback(self._background.discard)
        self.release(req)

    def release(self, req: RouterRequest) -> None:
        for engine in req.touched.values():
            engine.active.discard(req.request_id)
