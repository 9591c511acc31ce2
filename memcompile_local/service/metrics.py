"""Prometheus metrics of one server process (``GET /metrics``), on ``prometheus_client``.

Request counts and latencies are counted by the HTTP middleware; build-queue depth and model
tokens are read from the store when scraped, so they are the same whichever process answers.
"""

from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 10.0)


class _StoreCollector:
    """Reads queue depth and token totals at scrape time through the given callables."""

    def __init__(self, queue_depth: Callable[[], dict], token_totals: Callable[[], dict]):
        self._queue_depth = queue_depth
        self._token_totals = token_totals

    def collect(self):
        depth = self._queue_depth()
        g = GaugeMetricFamily("memcompile_build_queue_turns", "Turns waiting for a background build")
        g.add_metric([], depth["turns"])
        yield g
        g = GaugeMetricFamily("memcompile_build_queue_namespaces", "Memories waiting for a background build")
        g.add_metric([], depth["namespaces"])
        yield g
        c = CounterMetricFamily("memcompile_model_tokens", "Model tokens in the store's request cache",
                                labels=["stage", "kind"])
        for stage, t in sorted(self._token_totals().items()):
            c.add_metric([stage, "prompt"], t["prompt"])
            c.add_metric([stage, "completion"], t["completion"])
        yield c


class _ViewCacheCollector:
    """The view cache's size and evictions, read at scrape time."""

    def __init__(self, views):
        self._views = views

    def collect(self):
        g = GaugeMetricFamily("memcompile_views_held", "Users whose memory is held loaded")
        g.add_metric([], len(self._views))
        yield g
        g = GaugeMetricFamily("memcompile_view_bytes", "Estimated bytes of the memories held loaded")
        g.add_metric([], self._views.held_bytes)
        yield g
        c = CounterMetricFamily("memcompile_view_evictions", "Users let go by the view cache to stay within its bounds")
        c.add_metric([], self._views.evictions)
        yield c


class Metrics:
    """The process's registry: ``observe`` one request; ``render`` the exposition text."""

    def __init__(self, queue_depth: Callable[[], dict], token_totals: Callable[[], dict], views=None):
        self.registry = CollectorRegistry()
        self.requests = Counter("memcompile_requests", "HTTP requests answered",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("memcompile_request_seconds", "HTTP request latency",
                                 ["method", "route"], buckets=_BUCKETS, registry=self.registry)
        self.builds = Counter("memcompile_builds", "Background builds run", ["outcome"], registry=self.registry)
        self.registry.register(_StoreCollector(queue_depth, token_totals))
        if views is not None:
            self.registry.register(_ViewCacheCollector(views))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
