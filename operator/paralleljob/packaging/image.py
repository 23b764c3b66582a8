"""Build container images without a Docker engine: a Debian base made by mmdebstrap, buildah with runc.

``make image`` (``python -m paralleljob.packaging.image``) builds the project's unchanged Dockerfile with
its ``PYTHON_IMAGE`` build argument pointing at a base made here from Debian's packages (bookworm's
Python 3.11, pip, venv, CA certificates, passwd for ``useradd``), and writes a docker-archive that
``ctr images import`` loads on the dev cluster's real nodes. The worker image of the real-node tests
(``deploy/worker/``, standard library only) is built the same way.

Everything is cached under ``~/.cache/paralleljob/images/`` and keyed by its inputs: the base by its
package list and hook, an image by the hash of its Dockerfile, the files of its build context and the
base's key; an archive that exists is reused without asking buildah. buildah always gets ``--network
host`` (otherwise it creates a bridge and iptables rules in the host's namespace) and ``--runtime runc``
(crun cannot drive this machine's hybrid cgroups). pip inside a build sees the host's CA bundle, as
package traffic may pass a TLS-inspecting proxy.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from paralleljob.devcluster.versions import cache_root, repo_root

Report = Callable[[str], None]

SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates", "passwd")
# Debian marks its Python as externally managed (PEP 668); an image's pip must install into it.
BASE_HOOK = 'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED'
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def images_dir() -> Path:
    return cache_root() / "images"


def base_key() -> str:
    return hashlib.sha256("\0".join((SUITE, *BASE_PACKAGES, BASE_HOOK)).encode()).hexdigest()[:12]


def base_tag() -> str:
    return f"localhost/paralleljob/debian-python:{SUITE}-{base_key()}"


def _run(argv: list[str], what: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"{what} failed (exit {result.returncode}): {' '.join(argv[:3])} ...\n{result.stderr[-3000:]}"
        )
    return result.stdout


@contextmanager
def _lock(name: str) -> Iterator[None]:
    images_dir().mkdir(parents=True, exist_ok=True)
    with (images_dir() / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_base(report: Report = _stderr) -> str:
    """The base image in buildah's storage (made from a cached mmdebstrap tarball); returns its tag."""
    tag = base_tag()
    with _lock("base"):
        if subprocess.run(["buildah", "inspect", "--type", "image", tag], capture_output=True).returncode == 0:
            return tag
        rootfs = images_dir() / f"debian-{SUITE}-{base_key()}.tar"
        if not rootfs.is_file():
            report(f"making the base root filesystem with mmdebstrap ({', '.join(BASE_PACKAGES)})...")
            partial = rootfs.with_name(f".{rootfs.name}.partial-{os.getpid()}")
            _run(
                ["mmdebstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                 f"--customize-hook={BASE_HOOK}", SUITE, str(partial)],
                "mmdebstrap",
            )  # fmt: skip
            os.replace(partial, rootfs)
        container = _run(["buildah", "from", "scratch"], "buildah from").strip()
        try:
            _run(["buildah", "add", container, str(rootfs), "/"], "buildah add")
            _run(["buildah", "config", "--cmd", "python3", "--env", "LANG=C.UTF-8", container], "buildah config")
            _run(["buildah", "commit", "--quiet", container, tag], "buildah commit")
        finally:
            subprocess.run(["buildah", "rm", container], capture_output=True)
    return tag


def _context_digest(dockerfile: Path, context: Path, files: list[Path]) -> str:
    digest = hashlib.sha256(dockerfile.read_bytes() + base_key().encode())
    for path in sorted(files):
        digest.update(str(path.relative_to(context)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _tracked_files(context: Path, roots: tuple[str, ...]) -> list[Path]:
    files = []
    for root in roots:
        path = context / root
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        files += [p for p in candidates if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    return files


def build(
    name: str, dockerfile: Path, context: Path, inputs: tuple[str, ...], report: Report = _stderr
) -> tuple[str, Path]:
    """Build ``dockerfile`` on the Debian base; return (tag, docker-archive path). ``inputs`` are the
    context's files and folders the image is made of (its cache key)."""
    base = ensure_base(report)
    key = _context_digest(dockerfile, context, _tracked_files(context, inputs))
    tag = f"localhost/paralleljob/{name}:{key}"
    archive = images_dir() / f"{name}-{key}.tar"
    with _lock(name):
        if archive.is_file():
            return tag, archive
        report(f"building image {tag} with buildah...")
        argv = [
            "buildah", "build", "--runtime", "runc", "--network", "host", "--layers",
            "--build-arg", f"PYTHON_IMAGE={base}", "--file", str(dockerfile), "--tag", tag,
        ]  # fmt: skip
        if HOST_CA_BUNDLE.is_file():
            argv += ["--volume", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"]
        _run([*argv, str(context)], f"building {name}")
        partial = archive.with_name(f".{archive.name}.partial-{os.getpid()}")
        _run(["buildah", "push", "--quiet", tag, f"docker-archive:{partial}:{tag}"], "buildah push")
        os.replace(partial, archive)
    return tag, archive


def build_operator_image(report: Report = _stderr) -> tuple[str, Path]:
    root = repo_root()
    return build("paralleljob", root / "Dockerfile", root, ("pyproject.toml", "README.md", "operator"), report)


def build_worker_image(report: Report = _stderr) -> tuple[str, Path]:
    worker = repo_root() / "deploy" / "worker"
    return build("paralleljob-worker", worker / "Dockerfile", worker, ("worker.py",), report)


if __name__ == "__main__":
    for built_tag, built_archive in (build_operator_image(), build_worker_image()):
        print(f"{built_tag} {built_archive}")
