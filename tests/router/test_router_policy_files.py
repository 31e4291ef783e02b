"""A policy file with a bug fails only its own requests, with a clear 500 naming the policy."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from router_procs import free_port, start_mock, start_router, wait_ready

pytestmark = [pytest.mark.procs, pytest.mark.timeout(90)]
BUGGY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "policy_files", "buggy.py")


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("policy-dir")  # the router's own: tests write there


@pytest.fixture(scope="module")
def buggy_router(policy_dir) -> Iterator[tuple[str, object]]:
    engine_port, router_port = free_port(), free_port()
    engine = start_mock(engine_port)
    router = start_router(router_port, [engine_port], "--policy-file", BUGGY,
                          "--policy", "sometimes_crashes", "--policy-timeout-s", "1",
                          "--policy-dir", str(policy_dir), "--policy-dir-poll-s", "3600")
    base = f"http://127.0.0.1:{router_port}"
    try:
        wait_ready(base, router)
        yield base, router
    finally:
        router.stop()
        engine.stop()


def _post(base: str, tokens: list[int]) -> requests.Response:
    return requests.post(f"{base}/v1/completions", json={"prompt": tokens, "max_tokens": 3})


def test_bug_fails_only_its_requests(buggy_router):
    base, router = buggy_router
    assert requests.get(f"{base}/admin/policy").json()["policy"] == "sometimes_crashes"
    for i in range(3):
        assert _post(base, [10, 20, 30 + i]).status_code == 200
        bad = _post(base, [10, 666, 30 + i])
        assert bad.status_code == 500
        err = bad.json()["error"]
        assert "sometimes_crashes" in err["message"] and "ZeroDivisionError" in err["message"]
        assert err["type"] == "policy_error"
    assert "policy 'sometimes_crashes' raised" in router.output()
    assert requests.get(f"{base}/ready").status_code == 200


@pytest.mark.parametrize("name, phrase", [("wrong_verb_order", "wrong verb order"),
                                          ("returns_nothing", "a policy returns a placement"),
                                          ("hangs", "did not decide within 1 s")])
def test_verb_misuse_is_a_clear_500(buggy_router, name, phrase):
    base, _ = buggy_router
    assert requests.put(f"{base}/admin/policy", json={"policy": name}).status_code == 200
    r = _post(base, list(range(100, 140)))
    assert r.status_code == 500 and phrase in r.json()["error"]["message"], r.text
    assert name in r.json()["error"]["message"]
    # the engine got its work aborted: nothing is left active on it
    engines = requests.get(f"{base}/admin/engines").json()["engines"]
    assert all(e["active_requests"] == 0 and e["cached_blocks"] >= 0 for e in engines)
    assert requests.put(f"{base}/admin/policy", json={"policy": "round_robin"}).status_code == 200
    assert _post(base, [1, 2, 3]).status_code == 200


def test_policy_file_loaded_live(buggy_router, policy_dir):
    base, _ = buggy_router
    path = policy_dir / "mine.py"
    path.write_text("from pyrouter import policy\n\n"
                    "@policy('first_engine_only')\n"
                    "async def route(req, cluster):\n"
                    "    e = cluster.engines()[0]\n"
                    "    req.note_route('mine', engine=e.id)\n"
                    "    return e.start_generate(req)\n")
    r = requests.put(f"{base}/admin/policy", json={"policy": "first_engine_only",
                                                    "file": "mine.py"})
    assert r.status_code == 200 and "first_engine_only" in r.json()["available"]
    assert _post(base, [5, 6]).headers["X-Switchyard-Route"] == "mine engine=e0"
    broken = policy_dir / "broken.py"
    broken.write_text("this is not python(\n")
    r = requests.put(f"{base}/admin/policy", json={"policy": "x", "file": "broken.py"})
    assert r.status_code == 400 and "failed to load" in r.json()["error"]["message"]
    assert requests.get(f"{base}/admin/policy").json()["policy"] == "first_engine_only"
    r = requests.put(f"{base}/admin/policy", json={"policy": "x", "file": "absent.py"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "policy_file_not_found"


def test_no_code_runs_from_outside_the_policy_dir(buggy_router, policy_dir, tmp_path):
    """Finding 2: `file` used to execute any Python file or module on the router host."""
    base, _ = buggy_router
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    escape = policy_dir / "escape.py"
    escape.symlink_to(evil)  # a link inside the directory to a file outside it
    for source in (str(evil), "../" + evil.name, "escape.py", str(escape),
                   "tests.router.policy_files.buggy", "os"):
        r = requests.put(f"{base}/admin/policy", json={"policy": "x", "file": source})
        assert r.status_code == 403, (source, r.text)
        assert r.json()["error"]["code"] == "policy_file_not_allowed"
    assert not marker.exists()
    assert requests.get(f"{base}/admin/policy").json()["policy"] != "x"
