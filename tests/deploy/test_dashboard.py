"""The Grafana dashboard (deploy/observability/grafana-dashboard.json) queries only metrics that
Switchyard exports — the router's and the engines' registries, read as Prometheus would — and
docs/observability.md names every one of them."""
from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace

from deploy_refs import DEPLOY, ROOT

from engine.core.stats import EngineStats
from engine.server.launcher import free_port
from engine.server.metrics import EngineMetrics
from pyrouter.metrics.router_metrics import RouterMetrics

_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count",
                                                              "_created"), "gauge": ("",)}
_METRIC = re.compile(r"switchyard:[A-Za-z0-9_:]+")


def _engine_core() -> SimpleNamespace:
    stats = EngineStats("engine-0", "prefill", 0, 0, 0, 0, 1, 10, 0)
    return SimpleNamespace(stats=lambda: stats,
                           cache=SimpleNamespace(queried_tokens=0, hit_tokens=0),
                           scheduler=SimpleNamespace(num_preemptions=0))


def exported() -> dict[str, str]:
    """Every sample name a scrape of the router or an engine can contain -> its family."""
    names: dict[str, str] = {}
    for registry in (RouterMetrics().registry,
                     EngineMetrics(_engine_core(), "engine-0", "prefill").registry):
        for family in registry.collect():
            for suffix in _SUFFIXES[family.type]:
                names[family.name + suffix] = family.name
    return names


def _queries(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k in ("expr", "query") and isinstance(v, str)]
        return found + [q for v in node.values() for q in _queries(v)]
    if isinstance(node, list):
        return [q for v in node for q in _queries(v)]
    return []


def test_dashboard_names_only_exported_metrics():
    with open(os.path.join(DEPLOY, "observability", "grafana-dashboard.json"),
              encoding="utf-8") as f:
        dashboard = json.load(f)
    queries = _queries(dashboard)
    assert len(queries) >= 20
    names = exported()
    used = {m for q in queries for m in _METRIC.findall(q)}
    assert used, "the dashboard queries no switchyard metric"
    missing = sorted(used - set(names))
    assert not missing, f"the dashboard names metrics nobody exports: {missing}"
    # And it shows each family at least once (a metric nobody looks at is a gap in the board).
    unused = sorted(set(names.values()) - {names[m] for m in used})
    assert not unused, f"exported but not on the dashboard: {unused}"


def test_issue_names_are_exported_and_documented():
    names = exported()
    for name in ("switchyard:time_to_first_token_seconds_bucket",
                 "switchyard:time_per_output_token_seconds_bucket",
                 "switchyard:inter_token_latency_seconds_bucket",
                 "switchyard:e2e_request_latency_seconds_bucket",
                 "switchyard:num_requests_running", "switchyard:num_requests_waiting",
                 "switchyard:kv_cache_usage_perc", "switchyard:prefix_cache_hits_total",
                 "switchyard:prefix_cache_queries_total", "switchyard:kv_transfer_bytes_total",
                 "switchyard:kv_transfer_seconds_bucket", "switchyard:pattern_selections_total",
                 "switchyard:policy_switches_total", "switchyard:request_errors_total"):
        assert name in names, name
    with open(os.path.join(ROOT, "docs", "observability.md"), encoding="utf-8") as f:
        doc = f.read()
    undocumented = sorted(f for f in set(names.values()) if f"`{f}" not in doc)
    assert not undocumented, f"docs/observability.md does not list {undocumented}"


def test_engine_metrics_port_keeps_the_names_when_prometheus_asks_for_openmetrics():
    # Prometheus sends an OpenMetrics Accept header; the series must still be `switchyard:...`,
    # the names the dashboard and docs use (prometheus_client's own server escapes them).
    import urllib.request

    port = free_port()
    EngineMetrics(_engine_core(), "engine-0", "prefill").serve("127.0.0.1", port)
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={
        "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode()
        assert resp.headers["Content-Type"].startswith("text/plain")
    assert "switchyard:num_requests_running{" in text
    assert "switchyard_num_requests_running" not in text
