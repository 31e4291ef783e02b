"""Who may talk to an engine: a shared deployment token, and optionally mutual TLS.

Token: `SWITCHYARD_ENGINE_TOKEN` (or a file named by `SWITCHYARD_ENGINE_TOKEN_FILE`, as a
Kubernetes Secret mounts it). When set, an engine refuses every Engine RPC without
`authorization: Bearer <token>` metadata (UNAUTHENTICATED) and every KV link whose HELLO lacks
it; the standard health service stays open for probes. The router, the engines' own KV links
and every EngineClient send it from the same variables. `switchyard serve` generates a fresh
token per deployment into a 0600 file in its run directory (pyrouter/supervisor/engine_token.py,
kept while a later serve adopts the engines that read it). Unset: engines accept anyone who
can reach them (a single machine's loopback, tests).

mTLS: with `SWITCHYARD_ENGINE_TLS_CERT` and `SWITCHYARD_ENGINE_TLS_KEY` (PEM files) an engine
serves gRPC over TLS, and with `SWITCHYARD_ENGINE_TLS_CA` it requires client certificates
signed by that CA; clients use the same three variables (their own certificate, the CA that
signed the engines'), plus `SWITCHYARD_ENGINE_TLS_SERVER_NAME` when the engines' certificate
names differ from the addresses dialled. docs/reliability.md shows the set-up.
"""
from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

TOKEN_ENV = "SWITCHYARD_ENGINE_TOKEN"
TOKEN_FILE_ENV = "SWITCHYARD_ENGINE_TOKEN_FILE"
TLS_CERT_ENV = "SWITCHYARD_ENGINE_TLS_CERT"
TLS_KEY_ENV = "SWITCHYARD_ENGINE_TLS_KEY"
TLS_CA_ENV = "SWITCHYARD_ENGINE_TLS_CA"
TLS_SERVER_NAME_ENV = "SWITCHYARD_ENGINE_TLS_SERVER_NAME"
_OPEN_SERVICES = ("/grpc.health.v1.Health/",)


def engine_token(environ: dict[str, str] | os._Environ[str] | None = None) -> str | None:
    """The deployment's engine token, or None when engines are open."""
    env = os.environ if environ is None else environ
    path = env.get(TOKEN_FILE_ENV, "")
    if path:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
        if not token:
            raise ValueError(f"{TOKEN_FILE_ENV} names an empty file: {path}")
        return token
    return env.get(TOKEN_ENV, "").strip() or None


def token_matches(expected: str | None, presented: str) -> bool:
    """Constant-time check of a presented token (None expected: no token required)."""
    if expected is None:
        return True
    return hmac.compare_digest(presented.encode(), expected.encode())


def call_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


class RequireToken(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses Engine RPCs that do not carry the deployment token."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}"

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        handler = await continuation(details)
        if handler is None or str(details.method).startswith(_OPEN_SERVICES):
            return handler
        presented = dict(details.invocation_metadata or ()).get("authorization", "")
        if hmac.compare_digest(str(presented).encode(), self._expected.encode()):
            return handler
        return _denied(handler)


async def _deny(request: Any, context: grpc.aio.ServicerContext) -> Any:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid engine token")


def _denied(handler: Any) -> Any:
    """A handler of the same kind (unary or server-streaming) that only refuses."""
    kwargs = {"request_deserializer": handler.request_deserializer,
              "response_serializer": handler.response_serializer}
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(_deny, **kwargs)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(_deny, **kwargs)
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(_deny, **kwargs)
    return grpc.unary_unary_rpc_method_handler(_deny, **kwargs)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def server_interceptors() -> list[grpc.aio.ServerInterceptor]:
    token = engine_token()
    return [RequireToken(token)] if token else []


def add_listening_port(server: grpc.aio.Server, address: str) -> int:
    """Bind `address`, over TLS when the engine has a certificate (mTLS when it has a CA)."""
    cert, key = os.environ.get(TLS_CERT_ENV, ""), os.environ.get(TLS_KEY_ENV, "")
    if not (cert and key):
        return int(server.add_insecure_port(address))
    ca = os.environ.get(TLS_CA_ENV, "")
    credentials = grpc.ssl_server_credentials(
        [(_read(key), _read(cert))], root_certificates=_read(ca) if ca else None,
        require_client_auth=bool(ca))
    return int(server.add_secure_port(address, credentials))


@dataclass(frozen=True, slots=True)
class ClientTls:
    """How a caller dials engines over TLS (PEM bytes): the CA their certificates are signed
    by, this side's own certificate and key (mTLS), the name their certificate carries."""

    ca: bytes
    cert: bytes | None
    key: bytes | None
    server_name: str | None


def client_tls() -> ClientTls | None:
    """The TLS settings for dialling engines, from the environment (None: plain TCP)."""
    ca = os.environ.get(TLS_CA_ENV, "")
    if not ca:
        return None
    cert, key = os.environ.get(TLS_CERT_ENV, ""), os.environ.get(TLS_KEY_ENV, "")
    return ClientTls(_read(ca), _read(cert) if cert else None, _read(key) if key else None,
                     os.environ.get(TLS_SERVER_NAME_ENV, "") or None)


def open_channel(address: str, options: list[tuple[str, Any]]) -> grpc.aio.Channel:
    """A channel to an engine: TLS (with this side's certificate for mTLS) when a CA is set."""
    tls = client_tls()
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=tls.ca, private_key=tls.key, certificate_chain=tls.cert)
    if tls.server_name:
        options = [*options, ("grpc.ssl_target_name_override", tls.server_name)]
    return grpc.aio.secure_channel(address, credentials, options=options)
