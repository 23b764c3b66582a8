"""``deploy/kind/fake-gpus.sh`` and the READMEs' install commands against a real API server.

The script only uses kubectl, so it runs here on throw-away Node objects (kwok leaves them alone: they lack
its annotation, so they stay NotReady and nothing is placed on them) and the result is read back the way the
operator reads nodes. The README's `helm install` / `kubectl` lines run verbatim."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import AppsV1Api

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession
from paralleljob.devcluster.versions import repo_root
from paralleljob.packaging.helm import ensure_helm, helm_env

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="the script needs kubectl on PATH"),
]

SCRIPT = repo_root() / "deploy" / "kind" / "fake-gpus.sh"


@pytest.fixture
def bare_nodes(kube: KubeSession) -> Iterator[tuple[str, list[str]]]:
    """Three Node objects with a unique label (the selector), deleted afterwards."""
    marker = f"kind-script-{secrets.token_hex(3)}"
    names = [f"{marker}-{i}" for i in range(3)]
    for name in names:
        kube.run(kube.core.create_node({"metadata": {"name": name, "labels": {"paralleljob.dev/kind-test": marker}}}))
    try:
        yield f"paralleljob.dev/kind-test={marker}", names
    finally:
        for name in names:
            kube.run(kube.core.delete_node(name))


def _run(dev_cluster: DevCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(dev_cluster.kubeconfig)}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def test_script_gives_selected_nodes_gpus_and_topology(
    dev_cluster: DevCluster, kube: KubeSession, bare_nodes: tuple[str, list[str]]
) -> None:
    from paralleljob.k8s.edge.config import TopologyConfig
    from paralleljob.k8s.edge.parse.nodes import parse_node

    selector, names = bare_nodes
    result = _run(dev_cluster, "--selector", selector, "--gpus", "4", "--nodes-per-rack", "2")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3
    nodes = {n.metadata.name: n for n in kube.run(kube.core.list_node(label_selector=selector)).items}
    for index, name in enumerate(names):
        node = nodes[name]
        assert node.status.capacity["nvidia.com/gpu"] == "4"
        assert node.status.allocatable["nvidia.com/gpu"] == "4"
        labels = node.metadata.labels
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["nvidia.com/gpu.memory"] == "81559" and labels["nvidia.com/gpu.count"] == "4"
        assert labels["network.topology.nvidia.com/leaf"] == f"leaf-{index // 2}"
        # What the operator makes of it: 4 H100s of ~80 GB in rack leaf-N (the config's second level).
        parsed = parse_node(kube.api.sanitize_for_serialization(node), TopologyConfig())
        assert parsed.gpu_count == 4 and parsed.gpu_product == "NVIDIA-H100-80GB-HBM3", parsed
        assert 79 < parsed.gpu_memory_gib < 80 and parsed.domains[1] == f"leaf-{index // 2}", parsed
        assert not parsed.warnings, parsed.warnings
    # Re-running is harmless, and --nodes picks nodes by name.
    again = _run(dev_cluster, "--nodes", f"{names[2]},{names[0]}", "--gpus", "8", "--product", "NVIDIA-A100-SXM4-80GB")
    assert again.returncode == 0, again.stderr
    changed = {n.metadata.name: n for n in kube.run(kube.core.list_node(label_selector=selector)).items}
    assert changed[names[0]].status.capacity["nvidia.com/gpu"] == "8"
    assert changed[names[1]].status.capacity["nvidia.com/gpu"] == "4"
    assert changed[names[2]].metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"


def test_script_refuses_bad_input(dev_cluster: DevCluster) -> None:
    assert _run(dev_cluster, "--gpus", "zero").returncode == 2
    assert _run(dev_cluster, "--bogus").returncode == 2
    nothing = _run(dev_cluster, "--selector", "paralleljob.dev/kind-test=no-such-node")
    assert nothing.returncode == 1 and "no nodes" in nothing.stderr


def _readme_commands(path: Path, heading: str | None = None) -> list[str]:
    """The shell lines of the first ``sh`` block (after ``heading``), continuations joined, comments dropped."""
    text = path.read_text()
    if heading is not None:
        text = text[text.index(heading) :]
    block = text[text.index("```sh\n") + 6 :]
    block = block[: block.index("```")].replace("\\\n", " ")
    return [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines() if line.strip()]


def test_readme_install_commands_work_as_written(dev_cluster: DevCluster, kube: KubeSession, tmp_path: Path) -> None:
    """The README's `helm install` and `kubectl apply` lines, run verbatim (the image is not pulled here:
    no pod starts without a controller-manager), then cleaned up."""
    commands = _readme_commands(repo_root() / "README.md", "## Install on a cluster")
    kind_commands = _readme_commands(repo_root() / "deploy" / "kind" / "README.md")
    variables = dict(line.split("=", 1) for line in commands if re.fullmatch(r"[A-Z_]+=\S+", line))
    wanted = [c for c in commands if c.startswith(("helm ", "kubectl "))]
    assert [c.split()[:2] for c in wanted] == [["helm", "install"], ["kubectl", "apply"], ["kubectl", "get"]]
    env = {**os.environ, **variables, **helm_env(tmp_path / "helm-home", dev_cluster.kubeconfig)}
    env["PATH"] = f"{ensure_helm().parent}:{env['PATH']}"
    root = repo_root()
    try:
        for command in wanted:
            result = subprocess.run(command, shell=True, cwd=root, env=env, capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        apps: Any = AppsV1Api(kube.api)
        deployment = kube.run(apps.read_namespaced_deployment("paralleljob", "paralleljob-system"))
        assert deployment.spec.template.spec.containers[0].image == f"{variables['IMAGE']}:0.1.0"
        # The kind README installs the same way, with its own image: its line must be valid too.
        (kind_install,) = [c for c in kind_commands if c.startswith("helm install")]
        dry = kind_install.replace("helm install", "helm upgrade --dry-run=server", 1).replace(
            " --create-namespace", ""
        )
        result = subprocess.run(dry, shell=True, cwd=root, env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and 'image: "paralleljob:dev"' in result.stdout, result.stderr
    finally:
        subprocess.run(
            "kubectl delete -f deploy/examples/llama-7b.yaml --ignore-not-found; "
            "helm uninstall paralleljob -n paralleljob-system --ignore-not-found",
            shell=True, cwd=root, env=env, capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        # The namespace stays: without a namespace controller a deleted one is Terminating for good, and a
        # re-run against the same cluster (PARALLELJOB_E2E_CLUSTER) could not install into it again.
