"""Time one reconcile pass (``k8s.decide.decide``) on a synthetic cluster, for the cost of per-job node filters.

    python -m tests.bench.decide_pass NODES JOBS PODS [CPU]

NODES 8-GPU nodes, PODS bound non-GPU pods requesting 8 CPUs each spread over them, JOBS pending TP8xPP2xDP2
ParallelJobs whose workers request CPU cores each (none when CPU is left out). Every pass admits the jobs
that fit; the median of 5 passes is printed. Not collected by pytest: a measurement, not a test.
"""

from __future__ import annotations

import statistics
import sys
import time

from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.pods import parse_pod
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.plan.decide import Observed, decide
from tests.k8s.factories import foreign_pod, node, paralleljob


def main(argv: list[str]) -> None:
    n_nodes, n_jobs, n_pods = (int(a) for a in argv[:3])
    cpu = argv[3] if len(argv) > 3 else ""
    config = TopologyConfig()
    nodes = [
        parse_node(node(f"n{i:05d}", leaf=f"leaf-{i // 32:03d}", spine=f"spine-{i // 512:02d}"), config)
        for i in range(n_nodes)
    ]
    pods = []
    for i in range(n_pods):
        body = foreign_pod(f"web-{i}", f"n{i % n_nodes:05d}", 0)
        body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "8"}}
        pods.append(parse_pod(body))
    extra = {}
    if cpu:
        container = {"name": "t", "image": "x", "resources": {"requests": {"cpu": cpu}}}
        extra = {"template": {"spec": {"containers": [container]}}}
    jobs = [
        parse_job(
            paralleljob(
                f"j{j:04d}", 8, 2, 2, created=f"2024-01-01T00:{j // 60 % 60:02d}:{j % 60:02d}Z", extra_spec=extra
            )
        )
        for j in range(n_jobs)
    ]
    times = []
    for _ in range(5):
        started = time.perf_counter()
        decide(Observed(jobs=jobs, pods=pods, nodes=nodes, now="2024-01-02T00:00:00Z"), config)
        times.append(time.perf_counter() - started)
    print(
        f"nodes={n_nodes} jobs={n_jobs} pods={n_pods} cpu={cpu or '-'}: median {statistics.median(times) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
