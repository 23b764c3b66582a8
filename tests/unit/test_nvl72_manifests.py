"""ComputeDomain manifests (k8s/edge/render/computedomain) and the dev cluster's NVL72 trays (devcluster/nvl72), pure:
the shapes the real API server then accepts are checked in tests/e2e/nvl72_e2e."""

from __future__ import annotations

from paralleljob.core.rankorder import RankOrder
from paralleljob.devcluster import nvl72
from paralleljob.devcluster.nodes import LEAF_LABEL, NodeShape, gpu_node_manifest
from paralleljob.k8s.edge.render import computedomain as cd


def test_a_compute_domain_is_owned_by_its_job_and_names_its_claim_template():
    owner = {"apiVersion": "paralleljob.dev/v1", "kind": "ParallelJob", "name": "llm", "uid": "u1", "controller": True}
    name = cd.compute_domain_name("llm", "abc.3")
    domain = cd.compute_domain_manifest("ns", name, "abc.3", owner, {"app": "x"})
    assert domain["apiVersion"] == "resource.nvidia.com/v1beta1" and domain["kind"] == "ComputeDomain"
    assert domain["metadata"]["name"] == name and domain["metadata"]["ownerReferences"] == [owner]
    assert domain["spec"] == {
        "numNodes": 0,
        "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}, "allocationMode": "Single"},
    }
    parsed = cd.parse_domain({**domain, "metadata": {**domain["metadata"], "uid": "d1"}})
    assert (parsed.name, parsed.uid, parsed.clique, parsed.owner_uid) == (name, "d1", "abc.3", "u1")
    assert not parsed.deleting
    assert domain["metadata"]["annotations"][cd.CLIQUE_ANNOTATION] == "abc.3"


def test_one_domain_per_clique_named_by_the_clique_not_its_order():
    domains = cd.domains_for("j", ["b.1", "b.1", "a.0", "b.1", "a.0"])
    assert list(domains) == ["b.1", "a.0"] and len(set(domains.values())) == 2
    # a placement that meets the cliques in another order (a re-place) names each clique's domain the same
    assert cd.domains_for("j", ["a.0", "b.1"]) == domains
    assert domains["a.0"].startswith("j-nvl-") and cd.domains_for("k", ["a.0"])["a.0"] != domains["a.0"]
    # cliques of two clusters with the same clique ID get different names
    assert cd.compute_domain_name("j", "uuid-1.0") != cd.compute_domain_name("j", "uuid-2.0")


def test_a_pod_references_the_channel_claim_once_from_pod_and_containers():
    pod = {"spec": {"containers": [{"name": "w", "resources": {"claims": [{"name": "gpus"}]}}, {"name": "side"}]}}
    once = cd.with_channel_claim(pod, "j-nvl0")
    twice = cd.with_channel_claim(once, "j-nvl0")
    assert once == twice
    assert once["spec"]["resourceClaims"] == [{"name": "nvlink-channel", "resourceClaimTemplateName": "j-nvl0-channel"}]
    assert once["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpus"}, {"name": "nvlink-channel"}]
    assert once["spec"]["containers"][1]["resources"]["claims"] == [{"name": "nvlink-channel"}]
    assert "resourceClaims" not in pod["spec"]  # the input is left alone


def test_clique_labels_are_read_only_when_well_formed():
    assert cd.clique_of_labels({cd.CLIQUE_LABEL: "4b5c-77.2"}) == "4b5c-77.2"
    assert cd.clique_of_labels({}) is None
    assert cd.clique_of_labels({cd.CLIQUE_LABEL: "no-clique-id"}) is None


def test_trays_of_a_rack_share_a_clique_and_never_a_leaf_with_hgx_nodes():
    shape = nvl72.tray_shape(2, "dra")
    trays = [nvl72.tray_node_manifest(shape, i) for i in range(shape.count)]
    assert len(trays) == 36
    cliques = [t["metadata"]["labels"][cd.CLIQUE_LABEL] for t in trays]
    assert len(set(cliques[:18])) == 1 and len(set(cliques[18:])) == 1 and cliques[0] != cliques[18]
    assert cd.clique_of_labels(trays[0]["metadata"]["labels"]) == cliques[0]
    hgx_leaves = {gpu_node_manifest(NodeShape(), i)["metadata"]["labels"][LEAF_LABEL] for i in range(4)}
    assert not hgx_leaves & {t["metadata"]["labels"][LEAF_LABEL] for t in trays}
    assert {t["metadata"]["name"] for t in trays[:2]} == {"gb200-000", "gb200-001"}


def test_a_tray_publishes_channel_0_and_daemon_0_of_the_compute_domain_driver():
    slice_ = nvl72.channel_slice_manifest("gb200-000", "uid")
    assert slice_["spec"]["driver"] == "compute-domain.nvidia.com"
    assert [d["name"] for d in slice_["spec"]["devices"]] == ["channel-0", "daemon-0"]
    assert slice_["spec"]["devices"][0]["attributes"] == {"type": {"string": "channel"}, "id": {"int": 0}}


def test_the_stand_in_controller_writes_the_drivers_workload_template():
    template = cd.channel_claim_template("ns", "j-nvl0-channel", "cd-uid")
    devices = template["spec"]["spec"]["devices"]
    assert devices["requests"] == [
        {"name": "channel", "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"}}
    ]
    assert devices["config"][0]["opaque"]["parameters"]["domainID"] == "cd-uid"
    assert template["metadata"]["labels"]["resource.nvidia.com/computeDomain"] == "cd-uid"


def test_tray_workers_get_torchrun_env_counted_in_trays():
    from paralleljob.devtools.nvl72pods import pods_json

    listed = pods_json("llm", 8, 2, 2, 2, RankOrder.TP_DP_PP)
    envs = [{e["name"]: e["value"] for e in p["spec"]["containers"][0]["env"]} for p in listed["items"]]  # type: ignore[index]
    assert [e["PET_NODE_RANK"] for e in envs] == [str(r) for r in range(8)]
    assert {e["PET_NNODES"] for e in envs} == {"8"} and {e["PET_NPROC_PER_NODE"] for e in envs} == {"4"}
    assert [e["PJ_TP_RANK_OFFSET"] for e in envs] == ["0", "4"] * 4
    # tp-dp-pp: node rank of TP group (d, p) is p * dp + d, two trays per group
    assert [(e["PJ_DP_RANK"], e["PJ_PP_RANK"]) for e in envs[::2]] == [("0", "0"), ("1", "0"), ("0", "1"), ("1", "1")]
    assert {e["MASTER_ADDR"] for e in envs} == {"llm-tray0.llm.default.svc"}
