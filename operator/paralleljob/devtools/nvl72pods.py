"""``python -m paralleljob.devtools.nvl72pods``: a job's whole-tray worker pods on GB200 NVL72, as
``kubectl get pods -o json`` would list them, for ``deploy/examples/train/run_local.py`` (docs/nvl72.md).

It places the job with the core's NVLink placer on an empty cluster of NVL72 racks, derives the tray pods
(core/nvl72/traypods) and writes each pod's name, node and environment (k8s/edge/render/trayenv), so that one
``torchrun train.py`` per tray, run by hand on CPU with gloo, checks that the framework's TP/PP/DP groups
are the placer's.
"""

from __future__ import annotations

import argparse
import json
import sys

from paralleljob.core import ClusterState, JobSpec, cost_model
from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.nvl72.traypods import tray_pods
from paralleljob.core.rankorder import RankOrder
from paralleljob.k8s.edge.render.trayenv import TrayJob, tray_env, tray_pod_name


def pods_json(name: str, tp: int, pp: int, dp: int, racks: int, order: RankOrder) -> dict[str, object]:
    state = ClusterState(nvl72_topology(racks))
    placement = NVLinkPlacer(state, rank_order=order).place(JobSpec(name, tp, pp, dp, 10.0), cost_model("megatron"))
    topo = state.topology
    pods = tray_pods(topo, placement.groups, tp, pp, dp, order)
    items = []
    for pod in pods:
        env = tray_env(TrayJob(name, "default", tp, pp, dp, order), pods, pod)
        items.append(
            {
                "metadata": {"name": tray_pod_name(name, pod)},
                "spec": {"nodeName": topo.node_names[pod.node], "containers": [{"name": "worker", "env": env}]},
            }
        )
    return {"kind": "List", "items": items}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="llm")
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--pp", type=int, default=2)
    parser.add_argument("--dp", type=int, default=2)
    parser.add_argument("--racks", type=int, default=2)
    parser.add_argument("--rank-order", default="tp-dp-pp")
    args = parser.parse_args()
    order = RankOrder.parse(args.rank_order)
    json.dump(pods_json(args.name, args.tp, args.pp, args.dp, args.racks, order), sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
