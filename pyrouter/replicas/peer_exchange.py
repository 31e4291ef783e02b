"""The dispatch deltas between router replicas (issue 25, one load view; docs/deploy.md,
"Several routers").

router_core does the exchange (router_core/src/peer/): a `RouterPeer` gRPC service on
`--peer-port` (default `--port` + 1000), and a stream to every peer (`--peer`, `--peers-dns`
re-resolved every few seconds, each at its port plus the same offset, as the admin routes are:
pyrouter/replicas/admin_propagation.py) carrying, every few milliseconds, what this replica dispatched per engine address. A
replica adds its peers' deltas to its engine table next to its own dispatches until its next
Stats covers them. This module starts it when the router has peers, keeps its engine addresses
in step with the membership (engine ids are each replica's own; addresses are shared), and
exports its counters on /metrics. Peers must present the deployment's engine token
(switchyard_engine_api/auth.py), as the engines ask of routers.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from pyrouter.cli import DEFAULT_PEER_PORT_OFFSET
from pyrouter.engines.membership import EngineMembership
from pyrouter.errors import BadRequest
from pyrouter.replicas.peers import RouterPeers
from pyrouter.security.engine_allow import split_host_port
from router_core import RouterPeerExchange
from switchyard_engine_api.auth import engine_token

# How often the membership's engine addresses are copied into the exchange: an engine added
# meanwhile is one whose deltas are ignored for that long (it has no load to speak of yet).
_SYNC_S = 0.2


class PeerMetrics(Collector):  # type: ignore[misc]
    """The exchange's counters, read when /metrics is scraped."""

    def __init__(self, exchange: RouterPeerExchange) -> None:
        self.exchange = exchange

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        up, inbound, received, unknown, sent = self.exchange.counters()
        yield GaugeMetricFamily("switchyard:router_peer_streams_up", "Dispatch-delta streams "
                                "from this router replica to its peers, connected now", value=up)
        yield GaugeMetricFamily("switchyard:router_peer_streams_in", "Dispatch-delta streams "
                                "from peer replicas to this one, open now", value=inbound)
        received_family = CounterMetricFamily(
            "switchyard:router_peer_deltas_received", "Per-engine dispatch deltas from peer "
            "replicas, by whether this replica knows the engine", labels=["engine_known"])
        received_family.add_metric(["true"], received)
        received_family.add_metric(["false"], unknown)
        yield received_family
        yield CounterMetricFamily("switchyard:router_peer_batches_sent", "Batches of this "
                                  "replica's dispatch deltas handed to its peer streams",
                                  value=sent)


class PeerExchange:
    """A running exchange: `close` stops it."""

    def __init__(self, exchange: RouterPeerExchange, engines: EngineMembership,
                 registry: CollectorRegistry) -> None:
        self.exchange = exchange
        self.engines = engines
        self._known: dict[int, str] = {}
        engines.core_followers.append(exchange.set_core)
        self._metrics = PeerMetrics(exchange)
        self._registry = registry
        registry.register(self._metrics)
        self.sync()
        self._syncing = asyncio.create_task(self._sync_forever())

    def sync(self) -> None:
        """The exchange's engine addresses := the membership's."""
        now = {h.num: h.address for h in self.engines.engines.values()}
        for num in self._known.keys() - now.keys():
            self.exchange.remove_engine(num)
        for num, address in now.items():
            if self._known.get(num) != address:
                self.exchange.set_engine(num, address)
        self._known = now

    async def _sync_forever(self) -> None:
        while True:
            await asyncio.sleep(_SYNC_S)
            self.sync()

    async def close(self) -> None:
        self.engines.core_followers.remove(self.exchange.set_core)
        self._syncing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._syncing
        self._registry.unregister(self._metrics)
        await asyncio.to_thread(self.exchange.shutdown)


def _shifted(address: str, offset: int) -> str:
    """HOST:PORT+offset (RouterPeers checked HOST:PORT)."""
    host, port = split_host_port(address)
    assert port is not None
    bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{bracketed}:{port + offset}"


def start_peer_exchange(peers: RouterPeers, host: str, port: int, peer_port: int | None,
                        engines: EngineMembership,
                        registry: CollectorRegistry) -> PeerExchange | None:
    """The exchange on `host`:`peer_port` (None: `port` + the default offset), or None when the
    router runs alone. A port that cannot be bound is a BadRequest (the router does not start).
    """
    if peers.alone:
        return None
    listen = port + DEFAULT_PEER_PORT_OFFSET if peer_port is None else peer_port
    offset = listen - port
    try:
        exchange = RouterPeerExchange(
            engines.core, host, listen,
            peers=[_shifted(a, offset) for a in peers.addresses],
            peers_dns=None if peers.dns is None else _shifted(peers.dns, offset),
            engine_token=engine_token() or "")
    except (OSError, ValueError, RuntimeError) as exc:
        raise BadRequest(f"router peer service on {host}:{listen}: {exc}",
                         param="peer_port") from None
    return PeerExchange(exchange, engines, registry)
