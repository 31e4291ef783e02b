"""`switchyard router`: the router alone, in front of running engines."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal

from aiohttp import web

from pyrouter.dispatch import Dispatcher, PolicySlot
from pyrouter.engines.membership import EngineSet
from pyrouter.errors import BadRequest
from pyrouter.front_bridge import FrontBridge
from pyrouter.http.app import make_app
from pyrouter.live_config import LiveConfig
from pyrouter.metrics import RouterMetrics
from pyrouter.policy_registry import ActivePolicy, get_policy, load_policy_source
from pyrouter.state import RouterConfig, RouterState
from pyrouter.tokenizer import load_router_tokenizer, model_display_id
from router_core import DetokenizerVocab, RouterFront

log = logging.getLogger("switchyard.router")


def initial_policy(name: str, policy_file: str | None) -> ActivePolicy:
    """--policy-file (a .py file or a module) registers its policies; --policy picks one
    (default: the first it registers)."""
    if policy_file:
        names = load_policy_source(policy_file)
        if name not in names and name == "round_robin":
            name = names[0]
    spec = get_policy(name)
    return ActivePolicy(spec, spec.check_params({}))


def parse_engine_arg(value: str) -> tuple[str, str | None]:
    """HOST:PORT or HOST:PORT@ROLE (role otherwise learned from the engine)."""
    address, _, role = value.partition("@")
    return address, role or None


def _sampling_defaults(args: argparse.Namespace) -> dict[str, float]:
    """SmolLM2's recommended sampling (its model card) when serving the default model."""
    default_model = args.model is None
    temperature = getattr(args, "default_temperature", None)
    top_p = getattr(args, "default_top_p", None)
    return {"default_temperature": temperature if temperature is not None else
            (0.2 if default_model else 1.0),
            "default_top_p": top_p if top_p is not None else (0.9 if default_model else 1.0)}


async def build_state(args: argparse.Namespace) -> RouterState:
    keys = frozenset(k.strip() for k in os.environ.get("SWITCHYARD_API_KEYS", "").split(",")
                     if k.strip())
    tokenizer = load_router_tokenizer(args.model)
    config = RouterConfig(served_model=model_display_id(args.model),
                          max_context=int(getattr(args, "max_context", None) or 8192),
                          max_inflight=int(getattr(args, "max_inflight", None) or 4096),
                          api_keys=keys, **_sampling_defaults(args))
    engines = EngineSet(poll_s=float(getattr(args, "poll_s", None) or 0.5))
    for spec in args.engine:
        engines.add(*parse_engine_arg(spec))
    slot = PolicySlot(initial_policy(args.policy, args.policy_file))
    timeout_s = float(getattr(args, "policy_timeout_s", None) or 300.0)
    metrics = RouterMetrics()
    return RouterState(config, tokenizer, engines, slot,
                       Dispatcher(engines, slot, policy_timeout_s=timeout_s,
                                  events=metrics.count_event),
                       DetokenizerVocab.from_tokenizer_json(tokenizer.to_json()),
                       metrics=metrics)


def start_rust_front(state: RouterState, args: argparse.Namespace, ops_port: int
                      ) -> tuple[RouterFront, FrontBridge]:
    """The Rust HTTP front on --host/--port; the aiohttp app answers its other routes on
    `ops_port` (loopback)."""
    cfg = state.config
    bridge = FrontBridge(state, f"http://127.0.0.1:{ops_port}",
                         next(iter(cfg.api_keys), None))
    # to_state()'s keys are RouterFront's tokenizer arguments.
    front = RouterFront(
        bridge, args.host, args.port, **state.tokenizer.to_state(),
        served_model=cfg.served_model, max_context=cfg.max_context,
        max_inflight=cfg.max_inflight, api_keys=sorted(cfg.api_keys),
        default_temperature=cfg.default_temperature, default_top_p=cfg.default_top_p,
        first_chunk_timeout_s=state.dispatcher.policy_timeout_s)
    state.engines.attach_front(front)
    return front, bridge


async def serve_router(args: argparse.Namespace, stop: asyncio.Event,
                       banner: str | None = None) -> None:
    live = LiveConfig.from_args(args)  # --policy-dir loads first: --policy may name its policies
    state = await build_state(args)
    await live.start(state)
    rust = getattr(args, "front", "aiohttp") == "rust"
    runner = web.AppRunner(make_app(state), handler_cancellation=True, access_log=None)
    await runner.setup()
    # --front rust: the aiohttp app serves only the front's non-OpenAI routes, on loopback.
    host, port = ("127.0.0.1", 0) if rust else (args.host, args.port)
    site = web.TCPSite(runner, host, port, backlog=4096, reuse_address=True)
    await site.start()
    front: RouterFront | None = None
    bridge: FrontBridge | None = None
    if rust:
        ops_port = int(runner.addresses[0][1])
        front, bridge = start_rust_front(state, args, ops_port)
    print(banner or f"switchyard router on http://{args.host}:{args.port} "
          f"policy={state.slot.current.name} engines={len(state.engines.engines)}"
          f"{' front=rust' if rust else ''}", flush=True)
    try:
        await stop.wait()
    finally:
        if front is not None:
            # On a thread: requests ending meanwhile still run their close on this loop.
            await asyncio.to_thread(front.shutdown, 1.0)
        if bridge is not None:
            await bridge.aclose()
        await runner.cleanup()
        await live.close()
        await state.engines.close()


def setup_logging_and_loop() -> None:
    logging.basicConfig(level=os.environ.get("SWITCHYARD_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # a declared dependency; plain asyncio still works
        pass


def run(args: argparse.Namespace) -> int:
    setup_logging_and_loop()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve_router(args, stop)

    try:
        asyncio.run(main())
    except BadRequest as exc:
        print(f"switchyard router: {exc.message}", flush=True)
        return 2
    return 0
