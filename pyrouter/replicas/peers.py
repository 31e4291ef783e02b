"""The other router replicas this one runs with (`switchyard router --peer` / `--peers-dns`).

Several replicas in front of the same engines share the prefix view without talking to each
other: each follows every engine's KV events (pyrouter/engines/membership.py). The peers named
here are for what the engines cannot tell them: the load each replica dispatched and saw
finish (docs/deploy.md, "Several routers"), exchanged by pyrouter/replicas/peer_exchange.py on each
peer's port plus the `--peer-port` offset.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from pyrouter.errors import BadRequest
from pyrouter.security.engine_allow import split_host_port

# The flags `serve` passes on to its routers (each replica also gets the others as --peer).
PEER_FLAGS = ("peer", "peers_dns", "peer_port")


def _check_peer(value: str, flag: str) -> None:
    """HOST:PORT (an IPv6 host in brackets), else BadRequest naming `flag`."""
    try:
        _, port = split_host_port(value)
    except BadRequest:
        port = None
    if port is None:
        raise BadRequest(f"{flag} wants HOST:PORT, got {value!r}", param=flag.lstrip("-"))


@dataclass(frozen=True, slots=True)
class RouterPeers:
    """Peer replicas by address, and a DNS name whose records are the replicas (a Kubernetes
    headless Service) — both as given; empty: this router runs alone."""
    addresses: tuple[str, ...] = ()
    dns: str | None = None

    def __post_init__(self) -> None:
        for address in self.addresses:
            _check_peer(address, "--peer")
        if self.dns is not None:
            _check_peer(self.dns, "--peers-dns")

    @property
    def alone(self) -> bool:
        return not self.addresses and self.dns is None


def router_peers(args: argparse.Namespace) -> RouterPeers:
    """The peers a router's flags name (BadRequest for a malformed one)."""
    return RouterPeers(tuple(getattr(args, "peer", None) or ()),
                       getattr(args, "peers_dns", None) or None)
