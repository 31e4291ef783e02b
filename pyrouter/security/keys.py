"""API keys and admin keys: who may call which route.

Two planes. Inference routes (/v1/...) take an inference key from `SWITCHYARD_API_KEYS` when any
is configured. Admin routes (/admin/...) take an admin key from `SWITCHYARD_ADMIN_KEYS`; an
inference key never opens them. With no admin keys configured, admin routes are open only where
nothing else is protected (no API keys either: a development router on loopback) or where the
admin plane listens on its own address (`--admin-port`: the network is the boundary there);
otherwise they answer 403. Admin routes that need no key answer loopback clients only (403
`admin_loopback_only` to anyone else), so a router started on a public address without admin
keys does not hand its policy and engines to whoever reaches it. Keys are compared in constant
time and never appear in a message.
"""
from __future__ import annotations

import hmac
import ipaddress
import os
from dataclasses import dataclass

from pyrouter.errors import Forbidden, Unauthorized

API_KEYS_ENV = "SWITCHYARD_API_KEYS"
ADMIN_KEYS_ENV = "SWITCHYARD_ADMIN_KEYS"
# Routes nobody needs a key for: probes, metrics scrapes, the API description.
OPEN_PATHS = frozenset({"/health", "/ready", "/metrics", "/openapi.json"})


def parse_keys(raw: str) -> frozenset[str]:
    return frozenset(k.strip() for k in raw.split(",") if k.strip())


def bearer_token(authorization: str) -> str:
    """The token of an `Authorization: Bearer <token>` header ("" when absent or another
    scheme)."""
    scheme, _, token = authorization.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _matches(token: str, keys: frozenset[str]) -> bool:
    # Every key is compared (no early exit), each in constant time.
    found = False
    for key in keys:
        found |= hmac.compare_digest(token.encode(), key.encode())
    return bool(token) and found


def is_admin_path(path: str) -> bool:
    return path == "/admin" or path.startswith("/admin/")


def is_loopback(host: str) -> bool:
    """`host` is a loopback address (IPv4-mapped IPv6 included); a name never is."""
    try:
        ip = ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return host == "localhost"
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


@dataclass(frozen=True, slots=True)
class KeyRing:
    api_keys: frozenset[str] = frozenset()
    admin_keys: frozenset[str] = frozenset()
    # The admin routes listen on their own address (--admin-port), not the public one.
    admin_plane_separate: bool = False

    def __post_init__(self) -> None:
        if self.api_keys & self.admin_keys:
            raise ValueError(f"a key may not be both an API key and an admin key "
                             f"({API_KEYS_ENV} and {ADMIN_KEYS_ENV} must not overlap)")

    @classmethod
    def from_env(cls, admin_plane_separate: bool = False,
                 environ: dict[str, str] | None = None) -> KeyRing:
        env = os.environ if environ is None else environ
        return cls(parse_keys(env.get(API_KEYS_ENV, "")), parse_keys(env.get(ADMIN_KEYS_ENV, "")),
                   admin_plane_separate)

    @property
    def admin_open(self) -> bool:
        """Admin routes need no key: nothing is protected, or they have their own address."""
        return not self.admin_keys and (not self.api_keys or self.admin_plane_separate)

    def check(self, path: str, authorization: str, peer: str | None = None) -> None:
        """Raise Unauthorized (401) / Forbidden (403) unless `authorization`, from the client
        address `peer` (None: a caller inside the router), may call `path`."""
        if path in OPEN_PATHS:
            return
        token = bearer_token(authorization)
        if is_admin_path(path):
            if self.admin_open:
                if peer is not None and not is_loopback(peer):
                    raise Forbidden(f"admin routes without a key answer loopback clients only: "
                                    f"set {ADMIN_KEYS_ENV} to call them from elsewhere",
                                    code="admin_loopback_only")
                return
            if not self.admin_keys:
                raise Forbidden(f"admin routes are disabled: set {ADMIN_KEYS_ENV} (inference keys "
                                "never grant admin access) or serve them on --admin-port",
                                code="admin_disabled")
            if not _matches(token, self.admin_keys):
                raise Unauthorized("missing or invalid admin key", code="invalid_admin_key")
            return
        if self.api_keys and not _matches(token, self.api_keys):
            raise Unauthorized("missing or invalid API key", code="invalid_api_key")

    def caller(self, authorization: str) -> str | None:
        """The API key a request authenticated with (its rate-limit identity), if any."""
        token = bearer_token(authorization)
        return token if token and _matches(token, self.api_keys) else None

    def caller_id(self, authorization: str, remote: str | None) -> str:
        """Whose per-caller limits apply: the API key when keys are configured, else the
        client's address."""
        key = self.caller(authorization)
        return f"key:{key}" if key is not None else f"addr:{remote or '?'}"
