"""The per-pass tables a pass works out only when read (plan/lazy.py, plan/groups/podgroups.GroupRequests)."""

from __future__ import annotations

from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.plan.groups.podgroups import GroupRequests
from paralleljob.k8s.plan.lazy import Lazy
from tests.k8s.factories import paralleljob


def test_a_lazy_table_is_built_once_and_only_when_read() -> None:
    builds: list[int] = []

    def build() -> dict[str, int]:
        builds.append(1)
        return {"a": 1, "b": 2}

    table = Lazy(build)
    assert not table.built and builds == []
    assert table["a"] == 1 and dict(table) == {"a": 1, "b": 2} and len(table) == 2 and "c" not in table
    assert table.built and builds == [1]


def test_group_requests_answer_per_job_as_the_jobs_ask() -> None:
    jobs = {job.key: job for job in (parse_job(paralleljob(f"j{i}", 2, 1, 2)) for i in range(3))}
    requests = GroupRequests(jobs, {})
    assert "ns/j1" in requests and "ns/nobody" not in requests
    assert requests["ns/j1"] is jobs["ns/j1"].request  # a plain job's request as it is, no copy
    assert sorted(requests) == sorted(jobs) and len(requests) == 3
