"""The router's access and degrade rules as plain functions (the HTTP tests drive them through
real processes; these pin each rule's edge cases): keys, engine allow-list, per-caller limits,
policy-dir resolution, readiness and the degraded route note, bad JSON."""
from __future__ import annotations

import os

import pytest

from pyrouter.degrade import readiness
from pyrouter.errors import BadRequest, Forbidden, NotFound, Unauthorized
from pyrouter.json_body import parse_json
from pyrouter.request import RouteNote
from pyrouter.runtime.policy_dir import PolicyDir
from pyrouter.security.engine_allow import EngineAllowList, split_host_port
from pyrouter.security.keys import KeyRing, bearer_token
from pyrouter.security.rate_limit import RateRules


def test_keys_separate_inference_and_admin() -> None:
    inf, adm = "sk-inference-7f3a", "sk-admin-91c2"
    ring = KeyRing(frozenset({inf}), frozenset({adm}))
    ring.check("/v1/completions", f"Bearer {inf}")
    ring.check("/health", "")
    ring.check("/openapi.json", "")
    ring.check("/admin/policy", f"Bearer {adm}")
    for path, auth in [("/v1/completions", ""), ("/v1/completions", f"Bearer {adm}"),
                       ("/admin/policy", f"Bearer {inf}"), ("/admin/engines/e0", f"Basic {adm}"),
                       ("/admin/engines", "Bearer ")]:
        with pytest.raises(Unauthorized) as info:
            ring.check(path, auth)
        assert inf not in info.value.message and adm not in info.value.message
    assert ring.caller(f"Bearer {inf}") == inf and ring.caller("Bearer nope") is None
    with pytest.raises(ValueError):
        KeyRing(frozenset({"same"}), frozenset({"same"}))


def test_admin_without_admin_keys() -> None:
    KeyRing().check("/admin/policy", "")  # nothing protected: a development router
    with pytest.raises(Forbidden) as info:  # inference protected, admin never configured
        KeyRing(frozenset({"inf"})).check("/admin/policy", "Bearer inf")
    assert info.value.code == "admin_disabled"
    KeyRing(frozenset({"inf"}), admin_plane_separate=True).check("/admin/policy", "")
    assert bearer_token("bearer  tok ") == "tok" and bearer_token("tok") == ""


def test_keys_from_env() -> None:
    ring = KeyRing.from_env(environ={"SWITCHYARD_API_KEYS": " a, b ,",
                                     "SWITCHYARD_ADMIN_KEYS": "z"})
    assert ring.api_keys == {"a", "b"} and ring.admin_keys == {"z"}


def test_engine_allow_list() -> None:
    allow = EngineAllowList.from_config(["10.0.0.0/8", "engine-0.engines:50051", "[fd00::1]:7"],
                                        ["192.168.1.5:9000"], environ={})
    allow.check("127.0.0.1:5000", ["127.0.0.1"])
    allow.check("localhost:5000", ["127.0.0.1"])
    allow.check("10.2.3.4:1", ["10.2.3.4"])
    allow.check("192.168.1.5:9001", ["192.168.1.5"])  # a start-up engine's host
    allow.check("engine-0.engines:50051", [])
    allow.check("[fd00::1]:7", ["fd00::1"])
    for address, resolved in [("8.8.8.8:53", ["8.8.8.8"]), ("engine-0.engines:50052", []),
                              ("evil.example:80", ["10.0.0.1", "8.8.8.8"]),
                              ("[fd00::1]:8", ["fd00::1"]), ("nowhere:1", [])]:
        with pytest.raises(Forbidden):
            allow.check(address, resolved)
    allow.check("evil.example:80", ["10.0.0.1"])  # resolves inside an allowed network only
    assert split_host_port("[::1]:80") == ("::1", 80)
    with pytest.raises(BadRequest):
        split_host_port("host:notaport")
    env_allow = EngineAllowList.from_config([], [], environ={"SWITCHYARD_ENGINE_ALLOW": "1.2.3.4"})
    env_allow.check("1.2.3.4:5", ["1.2.3.4"])


def test_rate_rules_are_checked() -> None:
    # router_core applies them (front/caller_limits.rs, its unit test pins each limit's edges;
    # test_reliability_http.py drives them through a router).
    assert RateRules(rps=2.0, burst=2, max_inflight=3).active
    assert not RateRules().active
    with pytest.raises(ValueError):
        RateRules(rps=-1)


def test_policy_dir_resolves_only_inside(tmp_path) -> None:
    d = tmp_path / "policies"
    d.mkdir()
    (d / "ok.py").write_text("from pyrouter import policy\n")
    outside = tmp_path / "evil.py"
    outside.write_text("")
    (d / "link.py").symlink_to(outside)
    pd = PolicyDir(str(d))
    assert pd.resolve("ok.py") == os.path.join(str(d), "ok.py")
    assert pd.resolve(str(d / "ok.py")) == str(d / "ok.py")
    for name in ["../evil.py", str(outside), "link.py", "os", "pkg.module", "ok.py\x00"]:
        with pytest.raises(Forbidden):
            pd.resolve(name)
    with pytest.raises(NotFound):
        pd.resolve("missing.py")


class _E:
    def __init__(self, role: str) -> None:
        self.role = role


def test_readiness_and_degraded_note() -> None:
    full = readiness(("prefill", "decode"), [_E("prefill"), _E("decode")], False)
    assert full.serving and not full.missing_roles and not full.body()["degraded"]
    half = readiness(("prefill", "decode"), [_E("prefill")], False)
    assert half.serving and half.missing_roles == ["decode"] and half.body()["degraded"]
    assert readiness(("prefill", "decode"), [_E("any")], False).missing_roles == []
    assert not readiness(("any",), [], False).serving
    assert not readiness(("any",), [_E("any")], True).serving
    note = RouteNote("pd", {"decode": "e0"}, ["decode->e0"])
    assert note.header() == "pd decode=e0 degraded=decode->e0"


@pytest.mark.parametrize("raw, code", [
    (b'{"prompt": "a\\ud800"}', "invalid_json"),
    (b'{"max_tokens": ' + b"9" * 5001 + b"}", "invalid_json"),
    (b"[" * 100_000 + b"]" * 100_000, "json_too_deep"),
    (b"\xff\xfe", "invalid_json"),
    (b"", "invalid_json"),
])
def test_hostile_json_is_a_400(raw: bytes, code: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_json(raw)
    assert info.value.code == code


def test_keyless_admin_answers_loopback_clients_only() -> None:
    # Issue 24: `--host 0.0.0.0` without admin keys served PUT /admin/policy to anyone.
    ring = KeyRing()
    for peer in ("127.0.0.1", "::1", "::ffff:127.0.0.1", "127.3.2.1", None):
        ring.check("/admin/policy", "", peer)
    for peer in ("10.0.0.8", "192.168.1.20", "2001:db8::1", "::ffff:10.1.1.1", "nonsense"):
        with pytest.raises(Forbidden) as info:
            ring.check("/admin/engines", "", peer)
        assert info.value.code == "admin_loopback_only"
    ring.check("/ready", "", "10.0.0.8")  # the open routes stay open
    ring.check("/v1/completions", "", "10.0.0.8")
    # With admin keys the key decides, wherever the client is.
    KeyRing(admin_keys=frozenset({"adm"})).check("/admin/policy", "Bearer adm", "10.0.0.8")
