"""`switchyard router --engine-dns NAME:PORT[@ROLE]`: engine membership from DNS.

A Kubernetes headless Service answers one A (or AAAA) record per pod, so re-resolving its name
every few seconds tells the router which engine pods exist. New addresses join and vanished ones
are drained and removed through `EngineMembership` — the same code path as POST and
DELETE /admin/engines — so discovery has no membership logic of its own. Whether a member takes
work is still decided by the router's own gRPC health checks, not by DNS.

A failed lookup (the DNS server is unreachable, times out) changes nothing: a glitch must not
drain a healthy pool. A name that does not exist (NXDOMAIN, which is also what a headless
Service with no pods answers) means "no engines" and drains what this name had added.
"""
from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass

from pyrouter.engines.membership import EngineMembership
from pyrouter.errors import BadRequest

log = logging.getLogger("switchyard.router")

_ROLES = ("any", "prefill", "decode")
# getaddrinfo's "this name has no addresses" answers; every other error is transient.
_NO_SUCH_NAME = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


@dataclass(frozen=True, slots=True)
class DnsEngineSpec:
    """One `--engine-dns` value: resolve `name`, engines listen on `port`, all with `role`."""

    name: str
    port: int
    role: str | None

    @classmethod
    def parse(cls, value: str) -> DnsEngineSpec:
        target, _, role = value.partition("@")
        name, sep, port = target.rpartition(":")
        if not sep or not name or not port.isdigit() or not 0 < int(port) < 65536:
            raise BadRequest(f"--engine-dns must be NAME:PORT[@ROLE], got {value!r}",
                             param="engine_dns")
        if role and role not in _ROLES:
            raise BadRequest(f"--engine-dns role must be one of {_ROLES}, got {role!r}",
                             param="engine_dns")
        return cls(name, int(port), role or None)


def format_address(ip: str, port: int) -> str:
    """HOST:PORT as gRPC and EngineMembership expect it; IPv6 literals in brackets."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


async def resolve_addresses(name: str, port: int) -> set[str] | None:
    """Every address `name` resolves to, as HOST:PORT; None when the lookup itself failed."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno in _NO_SUCH_NAME:
            return set()
        log.warning("engine DNS lookup of %s failed (%s); membership unchanged", name, exc)
        return None
    return {format_address(str(info[4][0]), port) for info in infos}


class DnsEngineDiscovery:
    """Keeps the engines behind one DNS name in an EngineMembership, re-resolving every `interval_s`."""

    def __init__(self, engines: EngineMembership, spec: DnsEngineSpec, interval_s: float = 5.0) -> None:
        if interval_s <= 0:
            raise ValueError("DNS re-resolve interval must be > 0")
        self.engines = engines
        self.spec = spec
        self.interval_s = interval_s
        self.owned: dict[str, str] = {}  # address -> engine id, for engines this name added
        self._task: asyncio.Task[None] | None = None
        self._drains: set[asyncio.Task[None]] = set()

    async def sync_once(self) -> None:
        """One lookup and the membership changes it implies."""
        found = await resolve_addresses(self.spec.name, self.spec.port)
        if found is None:
            return
        # Someone else (DELETE /admin/engines) may have removed an engine this name added.
        self.owned = {a: i for a, i in self.owned.items() if i in self.engines.engines}
        members = {e.address for e in self.engines.engines.values()}
        for address in sorted(found - set(self.owned)):
            if address in members:  # also given with --engine or POST /admin/engines
                continue
            handle = self.engines.add(address, self.spec.role)
            self.owned[address] = handle.id
            log.info("engine %s (%s) joined via DNS name %s", handle.id, address, self.spec.name)
        for address in sorted(set(self.owned) - found):
            engine_id = self.owned.pop(address)
            log.info("engine %s (%s) left DNS name %s; draining it", engine_id, address,
                     self.spec.name)
            task = asyncio.create_task(self.engines.drain_and_remove(engine_id))
            self._drains.add(task)
            task.add_done_callback(self._drains.discard)

    async def _run(self) -> None:
        while True:
            try:
                await self.sync_once()
            except Exception:  # never let one odd answer end discovery
                log.exception("engine discovery for %s failed this round", self.spec.name)
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        tasks = [t for t in (self._task, *self._drains) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
