"""Reaping abandoned e2e clusters reads only their own state files (seen when another checkout, with a newer
state format, had a dev cluster running: every e2e session of this one failed at setup)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paralleljob.devcluster.cluster import reap_abandoned


def test_reaping_skips_clusters_of_other_names_without_reading_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARALLELJOB_CACHE", str(tmp_path))
    other = tmp_path / "run" / "rn1"
    other.mkdir(parents=True)
    # a field this version does not know: another checkout's newer ClusterState
    (other / "state.json").write_text(json.dumps({"name": "rn1", "run_dir": str(other), "field_from_later": 1}))
    assert reap_abandoned("e2e-", report=lambda _: None) == []
    assert (other / "state.json").is_file()  # left alone
