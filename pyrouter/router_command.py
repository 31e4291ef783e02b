"""`switchyard router`: the router alone, in front of running engines."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from collections.abc import Sequence

from prometheus_client.registry import Collector

from pyrouter.admission import admission_config
from pyrouter.engines.membership import (
    PREFIX_INDEX_MAX_BLOCKS,
    UPKEEP_POLLS_PER_S,
    EngineMembership,
)
from pyrouter.errors import BadRequest
from pyrouter.http.drain import drain
from pyrouter.live_config import LiveConfig
from pyrouter.metrics.router_metrics import RouterMetrics
from pyrouter.model_groups import (
    ModelEngines,
    ModelGroup,
    ModelSpec,
    engine_group,
    parse_model_args,
)
from pyrouter.replicas.admin_sync import start_admin_propagation
from pyrouter.replicas.peer_exchange import PeerExchange, start_peer_exchange
from pyrouter.replicas.peers import router_peers
from pyrouter.replicas.restarts import replica_restarts_from_env
from pyrouter.runtime.bridge import PolicyRuntime
from pyrouter.runtime.builtins import sync_builtins
from pyrouter.runtime.dispatch import Dispatcher, PolicySlot
from pyrouter.runtime.policy_registry import ActivePolicy, get_policy, load_policy_source
from pyrouter.runtime.records import RequestRecorder
from pyrouter.security.engine_allow import EngineAllowList
from pyrouter.security.keys import ADMIN_KEYS_ENV, KeyRing
from pyrouter.security.rate_limit import RateRules
from pyrouter.session_affinity import session_config
from pyrouter.state import RouterConfig, RouterState
from pyrouter.tokenizer import load_router_tokenizer
from router_core import UPKEEP_LIVENESS_S, DetokenizerVocab, RouterFront

log = logging.getLogger("switchyard.router")
DRAIN_ENV = "SWITCHYARD_DRAIN_S"  # the engines' drain variable; the router's default grace too
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
FRONT_CLOSE_S = 1.0  # after the drain: for the front's connections to close


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
    """SmolLM2's recommended sampling (its model card) when serving the default model (the
    first model, when there are several)."""
    default_model = _models(args)[0].path is None
    temperature = getattr(args, "default_temperature", None)
    top_p = getattr(args, "default_top_p", None)
    return {"default_temperature": temperature if temperature is not None else
            (0.2 if default_model else 1.0),
            "default_top_p": top_p if top_p is not None else (0.9 if default_model else 1.0)}


def _opt(args: argparse.Namespace, name: str, default: float) -> float:
    value = getattr(args, name, None)
    return float(default if value is None else value)


def router_config(args: argparse.Namespace) -> RouterConfig:
    """The router's settings from its flags and environment (keys never come from flags)."""
    admin_separate = getattr(args, "admin_port", None) is not None
    try:
        return RouterConfig(
            served_model=_models(args)[0].name,
            max_context=int(getattr(args, "max_context", None) or 8192),
            max_inflight=int(getattr(args, "max_inflight", None) or 4096),
            keys=KeyRing.from_env(admin_plane_separate=admin_separate),
            max_body_bytes=int(_opt(args, "max_body_bytes", 4 << 20)),
            body_timeout_s=_opt(args, "body_timeout_s", 30.0),
            idle_timeout_s=_opt(args, "idle_timeout_s", 30.0),
            drain_s=_opt(args, "drain_s", float(os.environ.get(DRAIN_ENV, "") or 30.0)),
            rate=RateRules(_opt(args, "rate_limit_rps", 0.0),
                           int(_opt(args, "rate_limit_burst", 0)),
                           int(_opt(args, "max_inflight_per_caller", 0))),
            engine_allow=EngineAllowList.from_config(
                getattr(args, "engine_allow", None) or [],
                [parse_engine_arg(e)[0] for e in args.engine]),
            **_sampling_defaults(args))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _models(args: argparse.Namespace) -> list[ModelSpec]:
    try:
        return parse_model_args(getattr(args, "model", None))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _membership(args: argparse.Namespace) -> EngineMembership:
    """The engines, upkept at the pace of --poll-s, --liveness-s and --upkeep-polls-per-s, their
    prefix index bounded by --prefix-index-max-blocks."""
    polls_per_s = getattr(args, "upkeep_polls_per_s", None)
    liveness_s = getattr(args, "liveness_s", None)
    max_blocks = getattr(args, "prefix_index_max_blocks", None)
    if max_blocks is not None and max_blocks < 1:
        raise BadRequest("--prefix-index-max-blocks must be at least 1")
    try:
        return EngineMembership(
            poll_s=float(getattr(args, "poll_s", None) or 0.5),
            polls_per_s=UPKEEP_POLLS_PER_S if polls_per_s is None else float(polls_per_s),
            liveness_s=UPKEEP_LIVENESS_S if liveness_s is None else float(liveness_s),
            index_max_blocks=PREFIX_INDEX_MAX_BLOCKS if max_blocks is None else int(max_blocks))
    except ValueError as exc:  # UpkeepPace's check, named by the flags
        raise BadRequest(f"--poll-s, --liveness-s, --upkeep-polls-per-s: {exc}") from None


