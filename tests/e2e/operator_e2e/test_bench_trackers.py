"""The benchmarks time the operator by their own watch of the API (devtools/tracker.py), so that watch must
see what the API server holds: every pod bound where the API says, a job admitted and then Succeeded, and
nothing left counted as waiting. A tracker that missed events would make every benchmark figure wrong."""

from __future__ import annotations

import asyncio

import pytest
from pjhelpers import Jobs

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.kwok import COMPLETE_AFTER_ANNOTATION
from paralleljob.devtools.bench_jobs import JobTracker
from paralleljob.devtools.bench_kit import PodTracker
from paralleljob.k8s.runtime.api import Kube, job_path, pod_path

pytestmark = pytest.mark.e2e


def test_the_benchmarks_trackers_see_a_job_bound_and_finish_as_the_api_holds_it(
    pjs: Jobs, namespace: str, dev_cluster: DevCluster
) -> None:
    async def scenario() -> None:
        kube = await Kube.connect(str(dev_cluster.kubeconfig))
        try:
            async with PodTracker(kube, namespace) as pods, JobTracker(kube, namespace) as jobs:
                body = Jobs.manifest("tracked", 1, 1, 2)
                body["spec"]["template"]["metadata"] = {"annotations": {COMPLETE_AFTER_ANNOTATION: "2s"}}
                await kube.request("POST", job_path(namespace), body)
                await pods.wait(lambda: len(pods.bound("tracked")) == 2, 60)
                listed, _ = await kube.list(pod_path(namespace))
                on_record = {p["metadata"]["uid"]: p["spec"].get("nodeName") for p in listed}
                assert {uid: pods.pods[uid]["node"] for uid in pods.bound("tracked")} == {
                    uid: node for uid, node in on_record.items() if node
                }
                await jobs.wait(lambda: "tracked" in jobs.done_at, 60)
                assert jobs.admitted_at["tracked"] <= jobs.done_at["tracked"]
                assert jobs.phase["tracked"] == "Succeeded" and jobs.waiting() == 0
                assert not jobs.gone_unseen
        finally:
            await kube.close()

    asyncio.run(scenario())
