"""Which engine addresses `POST /admin/engines` may add (the router connects out to them).

Entries: an IP network (`10.0.0.0/8`, `fd00::/8`), an IP, or a host name, each optionally with
`:PORT` (`10.1.2.3:50051`, `engine-0.engines:50051`; IPv6 with a port as `[fd00::1]:50051`).
An address is allowed when its host is a listed name (same port if the entry has one), or when
every IP it resolves to lies in a listed network. The default list is loopback plus the hosts
the router was started with (`--engine`), so by default an admin can re-add what it had, never
point the router at an arbitrary host. `--engine-allow` / `SWITCHYARD_ENGINE_ALLOW` extend it.
"""
from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pyrouter.errors import BadRequest, Forbidden

ALLOW_ENV = "SWITCHYARD_ENGINE_ALLOW"
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
LOOPBACK = ("127.0.0.0/8", "::1/128", "localhost")


def split_host_port(address: str) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]:port`, a bare IPv6 address or network -> (host, port)."""
    text = address.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:  # no port, or an IPv6 address without brackets
        host, port = text, ""
    if not host or (port and not port.isdigit()) or (port and not 0 < int(port) < 65536):
        raise BadRequest(f"not an address: {address!r}", param="address")
    return host.lower(), int(port) if port else None


@dataclass(frozen=True, slots=True)
class _Entry:
    network: IpNetwork | None
    name: str | None
    port: int | None

    @classmethod
    def parse(cls, text: str) -> _Entry:
        try:
            return cls(ipaddress.ip_network(text.strip(), strict=False), None, None)
        except ValueError:
            pass
        host, port = split_host_port(text)
        try:
            return cls(ipaddress.ip_network(host, strict=False), None, port)
        except ValueError:
            return cls(None, host, port)


class EngineAllowList:
    def __init__(self, entries: Iterable[str]) -> None:
        self.entries = [_Entry.parse(e) for e in entries if e.strip()]

    @classmethod
    def from_config(cls, extra: Sequence[str], start_engines: Sequence[str],
                    environ: dict[str, str] | None = None) -> EngineAllowList:
        env = os.environ if environ is None else environ
        from_env = [e for e in env.get(ALLOW_ENV, "").split(",") if e.strip()]
        started = [split_host_port(a)[0] for a in start_engines]
        return cls([*LOOPBACK, *started, *extra, *from_env])

    def check(self, address: str, resolved: Sequence[str]) -> None:
        """Raise Forbidden unless `address` (HOST:PORT) may be added; `resolved`: the IPs its host
        resolves to (the caller resolves, asynchronously; an IP literal resolves to itself)."""
        host, port = split_host_port(address)
        for entry in self.entries:
            if entry.name is not None and entry.name == host and entry.port in (None, port):
                return
        if resolved and all(self._ip_allowed(ip, port) for ip in resolved):
            return
        raise Forbidden(f"engine address {address!r} is not on the allow-list (--engine-allow / "
                        f"{ALLOW_ENV})", param="address", code="engine_not_allowed")

    def _ip_allowed(self, ip_text: str, port: int | None) -> bool:
        try:
            ip = ipaddress.ip_address(ip_text.split("%")[0])
        except ValueError:
            return False
        return any(entry.network is not None and ip in entry.network
                   and entry.port in (None, port) for entry in self.entries)