async def build_state(args: argparse.Namespace) -> RouterState:
    config = router_config(args)
    models = _models(args)
    tokenizer = load_router_tokenizer(models[0].path)
    engines = _membership(args)
    names = [m.name for m in models]
    engines.group_of = lambda served: engine_group(names, served)
    for spec in args.engine:
        engines.add(*parse_engine_arg(spec))
    timeout_s = float(getattr(args, "policy_timeout_s", None) or 300.0)
    metrics = RouterMetrics()
    groups: dict[str, ModelGroup] = {}
    for model in models:
        # One model: its group is every engine (as before models were grouped).
        members = engines if len(models) == 1 else ModelEngines(engines, model.name)
        slot = PolicySlot(initial_policy(args.policy, args.policy_file))
        dispatcher = Dispatcher(members, slot, policy_timeout_s=timeout_s,
                                events=metrics.count_event)
        dispatcher.feedback.sink = metrics.observe_prediction_error
        groups[model.name] = ModelGroup(
            model, members, slot, dispatcher,
            tokenizer if model is models[0] else load_router_tokenizer(model.path))
    first = groups[models[0].name]
    return RouterState(config, tokenizer, engines, first.slot, first.dispatcher,
                       DetokenizerVocab.from_tokenizer_json(tokenizer.to_json()),
                       metrics=metrics, models=groups)


def _admin_host(args: argparse.Namespace) -> str:
    return getattr(args, "admin_host", None) or "127.0.0.1"


def start_front(state: RouterState, args: argparse.Namespace) -> RouterFront:
    """The HTTP front on --host/--port (and the admin plane on --admin-port): the OpenAI routes
    run in Rust; policy decisions and the other routes come to the bridge on this loop."""
    cfg = state.config
    # to_state()'s keys are RouterFront's tokenizer arguments.
    front = RouterFront(
        PolicyRuntime(state), args.host, args.port, **state.tokenizer.to_state(),
        served_model=cfg.served_model, max_context=cfg.max_context,
        max_inflight=cfg.max_inflight, api_keys=sorted(cfg.keys.api_keys),
        default_temperature=cfg.default_temperature, default_top_p=cfg.default_top_p,
        first_chunk_timeout_s=state.dispatcher.policy_timeout_s,
        max_body_bytes=cfg.max_body_bytes, body_timeout_s=cfg.body_timeout_s,
        idle_timeout_s=cfg.idle_timeout_s,
        admin_host=_admin_host(args), admin_port=getattr(args, "admin_port", None))
    for group in list(state.models.values())[1:]:  # the first came with the front
        assert group.tokenizer is not None  # build_state loads every model's
        front.add_served_model(group.name, **group.tokenizer.to_state())
    state.engines.attach_front(front)
    rate = cfg.rate
    front.set_caller_limits(rate.rps, rate.burst, rate.max_inflight)
    # Under a data-parallel built-in router_core picks engines itself (pyrouter/runtime/
    # builtins.py).
    sync_builtins(state, front)
    for group in state.models.values():
        group.slot.on_change(lambda _active: sync_builtins(state, front))
    state.recorder = RequestRecorder(state, front)
    return front


async def serve_router(args: argparse.Namespace, stop: asyncio.Event,
                       collectors: Sequence[Collector] = ()) -> None:
    """`collectors`: more metrics for this router's /metrics (serve's replica restarts)."""
    live = LiveConfig.from_args(args)  # --policy-dir loads first: --policy may name its policies
    state = await build_state(args)
    for collector in collectors:
        state.metrics.registry.register(collector)
    state.peers = router_peers(args)
    state.policy_dir = live.policy_dir
    state.sessions = session_config(args)
    await live.start(state)
    cfg = state.config
    state.admission = admission_config(args)
    front: RouterFront | None = None
    recording: asyncio.Task[None] | None = None
    peer_exchange: PeerExchange | None = None
    try:
        # The peers' admin changes (policy, engines, settings) before serving anything.
        await start_admin_propagation(state, args)
        front = start_front(state, args)
        # The peers' dispatches into this replica's load view, and this one's into theirs.
        peer_exchange = start_peer_exchange(
            state.peers, args.host, args.port, getattr(args, "peer_port", None), state.engines,
            state.metrics.registry)
        state.sessions.apply(front)
        if front.admin_port is not None:
            admin_host = _admin_host(args)
            log.info("admin routes on http://%s:%d only", admin_host, front.admin_port)
            if cfg.keys.admin_open and admin_host not in LOOPBACK_HOSTS:
                log.warning("admin routes on %s have no key (%s unset): they answer loopback "
                            "clients only", admin_host, ADMIN_KEYS_ENV)
        elif cfg.keys.admin_open and args.host not in LOOPBACK_HOSTS:
            log.warning("admin routes have no key (%s unset) and --host %s is not loopback: "
                        "they answer loopback clients only", ADMIN_KEYS_ENV, args.host)
        state.admission.apply(front)
        assert state.recorder is not None
        recording = asyncio.create_task(state.recorder.run())
        print(f"switchyard router on http://{args.host}:{args.port} "
              f"policy={state.slot.current.name} engines={len(state.engines.engines)}",
              flush=True)
        await stop.wait()
        await drain(state, cfg.drain_s)
    finally:
        if front is not None:
            # On a thread: requests ending meanwhile still run their close on this loop.
            await asyncio.to_thread(front.shutdown, FRONT_CLOSE_S)
        if recording is not None:
            recording.cancel()  # records the last requests as it ends
        if peer_exchange is not None:
            await peer_exchange.close()
        await live.close()
        if state.replication is not None:
            await state.replication.close()
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
    restarts = replica_restarts_from_env()  # a replica that `switchyard serve` started

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve_router(args, stop, collectors=[restarts] if restarts else [])

    try:
        asyncio.run(main())
    except BadRequest as exc:
        print(f"switchyard router: {exc.message}", flush=True)
        return 2
    return 0
