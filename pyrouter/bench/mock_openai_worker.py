"""A minimal OpenAI-style HTTP worker that streams synthetic tokens at no cost.

Only for the router-overhead benchmark: it stands behind vllm-router / SGLang's router (which
speak HTTP to workers) the way `switchyard engine --mock` stands behind Switchyard's router.
Run: python -m pyrouter.bench.mock_openai_worker --port P
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from aiohttp import web

_MODEL = "mock"


def _chunk(kind: str, i: int, finish: str | None) -> bytes:
    choice: dict[str, object] = {"index": 0, "finish_reason": finish, "logprobs": None}
    if kind == "chat":
        choice["delta"] = {"content": f" w{i}"}
    else:
        choice["text"] = f" w{i}"
    body = {"id": "cmpl-mock", "object": "chat.completion.chunk" if kind == "chat" else
            "text_completion", "created": int(time.time()), "model": _MODEL,
            "choices": [choice]}
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


async def _generate(request: web.Request, kind: str) -> web.StreamResponse:
    body = await request.json()
    n = int(body.get("max_tokens") or 16)
    if not body.get("stream"):
        text = "".join(f" w{i}" for i in range(n))
        choice: dict[str, object] = {"index": 0, "finish_reason": "length", "logprobs": None}
        if kind == "chat":
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return web.json_response({"id": "cmpl-mock", "object": "text_completion",
                                  "created": int(time.time()), "model": _MODEL,
                                  "choices": [choice],
                                  "usage": {"prompt_tokens": 4, "completion_tokens": n,
                                            "total_tokens": n + 4}})
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i in range(n):
        await resp.write(_chunk(kind, i, "length" if i == n - 1 else None))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completion")


async def chat(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat")


async def ok(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def model_info(request: web.Request) -> web.Response:
    # Fields the SGLang / vLLM routers probe on their workers.
    return web.json_response({"model_path": _MODEL, "tokenizer_path": None,
                              "is_generation": True, "served_model_name": _MODEL})


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": _MODEL, "object": "model"}]})


def make_app() -> web.Application:
    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/generate", completions)
    for path in ("/health", "/health_generate", "/readiness", "/liveness"):
        app.router.add_get(path, ok)
    app.router.add_get("/get_model_info", model_info)
    app.router.add_get("/get_server_info", model_info)
    app.router.add_get("/v1/models", models)
    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="OpenAI-style mock worker (benchmarks only)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    args = p.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(make_app(), host=args.host, port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
