"""The benchmark's request mix: counters read from Prometheus text as the client library writes it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

from paralleljob.devtools import requestmix


def exposition(counts: dict[tuple[str, str, str, str], int]) -> str:
    registry = CollectorRegistry()
    counter = Counter(
        "apiserver_request_total", "requests", ["verb", "resource", "subresource", "code"], registry=registry
    )
    for labels, value in counts.items():
        counter.labels(*labels).inc(value)
    return generate_latest(registry).decode()


def test_counter_summed_over_codes_and_created_samples_ignored() -> None:
    text = exposition(
        {("POST", "pods", "", "201"): 7, ("POST", "pods", "", "409"): 2, ("PUT", "x", "status", "200"): 1}
    )
    counts = requestmix.counter_by(text, requestmix.APISERVER_FAMILY, requestmix.APISERVER_KEYS)
    assert counts == {("POST", "pods", ""): 9.0, ("PUT", "x", "status"): 1.0}


def test_per_job_is_the_growth_largest_first_with_the_sum() -> None:
    before = {("POST", "pods", ""): 10.0, ("GET", "nodes", ""): 5.0}
    after = {("POST", "pods", ""): 30.0, ("GET", "nodes", ""): 5.0, ("PUT", "jobs", "status"): 50.0}
    out = requestmix.per_job(before, after, jobs=10, top=1)
    assert out == {"PUT jobs status": 5.0, "all": 7.0}
