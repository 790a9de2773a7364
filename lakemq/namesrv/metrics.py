"""NamesrvMetrics: the NameServer's Prometheus metrics, in a registry of its own.

Counters and the latency histogram are recorded by :class:`NamesrvProcessor` per request;
the live-broker and topic gauges are read from the route tables when Prometheus scrapes
(``len()`` of dicts the loop owns, safe from the HTTP thread). docs/METRICS.md lists them.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.namesrv.route_info import RouteInfoManager

__all__ = ["NamesrvMetrics"]

_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)


class _RouteCollector(Collector):
    def __init__(self, routes: RouteInfoManager) -> None:
        self._routes = routes

    def collect(self) -> Iterator[Metric]:
        r = self._routes
        for name, text, value in (
            ("lakemq_namesrv_live_brokers", "Brokers registered and not expired.", len(r.broker_live_table)),
            ("lakemq_namesrv_topics", "Topics with a route.", len(r.topic_queue_table)),
            ("lakemq_namesrv_clusters", "Clusters with at least one broker.", len(r.cluster_addr_table)),
        ):
            yield GaugeMetricFamily(name, text, value=value)


class NamesrvMetrics:
    def __init__(self, routes: RouteInfoManager, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.registrations = Counter(
            "lakemq_namesrv_registrations", "REGISTER_BROKER requests, by response code.", ["result"], registry=r)
        self.route_requests = Counter(
            "lakemq_namesrv_route_requests",
            "GET_ROUTEINFO_BY_TOPIC requests, by result (found, not_found).", ["result"], registry=r)
        self.request_latency_seconds = Histogram(
            "lakemq_namesrv_request_latency_seconds", "Time to answer one request, by request code.",
            ["code"], buckets=_BUCKETS, registry=r)
        r.register(_RouteCollector(routes))

    def record(self, code: int, response_code: int, seconds: float) -> None:
        """Count one answered request."""
        try:
            name = RequestCode(code).name
        except ValueError:
            name = "unknown"
        self.request_latency_seconds.labels(name).observe(seconds)
        if code == RequestCode.REGISTER_BROKER:
            try:
                result = ResponseCode(response_code).name
            except ValueError:
                result = str(response_code)
            self.registrations.labels(result).inc()
        elif code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            self.route_requests.labels("found" if response_code == ResponseCode.SUCCESS else "not_found").inc()
