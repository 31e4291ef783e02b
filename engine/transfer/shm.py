"""`shm`: K/V bytes go through a shared-memory staging area; the socket only carries pointers.

Only for engines on the same host (same host_id). One copy per side: the sender gathers from its
pages into the area, the receiver scatters from the area into its pages.
"""
from __future__ import annotations

import os

from engine.transfer.layout import KVLayout
from engine.transfer.link import SocketLink

# Large enough to keep many layer chunks in flight; a chunk may be at most this big.
DEFAULT_STAGING_BYTES = int(os.environ.get("SWITCHYARD_SHM_STAGING_MB", "64")) << 20


class ShmTransport(SocketLink):
    def __init__(
        self, host: str, port: int, layout: KVLayout, staging_bytes: int = DEFAULT_STAGING_BYTES
    ) -> None:
        super().__init__(host, port, layout, staging_bytes=staging_bytes)
