"""`--policy-dir DIR`: every policy file in DIR loads at start and reloads when it changes,
including the symlink swap by which Kubernetes updates a mounted ConfigMap."""
from __future__ import annotations

import os
import time

import pytest
import requests
from router_procs import SWITCHYARD, Proc, free_port, start_mock, wait_ready

from pyrouter.errors import BadRequest
from pyrouter.runtime.policy_dir import PolicyDir
from pyrouter.runtime.policy_registry import get_policy

pytestmark = pytest.mark.procs


def policy_source(name: str, label: str) -> str:
    """A policy that tags its route header with `label`, so a test sees which version ran."""
    return ("from pyrouter import policy\n\n"
            f"@policy({name!r})\n"
            "async def route(req, cluster):\n"
            "    e = cluster.engines()[0]\n"
            f"    req.note_route({label!r}, engine=e.id)\n"
            "    return e.start_generate(req)\n")


def route_label(name: str) -> str:
    """Which version of policy `name` is registered: the label in its source's code object."""
    consts = get_policy(name).route.__code__.co_consts
    return next(c for c in consts if isinstance(c, str) and c.startswith("v"))


def configmap_dir(root, files: dict[str, str], revision: str) -> None:
    """Lay out `root` as the kubelet does: NAME -> ..data/NAME, ..data -> ..REVISION/."""
    rev = root / f"..{revision}"
    rev.mkdir()
    for name, text in files.items():
        (rev / name).write_text(text)
    tmp = root / "..data_tmp"
    os.symlink(rev.name, tmp)
    os.replace(tmp, root / "..data")  # atomic swap, as the kubelet does
    for name in files:
        if not (root / name).is_symlink():
            os.symlink(os.path.join("..data", name), root / name)


def test_loads_every_file_and_reloads_a_changed_one(tmp_path):
    (tmp_path / "a.py").write_text(policy_source("pdir_a", "v1"))
    (tmp_path / "b.py").write_text(policy_source("pdir_b", "v1"))
    (tmp_path / "notes.txt").write_text("not a policy")
    reloads: list[list[str]] = []
    pdir = PolicyDir(str(tmp_path), on_reload=reloads.append)
    assert sorted(pdir.load_all()) == ["pdir_a", "pdir_b"]
    assert pdir.poll() == [] and reloads == []  # nothing changed

    (tmp_path / "a.py").write_text(policy_source("pdir_a", "v2") + "\n")
    assert pdir.poll() == ["pdir_a"] and reloads == [["pdir_a"]]
    assert route_label("pdir_a") == "v2" and route_label("pdir_b") == "v1"

    (tmp_path / "c.py").write_text(policy_source("pdir_c", "v1"))  # a new file
    assert pdir.poll() == ["pdir_c"]


def test_a_broken_version_keeps_the_previous_one(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(policy_source("pdir_keep", "v1"))
    pdir = PolicyDir(str(tmp_path))
    pdir.load_all()
    path.write_text("this is not python(\n")
    assert pdir.poll() == []
    assert "failed to load" in pdir.errors[str(path)]
    assert route_label("pdir_keep") == "v1"
    path.write_text(policy_source("pdir_keep", "v3"))
    assert pdir.poll() == ["pdir_keep"] and not pdir.errors
    path.unlink()  # removed: stays registered (it may be the active policy)
    assert pdir.poll() == [] and route_label("pdir_keep") == "v3"


def test_configmap_symlink_swap_is_a_change(tmp_path):
    configmap_dir(tmp_path, {"cm.py": policy_source("pdir_cm", "v1")}, "2026_11_30_1")
    pdir = PolicyDir(str(tmp_path))
    assert pdir.load_all() == ["pdir_cm"]  # ..data and ..2026_* are hidden: not loaded as files
    # Same size, and the same mtime if the kubelet is fast: only the inode tells them apart.
    configmap_dir(tmp_path, {"cm.py": policy_source("pdir_cm", "v2")}, "2026_11_30_2")
    assert pdir.poll() == ["pdir_cm"] and route_label("pdir_cm") == "v2"


def test_a_link_to_a_file_outside_is_never_loaded(tmp_path):
    # Issue 24: at start the directory loaded a symlink to a file elsewhere, which PUT refuses.
    elsewhere, inside = tmp_path / "elsewhere", tmp_path / "policies"
    elsewhere.mkdir()
    inside.mkdir()
    (elsewhere / "evil.py").write_text(policy_source("pdir_outside", "v1"))
    (inside / "good.py").write_text(policy_source("pdir_inside", "v1"))
    os.symlink(elsewhere / "evil.py", inside / "evil.py")
    pdir = PolicyDir(str(inside))
    assert pdir.load_all() == ["pdir_inside"]
    (elsewhere / "evil.py").write_text(policy_source("pdir_outside", "v2") + "\n")
    assert pdir.poll() == []
    with pytest.raises(BadRequest, match="unknown policy"):
        get_policy("pdir_outside")


def test_bad_directory_and_bad_file_are_clear_errors(tmp_path):
    with pytest.raises(BadRequest, match="not a directory"):
        PolicyDir(str(tmp_path / "missing"))
    (tmp_path / "empty.py").write_text("x = 1\n")
    with pytest.raises(BadRequest, match="registers no @policy"):
        PolicyDir(str(tmp_path)).load_all()


@pytest.mark.timeout(90)
def test_router_switches_to_and_reloads_dir_policies(tmp_path):
    (tmp_path / "tagged.py").write_text(policy_source("dir_tagged", "v1"))
    engine_port, router_port = free_port(), free_port()
    engine = start_mock(engine_port)
    router = Proc([*SWITCHYARD, "router", "--port", str(router_port), "--poll-s", "0.1",
                   "--engine", f"127.0.0.1:{engine_port}", "--policy", "round_robin",
                   "--policy-dir", str(tmp_path), "--policy-dir-poll-s", "0.1"],
                  log_name=f"router{router_port}")
    base = f"http://127.0.0.1:{router_port}"

    def route() -> str:
        r = requests.post(f"{base}/v1/completions", json={"prompt": [1, 2], "max_tokens": 2},
                          timeout=30)
        assert r.status_code == 200, r.text
        return r.headers["X-Switchyard-Route"]

    try:
        wait_ready(base, router)
        assert "dir_tagged" in requests.get(f"{base}/admin/policy", timeout=5).json()["available"]
        assert route().startswith("dp ")
        r = requests.put(f"{base}/admin/policy", json={"policy": "dir_tagged"}, timeout=5)
        assert r.status_code == 200, r.text
        assert route() == "v1 engine=e0"
        # Edit the file: the active policy picks up the new code with no admin call.
        (tmp_path / "tagged.py").write_text(policy_source("dir_tagged", "v2") + "# edited\n")
        deadline = time.monotonic() + 20
        while route() != "v2 engine=e0":
            assert time.monotonic() < deadline, router.output()
            time.sleep(0.1)
    finally:
        router.stop()
        engine.stop()
