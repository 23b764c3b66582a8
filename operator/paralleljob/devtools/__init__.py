"""Developer tools that are not part of the shipped operator: the operator benchmarks
(``paralleljob bench operator|dra|worker-crash|scale``, ``paralleljob bench-operator``), the live demo on
the local control plane (``paralleljob demo-cluster``) and the kube-scheduler baseline they compare with.
They drive the dev cluster (``paralleljob.devcluster``) and the operator from outside; the operator
(``paralleljob.k8s``) never imports them.
"""
