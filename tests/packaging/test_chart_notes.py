"""The install's notes: every Service they tell the user to port-forward to is one the chart makes, under
the README's release name and any other, and the web view is mentioned (how to reach it, or how to turn it
on). The notes once never mentioned it, and docs/dashboard.md named a Service the chart did not make."""

from __future__ import annotations

import re

import pytest
import yaml

from paralleljob.packaging.chart import chart_dir
from paralleljob.packaging.helm import run_helm


def _notes_and_services(helm: dict[str, str], release: str, *sets: str) -> tuple[str, set[str]]:
    common = [release, str(chart_dir()), "--namespace", "paralleljob-system"]
    for value in sets:
        common += ["--set", value]
    out = run_helm(["install", *common, "--dry-run=client"], helm).stdout
    notes = out.split("\nNOTES:\n", 1)[1]
    rendered = run_helm(["template", *common], helm).stdout
    services = {d["metadata"]["name"] for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Service"}
    return notes, services


@pytest.mark.parametrize(("release", "web"), [("paralleljob", "paralleljob-web"), ("pj", "pj-paralleljob-web")])
def test_the_notes_name_the_web_views_service_the_chart_makes(helm: dict[str, str], release: str, web: str) -> None:
    notes, services = _notes_and_services(helm, release, "webView.enabled=true")
    forwards = set(re.findall(r"port-forward svc/(\S+) ", notes))
    assert web in forwards and forwards <= services, (forwards, services)
    assert f"port-forward svc/{web} 8090" in notes and "http://127.0.0.1:8090/" in notes


def test_without_the_web_view_the_notes_say_how_to_turn_it_on(helm: dict[str, str]) -> None:
    notes, services = _notes_and_services(helm, "paralleljob")
    assert "webView.enabled=true" in notes
    assert set(re.findall(r"port-forward svc/(\S+) ", notes)) == {"paralleljob-metrics"} <= services
