"""deploy/compose.yaml, the Dockerfiles and the pinned requirements: every flag, port, path and
environment variable they use exists in the code, the pins satisfy pyproject.toml, and the
images are built only from the Debian base and the package registries."""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from deploy_refs import DEPLOY, OVERLAYS, ROOT, env_read_by_code, flag_value, render  # noqa: E402

from pyrouter.cli import build_parser  # noqa: E402
from pyrouter.probe import main as probe_main  # noqa: E402
from pyrouter.runtime.policy_dir import PolicyDir  # noqa: E402

_VARIABLE = re.compile(r"\$\{([A-Z0-9_]+):-([^}]*)\}")


def load_compose() -> dict:
    """compose.yaml with each ${VAR:-default} at its default, as compose interpolates it."""
    text = open(os.path.join(DEPLOY, "compose.yaml"), encoding="utf-8").read()
    return yaml.safe_load(_VARIABLE.sub(lambda m: m.group(2), text))


COMPOSE = load_compose()
SERVICES = COMPOSE["services"]
OURS = {n: s for n, s in SERVICES.items() if s["image"].startswith("switchyard/")}
# The services that run `switchyard` (HAProxy runs its image's own command).
SWITCHYARD_SERVICES = {n: s for n, s in OURS.items() if "command" in s}
ENGINES = {n: s for n, s in SWITCHYARD_SERVICES.items() if s["command"][0] == "engine"}
ROUTERS = {n: s for n, s in SWITCHYARD_SERVICES.items() if s["command"][0] == "router"}


def parsed(service: dict):
    return build_parser().parse_args(service["command"])


def probe_target(service: dict) -> tuple[str, str]:
    test = service["healthcheck"]["test"]
    assert test[:4] == ["CMD", "python", "-m", "pyrouter.probe"], test
    return test[4], test[5]


def test_the_stack_is_two_routers_behind_haproxy_prefill_and_decode_on_loopback():
    assert sorted(OURS) == ["engine-decode", "engine-prefill", "haproxy", "router-0", "router-1"]
    for name, service in OURS.items():
        assert service["network_mode"] == "host", name
    for name, service in SWITCHYARD_SERVICES.items():
        assert parsed(service).host == "127.0.0.1", f"{name} must bind loopback only"
    assert {n: parsed(s).role for n, s in ENGINES.items()} == {
        "engine-prefill": "prefill", "engine-decode": "decode"}


def test_routers_reach_each_engine_where_it_listens():
    listening = {f"127.0.0.1:{parsed(s).port}@{parsed(s).role}" for s in ENGINES.values()}
    for service in ROUTERS.values():
        router = parsed(service)
        assert router.command == "router" and router.policy == "pd"
        assert set(router.engine) == listening
    transfer_ports = [s["environment"]["SWITCHYARD_TRANSFER_PORT"] for s in ENGINES.values()]
    assert len(set(transfer_ports)) == len(transfer_ports), "host network: ports must differ"


def test_each_router_names_the_others_as_peers():
    ports = {name: parsed(s).port for name, s in ROUTERS.items()}
    assert len(set(ports.values())) == len(ports) == 2, ports
    for name, service in ROUTERS.items():
        assert sorted(parsed(service).peer) == sorted(
            f"127.0.0.1:{port}" for other, port in ports.items() if other != name)


def haproxy_config() -> tuple[str, dict[str, str]]:
    """deploy/haproxy/haproxy.cfg, and it with the haproxy service's environment substituted."""
    text = open(os.path.join(DEPLOY, "haproxy", "haproxy.cfg"), encoding="utf-8").read()
    env = {k: str(v) for k, v in SERVICES["haproxy"]["environment"].items()}
    assert set(re.findall(r"\$\{(\w+)\}", text)) == set(env), "every variable set, none unused"
    return re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], text), env


