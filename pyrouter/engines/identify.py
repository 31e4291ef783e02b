"""Is there a Switchyard engine at an address? Asked before POST /admin/engines adds one.

An engine answers the standard gRPC health service (open to probes) with SERVING and, with the
deployment's engine token, its ModelInfo RPC. Anything else — a closed port, an SSH server, an HTTP server,
an engine of another deployment (token refused), a host that never answers — is refused within
`deadline_s`, so an admin call never blocks for long and nothing unreachable is kept.
"""
from __future__ import annotations

import asyncio

from pyrouter.engines.rust_client import dial
from pyrouter.errors import BadRequest, EngineCallError


async def check_is_engine(address: str, deadline_s: float = 3.0) -> None:
    """Return when `address` answers as a Switchyard engine; else a 400 saying why."""
    client = dial(address, deadline_s)  # the router's own client, dropped when answered
    try:
        async with asyncio.timeout(deadline_s):
            if not await client.healthy(timeout_s=deadline_s):
                raise BadRequest(f"{address} does not answer as a serving Switchyard engine "
                                 "(gRPC health); nothing was added", param="address",
                                 code="engine_unreachable")
            await client.model_info(timeout_s=deadline_s)
    except TimeoutError:
        raise BadRequest(f"{address} did not answer as a Switchyard engine within "
                         f"{deadline_s:g} s; nothing was added", param="address",
                         code="engine_unreachable") from None
    except EngineCallError as exc:
        if exc.code in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
            raise BadRequest(f"{address} refused this deployment's engine token; nothing was "
                             "added", param="address", code="engine_token_refused") from None
        raise BadRequest(f"{address} does not answer as a Switchyard engine "
                         f"({exc.code}); nothing was added", param="address",
                         code="engine_unreachable") from None
