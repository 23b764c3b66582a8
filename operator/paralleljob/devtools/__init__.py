"""Developer tools that are not part of the shipped operator: the operator benchmarks
(``paralleljob bench operator|dra|worker-crash|scale``, ``paralleljob bench-operator``), the live demo on
the local control plane (``paralleljob demo-cluster``), the kube-scheduler baseline they compare with, and
``paralleljob operator`` as a subprocess (:mod:`.operatorproc`, also used by the chaos run and the e2e tests).
They drive the dev cluster (``paralleljob.devcluster``) and the operator from outside; the operator
(``paralleljob.k8s``) never imports them.
"""
