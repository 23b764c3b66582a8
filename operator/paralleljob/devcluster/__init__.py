"""Local Kubernetes control plane for the demo and the end-to-end tests (SPEC section 6).

etcd, kube-apiserver and kube-controller-manager are built with Go from the committed wrapper modules under
``deploy/devcluster/``, and kwok fakes the GPU nodes and the pod lifecycle. Everything binds to 127.0.0.1
and lives in a run directory, so ``down`` can stop exactly the processes that ``up`` started.

Entry points: :func:`paralleljob.devcluster.cluster.up` / :func:`~paralleljob.devcluster.cluster.down`
(and the ``paralleljob dev-cluster`` CLI), :mod:`paralleljob.devcluster.chaos` for failure injection.
Importing this package pulls in no Kubernetes client; the modules that need one import it themselves.
"""
