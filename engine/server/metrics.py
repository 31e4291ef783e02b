"""The engine's Prometheus metrics, in vLLM's naming under `switchyard:`, on its own HTTP port
(`--metrics-port`, env SWITCHYARD_METRICS_PORT; off when neither is given). Every series is
labelled `engine` (its id) and `role`. Load and cache gauges and the running counters are read
from the core when scraped; per-request histograms and transfer counters are observed when the
work ends (never per token or per step).
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

_LABELS = ["engine", "role"]
# vLLM's buckets for request phase times (seconds).
_PHASE_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                  60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
_SHORT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                  30.0, 60.0, 120.0)


class _CoreCollector(Collector):  # type: ignore[misc]
    """Gauges and counters the core keeps anyway, read at scrape time (one stats() call)."""

    def __init__(self, core: Any, labels: list[str]) -> None:
        self._core = core
        self._labels = labels

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        core, labels = self._core, self._labels
        stats = core.stats()
        gauges = {
            "switchyard:num_requests_running": ("Requests in the running batch (generations "
                                                "and sends)", stats.running_requests),
            "switchyard:num_requests_waiting": ("Requests waiting to be scheduled",
                                                stats.queued_requests),
            "switchyard:kv_cache_usage_perc": ("KV-cache usage: 1 means every page is in use",
                                               stats.kv_pages_used / max(1, stats.kv_pages_total)),
            "switchyard:kv_reservations": ("KV reservations (PrepRecv) held for transfers",
                                           stats.leases),
            "switchyard:num_queued_prefill_tokens": ("Prefill tokens not computed yet",
                                                     stats.queued_prefill_tokens),
        }
        for name, (doc, value) in gauges.items():
            family = GaugeMetricFamily(name, doc, labels=_LABELS)
            family.add_metric(labels, float(value))
            yield family
        counters = {
            "switchyard:prefix_cache_queries": ("Prompt tokens looked up in the prefix cache",
                                                core.cache.queried_tokens),
            "switchyard:prefix_cache_hits": ("Prompt tokens found in the prefix cache",
                                             core.cache.hit_tokens),
            "switchyard:num_preemptions": ("Requests preempted (recomputed later)",
                                           core.scheduler.num_preemptions),
        }
        for name, (doc, value) in counters.items():
            counter = CounterMetricFamily(name, doc, labels=_LABELS)
            counter.add_metric(labels, float(value))
            yield counter


class EngineMetrics:
    def __init__(self, core: Any, engine_id: str, role: str) -> None:
        self.registry = r = CollectorRegistry()
        self.labels = [engine_id, role]
        r.register(_CoreCollector(core, self.labels))
        self.queue_time = Histogram("switchyard:request_queue_time_seconds",
                                    "Time a request waited before its first step", _LABELS,
                                    buckets=_SHORT_BUCKETS, registry=r).labels(*self.labels)
        self.prefill_time = Histogram("switchyard:request_prefill_time_seconds",
                                      "First step to first token (a send: to the last layer)",
                                      _LABELS, buckets=_PHASE_BUCKETS,
                                      registry=r).labels(*self.labels)
        self.decode_time = Histogram("switchyard:request_decode_time_seconds",
                                     "First token to the request's last token", _LABELS,
                                     buckets=_PHASE_BUCKETS, registry=r).labels(*self.labels)
        self.tokens = Counter("switchyard:engine_tokens", "Tokens this engine processed: "
                              "prompt (computed or cached) and generated",
                              [*_LABELS, "kind"], registry=r)
        self.kv_bytes = Counter("switchyard:kv_transfer_bytes", "KV bytes that crossed between "
                                "engines", [*_LABELS, "direction", "transport"], registry=r)
        self.kv_seconds = Histogram("switchyard:kv_transfer_seconds", "Time of one KV transfer "
                                    "(send: first byte to last acknowledgement; receive: first "
                                    "to last write)", [*_LABELS, "direction", "transport"],
                                    buckets=_SHORT_BUCKETS, registry=r)
        self.errors = Counter("switchyard:engine_errors", "Verb calls that failed, by gRPC "
                              "status", [*_LABELS, "verb", "code"], registry=r)

    def generation_done(self, queue_s: float, prefill_s: float, decode_s: float | None,
                        prompt_tokens: int, cached_tokens: int, output_tokens: int) -> None:
        self.queue_time.observe(queue_s)
        self.prefill_time.observe(prefill_s)
        if decode_s is not None:
            self.decode_time.observe(decode_s)
        self.tokens.labels(*self.labels, "prompt").inc(prompt_tokens)
        self.tokens.labels(*self.labels, "cached").inc(cached_tokens)
        self.tokens.labels(*self.labels, "generated").inc(output_tokens)

    def kv_transfer(self, direction: str, transport: str, nbytes: int, seconds: float) -> None:
        self.kv_bytes.labels(*self.labels, direction, transport).inc(nbytes)
        self.kv_seconds.labels(*self.labels, direction, transport).observe(seconds)

    def error(self, verb: str, code: str) -> None:
        self.errors.labels(*self.labels, verb, code).inc()

    def serve(self, host: str, port: int) -> None:
        """GET http://host:port/metrics from a daemon thread, always in the Prometheus text
        format, as the router's /metrics: prometheus_client's own server answers a Prometheus
        that asks for OpenMetrics with `switchyard:` names escaped to `switchyard_`, so the
        engines' series would not be found under the names the router and dashboards use."""
        registry = self.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path.split("?")[0] not in ("/", "/metrics"):
                    self.send_error(404)
                    return
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # scrapes every few seconds would flood the engine's log

        server = ThreadingHTTPServer((host, port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
