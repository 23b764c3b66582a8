"""Images on the real nodes: the pod sandbox ("pause") image made here, and loading image archives.

Nothing may be pulled from a registry, so the sandbox image the kubelet asks containerd for is written by
hand: a docker-archive (``manifest.json``, the image config, one layer tar holding our static ``pause``
binary) that ``ctr images import`` understands. Any other image (``make image``'s) arrives as a
docker-archive too and is imported into containerd's ``k8s.io`` namespace, where the CRI plugin looks.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

PAUSE_IMAGE = "localhost/paralleljob/pause:1"
CRI_NAMESPACE = "k8s.io"


def _layer_with(binary: Path, name: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as layer:
        info = layer.gettarinfo(str(binary), arcname=name)
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        info.mode = 0o755
        with binary.open("rb") as data:
            layer.addfile(info, data)
    return buffer.getvalue()


def write_pause_archive(pause_binary: Path, destination: Path, tag: str = PAUSE_IMAGE) -> Path:
    """A docker-archive of a one-file image whose entrypoint is ``/pause``."""
    layer = _layer_with(pause_binary, "pause")
    layer_digest = hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
            "history": [{"created_by": "paralleljob dev-cluster (deploy/devcluster/kubernetes/pause)"}],
        },
        sort_keys=True,
    ).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": [f"{layer_digest}/layer.tar"]}])
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(destination, mode="w") as archive:
        for name, data in (
            (f"{layer_digest}/layer.tar", layer),
            (config_name, config),
            ("manifest.json", manifest.encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return destination


def import_archive(containerd_socket: Path, archive: Path) -> None:
    """Load a docker-archive into the node's containerd, where the kubelet's CRI calls find it."""
    result = subprocess.run(
        ["ctr", "--address", str(containerd_socket), "--namespace", CRI_NAMESPACE, "images", "import", str(archive)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"ctr images import {archive} failed: {result.stderr.strip()}")
