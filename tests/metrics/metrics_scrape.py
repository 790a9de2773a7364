"""Scraping helpers for the metrics tests: find a server's /metrics URL and read it as Prometheus would."""

from __future__ import annotations

import re
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.cluster import ServerProcess

METRICS_URL = re.compile(r", metrics (http://\S+/metrics)")


def metrics_url(server: ServerProcess) -> str:
    found = METRICS_URL.findall((server.work_dir / f"{server.name}.out").read_text())
    assert found, f"no metrics URL on {server.name}'s boot line"
    return found[-1]


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """Every sample as {(name, sorted labels): value}."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items())
