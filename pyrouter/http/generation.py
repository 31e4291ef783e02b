"""POST /v1/completions and /v1/chat/completions: parse, admit via the policy, stream or collect.

Finish reasons a client sees are OpenAI's `stop` and `length`; an engine's internal endings
(`abort`, `error`, `handoff`) never reach it (pyrouter/dispatch.py turns the first two into
errors). While the router drains (SIGTERM), new requests get 503 `shutting_down` with
Retry-After; a request still running when the grace period ends is cancelled by the drain
(pyrouter/http/drain.py) and ends properly: a stream with an error event, `[DONE]` and the end of
the body, a plain request with a 503.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from typing import Any, Literal

from aiohttp import web

from pyrouter.dispatch import RequestRun
from pyrouter.errors import Busy, PolicyFailed, RouterError, ShuttingDown
from pyrouter.http.body import read_body
from pyrouter.http.drain import DRAIN_RETRY_AFTER_S, SHUTDOWN_KEY
from pyrouter.http.parse import parse_request
from pyrouter.json_body import parse_json
from pyrouter.request import RouterRequest
from pyrouter.request_end import record_request_end
from pyrouter.request_trace import start_request_trace
from pyrouter.state import STATE, RouterState
from pyrouter.timeline import RequestTimeline
from router_core import IncrementalDetokenizer, SseEncoder

log = logging.getLogger("switchyard.router")
_CLIENT_FINISH = {"stop": "stop", "length": "length"}
ROUTE_HEADER = "X-Switchyard-Route"
# Set on a request whose error this module already counted (pyrouter/request_end.py), so the
# app's error middleware does not count it twice.
ERROR_COUNTED = "error_counted"
# Bodies above this size are parsed and tokenised on a worker thread (tokenising releases the
# GIL there), so a long prompt never stalls the event loop for the other requests.
_OFF_LOOP_BYTES = 16 << 10


def shutting_down() -> ShuttingDown:
    return ShuttingDown("the router is shutting down; retry on another replica",
                        retry_after_s=DRAIN_RETRY_AFTER_S)


async def _parse(request: web.Request, state: RouterState,
                 kind: Literal["completion", "chat"]) -> RouterRequest:
    raw = await read_body(request)
    cfg = state.config
    max_context = min(cfg.max_context, state.engines.max_context or cfg.max_context)
    max_prompt_bytes = max_context * state.tokenizer.max_token_bytes()

    def parse() -> RouterRequest:
        return parse_request(parse_json(raw), kind, state.tokenizer, request["request_id"],
                             cfg.served_model, max_context, cfg.default_temperature,
                             cfg.default_top_p, max_prompt_bytes)

    return await asyncio.to_thread(parse) if len(raw) > _OFF_LOOP_BYTES else parse()


async def handle_generation(request: web.Request, kind: Literal["completion", "chat"]
                            ) -> web.StreamResponse:
    state = request.app[STATE]
    timeline = RequestTimeline()  # the request's clock starts before the body is read
    # An error here reaches the middleware (app.py envelope), which counts it.
    if state.draining:
        raise shutting_down()
    req = await _parse(request, state, kind)
    if state.counters.inflight >= state.config.max_inflight:
        raise Busy(f"{state.counters.inflight} requests in flight (limit "
                   f"{state.config.max_inflight})", code="too_many_requests", retry_after_s=1.0)
    caller = ""  # who the per-caller limits count (no limits: nobody)
    if state.limiter.rules.active:
        caller = state.config.keys.caller_id(request.headers.get("Authorization", ""),
                                             request.remote)
        state.limiter.acquire(caller)
    req.engine_request_id = request["engine_request_id"]
    req.timeline = timeline
    timeline.trace = start_request_trace(state.tracer, req, request.headers)
    req.scope.open(state.counters)
    task = asyncio.current_task()
    if task is not None:
        state.handlers[task] = request
    status, error_type = "cancelled", ""  # a client gone mid-request ends with neither
    policy_name = state.slot.current.name
    run: RequestRun | None = None
    try:
        run = await state.dispatcher.admit(req)
        state.runs[req.request_id] = run
        policy_name = run.policy_name
        state.metrics.count_selection(policy_name, req.route.label())
        request["route"] = req.route.header()
        if req.stream:
            resp = await _stream(request, state, req, run)
        else:
            resp = await _collect(state, req, run)
        status = "error" if request.get("failed") else "ok"
        error_type = request.get("failed") or ""
        return resp
    except asyncio.CancelledError:
        if not request.get(SHUTDOWN_KEY) or task is None:
            raise  # the client went away
        task.uncancel()  # the drain's signal, answered here: a plain 503
        status, error_type = "error", "shutting_down"
        raise shutting_down() from None
    except RouterError as exc:
        status, error_type = "error", exc.code or exc.error_type
        if isinstance(exc, PolicyFailed):
            state.metrics.child(state.metrics.policy_errors, policy_name).inc()
        raise
    except Exception as exc:
        status, error_type = "error", type(exc).__name__
        raise
    finally:
        # One owner releases everything the request held, on every path (client gone too).
        if task is not None:
            state.handlers.pop(task, None)
        state.limiter.release(caller)
        if run is not None:
            if state.runs.get(req.request_id) is run:
                del state.runs[req.request_id]
            await run.close()
        req.scope.close()
        record_request_end(state, req, policy_name, status, error_type)
        request[ERROR_COUNTED] = status != "ok"


def _finish(reason: str) -> str:
    return _CLIENT_FINISH.get(reason, "stop")


def _usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    """The non-streaming body's usage (streams get the same fields from SseEncoder.usage)."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


