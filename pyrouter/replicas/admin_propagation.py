"""One policy across router replicas: an admin change made on one replica reaches the others.

Each replicated setting is a *record* under a key — `policy:<model>`, `admission`,
`session-affinity`, `engine:<address>`, `state:<model>:<policy>:<name>` (a stateful policy's
shared state, pyrouter/runtime/shared_policy_state.py) — holding the setting in full (not the delta a PUT
named) and a generation: a counter one above the highest this replica has seen, and the id of
the replica that made it, so that of two records for one key every replica keeps the same one
(newest counter; equal counters: the larger origin id).

Two paths, both over the peers' admin API (the admin key of SWITCHYARD_ADMIN_KEYS, which the
replicas of one deployment share):
- push: the replica that takes an admin change POSTs its record to every peer's
  /admin/replication at once, and says in its answer how many took it (X-Switchyard-Propagated);
- pull: at start and every --peer-sync-s each replica reads every peer's records
  (GET /admin/replication) and applies those newer than its own, so a replica that was down,
  restarted or missed a push converges within one interval.
A record that arrives is applied and kept, never forwarded again, so changes cannot loop. Why
HTTP and not the peers' dispatch stream: admin changes are rare, need the admin key's
authority, and must reach a replica that was down when they were made (docs/deploy.md).
"""
from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyrouter.errors import BadRequest
from pyrouter.replicas.peers import RouterPeers
from pyrouter.security.engine_allow import split_host_port

if TYPE_CHECKING:
    import aiohttp

    from pyrouter.http.routes import OpsRequest
    from pyrouter.state import RouterState

log = logging.getLogger("switchyard.router")
PEER_PLANE = "peer"  # OpsRequest.plane of a change a peer made: applied here, not pushed on
PROPAGATED_HEADER = "X-Switchyard-Propagated"  # "<peers that took it>/<peers>"
REPLICATION_PATH = "/admin/replication"
PUSH_TIMEOUT_S = 2.0  # a peer slower than this (adding an engine checks it first) pulls later
PULL_TIMEOUT_S = 2.0


@dataclass(frozen=True, order=True, slots=True)
class Generation:
    counter: int
    origin: str


@dataclass(frozen=True, slots=True)
class ChangeRecord:
    key: str
    generation: Generation
    body: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "generation": {"counter": self.generation.counter,
                                                "origin": self.generation.origin},
                "body": self.body}

    @classmethod
    def from_json(cls, obj: object) -> ChangeRecord:
        """A record as a peer sent it (BadRequest when it is not one)."""
        gen = obj.get("generation") if isinstance(obj, dict) else None
        if not (isinstance(obj, dict) and isinstance(obj.get("key"), str) and obj["key"]
                and isinstance(obj.get("body"), dict) and isinstance(gen, dict)
                and isinstance(gen.get("counter"), int) and not isinstance(gen["counter"], bool)
                and gen["counter"] >= 1 and isinstance(gen.get("origin"), str)):
            raise BadRequest("expected {\"key\": STR, \"generation\": {\"counter\": INT >= 1, "
                             "\"origin\": STR}, \"body\": {...}}", param="key")
        return cls(obj["key"], Generation(gen["counter"], gen["origin"]), obj["body"])


Applier = Callable[[ChangeRecord], Awaitable[None]]


def peer_admin_offset(port: int, admin_port: int | None) -> int:
    """Peers' admin routes listen at their port plus this (their own --admin-port offset, the
    same as this replica's: serve --routers and a Deployment's pods all share one layout)."""
    return 0 if admin_port is None else admin_port - port


