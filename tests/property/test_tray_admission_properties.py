"""The operator on random mixed clusters (NVL72-like cliques of 4-GPU trays beside HGX nodes of 8): random
jobs arrive, run, lose trays and are deleted, through the real reconcile pass (tests/k8s/harness). After
every pass: no GPU is bound to two pods; a tray record's pods are whole trays, each TP group inside one
clique, and a tray that holds a whole-tray pod holds no other pod (so no tray is in two ComputeDomains);
while every clique has several trays, a job with a TP group larger than every node is never refused as
larger than a node."""

from __future__ import annotations

from collections import Counter

from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import record_from_status, record_groups
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster

SHAPES = [(8, 1, 1), (8, 2, 1), (8, 1, 2), (16, 1, 1), (4, 1, 2), (4, 1, 1), (8, 2, 2)]


def _cluster(racks: int, trays: int, hgx: int) -> FakeCluster:
    nodes = [
        node(f"r{r}-t{t:02d}", 4, leaf=f"leaf-r{r}", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: f"uuid.{r}"})
        for r in range(racks)
        for t in range(trays)
    ]
    nodes += [node(f"hgx-{h}", 8, leaf="leaf-hgx") for h in range(hgx)]
    return FakeCluster(nodes)


def _check(fc: FakeCluster, cliques: dict[str, str | None]) -> None:
    used: Counter[tuple[str, int]] = Counter()
    pods_on: dict[str, set[str]] = {}
    for pod in fc.pods.values():
        where = pod["spec"].get("nodeName")
        if not where or pod["status"]["phase"] in ("Succeeded", "Failed"):
            continue
        pods_on.setdefault(where, set()).add(pod["metadata"]["name"])
        for i in pod["metadata"]["annotations"]["paralleljob.dev/gpu-indices"].split(","):
            used[(where, int(i))] += 1
    assert all(c == 1 for c in used.values()), f"a GPU is used twice: {used}"
    live: Counter[str | None] = Counter(cliques.get(name) for name in fc.nodes)
    cliques_whole = all(live[c] >= 2 for c in set(cliques.values()) if c is not None)
    for key, body in fc.jobs.items():
        status = body.get("status") or {}
        for condition in status.get("conditions", []):
            # (a clique down to one live tray is no multi-node NVLink domain: then the node is the limit)
            assert not cliques_whole or "largest node" not in condition["message"], (key, condition)
        record = record_from_status(status) if status.get("phase") in ("Placing", "Running", "Recovering") else None
        if record is None or not record.trays:
            continue
        event("tray record")
        for group in record_groups(record):
            assert len({cliques.get(gpu.split("/")[0]) for gpu in group}) == 1, (key, group)
        for tray in record.trays:
            assert tray.gpu_indices == (0, 1, 2, 3)
            assert pods_on.get(tray.node, {tray.name}) <= {tray.name}, (tray, pods_on.get(tray.node))


# Found by Hypothesis: room-making for j4 (32 GPUs: two whole cliques) moved j3, a TP8 over two trays, onto the
# HGX node j0's deletion freed, and its record kept one "tray" pod of 8 GPUs on a node outside every clique.
TRAY_JOB_MOVED_ONTO_HGX = {"racks": 3, "trays": 4, "hgx": 1, "steps": [("add", 0)] * 4 + [("add", 20), ("delete", 0)]}


@settings(max_examples=80, deadline=None)
@example(**TRAY_JOB_MOVED_ONTO_HGX)
@given(
    racks=st.integers(1, 3),
    trays=st.integers(2, 6),
    hgx=st.integers(0, 2),
    steps=st.lists(
        st.tuples(st.sampled_from(["add", "add", "add", "delete", "lose"]), st.integers(0, 50)), min_size=1, max_size=12
    ),
)
def test_whole_trays_stay_whole_and_no_gpu_is_used_twice(
    racks: int, trays: int, hgx: int, steps: list[tuple[str, int]]
) -> None:
    fc = _cluster(racks, trays, hgx)
    cliques = {name: (n["metadata"]["labels"].get(cd.CLIQUE_LABEL)) for name, n in fc.nodes.items()}
    made = 0
    for action, pick in steps:
        if action == "add":
            tp, pp, dp = SHAPES[pick % len(SHAPES)]
            fc.add_job(paralleljob(f"j{made}", tp, pp, dp, memory=10.0))
            made += 1
        elif action == "delete" and fc.jobs:
            fc.jobs.pop(sorted(fc.jobs)[pick % len(fc.jobs)])
        elif action == "lose":
            names = sorted(n for n in fc.nodes if cliques.get(n))
            if len(names) > 1:
                del fc.nodes[names[pick % len(names)]]
        fc.step()
        _check(fc, cliques)
        fc.step()
        _check(fc, cliques)
