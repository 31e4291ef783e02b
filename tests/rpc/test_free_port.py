"""engine.server.launcher.free_port: ports below the kernel's ephemeral range, so nothing bound to
port 0 and no outgoing connection can take one between the choice and the bind that wants it (a
test's router replica once lost its --port that way), and `count` consecutive ones free."""
from __future__ import annotations

import socket

from engine.server import launcher
from engine.server.launcher import free_port, port_bindable
from pyrouter.cli import DEFAULT_PEER_PORT_OFFSET


def test_ports_are_below_the_ephemeral_range_and_consecutive_ones_are_free() -> None:
    low = launcher._ephemeral_low()
    for _ in range(20):
        base = free_port(count=3)
        assert base + 3 + DEFAULT_PEER_PORT_OFFSET < low  # a replica's peer port too
        assert all(port_bindable("127.0.0.1", base + i) for i in range(3))


def test_a_taken_port_is_not_bindable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))
        s.listen()
        assert not port_bindable("127.0.0.1", s.getsockname()[1])