class AdminPropagation:
    """This replica's records, and the pushes and pulls that keep them equal to its peers'."""

    def __init__(self, peers: RouterPeers, apply: Applier, admin_offset: int = 0,
                 admin_key: str | None = None, sync_s: float = 2.0) -> None:
        self.peers = peers
        self.apply = apply
        self.admin_offset = admin_offset
        self.admin_key = admin_key
        self.sync_s = sync_s
        self.origin = uuid.uuid4().hex[:12]
        self.records: dict[str, ChangeRecord] = {}
        self.counter = 0
        self._lock = asyncio.Lock()  # one record applied at a time, in generation order
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing: set[str] = set()  # peers whose last call failed (logged once)

    def newest(self, key: str) -> ChangeRecord | None:
        return self.records.get(key)

    def stamp(self, key: str, body: dict[str, Any]) -> ChangeRecord:
        """A record for a change made here, newer than any this replica has seen."""
        self.counter += 1
        record = ChangeRecord(key, Generation(self.counter, self.origin), body)
        self.records[key] = record
        return record

    async def receive(self, record: ChangeRecord) -> bool:
        """Apply a peer's record when it is newer than this replica's for its key."""
        async with self._lock:
            mine = self.records.get(record.key)
            if mine is not None and mine.generation >= record.generation:
                return False
            self.counter = max(self.counter, record.generation.counter)
            self.records[record.key] = record
            try:
                await self.apply(record)
            except Exception as exc:  # kept all the same: the peers agree on what is newest
                message = getattr(exc, "message", None) or repr(exc)
                log.error("replicated change %s from a peer could not be applied here: %s",
                          record.key, message)
            return True

    async def push(self, record: ChangeRecord) -> tuple[int, int]:
        """Send `record` to every peer; (how many took it, how many were tried)."""
        addresses = await self.peer_admin_addresses()
        results = await asyncio.gather(*(self._post(a, record) for a in addresses))
        return sum(results), len(addresses)

    async def pull_once(self, starting: bool = False) -> int:
        """Apply every peer's records newer than this replica's; how many were applied.
        `starting`: a peer that does not answer is expected (replicas start together) and
        said at INFO; later pulls warn once per peer that stops answering."""
        addresses = await self.peer_admin_addresses()
        fetched = await asyncio.gather(*(self._get(a, starting) for a in addresses))
        applied = 0
        for record in sorted((r for records in fetched for r in records),
                             key=lambda r: r.generation):
            applied += await self.receive(record)
        if applied:
            log.info("caught up with the peers: %d admin change(s) applied", applied)
        return applied

    def start(self) -> None:
        self._task = asyncio.create_task(self._sync_loop())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _sync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.sync_s)
            try:
                await self.pull_once()
            except Exception:  # a bug must not end the loop that makes replicas converge
                log.exception("admin sync with the peers failed")

    async def peer_admin_addresses(self) -> list[str]:
        """host:port of every peer's admin routes (--peer, and --peers-dns resolved now; a
        record for this replica itself is harmless: its own records are never newer)."""
        hosts = [split_host_port(a) for a in self.peers.addresses]
        if self.peers.dns is not None:
            name, port = split_host_port(self.peers.dns)
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(
                    name, None, type=socket.SOCK_STREAM)
            except (OSError, UnicodeError):
                infos = []
            hosts += [(str(info[4][0]), port) for info in infos]
        out = []
        for host, port in hosts:
            assert port is not None  # RouterPeers checked HOST:PORT
            bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
            out.append(f"{bracketed}:{port + self.admin_offset}")
        return sorted(set(out))

    def _http(self) -> aiohttp.ClientSession:
        import aiohttp  # only a router with peers needs an HTTP client

        if self._session is None:
            headers = {"Authorization": f"Bearer {self.admin_key}"} if self.admin_key else {}
            self._session = aiohttp.ClientSession(headers=headers)
        return self._session

    def _failed(self, address: str, why: str, starting: bool = False) -> None:
        if starting:
            log.info("router peer %s not reachable yet (%s); reading it again in %.1f s",
                     address, why, self.sync_s)
        elif address not in self._failing:
            self._failing.add(address)
            log.warning("router peer %s: admin sync failed (%s); retrying every %.1f s",
                        address, why, self.sync_s)

    def _ok(self, address: str) -> None:
        if address in self._failing:
            self._failing.discard(address)
            log.info("router peer %s: admin sync works again", address)

    async def _post(self, address: str, record: ChangeRecord) -> bool:
        import aiohttp

        try:
            async with self._http().post(f"http://{address}{REPLICATION_PATH}",
                                         json=record.to_json(),
                                         timeout=aiohttp.ClientTimeout(total=PUSH_TIMEOUT_S)) as r:
                if r.status != 200:
                    self._failed(address, f"HTTP {r.status}: {(await r.text())[:200]}")
                    return False
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._failed(address, repr(exc))
            return False
        self._ok(address)
        return True

    async def _get(self, address: str, starting: bool = False) -> list[ChangeRecord]:
        import aiohttp

        try:
            async with self._http().get(f"http://{address}{REPLICATION_PATH}",
                                        timeout=aiohttp.ClientTimeout(total=PULL_TIMEOUT_S)) as r:
                if r.status != 200:
                    self._failed(address, f"HTTP {r.status}: {(await r.text())[:200]}")
                    return []
                body = await r.json()
            records = [ChangeRecord.from_json(obj) for obj in body["records"]]
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError, KeyError, TypeError,
                BadRequest) as exc:
            self._failed(address, repr(exc), starting)
            return []
        self._ok(address)
        return records


async def propagate(state: RouterState, request: OpsRequest, key: str,
                    body: dict[str, Any]) -> list[tuple[str, str]]:
    """After an admin change made on this replica: record it and push it to the peers. The
    response headers that say how many took it (none when the change came from a peer or the
    router runs alone)."""
    replication = state.replication
    if replication is None or request.plane == PEER_PLANE:
        return []
    took, tried = await replication.push(replication.stamp(key, body))
    return [(PROPAGATED_HEADER, f"{took}/{tried}")]
