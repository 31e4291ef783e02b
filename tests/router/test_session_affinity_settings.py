"""Session affinity's settings: the flags of `switchyard router` and `switchyard serve` (which
passes them on to its router) and their checks; the live route is tested on a running router in
test_session_affinity_real.py."""
from __future__ import annotations

import pytest

from pyrouter.cli import build_parser
from pyrouter.errors import BadRequest
from pyrouter.replicas.command_lines import serve_router_args
from pyrouter.session_affinity import DEFAULT_LOAD_BOUND, SessionAffinityConfig, session_config


def test_the_flags_reach_the_router_from_serve_and_router() -> None:
    serve = build_parser().parse_args(["serve", "--session-from-user", "--session-load-bound", "2"])
    assert session_config(serve_router_args(serve, [], "round_robin")) == SessionAffinityConfig(2.0, True)
    router = build_parser().parse_args(["router", "--engine", "127.0.0.1:1"])
    assert session_config(router) == SessionAffinityConfig(DEFAULT_LOAD_BOUND, False)


@pytest.mark.parametrize("bound", [0.99, float("nan"), float("inf"), True, "2"])
def test_a_bound_below_one_or_not_a_number_is_refused(bound: object) -> None:
    with pytest.raises(BadRequest) as err:
        SessionAffinityConfig(bound, False)  # type: ignore[arg-type]
    assert err.value.param == "load_bound"
    with pytest.raises(BadRequest):
        SessionAffinityConfig(1.0, "yes")  # type: ignore[arg-type]
    assert SessionAffinityConfig(1, True).body() == {"load_bound": 1, "from_user": True}
