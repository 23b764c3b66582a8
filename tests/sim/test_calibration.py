"""The collective model against published NCCL-tests runs (docs/simulator.md, "Calibration")."""

from __future__ import annotations

from pathlib import Path

import pytest

from paralleljob.core.timing.collectives import GB200_NVL72, HGX_H100, allreduce_busbw, allreduce_ms
from paralleljob.sim.report.calibration import ANCHORS, GIB, TOLERANCE, Anchor, error, table

DOC = Path(__file__).resolve().parents[2] / "docs" / "simulator.md"


@pytest.mark.parametrize("anchor", ANCHORS, ids=lambda a: f"{a.what} {a.size_bytes}")
def test_every_modelled_bus_bandwidth_is_within_20_percent_of_its_published_run(anchor: Anchor) -> None:
    assert abs(error(anchor)) <= TOLERANCE


def test_the_docs_table_is_the_models_own_printout() -> None:
    assert table() in DOC.read_text(encoding="utf-8")


def test_the_algorithm_the_model_picks_is_the_one_the_published_runs_used() -> None:
    # One HGX node: NVLink SHARP beats the ring; two racks: NVLS inside, the shard over the NICs; twenty
    # racks: a ring, whose 2(n-1) steps are the fixed cost the published size sweep shows.
    assert allreduce_ms(HGX_H100, 8 * GIB, 8)[1] == "nvls"
    assert allreduce_ms(GB200_NVL72, 8 * GIB, 144)[1] == "tree"
    assert allreduce_ms(GB200_NVL72, 8 * GIB, 1440)[1] == "ring"
    with pytest.raises(ValueError, match="not available"):
        allreduce_ms(GB200_NVL72, GIB, 1440, "nvls")


def test_a_strided_ring_with_one_gpu_per_domain_runs_at_the_nic() -> None:
    # Megatron's DP groups have one member per node: their ring is the network's, as the cost model charges.
    assert allreduce_busbw(HGX_H100, 8 * GIB, 4, per_domain=1) == pytest.approx(47.5, rel=0.01)


def test_small_messages_pay_the_latency_terms() -> None:
    # The fixed cost (ring steps, NVLS passes) is what makes bus bandwidth climb with message size.
    for gpus in (8, 72, 144, 1440):
        fabric = HGX_H100 if gpus == 8 else GB200_NVL72
        small, large = allreduce_busbw(fabric, GIB // 8, gpus), allreduce_busbw(fabric, 8 * GIB, gpus)
        assert small < large
