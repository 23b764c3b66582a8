"""``make dashboard-assets``: the web view's front-end library, fetched from the npm registry with npm and
unpacked into ``paralleljob/dashboard/static/vendor/`` (never a CDN at run time).

``lock.json`` pins each package's version and the registry's integrity hash of its tarball; a tarball that
does not match is refused. The unpacked files are committed, with their SHA-256 in the lock, so installing
the Python package needs no Node; a unit test holds the committed files to the lock.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VENDOR = Path(__file__).resolve().parents[1] / "dashboard" / "static" / "vendor"


def lock() -> dict[str, dict[str, object]]:
    return dict(json.loads((VENDOR / "lock.json").read_text()))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(name: str, entry: dict[str, object]) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("npm is needed to refresh the vendored files (the committed ones need nothing)")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([npm, "pack", f"{name}@{entry['version']}", "--silent"], cwd=tmp, check=True,
                       stdout=subprocess.DEVNULL)
        tarball = next(Path(tmp).glob("*.tgz"))
        algorithm, _, expected = str(entry["tarball_integrity"]).partition("-")
        got = base64.b64encode(hashlib.new(algorithm, tarball.read_bytes()).digest()).decode()
        if got != expected:
            raise SystemExit(f"{name}@{entry['version']}: tarball integrity {got} is not the locked {expected}")
        files = dict(entry["files"])  # type: ignore[call-overload]
        with tarfile.open(tarball) as archive:
            for member, target in files.items():
                source = archive.extractfile(member)
                assert source is not None, member
                (VENDOR / target).write_bytes(source.read())
                print(f"{name}@{entry['version']}: {member} -> {VENDOR / target} ({sha256(VENDOR / target)[:12]})")


def main() -> int:
    for name, entry in lock().items():
        fetch(name, entry)
    return 0


if __name__ == "__main__":
    sys.exit(main())
