"""deploy/k8s/overlays/ha: the router scaled out (issue 25, deliver 7). Beyond what every overlay
passes (test_k8s_manifests.py renders and schema-checks `ha` too): the replicas find each other
through a headless Service named by --peers-dns, an autoscaler keeps 2 or more of them on a
metric the router really exports (through the prometheus-adapter rule shipped beside it), the
disruption budget always leaves one replica serving, and replicas spread over nodes."""
from __future__ import annotations

import os
import re
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from deploy_refs import DEPLOY, by_kind, render, source_text  # noqa: E402

from pyrouter.cli import DEFAULT_PEER_PORT_OFFSET, build_parser  # noqa: E402
from pyrouter.replicas.peers import router_peers  # noqa: E402

pytestmark = pytest.mark.procs  # renders the overlay with kubectl

HA = os.path.join(DEPLOY, "k8s", "overlays", "ha")


def _router(docs: tuple) -> dict:  # type: ignore[type-arg]
    return by_kind(docs, "Deployment")["router"]


def _labels(workload: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return workload["spec"]["template"]["metadata"]["labels"]


def _adapter_rule() -> dict:  # type: ignore[type-arg]
    values = yaml.safe_load(open(os.path.join(HA, "prometheus-adapter-values.yaml"),
                                 encoding="utf-8"))
    assert values["rules"]["default"] is False  # only our rule: no surprise metrics
    (rule,) = values["rules"]["custom"]
    return rule


def test_replicas_find_each_other_through_a_headless_service():
    docs = render("ha")
    router = _router(docs)
    container = router["spec"]["template"]["spec"]["containers"][0]
    peers = router_peers(build_parser().parse_args(container["args"]))
    assert peers.dns is not None and not peers.addresses
    name, port = peers.dns.rsplit(":", 1)
    service = by_kind(docs, "Service")[name]
    spec = service["spec"]
    assert spec["clusterIP"] == "None", "one DNS record per replica, not a virtual IP"
    assert spec["publishNotReadyAddresses"] is True  # replicas starting together meet
    assert all(_labels(router).get(k) == v for k, v in spec["selector"].items())
    (svc_port,) = spec["ports"]
    (http,) = [p for p in container["ports"] if p["name"] == "http"]
    assert svc_port["port"] == int(port) == http["containerPort"]
    assert svc_port["targetPort"] == http["name"]


def test_an_autoscaler_keeps_two_or_more_replicas():
    docs = render("ha")
    router = _router(docs)
    (hpa,) = by_kind(docs, "HorizontalPodAutoscaler").values()
    spec = hpa["spec"]
    target = spec["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", router["metadata"]["name"])
    assert 2 <= spec["minReplicas"] < spec["maxReplicas"]
    assert "replicas" not in router["spec"], "the autoscaler owns the count"
    # At most one replica down for a disruption, so at least one of the 2+ always serves.
    pdbs = [p for p in by_kind(docs, "PodDisruptionBudget").values()
            if all(_labels(router).get(k) == v
                   for k, v in p["spec"]["selector"]["matchLabels"].items())]
    (pdb,) = pdbs
    assert pdb["spec"]["maxUnavailable"] < spec["minReplicas"]
    (spread,) = router["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"] == {
        k: v for k, v in _labels(router).items() if k in spread["labelSelector"]["matchLabels"]}


def test_the_autoscaled_metric_is_one_the_router_exports_via_the_adapter_rule():
    (hpa,) = by_kind(render("ha"), "HorizontalPodAutoscaler").values()
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"  # averaged per replica
    rule = _adapter_rule()
    assert metric["pods"]["metric"]["name"] == rule["name"]["as"]
    assert ":" not in rule["name"]["as"]  # the custom metrics API takes no ':' in names
    series = re.match(r"([a-z_:]+)\{", rule["seriesQuery"])
    assert series, rule["seriesQuery"]
    exported = series.group(1)
    assert re.fullmatch(rule["name"]["matches"], exported)
    assert f'"{exported}"' in source_text(), f"the router exports no {exported}"
    # Per pod: the series' namespace and pod labels are the HPA's objects.
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"},
                                              "pod": {"resource": "pod"}}
    for placeholder in ("<<.Series>>", "<<.LabelMatchers>>", "<<.GroupBy>>"):
        assert placeholder in rule["metricsQuery"]


def test_only_router_pods_reach_the_peer_port():
    docs = render("ha")
    router = _router(docs)
    container = router["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["args"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": args.port, "peer": args.peer_port}
    # Each replica dials its peers at their --port plus its own offset: the same everywhere.
    assert args.peer_port == args.port + DEFAULT_PEER_PORT_OFFSET
    spec = by_kind(docs, "NetworkPolicy")["router-ports"]["spec"]
    assert all(_labels(router).get(k) == v for k, v in spec["podSelector"]["matchLabels"].items())
    assert spec["policyTypes"] == ["Ingress"]
    open_rule, peer_rule = spec["ingress"]
    assert "from" not in open_rule and [p["port"] for p in open_rule["ports"]] == [args.port]
    assert [p["port"] for p in peer_rule["ports"]] == [args.peer_port]
    (peer,) = peer_rule["from"]
    assert set(peer) == {"podSelector"}
    assert all(_labels(router).get(k) == v for k, v in peer["podSelector"]["matchLabels"].items())