def test_haproxy_balances_the_routers_on_their_ready_checks():
    text, _ = haproxy_config()
    lines = [line.split("#")[0].strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    assert 'bind "127.0.0.1:8000"' in lines  # where clients connected before: one entry point
    backend = lines[lines.index("backend routers"):]
    assert "balance roundrobin" in backend
    assert "option httpchk GET /ready" in backend and "http-check expect status 200" in backend
    servers = [line.split() for line in backend if line.startswith("server ")]
    assert sorted(s[1] for s in servers) == sorted(ROUTERS)
    for _, name, address, *options in servers:
        assert address == f'"127.0.0.1:{parsed(ROUTERS[name]).port}"' and "check" in options
    # Nothing ready: the OpenAI error body, from the directory the service mounts.
    (errorfile,) = [line.split() for line in backend if line.startswith("errorfile ")]
    (mount,) = SERVICES["haproxy"]["volumes"]
    source, target = mount.split(":")[:2]
    assert errorfile[1] == "503" and errorfile[2].startswith(target + "/")
    raw = open(os.path.join(DEPLOY, source, errorfile[2][len(target) + 1:]), "rb").read()
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.0 503 ") and b"Content-Type: application/json" in head
    assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
    # The image runs this file: the Dockerfile's haproxy stage points at the mounted one.
    stage = dockerfile_stages(os.path.join(DEPLOY, "Dockerfile"))["haproxy"]
    (cmd,) = [line for line in stage if line.startswith("CMD ")]
    assert yaml.safe_load(cmd[4:]) == ["-f", f"{target}/haproxy.cfg"]
    assert [line.split()[1] for line in stage if line.startswith("USER ")] == ["haproxy"]


def test_haproxy_ports_are_the_compose_variables_routers_use():
    _, env = haproxy_config()
    for index, service in enumerate(sorted(ROUTERS)):
        assert int(env[f"SWITCHYARD_ROUTER_{index}_PORT"]) == parsed(ROUTERS[service]).port
    assert env["SWITCHYARD_ROUTER_PORT"] == "8000"


def test_health_checks_probe_the_ports_the_services_listen_on():
    for name, service in SWITCHYARD_SERVICES.items():
        kind, target = probe_target(service)
        args = parsed(service)
        if args.command == "engine":
            assert (kind, target) == ("grpc", f"127.0.0.1:{args.port}"), name
        else:
            assert (kind, target) == ("http", f"http://127.0.0.1:{args.port}/health")
        # The probe accepts these arguments (a bad one would exit 2 from argparse).
        assert probe_main([kind, target, "--timeout-s", "0.2"]) in (0, 1)


def test_every_env_var_is_read_by_the_code():
    for name, service in SWITCHYARD_SERVICES.items():
        for var in service.get("environment", {}):
            assert env_read_by_code(var), f"{name}: {var} is read by nothing"


def test_policies_are_mounted_where_the_router_loads_them():
    for router in ROUTERS.values():
        (policy_dir,) = flag_value(router["command"], "--policy-dir")
        mounts = {v.split(":")[1]: v.split(":")[0] for v in router["volumes"]}
        assert os.path.normpath(os.path.join(DEPLOY, mounts[policy_dir])) == \
            os.path.join(DEPLOY, "policies")
    assert PolicyDir(os.path.join(DEPLOY, "policies")).load_all() == ["long_prompts_pd"]
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert os.path.exists(os.path.join(DEPLOY, source)), f"{name}: {source}"
            else:
                assert source in COMPOSE["volumes"], f"{name}: {source}"


def test_engine_caches_are_where_the_image_points_the_cache():
    dockerfile = open(os.path.join(DEPLOY, "Dockerfile"), encoding="utf-8").read()
    for service in ENGINES.values():
        (volume,) = service["volumes"]
        assert f"SWITCHYARD_CACHE_DIR={volume.split(':')[1]}" in dockerfile


def test_optional_profiles_only():
    for name, service in SERVICES.items():
        assert (name in OURS) != bool(service.get("profiles")), name
    prometheus = yaml.safe_load(open(os.path.join(DEPLOY, "observability", "prometheus.yml"),
                                     encoding="utf-8"))
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in prometheus["scrape_configs"]}
    assert sorted(jobs["switchyard-router"]) == sorted(
        f"127.0.0.1:{parsed(s).port}" for s in ROUTERS.values())  # each replica, not HAProxy
    assert sorted(jobs["switchyard-engines"]) == sorted(
        f"127.0.0.1:{parsed(s).metrics_port}" for s in ENGINES.values())


# ---- images ----

