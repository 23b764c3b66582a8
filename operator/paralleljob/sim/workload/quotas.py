"""Per-team quotas for the simulator's core queues, from the trace's tenants (``--quotas``).

A tenant becomes one core ``QueueSpec``, as a ParallelJobQueue does in the operator (k8s/edge/parse/queues.py): a weight
for DRF fair share, a guarantee it can reclaim from borrowers by preemption, and a maximum it never exceeds.
The rules that use them (admission refuses a job above its queue's maximum; a queue below its guarantee may
preempt a queue that borrows above its own) are the core's, imported by the engine, never restated here.

* ``none``: no queue objects; every tenant is a queue of weight 1, no guarantee, no cap.
* ``trace``: quotas from the tenants' demand in the trace. With ``G`` GPUs, ``n`` tenants, a floor ``f``
  (``--quota-floor``, GPUs, default 8: one 8-GPU node) cut to ``G // n`` when the tenants cannot all have
  it, and ``share`` = the tenant's GPU-seconds (duration x GPUs over its jobs) / everyone's:

      guaranteed = f + floor(share x (G - n x f))         (so the guarantees never add up to more than G)
      max        = max(min(G, ceil(B x guaranteed)), the tenant's largest job)
      weight     = guaranteed / G                          (fair share and guarantee agree)

  ``B`` is ``--quota-borrow`` (default 2; 1 = no borrowing). The maximum is never below the tenant's largest
  job: a cap under it would leave that job waiting for ever (such a job is then refused by the placer if it
  cannot fit the cluster at all). The floor keeps a small tenant from getting a guarantee of zero, which
  would let every borrower keep its GPUs against it.
* a CSV path with a header ``tenant,weight,guaranteed,max`` (``max`` empty: no cap). A tenant of the trace
  that the file does not name is a queue of weight 1 with no guarantee and no cap (the core's default).
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from paralleljob.core.admit.queueing import QueueSpec
from paralleljob.core.errors import InvalidRequest
from paralleljob.sim.workload.trace import TraceJob, open_csv

DEFAULT_BORROW = 2.0
DEFAULT_FLOOR_GPUS = 8


def trace_quotas(
    trace: Sequence[TraceJob],
    cluster_gpus: int,
    borrow: float = DEFAULT_BORROW,
    floor_gpus: int = DEFAULT_FLOOR_GPUS,
) -> tuple[QueueSpec, ...]:
    """One queue per tenant of ``trace``, sized by its share of the trace's GPU-seconds (module docstring)."""
    if not borrow >= 1:
        raise ValueError(f"--quota-borrow must be >= 1 (1: no borrowing), got {borrow}")
    if floor_gpus < 0:
        raise ValueError(f"--quota-floor must be >= 0, got {floor_gpus}")
    if cluster_gpus < 1:
        raise ValueError("quotas need a cluster with GPUs")
    demand: dict[str, float] = defaultdict(float)
    largest: dict[str, int] = defaultdict(int)
    for job in trace:
        demand[job.tenant] += job.duration_s * job.num_gpus
        largest[job.tenant] = max(largest[job.tenant], job.num_gpus)
    if not demand:
        return ()
    n = len(demand)
    floor = min(floor_gpus, cluster_gpus // n)
    rest = cluster_gpus - n * floor
    total = math.fsum(demand.values())
    specs = []
    for tenant in sorted(demand):
        share = demand[tenant] / total if total > 0 else 1.0 / n
        guaranteed = floor + math.floor(share * rest)
        cap = max(min(cluster_gpus, math.ceil(borrow * guaranteed)), largest[tenant], guaranteed)
        weight = max(guaranteed, 1) / cluster_gpus
        specs.append(QueueSpec(tenant, weight=weight, guaranteed_gpus=guaranteed, max_gpus=cap))
    return tuple(specs)


def read_quotas(path: Path) -> tuple[QueueSpec, ...]:
    """Quotas from a CSV ``tenant,weight,guaranteed,max``; errors name the file and line."""
    with open_csv(path) as handle:
        reader = csv.DictReader(handle)
        missing = {"tenant", "weight", "guaranteed", "max"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path.name}: missing column(s) {sorted(missing)}; need tenant,weight,guaranteed,max")
        specs = []
        for row in reader:
            where = f"{path.name}:{reader.line_num}"
            try:
                cap = (row["max"] or "").strip()
                spec = QueueSpec(
                    (row["tenant"] or "").strip(),
                    float(row["weight"] or ""),
                    int(row["guaranteed"] or ""),
                    int(cap) if cap else None,
                )
            except (TypeError, ValueError, InvalidRequest) as exc:
                raise ValueError(f"{where}: {exc}") from None
            specs.append(spec)
    if len({s.name for s in specs}) != len(specs):
        raise ValueError(f"{path.name}: a tenant is listed twice")
    return tuple(specs)


def parse_quotas(
    value: str,
    trace: Sequence[TraceJob],
    cluster_gpus: int,
    borrow: float = DEFAULT_BORROW,
    floor_gpus: int = DEFAULT_FLOOR_GPUS,
) -> tuple[QueueSpec, ...]:
    """``--quotas``: none, trace or a CSV path. Refuses quotas under which a job would wait for ever."""
    if value == "none":
        return ()
    if value == "trace":
        return trace_quotas(trace, cluster_gpus, borrow, floor_gpus)
    path = Path(value)
    if not path.is_file():
        raise ValueError(f"--quotas: {value!r} is neither none, trace nor a quota CSV file")
    specs = read_quotas(path)
    caps = {s.name: s.max_gpus for s in specs}
    for job in trace:
        cap = caps.get(job.tenant)
        if cap is not None and job.num_gpus > cap:
            # The core's admission would keep it waiting (a quota refusal is never final), so the run would
            # not end: say so now.
            raise ValueError(f"job {job.job_id} needs {job.num_gpus} GPUs, above tenant {job.tenant!r}'s max {cap}")
    return specs
