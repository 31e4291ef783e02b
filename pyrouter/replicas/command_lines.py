"""`switchyard serve --routers N`: the command line of each router replica.

Replica i listens on --port + i (and --admin-port + i when the admin plane has a port of its
own; /metrics is on each replica's own port). Every replica gets the same engines and flags, and
the others' addresses as --peer, so a restarted one reads the current policy and settings from a
peer before it serves (pyrouter/replicas/admin_propagation.py) and what the engines cache from their
snapshots. serve's supervisor (pyrouter/supervisor/) starts each as a `switchyard router`
process of its own — replica 0 too — so one dying fails only its own streams.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Protocol

from pyrouter.admission import ADMISSION_FLAGS
from pyrouter.session_affinity import SESSION_FLAGS

_ANY_ADDRESS = ("0.0.0.0", "::", "")
# Router flags `serve` passes through as they are (pyrouter/cli.py: add_router_guard_arguments).
_ROUTER_GUARD_FLAGS = ("admin_port", "admin_host", "engine_allow", "max_body_bytes",
                       "body_timeout_s", "idle_timeout_s", "drain_s", "rate_limit_rps",
                       "rate_limit_burst", "max_inflight_per_caller")
# And the engine upkeep's (add_upkeep_arguments): None leaves the router's default.
_UPKEEP_FLAGS = ("poll_s", "liveness_s", "upkeep_polls_per_s", "prefix_index_max_blocks")


class ServedEngine(Protocol):
    """What a replica's --engine flag is made of."""

    @property
    def address(self) -> str: ...

    @property
    def role(self) -> str: ...


def serve_router_args(args: argparse.Namespace, engines: Sequence[ServedEngine],
                      policy: str) -> argparse.Namespace:
    """The `switchyard router` flags (as parsed) every replica of `serve` ARGS shares."""
    router_args = argparse.Namespace(
        engine=[f"{e.address}@{e.role}" for e in engines], policy=policy,
        policy_file=_absolute(args.policy_file),
        policy_dir=_absolute(getattr(args, "policy_dir", None)), model=args.model,
        host=args.host, port=args.port, max_inflight=None, max_context=None,
        default_temperature=None, default_top_p=None)
    for name in (*_ROUTER_GUARD_FLAGS, *SESSION_FLAGS, *_UPKEEP_FLAGS):
        setattr(router_args, name, getattr(args, name, None))
    for name in ADMISSION_FLAGS:  # the admission queue's (pyrouter/admission.py)
        setattr(router_args, name, getattr(args, name, None))
    return router_args


def _absolute(path: str | None) -> str | None:
    """A path the user gave relative to their directory, for a replica that runs in the
    checkout's; a module name (--policy-file takes one) is left as it is."""
    return os.path.abspath(path) if path and os.path.exists(path) else path


def router_argv(args: argparse.Namespace) -> list[str]:
    """`switchyard router` flags that parse back to `args` (every attribute a router flag:
    lists repeat it, True is a bare switch, None and False leave it out)."""
    argv: list[str] = []
    for name, value in sorted(vars(args).items()):
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, list | tuple):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv


def replica_args(args: argparse.Namespace, index: int, count: int) -> argparse.Namespace:
    """Replica `index` of `count`: its own ports, and every other replica as a peer."""
    host = "127.0.0.1" if args.host in _ANY_ADDRESS else args.host
    mine = argparse.Namespace(**vars(args))
    mine.port = args.port + index
    if getattr(args, "admin_port", None) is not None:
        mine.admin_port = args.admin_port + index
    mine.peer = [*(getattr(args, "peer", None) or []),
                 *(f"{host}:{args.port + i}" for i in range(count) if i != index)]
    return mine


def replica_command(args: argparse.Namespace, index: int, count: int) -> list[str]:
    """The command that runs replica `index` of `count` of the router whose flags are `args`."""
    return [sys.executable, "-m", "pyrouter.cli", "router",
            *router_argv(replica_args(args, index, count))]
