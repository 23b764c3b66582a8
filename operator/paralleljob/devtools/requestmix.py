"""Which API requests a benchmark run cost, and whose: counters read from the API server's own ``/metrics``
(``apiserver_request_total``: every client, the controllers and kwok included) and from the operator's
(``paralleljob_api_requests_total``), before and after a run, and put per job, largest first.

A drain that the API server caps is read from here: which requests it served, and which of them the operator
made, says what a change to the operator can still remove."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

Counts = dict[tuple[str, ...], float]

APISERVER_FAMILY = "apiserver_request"  # the parser drops the counter's "_total"
APISERVER_KEYS = ("verb", "resource", "subresource")
OPERATOR_FAMILY = "paralleljob_api_requests"
OPERATOR_KEYS = ("verb", "resource")


def counter_by(text: str, family: str, keys: Iterable[str]) -> Counts:
    """The ``family`` counter's samples in ``text`` summed by the label values ``keys`` (other labels, the
    HTTP code say, summed over)."""
    wanted = tuple(keys)
    out: Counts = {}
    for metric in text_string_to_metric_families(text):
        if metric.name != family:
            continue
        for sample in metric.samples:
            if not sample.name.endswith("_total"):
                continue  # a counter's _created sample
            key = tuple(sample.labels.get(k, "") for k in wanted)
            out[key] = out.get(key, 0.0) + sample.value
    return out


def apiserver_metrics(kubeconfig: Path) -> str:
    """The API server's ``/metrics`` text, through kubectl with the cluster's admin kubeconfig."""
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "--raw", "/metrics"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def per_job(before: Counts, after: Counts, jobs: int, top: int = 12) -> dict[str, float]:
    """What each key grew by between the two reads, divided by ``jobs``, the ``top`` largest (keys joined
    with spaces, empty labels left out), and their sum over every key as ``"all"``."""
    grown = {key: after[key] - before.get(key, 0.0) for key in after}
    grown = {key: value for key, value in grown.items() if value > 0}
    largest = sorted(grown.items(), key=lambda item: (-item[1], item[0]))[:top]
    out = {" ".join(part for part in key if part): round(value / jobs, 2) for key, value in largest}
    out["all"] = round(sum(grown.values()) / jobs, 2)
    return out
