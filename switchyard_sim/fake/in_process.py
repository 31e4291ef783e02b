"""A client of the router's front run in-process (router_core.InProcessFront): what FakeCluster
and the simulator send their requests through.

The request goes in as the JSON body a client would POST and comes back as the client would see
it — status, X-Switchyard-Route, the streamed tokens (`return_token_ids`), the finish reason or
the error — after the front's own parsing, admission, request task and bridge
(pyrouter/front_bridge.py) ran it. The front's futures are polled here, on this asyncio loop,
and wake it when they can go on; nothing of the front runs on another thread, so the
simulator's virtual clock only moves when the whole router is waiting (the policies' verbs are
driven the same way: pyrouter/runtime/pollable.py).
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyrouter.runtime.pollable import until_ready
from router_core import InProcessFront, InProcessRequest

# Called after each streamed event that brought tokens, with the number the client has so far.
OnTokens = Callable[[int], Awaitable[None]]


@dataclass(slots=True)
class ClientError:
    """An error the client got: the status (an error event mid-stream keeps the 200's) and
    the OpenAI error body's fields."""

    status: int
    message: str
    type: str = ""
    code: str = ""
    param: str | None = None

    @classmethod
    def of(cls, status: int, body: dict[str, Any]) -> ClientError:
        error = body.get("error") or {}
        return cls(status, str(error.get("message", "")), str(error.get("type", "")),
                   str(error.get("code") or ""), error.get("param"))


@dataclass(slots=True)
class ClientView:
    """What the client saw of one request."""

    engine_request_id: str
    status: int = 0
    route: str = ""
    tokens: list[int] = field(default_factory=list)
    finish_reason: str = ""
    error: ClientError | None = None
    usage: dict[str, Any] | None = None
    disconnected: bool = False


def _events(buffer: bytearray) -> list[bytes]:
    """The complete SSE events at the front of `buffer` (taken out of it)."""
    events = []
    while (end := buffer.find(b"\n\n")) >= 0:
        events.append(bytes(buffer[:end]))
        del buffer[:end + 2]
    return events


async def _read(request: InProcessRequest, view: ClientView, disconnect_after: int | None,
                on_tokens: OnTokens | None) -> None:
    head = await until_ready(request.poll_head)
    assert head is not None
    view.status, headers = head
    view.route = dict(headers).get("x-switchyard-route", "")
    streamed = dict(headers).get("content-type", "").startswith("text/event-stream")
    body = bytearray()
    while (data := await until_ready(request.poll_body)) is not None:
        body.extend(data)
        if not streamed:
            continue
        for event in _events(body):
            payload = event.removeprefix(b"data: ")
            if payload == b"[DONE]":
                continue
            message = json.loads(payload)
            if "error" in message:
                view.error = ClientError.of(view.status, message)
                continue
            view.usage = message.get("usage") or view.usage
            had = len(view.tokens)
            for choice in message.get("choices", ()):
                view.tokens.extend(choice.get("token_ids") or ())
                view.finish_reason = choice.get("finish_reason") or view.finish_reason
            if on_tokens is not None and len(view.tokens) > had:
                await on_tokens(len(view.tokens))
            if disconnect_after is not None and len(view.tokens) >= disconnect_after:
                request.disconnect()
                view.disconnected = True
                return
    if not streamed:
        answer = json.loads(body)
        if view.status != 200:
            view.error = ClientError.of(view.status, answer)
        else:
            choice = answer["choices"][0]
            view.tokens = list(choice.get("token_ids") or ())
            view.finish_reason = choice.get("finish_reason") or ""
            view.usage = answer.get("usage")


async def send(front: InProcessFront, body: dict[str, Any], *, kind: str = "completion",
               headers: Sequence[tuple[str, str]] = (), disconnect_after: int | None = None,
               on_tokens: OnTokens | None = None) -> ClientView:
    """Sends one request and reads its response (streamed: `stream` in `body`); with
    `disconnect_after=k` the client goes away once it has k tokens. Returns when the request
    task has ended (its clean-up done)."""
    view, _ = await send_request(front, body, kind=kind, headers=headers,
                                 disconnect_after=disconnect_after, on_tokens=on_tokens)
    return view


async def send_request(front: InProcessFront, body: dict[str, Any], *, kind: str = "completion",
                       headers: Sequence[tuple[str, str]] = (),
                       disconnect_after: int | None = None, on_tokens: OnTokens | None = None
                       ) -> tuple[ClientView, InProcessRequest]:
    """As `send`, with the request itself (its `outcome()`: how it ran)."""
    request = front.request("chat" if kind == "chat" else "completion",
                            json.dumps(body).encode(), list(headers))
    view = ClientView(request.engine_request_id)
    task = asyncio.ensure_future(until_ready(lambda wake: (request.poll_task(wake), None)))
    try:
        await _read(request, view, disconnect_after, on_tokens)
    except BaseException:
        request.disconnect()
        raise
    finally:
        await task
    return view, request
