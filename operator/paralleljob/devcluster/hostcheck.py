"""What a machine needs to run real (kubelet) nodes, and installing it from Debian's packages.

``missing()`` says, in words, every capability or program that is absent (not root, no network
namespaces, no cgroup hierarchy, no overlay filesystem, no containerd ...); an empty list means real nodes
can start. ``install()`` (``paralleljob dev-cluster prereqs``) installs the packages with apt-get when it
runs as root on a Debian-like machine, printing what it installs, and is a no-op when all is present.
Kernel features cannot be installed: for those it says what is missing and fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

Report = Callable[[str], None]

# program (or file) -> the Debian package that provides it
PROGRAMS: dict[str, str] = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "socat": "socat",
    "iptables": "iptables",
    "nsenter": "util-linux",
    "ip": "iproute2",
}
CNI_BIN_DIR = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "loopback")
CNI_PACKAGE = "containernetworking-plugins"
# For `make image` (the image build, not the nodes): buildah with runc, a base from Debian's packages.
IMAGE_PROGRAMS: dict[str, str] = {"buildah": "buildah", "mmdebstrap": "mmdebstrap"}


def missing_features() -> list[str]:
    """Kernel or privilege features that no package can supply."""
    problems = []
    if os.geteuid() != 0:
        problems.append(f"real nodes need root (network namespaces, mounts, cgroups); running as uid {os.geteuid()}")
    if not Path("/proc/self/ns/net").exists():
        problems.append("the kernel has no network namespaces (/proc/self/ns/net is missing)")
    if not (Path("/sys/fs/cgroup/pids").is_dir() or Path("/sys/fs/cgroup/cgroup.controllers").is_file()):
        problems.append("no cgroup hierarchy with the pids controller is mounted under /sys/fs/cgroup")
    filesystems = Path("/proc/filesystems").read_text() if Path("/proc/filesystems").exists() else ""
    if "overlay" not in filesystems:
        problems.append("the kernel has no overlay filesystem (containerd's snapshotter needs it)")
    return problems


def missing_packages(programs: dict[str, str] = PROGRAMS) -> list[str]:
    """Debian packages whose programs are not installed."""
    packages = {package for program, package in programs.items() if shutil.which(program) is None}
    if any(not (CNI_BIN_DIR / plugin).is_file() for plugin in CNI_PLUGINS):
        packages.add(CNI_PACKAGE)
    return sorted(packages)


def missing(programs: dict[str, str] = PROGRAMS) -> list[str]:
    """Everything in the way of real nodes, each said in words; empty when they can run."""
    problems = missing_features()
    packages = missing_packages(programs)
    if packages:
        problems.append(
            f"missing packages: {', '.join(packages)} (`paralleljob dev-cluster prereqs` installs them as root)"
        )
    return problems


def install(report: Report, with_image_tools: bool = True) -> list[str]:
    """Install what is missing with apt-get; return the problems left (empty on success)."""
    programs = {**PROGRAMS, **(IMAGE_PROGRAMS if with_image_tools else {})}
    features = missing_features()
    if features:
        return features
    packages = missing_packages(programs)
    if not packages:
        report("real-node prerequisites: all installed")
        return []
    if shutil.which("apt-get") is None:
        return [f"missing packages {', '.join(packages)} and no apt-get to install them"]
    # buildah's recommended packages would pull in crun and a netavark bridge setup we do not use.
    extra = ["umoci", "skopeo"] if "buildah" in packages else []
    report(f"installing with apt-get: {', '.join(packages + extra)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (
        ["apt-get", "update", "-q"],
        ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q", *packages, *extra],
    ):
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            return [f"`{' '.join(command)}` failed (exit {result.returncode}):\n{result.stderr[-2000:]}"]
    return missing(programs)