async def _collect(state: RouterState, req: RouterRequest, run: RequestRun) -> web.Response:
    detok = IncrementalDetokenizer(state.detok_vocab, req.sampling.stop)
    texts: list[str] = []
    ids: list[int] = []
    finish = "stop"
    async for chunk in run.chunks():
        ids.extend(chunk.token_ids)
        text, stopped = detok.push(chunk.token_ids)
        texts.append(text)
        if stopped:
            finish = "stop"
            if not chunk.finish_reason:
                run.stop_early()
            break
        if chunk.finish_reason:
            finish = _finish(chunk.finish_reason)
    else:
        texts.append(detok.flush())
    prompt_tokens = req.prompt_len
    req.completion_tokens = len(ids)
    text = "".join(texts)
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
    if req.kind == "chat":
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    if req.return_token_ids:
        choice["token_ids"] = ids
    body = {"id": req.request_id,
            "object": "chat.completion" if req.kind == "chat" else "text_completion",
            "created": int(time.time()), "model": req.model, "choices": [choice],
            "usage": _usage(prompt_tokens, len(ids), run.first.cached_tokens)}
    return web.json_response(body, headers={ROUTE_HEADER: req.route.header()})


class _SseResponse(web.StreamResponse):
    # The first events are already in hand when the response starts, so the headers go out
    # with them in one send instead of a send of their own (aiohttp's opt-in buffering).
    _send_headers_immediately = False


def _encode_chunk(enc: SseEncoder, detok: IncrementalDetokenizer, token_ids: Sequence[int],
                  finish: str | None) -> tuple[bytes, bool]:
    """One engine chunk -> one SSE event per token (as OpenAI streams), joined for one write.

    Returns (bytes, stopped by a stop string). A token whose text is held back (a partial
    UTF-8 sequence, a possible stop string) yields no event; the finish reason rides on the
    last token's event (router_core lets a stop string completing on that token win).
    """
    if not token_ids:  # a finish-only chunk: flush what was held back
        return (enc.delta_tokens(detok, (), finish)[0] if finish is not None else b""), False
    events: list[bytes] = []
    last = len(token_ids) - 1
    for i, token in enumerate(token_ids):
        data, stopped = enc.delta_tokens(detok, (token,), finish if i == last else None)
        if data:
            events.append(data)
        if stopped:
            return b"".join(events), True
    return b"".join(events), False


async def _stream(request: web.Request, state: RouterState, req: RouterRequest,
                  run: RequestRun) -> web.StreamResponse:
    resp = _SseResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
        ROUTE_HEADER: request["route"], "X-Request-Id": request["request_id"]})
    await resp.prepare(request)
    enc = SseEncoder(req.request_id, req.model, int(time.time()), req.kind)
    detok = IncrementalDetokenizer(state.detok_vocab, req.sampling.stop)
    # Events not yet written: everything one engine chunk produced goes out in one write, and
    # the last chunk's events go out with [DONE] and the end of the body.
    pending = [enc.role_chunk()] if req.kind == "chat" else []
    completion = 0
    try:
        async for chunk in run.chunks():
            completion += len(chunk.token_ids)
            finish = _finish(chunk.finish_reason) if chunk.finish_reason else None
            data, stopped = _encode_chunk(enc, detok, chunk.token_ids, finish)
            pending.append(data)
            if stopped:
                if finish is None:
                    run.stop_early()
                break
            if finish is None:
                await resp.write(b"".join(pending))
                pending.clear()
    except RouterError as exc:  # headers are gone: end the stream with an error event
        log.warning("request %s failed mid-stream: %s", req.request_id, exc.message)
        req.completion_tokens = completion
        return await _end_with_error(request, resp, pending, enc, exc)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not request.get(SHUTDOWN_KEY) or task is None:
            raise  # the client went away: nobody to write to
        task.uncancel()  # the drain's grace is over: end the stream properly
        req.completion_tokens = completion
        return await _end_with_error(request, resp, pending, enc, shutting_down())
    prompt_tokens = req.prompt_len
    req.completion_tokens = completion
    if req.include_usage:
        pending.append(enc.usage(prompt_tokens, completion, run.first.cached_tokens))
    pending.append(enc.done())
    await resp.write_eof(b"".join(pending))
    return resp


async def _end_with_error(request: web.Request, resp: web.StreamResponse, pending: list[bytes],
                          enc: SseEncoder, exc: RouterError) -> web.StreamResponse:
    """An error event, then [DONE] and the chunked terminator: the client always sees an end."""
    pending += [b"data: " + json.dumps(exc.body()).encode() + b"\n\n", enc.done()]
    request["failed"] = exc.code or exc.error_type
    try:
        await resp.write_eof(b"".join(pending))
    except ConnectionError:
        pass  # the client left meanwhile
    return resp


async def completions(request: web.Request) -> web.StreamResponse:
    return await handle_generation(request, "completion")


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await handle_generation(request, "chat")
