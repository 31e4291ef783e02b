"""The open-loop runner against a stub server that misbehaves on purpose: every failure is a
failed record with its reason (never dropped, never an exception), a stalled request times out,
and Ctrl-C (the stop event) ends the run at once with the records so far."""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from switchyard_bench.serve.client import ClientConfig
from switchyard_bench.serve.request_body import Slo
from switchyard_bench.serve.runner import run_open_loop
from switchyard_bench.serve.summary import summarize
from switchyard_bench.workloads import WorkItem

# max_tokens picks the stub's behaviour
OK, HTTP_503, ERROR_EVENT, NO_DONE, STALL = 3, 4, 5, 6, 7
BODIES = web.AppKey("bodies", list)


def _event(body: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def _completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    mode = body["max_tokens"]
    request.app[BODIES].append(body)
    if mode == HTTP_503:
        return web.json_response({"error": {"message": "no capacity", "type": "x",
                                            "param": None, "code": None}}, status=503)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "X-Request-Id": f"cmpl-{len(request.app[BODIES])}",
                                       "X-Switchyard-Route": "dp engine=e0"})
    await resp.prepare(request)
    for i in range(3):
        await asyncio.sleep(0.01)
        await resp.write(_event({"choices": [{"index": 0, "text": f"t{i}",
                                              "finish_reason": None}]}))
        if mode == STALL:
            await asyncio.sleep(30)
        if mode == ERROR_EVENT and i == 1:
            await resp.write(_event({"error": {"message": "engine died mid-stream"}}))
            await resp.write_eof(b"data: [DONE]\n\n")
            return resp
    if mode == NO_DONE:
        await resp.write_eof()
        return resp
    await resp.write(_event({"choices": [], "usage": {"prompt_tokens": 2,
                                                       "completion_tokens": 3}}))
    await resp.write_eof(b"data: [DONE]\n\n")
    return resp


@pytest.fixture
async def stub() -> AsyncIterator[tuple[str, list[dict[str, object]]]]:
    app = web.Application()
    app[BODIES] = []
    app.router.add_post("/v1/completions", _completions)
    server = TestServer(app)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), app[BODIES]
    finally:
        await server.close()


async def test_every_failure_is_recorded_with_its_reason(stub):
    url, bodies = stub
    items = [WorkItem(0.01 * i, [5, 6], mode) for i, mode in
             enumerate([OK, HTTP_503, ERROR_EVENT, NO_DONE, STALL, OK])]
    cfg = ClientConfig(url, timeout_s=1.0, slo=Slo(ttft_ms=5000.0))
    async with aiohttp.ClientSession() as session:
        run = await run_open_loop(session, cfg, items, asyncio.Event(), progress=False)
    by_mode = {r.max_tokens: r for r in run.records}
    assert len(run.records) == 6 and not run.interrupted
    assert by_mode[OK].ok and by_mode[OK].request_id and by_mode[OK].route == "dp engine=e0"
    assert by_mode[HTTP_503].error == "HTTP 503: no capacity"
    assert by_mode[ERROR_EVENT].error == "engine died mid-stream"
    assert by_mode[NO_DONE].error == "stream ended without data: [DONE]"
    assert by_mode[STALL].error == "timeout after 1 s" and by_mode[STALL].ttft_ms is not None
    s = summarize(run.records, run.duration_s, slo_given=True)
    assert (s["requests"], s["completed"], s["failed"]) == (6, 2, 4)
    assert s["slo_attainment"] == pytest.approx(2 / 6)
    # what went over the wire: token ids, ignore_eos, the output length, the SLO
    assert bodies[0]["prompt"] == [5, 6] and bodies[0]["ignore_eos"] is True
    assert bodies[0]["slo"] == {"ttft_ms": 5000.0}


async def test_stop_event_ends_the_run_with_what_it_has(stub):
    url, _ = stub
    items = [WorkItem(0.0, [1], OK), WorkItem(0.0, [1], STALL)] + [
        WorkItem(5.0 + i, [1], OK) for i in range(5)]
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as session:
        asyncio.get_running_loop().call_later(0.5, stop.set)
        started = time.perf_counter()
        run = await run_open_loop(session, ClientConfig(url, timeout_s=60), items, stop,
                                  progress=False)
    assert time.perf_counter() - started < 5  # neither the stalled request nor later sends
    assert run.interrupted and len(run.records) == 2
    finished, cut = run.records
    assert finished.ok and not finished.interrupted
    assert cut.interrupted and cut.error == "interrupted" and not cut.ok
    s = summarize(run.records, run.duration_s, slo_given=False)
    assert (s["requests"], s["completed"], s["failed"], s["interrupted"]) == (1, 1, 0, 1)
