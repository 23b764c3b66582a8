"""Every status the operator writes survives the real API server's CRD: nothing is pruned.

The API server drops, without a word, any status field its CRD's schema does not declare. When
``status.reoptimization`` was missing from the CRD, every repaired job made the operator write it again on
every pass (60-90 passes a second) and post an Event each time, and ``MigrateAtCheckpoint`` never
migrated. The statuses come from the operator's own pure pass over scenarios that together write every
field the plan can write (``tests/k8s/statuscorpus.py``; a unit test keeps that list complete), so a new
field cannot be forgotten in ``crds/``. No operator runs in this module: the statuses are written as they
are and read back.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import CustomObjectsApi
from tests.k8s.statuscorpus import statuses

from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import GROUP, PLURAL, VERSION
from paralleljob.k8s.edge.status.statuscheck import dropped_fields

pytestmark = pytest.mark.e2e


def test_every_status_the_operator_writes_round_trips_through_the_crd(kube: KubeSession, namespace: str) -> None:
    custom: Any = CustomObjectsApi(kube.api)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ParallelJob",
        "metadata": {"name": "roundtrip"},
        "spec": {
            "parallelism": {"tensor": 1, "pipeline": 1, "data": 1},
            "template": {"spec": {"containers": [{"name": "trainer", "image": "trainer:e2e"}]}},
        },
    }
    kube.run(custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body))
    corpus = statuses()
    assert len(corpus) > 10
    problems: list[str] = []
    for status in corpus:
        current = kube.run(custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "roundtrip"))
        # the whole status replaced, as a fresh object would get it
        current["status"] = status
        stored = kube.run(
            custom.replace_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "roundtrip", current)
        )
        problems += [f"{path} (phase {status.get('phase')})" for path in dropped_fields(status, stored["status"])]
        read = kube.run(custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "roundtrip"))
        assert read["status"] == stored["status"]
    assert not problems, "the CRD pruned status fields the operator writes:\n" + "\n".join(sorted(set(problems)))
