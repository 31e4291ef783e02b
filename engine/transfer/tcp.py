"""`tcp`: K/V bytes travel in the frames themselves. Works between any two hosts."""
from __future__ import annotations

from engine.transfer.layout import KVLayout
from engine.transfer.link import SocketLink


class TcpTransport(SocketLink):
    def __init__(self, host: str, port: int, layout: KVLayout) -> None:
        super().__init__(host, port, layout, staging_bytes=0)