def dockerfile_stages(path: str) -> dict[str, list[str]]:
    """Stage name -> its instructions (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", open(path, encoding="utf-8").read())
    stages: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            words = line.split()
            current = stages.setdefault(words[-1] if "AS" in (w.upper() for w in words)
                                        else f"stage{len(stages)}", [])
        current.append(line)
    return stages


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cuda"])
def test_images_come_from_the_debian_base_and_registries_only(name):
    stages = dockerfile_stages(os.path.join(DEPLOY, name))
    for stage, lines in stages.items():
        base = lines[0].split()[1]
        assert base.startswith("${") or base in stages, f"{stage} FROM {base}"
        for forbidden in ("rustup", "download.pytorch.org", "curl ", "wget "):
            assert not any(forbidden in line for line in lines), f"{stage}: {forbidden}"


def test_runtime_images_run_as_non_root_with_a_health_check():
    stages = dockerfile_stages(os.path.join(DEPLOY, "Dockerfile"))
    for stage, port_cmd in (("router", ("http", "http://127.0.0.1:8000/health")),
                            ("engine", ("grpc", "127.0.0.1:50051"))):
        lines = stages[stage]
        users = [line.split()[1] for line in lines if line.startswith("USER ")]
        assert users and users[-1] == "switchyard"
        (health,) = [line for line in lines if line.startswith("HEALTHCHECK ")]
        assert f'"pyrouter.probe", "{port_cmd[0]}", "{port_cmd[1]}"' in health
        (cmd,) = [line for line in lines if line.startswith("CMD ")]
        args = build_parser().parse_args(yaml.safe_load(cmd[4:]))
        assert args.command == stage and args.port == int(port_cmd[1].split(":")[-1].split("/")[0])


def read_pins(*names: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for name in names:
        for line in open(os.path.join(DEPLOY, "requirements", name), encoding="utf-8"):
            line = line.split("#")[0].strip()
            if line and not line.startswith("-r"):
                req = Requirement(line)
                (spec,) = req.specifier
                assert spec.operator == "==", f"{name}: {line} is not pinned"
                pins[req.name.lower().replace("_", "-")] = spec.version
    return pins


def test_pins_satisfy_pyproject():
    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))
    engine = read_pins("engine.txt", "torch-cpu.txt", "grammar.txt")
    router = read_pins("router.txt")
    for dep in project["project"]["dependencies"]:
        req = Requirement(dep)
        key = req.name.lower()
        assert key in engine, f"{key} is not pinned for the engine image"
        assert engine[key] in req.specifier, f"engine pins {key}=={engine[key]}, wants {req}"
        if key in router:
            assert router[key] == engine[key], f"router and engine pin {key} differently"
    assert "torch" not in router and not any(k.startswith("nvidia") for k in router)
    build = read_pins("build.txt", "model.txt")
    (maturin,) = [Requirement(r) for r in project["build-system"]["requires"]]
    assert build["maturin"] in maturin.specifier


def test_compose_commands_quote_cleanly():
    for service in SWITCHYARD_SERVICES.values():  # exec form only: no shell between compose and switchyard
        assert isinstance(service["command"], list)
        assert shlex.join(service["command"]).count("$") == 0


@pytest.mark.procs  # renders the kustomize overlays with kubectl
def test_image_tags_follow_the_package_version():
    version = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]["version"]
    makefile = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read()
    assert f"\nDEPLOY_VERSION := {version}\n" in makefile
    for service in OURS.values():
        assert service["image"].endswith(f":{version}")
    cuda = open(os.path.join(DEPLOY, "Dockerfile.cuda"), encoding="utf-8").read()
    assert f"ARG BUILDER_IMAGE=switchyard/builder:{version}\n" in cuda
    for overlay in OVERLAYS:
        for doc in render(overlay):
            for c in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                assert c["image"].endswith(f":{version}"), (overlay, c["image"])


def test_build_context_holds_every_package_the_wheel_ships():
    # .dockerignore is a whitelist: a package missing from it breaks the wheel build in the image.
    maturin = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["tool"]["maturin"]
    allowed = {line.strip().lstrip("!") for line in open(os.path.join(ROOT, ".dockerignore"))
               if line.strip().startswith("!")}
    generated = {"switchyard_rpc"}  # written from proto/ inside the builder stage
    missing = set(maturin["python-packages"]) - generated - allowed
    assert not missing, f".dockerignore leaves out {sorted(missing)}"
