"""`serve --routers N` and `router --peer/--peers-dns`: the flags each replica is started with.

No processes: the replica's command line is built from serve's router flags and parsed back by
the `switchyard router` parser, so a flag serve passes that the router does not take fails here.
"""
from __future__ import annotations

import argparse

import pytest

from pyrouter.cli import build_parser
from pyrouter.errors import BadRequest
from pyrouter.replicas.command_lines import replica_args, router_argv, serve_router_args
from pyrouter.replicas.peers import RouterPeers, router_peers


class _Engine:
    def __init__(self, port: int, role: str) -> None:
        self.address = f"127.0.0.1:{port}"
        self.role = role


def _serve_router_args(*serve_flags: str) -> argparse.Namespace:
    args = build_parser().parse_args(["serve", *serve_flags])
    return serve_router_args(args, [_Engine(7001, "any"), _Engine(7002, "any")], "cache_aware")


def test_serve_takes_routers_and_defaults_to_one() -> None:
    assert build_parser().parse_args(["serve"]).routers == 1
    assert build_parser().parse_args(["serve", "--routers", "3"]).routers == 3


def test_replicas_take_consecutive_ports_and_name_each_other_as_peers() -> None:
    args = _serve_router_args("--port", "8100", "--admin-port", "9100", "--routers", "3")
    replicas = [replica_args(args, i, 3) for i in range(3)]
    assert [r.port for r in replicas] == [8100, 8101, 8102]
    assert [r.admin_port for r in replicas] == [9100, 9101, 9102]
    assert replicas[0].peer == ["127.0.0.1:8101", "127.0.0.1:8102"]
    assert replicas[2].peer == ["127.0.0.1:8100", "127.0.0.1:8101"]
    assert args.port == 8100 and getattr(args, "peer", None) is None  # serve's own untouched


def test_a_wildcard_host_names_peers_on_loopback() -> None:
    args = _serve_router_args("--host", "0.0.0.0", "--routers", "2")
    assert replica_args(args, 1, 2).peer == ["127.0.0.1:8000"]
    assert replica_args(args, 1, 2).host == "0.0.0.0"


def test_no_admin_port_stays_none() -> None:
    args = _serve_router_args("--routers", "2")
    assert replica_args(args, 1, 2).admin_port is None


@pytest.mark.parametrize("serve_flags", [
    (),
    ("--admin-port", "9100", "--session-from-user", "--session-load-bound", "1.5",
     "--engine-allow", "10.0.0.0/8", "--engine-allow", "db:9", "--model", "a=default",
     "--model", "b=default", "--drain-s", "4", "--rate-limit-rps", "2.5"),
])
def test_the_replica_command_line_parses_back_to_the_same_flags(
        serve_flags: tuple[str, ...]) -> None:
    mine = replica_args(_serve_router_args("--routers", "2", *serve_flags), 1, 2)
    parsed = build_parser().parse_args(["router", *router_argv(mine)])
    assert parsed.command == "router"
    for name, value in vars(mine).items():
        if value is not None:
            assert getattr(parsed, name) == value, name


def test_serve_passes_the_upkeep_flags_to_every_replica() -> None:
    args = _serve_router_args("--routers", "2", "--poll-s", "0.25", "--liveness-s", "4",
                              "--upkeep-polls-per-s", "64", "--prefix-index-max-blocks", "4096")
    for index in range(2):
        parsed = build_parser().parse_args(["router",
                                            *router_argv(replica_args(args, index, 2))])
        assert (parsed.poll_s, parsed.liveness_s, parsed.upkeep_polls_per_s,
                parsed.prefix_index_max_blocks) == (0.25, 4.0, 64.0, 4096)


def test_serve_without_upkeep_flags_leaves_the_routers_defaults() -> None:
    argv = router_argv(replica_args(_serve_router_args(), 0, 1))
    assert not {"--poll-s", "--liveness-s", "--upkeep-polls-per-s",
                "--prefix-index-max-blocks"} & set(argv)


def test_router_stores_repeated_peers_and_a_dns_name() -> None:
    args = build_parser().parse_args(["router", "--peer", "10.0.0.5:8000", "--peer",
                                      "[::1]:8001", "--peers-dns", "routers.ns.svc:8000"])
    peers = router_peers(args)
    assert peers.addresses == ("10.0.0.5:8000", "[::1]:8001")
    assert peers.dns == "routers.ns.svc:8000"
    assert not peers.alone
    assert router_peers(build_parser().parse_args(["router"])).alone


@pytest.mark.parametrize("bad", ["nohost", "host:", "host:0", "host:99999", ":8000", "h:x"])
def test_a_malformed_peer_is_refused(bad: str) -> None:
    with pytest.raises(BadRequest, match="--peer wants HOST:PORT"):
        RouterPeers((bad,))
    with pytest.raises(BadRequest, match="--peers-dns wants HOST:PORT"):
        RouterPeers(dns=bad)
