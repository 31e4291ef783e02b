"""What a deployed router follows while it runs: engines behind DNS names (`--engine-dns`) and a
directory of policy files (`--policy-dir`).

`serve_router` builds this before the router state (so `--policy` may name a policy from the
directory), starts it once the state exists, and closes it on shutdown.
"""
from __future__ import annotations

import argparse
import logging

from pyrouter.cluster import ActivePolicy
from pyrouter.engines.dns_discovery import DnsEngineDiscovery, DnsEngineSpec
from pyrouter.errors import BadRequest
from pyrouter.runtime.dispatch import PolicySlot
from pyrouter.runtime.policy_dir import PolicyDir
from pyrouter.runtime.policy_registry import get_policy
from pyrouter.state import RouterState

log = logging.getLogger("switchyard.router")


def refresh_active_policy(state: RouterState, reloaded: list[str]) -> None:
    """If an active policy's file was reloaded (each served model's), new requests get its new
    code (same params)."""
    for group in list(state.models.values()) or [state.group()]:
        _refresh(group.slot, reloaded)


def _refresh(slot: PolicySlot, reloaded: list[str]) -> None:
    active = slot.current
    if active.name not in reloaded:
        return
    spec = get_policy(active.name)
    try:
        params = spec.check_params(active.params)
    except BadRequest as exc:
        log.error("reloaded policy %s rejects the active params (%s); keeping the old code",
                  active.name, exc.message)
        return
    slot.current = ActivePolicy(spec, params)
    log.info("active policy %s replaced by its reloaded version", active.name)


def _positive(args: argparse.Namespace, name: str, default: float) -> float:
    value = getattr(args, name, None)
    value = default if value is None else float(value)
    if not value > 0:
        raise BadRequest(f"--{name.replace('_', '-')} must be > 0, got {value}", param=name)
    return value


class LiveConfig:
    def __init__(self, dns_specs: list[DnsEngineSpec], dns_interval_s: float,
                 policy_dir: PolicyDir | None, policy_poll_s: float) -> None:
        self.dns_specs = dns_specs
        self.dns_interval_s = dns_interval_s
        self.policy_dir = policy_dir
        self.policy_poll_s = policy_poll_s
        self.discoveries: list[DnsEngineDiscovery] = []

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LiveConfig:
        """Parses the flags and loads the policy directory now (raises BadRequest when bad)."""
        specs = [DnsEngineSpec.parse(v) for v in getattr(args, "engine_dns", None) or []]
        directory = getattr(args, "policy_dir", None)
        policy_dir = PolicyDir(directory) if directory else None
        if policy_dir is not None:
            log.info("policy directory %s: %s", directory, policy_dir.load_all())
        dns_interval_s = _positive(args, "engine_dns_interval_s", 5.0)
        return cls(specs, dns_interval_s, policy_dir, _positive(args, "policy_dir_poll_s", 2.0))

    async def start(self, state: RouterState) -> None:
        for spec in self.dns_specs:
            discovery = DnsEngineDiscovery(state.engines, spec, self.dns_interval_s)
            await discovery.sync_once()  # engines known before the router answers its first request
            discovery.start()
            self.discoveries.append(discovery)
        if self.policy_dir is not None:
            self.policy_dir.on_reload = lambda names: refresh_active_policy(state, names)
            self.policy_dir.start(self.policy_poll_s)

    async def close(self) -> None:
        for discovery in self.discoveries:
            await discovery.close()
        if self.policy_dir is not None:
            await self.policy_dir.close()
