"""Where the operator's CPU goes while it binds a stream of gangs (the scale issue's binder part).

    python -m tests.bench.stream_profile [OUT]      (default OUT: stream-profile.txt)

A 64-node dev cluster, the operator as its own process, four rounds of the operator benchmark's 256-pod
stream (32 jobs of 8 pods); py-spy (``pip install py-spy``) samples the operator meanwhile and writes raw
stacks to OUT. Prints each round, the operator's CPU seconds, and the share of samples under the functions
that matter. Not collected by pytest: a measurement, not a test.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from paralleljob.devcluster.cluster import DevCluster, down, up
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devtools.bench_operator import bench_stream
from paralleljob.devtools.bench_scale import operator_under_test
from paralleljob.k8s.runtime.api import ApiError, Kube


async def profile(cluster: DevCluster, out: Path) -> None:
    spy_binary = shutil.which("py-spy") or str(Path(sys.prefix) / "bin" / "py-spy")
    operator = operator_under_test(cluster, Path(tempfile.mkdtemp(prefix="pj-profile-")), "profiled")
    kube = await Kube.connect(str(cluster.kubeconfig))
    try:
        with contextlib.suppress(ApiError):
            await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": "bench-stream"}})
        await operator.wait_leader_async(600.0, 0.05)
        await asyncio.sleep(2.0)
        argv = [spy_binary, "record", "--pid", str(operator.proc.pid), "--format", "raw", "-o", str(out),
                "--rate", "200", "--nonblocking"]  # fmt: skip
        spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.sleep(1.0)
        cpu = operator.cpu_seconds()
        for _ in range(4):
            stream = await bench_stream(kube, "bench-stream", 32, 8)
            print({k: v for k, v in stream.items() if k != "worker"}, flush=True)
        print(f"operator CPU: {operator.cpu_seconds() - cpu:.2f} s for 1,024 pods", flush=True)
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    finally:
        await kube.close()
        operator.stop()


def shares(raw: Path, top: int = 25) -> list[tuple[float, str]]:
    """Inclusive share of samples per function (each counted once per stack)."""
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        names = set()
        for frame in stack.split(";"):
            match = re.match(r"(.*) \((?:.*/)?([^/]*?):\d+\)$", frame)
            names.add(f"{match.group(1)} [{match.group(2)}]" if match else frame)
        for name in names:
            inclusive[name] += int(count)
    return [(100 * n / total, name) for name, n in inclusive.most_common(top)]


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "stream-profile.txt").resolve()
    name = "stream-profile"
    cluster = up(name, NodeShape(count=64, gpus_per_node=8, nodes_per_rack=8), die_with_caller=True)
    try:
        asyncio.run(profile(cluster, out))
    finally:
        down(name)
    for share, function in shares(out):
        print(f"{share:5.1f}%  {function}")


if __name__ == "__main__":
    main()
