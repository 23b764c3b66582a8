"""An optional kind the API server does not serve is a cluster without that feature, not a fault: one INFO line
that says what is then unavailable, however often it is tried again (every operator start on a cluster
without the gang API or DeviceTaintRules logged three 404 WARNINGs). A refusal (403) still warns: the role
lacks verbs the chart should have granted."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest

from paralleljob.k8s.runtime import reflector as reflector_module
from paralleljob.k8s.runtime.api import ApiError
from paralleljob.k8s.runtime.reflector import Receiver, Reflector, Watched
from tests.k8s.test_reflector import ScriptedKube

PATH = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
WITHOUT = "device taints are read from the ResourceSlices alone"


def _run_absent(status: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> ScriptedKube:
    monkeypatch.setattr(reflector_module, "ABSENT_RETRY_SECONDS", 0.01)  # several tries in a short test
    kube = ScriptedKube([ApiError(status, "the server could not find the requested resource")])
    watched = Watched(PATH, optional=True, unavailable=WITHOUT)
    reflector = Reflector(cast(Any, kube), watched, Receiver(lambda i, v: None, lambda k, b: None))

    async def scenario() -> None:
        task = asyncio.create_task(reflector.run())
        deadline = asyncio.get_running_loop().time() + 30
        while kube.listed < 3 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        task.cancel()

    with caplog.at_level(logging.DEBUG, logger="paralleljob.k8s"):
        asyncio.run(scenario())
    assert kube.listed >= 3 and reflector.absent
    return kube


def test_an_api_the_server_does_not_serve_is_said_once_at_info_with_what_is_unavailable(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_absent(404, caplog, monkeypatch)
    about = [r for r in caplog.records if PATH in r.getMessage()]
    assert [r.levelno for r in about] == [logging.INFO], [(r.levelname, r.getMessage()) for r in about]
    assert "not served" in about[0].getMessage() and WITHOUT in about[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_refused_optional_kind_still_warns_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run_absent(403, caplog, monkeypatch)
    about = [r for r in caplog.records if PATH in r.getMessage()]
    assert [r.levelno for r in about] == [logging.WARNING]
    assert WITHOUT in about[0].getMessage()
