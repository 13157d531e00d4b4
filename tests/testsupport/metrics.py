"""Scraping a broker's `/metrics` the way Prometheus does, parsed with `prometheus_client`'s
own parser: samples keyed by name and labels."""

from __future__ import annotations

import base64
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(
    port: int, credentials: tuple[str, str] | None = None, accept: str | None = None
) -> tuple[str, str]:
    """The body and Content-Type of GET /metrics on the HTTP listener at `port`."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if credentials is not None:
        token = base64.b64encode(":".join(credentials).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    if accept is not None:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode("utf-8"), response.headers["Content-Type"]


def samples(port: int, credentials: tuple[str, str] | None = None) -> Samples:
    text, _ = scrape(port, credentials)
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    """The sample `name` with exactly `labels`; KeyError when there is none."""
    return found[(name, tuple(sorted(labels.items())))]
