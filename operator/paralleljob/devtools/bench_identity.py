"""The identity a benchmark's operator acts as when it is measured beside Kueue.

The dev cluster's admin is in ``system:masters``, a group API Priority and Fairness exempts from queueing,
while Kueue's controller acts as a plain user whose requests queue in the ``global-default`` priority level.
An operator run as admin would skip the queues its rival waits in, so a side-by-side benchmark starts it
with the dev cluster's ``paralleljob-operator`` user instead, bound here to ``cluster-admin``: RBAC grants it
everything (what the chart's narrower role allows is the Helm e2e's concern, not a benchmark's) while APF
classifies it like any other user, into the same priority level as Kueue.
"""

from __future__ import annotations

from pathlib import Path

from paralleljob.devcluster.certs import OPERATOR_USER
from paralleljob.devcluster.cluster import DevCluster
from paralleljob.k8s.runtime.api import ApiError, Kube

BINDING_NAME = "paralleljob-bench-operator"
BINDINGS_PATH = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
ALREADY_EXISTS = 409


async def queued_operator_kubeconfig(kube: Kube, cluster: DevCluster) -> Path:
    """Bind ``cluster-admin`` to the operator's user (idempotent) and return its kubeconfig.

    ``kube`` must be allowed to write RBAC (the admin's client is). A cluster brought up before the user
    existed has no such kubeconfig: that is an error, not a silent fall back to the exempt admin."""
    path = cluster.operator_kubeconfig
    if not path.exists():
        raise FileNotFoundError(f"{path}: the dev cluster predates the operator's user; bring it up again")
    body = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": BINDING_NAME},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}],
    }
    try:
        await kube.request("POST", BINDINGS_PATH, body)
    except ApiError as error:
        if error.status != ALREADY_EXISTS:
            raise
    return path
