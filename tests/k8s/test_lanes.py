"""Urgent API requests go before background ones (``runtime/lanes.py``), and the executor sends a waiting
job's status-only chain as background and everything that puts GPUs to work or frees them as urgent."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

import paralleljob.k8s.runtime.lanes as lanes_module
import paralleljob.k8s.runtime.reconciler as reconciler_module
from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.config import OperatorConfig
from paralleljob.k8s.plan.decide import Observed
from paralleljob.k8s.runtime.lanes import BACKGROUND, CHAIN, REPAIR_SHARE, Lanes, new_chain
from paralleljob.k8s.runtime.observe.metrics import Metrics
from paralleljob.k8s.runtime.reconciler import Reconciler
from tests.k8s import factories
from tests.k8s.fakekube import FakeApi
from tests.k8s.test_runtime_fakekube import JOBS, NODES, Operator, execute, stop


async def _occupy(lanes: Lanes) -> tuple[asyncio.Task[None], asyncio.Event]:
    """Take the lanes' only slot until the returned event is set, so the next requests must wait."""
    gate = asyncio.Event()

    async def holder() -> None:
        async with lanes.slot():
            await gate.wait()

    task = asyncio.create_task(holder())
    await asyncio.sleep(0)
    return task, gate


async def _order_of_grants() -> list[str]:
    lanes = Lanes(1)
    order: list[str] = []

    async def request(name: str, background: bool) -> None:
        async with lanes.slot(background):
            order.append(name)
            await asyncio.sleep(0)

    first, release = await _occupy(lanes)
    waiters = [asyncio.create_task(request(n, n.startswith("b"))) for n in ("b1", "u1", "b2", "u2")]
    await asyncio.sleep(0)
    assert lanes.waiting() == (2, 2)
    release.set()
    await asyncio.gather(first, *waiters)
    assert lanes.free == 1 and lanes.waiting() == (0, 0)
    return order


def test_a_free_slot_goes_to_urgent_requests_first_each_lane_in_arrival_order() -> None:
    assert asyncio.run(_order_of_grants()) == ["u1", "u2", "b1", "b2"]


def test_every_fourth_slot_goes_to_a_waiting_background_request_so_urgent_work_cannot_starve_it() -> None:
    async def run() -> list[str]:
        lanes = Lanes(1)
        order: list[str] = []

        async def request(name: str) -> None:
            async with lanes.slot(name.startswith("b")):
                order.append(name)

        first, gate = await _occupy(lanes)
        names = ["b1", "b2", *(f"u{i}" for i in range(1, 8))]
        tasks = [asyncio.create_task(request(n)) for n in names]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(first, *tasks)
        return order

    assert asyncio.run(run()) == ["u1", "u2", "u3", "b1", "u4", "u5", "u6", "b2", "u7"]


def test_a_cancelled_waiter_gives_up_its_place_and_no_slot_is_lost() -> None:
    async def run() -> tuple[list[str], int]:
        lanes = Lanes(1)
        got: list[str] = []

        async def request(name: str) -> None:
            async with lanes.slot(False):
                got.append(name)

        first, gate = await _occupy(lanes)
        doomed, kept = asyncio.create_task(request("doomed")), asyncio.create_task(request("kept"))
        await asyncio.sleep(0)
        doomed.cancel()
        gate.set()
        await asyncio.gather(first, kept, return_exceptions=True)
        await asyncio.gather(doomed, return_exceptions=True)
        return got, lanes.free

    assert asyncio.run(run()) == (["kept"], 1)


def test_the_lane_follows_the_context_variable_by_default() -> None:
    async def run() -> list[tuple[str, str]]:
        lanes = Lanes(1)
        order: list[tuple[str, str]] = []

        async def request(name: str, background: bool) -> None:
            BACKGROUND.set(background)
            async with lanes.slot():
                order.append((name, "background" if BACKGROUND.get() else "urgent"))

        first, gate = await _occupy(lanes)
        tasks = [asyncio.create_task(request("b", True)), asyncio.create_task(request("u", False))]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(first, *tasks)
        return order

    assert asyncio.run(run()) == [("u", "urgent"), ("b", "background")]


def test_the_executor_sends_a_waiting_jobs_status_as_background_and_an_admitted_jobs_work_as_urgent() -> None:
    api = FakeApi()
    for i in range(2):
        api.seed(NODES, factories.node(f"n{i}", 8))
    api.seed(JOBS, factories.paralleljob("train", 4, 2, 2))  # 16 GPUs: fills both nodes
    api.seed(JOBS, factories.paralleljob("later", 4, 1, 1, created="2024-01-01T00:00:05Z"))  # waits for room

    async def run() -> None:
        op = Operator(api)
        plan = await op.decide()
        kinds = {a.job.name: a.only_records_waiting for a in plan.jobs}
        assert kinds == {"train": False, "later": True}
        await execute(op.executor, plan)

    asyncio.run(run())
    status_writes = {path.rsplit("/", 2)[-2]: bg for method, path, bg in api.lanes if path.endswith("/status")}
    assert status_writes == {"train": False, "later": True}
    pod_work = [bg for method, path, bg in api.lanes if "/pods" in path and method in ("POST", "PATCH", "PUT")]
    assert pod_work and not any(pod_work)  # every create and bind of the admitted gang: urgent
    assert BACKGROUND.get() is False  # the chain's lane did not leak into the caller


def test_a_pass_starts_at_most_background_chains_status_writes_and_the_rest_follow_in_later_passes() -> None:
    async def scenario() -> tuple[list[tuple[int, int]], dict[str, str]]:
        api = FakeApi()
        api.seed(NODES, factories.node("n0", 8))
        for i in range(6):  # w0 takes the node; w1-w5 wait: five first "Queued" writes
            api.seed(JOBS, factories.paralleljob(f"w{i}", 4, 2, 1, created=f"2024-01-01T00:00:0{i}Z"))
        kube = api.client()
        config = OperatorConfig(resync_seconds=3600, identity="test", background_chains=2)
        rec = Reconciler(kube, config, Metrics())
        seen: list[tuple[int, int]] = []  # (background chains in flight, held back) after each pass
        gauge = rec.metrics.registry.get_sample_value
        rec.on_pass = lambda: seen.append((len(rec.background), int(gauge("paralleljob_status_writes_held_back") or 0)))
        for kind, path in (("node", NODES), ("pod", "/api/v1/pods"), ("job", JOBS)):
            items, version = await kube.list(path)
            rec.on_list(kind, items, version)
        rec.synced.set()
        rec.leader.set()
        task = asyncio.create_task(rec.run())
        try:
            for _ in range(400):
                phases = {j["metadata"]["name"]: (j.get("status") or {}).get("phase", "") for j in api.items(JOBS)}
                if all(phases[f"w{i}"] == "Queued" for i in range(1, 6)):
                    break
                await asyncio.sleep(0.01)
        finally:
            await stop([task] + ([rec.events.task] if rec.events.task else []))
            await stop([t for t, _ in rec.inflight.values()])
        return seen, phases

    seen, phases = asyncio.run(scenario())
    assert phases == {"w0": phases["w0"], **{f"w{i}": "Queued" for i in range(1, 6)}}, "held-back writes made later"
    assert phases["w0"] in ("Placing", "Running"), "the admitted job's chain is not held back"
    assert seen[0] == (2, 3), "the first pass started two status writes and held three back"
    assert all(in_flight <= 2 for in_flight, _ in seen)


def test_a_pass_is_told_the_background_room_left_so_new_jobs_beyond_it_are_not_decided(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rooms: list[int | None] = []
    real = reconciler_module.decide

    def spy(observed: Observed, *args: Any, **kwargs: Any) -> Any:
        rooms.append(observed.background_room)
        return real(observed, *args, **kwargs)

    monkeypatch.setattr(reconciler_module, "decide", spy)

    async def scenario() -> None:
        api = FakeApi()
        api.seed(NODES, factories.node("n0", 8))
        kube = api.client()
        rec = Reconciler(kube, OperatorConfig(resync_seconds=3600, identity="test", background_chains=5), Metrics())
        for kind, path in (("node", NODES), ("pod", "/api/v1/pods"), ("job", JOBS)):
            items, version = await kube.list(path)
            rec.on_list(kind, items, version)
        await rec.pass_once()
        rec.background.update({"ns/a", "ns/b"})  # two status-only chains in flight
        await rec.pass_once()
        rec.background.update({f"ns/x{i}" for i in range(9)})  # more than the limit (never negative)
        await rec.pass_once()

    asyncio.run(scenario())
    assert rooms == [5, 3, 0]


def test_a_lists_pages_go_ahead_of_every_waiting_write_even_on_the_background_turn() -> None:
    """While a kind is listed its watch waits: behind a flood's writes a 50,000-job list took minutes."""

    async def run() -> list[str]:
        lanes = Lanes(1)
        order: list[str] = []

        async def request(name: str) -> None:
            async with lanes.slot(background=name.startswith("b"), first=name.startswith("page")):
                order.append(name)

        lanes.handed = 3  # the next slot handed over is the background lane's turn
        first, gate = await _occupy(lanes)
        tasks = [asyncio.create_task(request(n)) for n in ("b1", "u1", "page1", "u2", "page2")]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(first, *tasks)
        return order

    assert asyncio.run(run()) == ["page1", "page2", "u1", "u2", "b1"]


def test_the_client_sends_list_pages_in_the_first_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seam: ``Kube.list`` asks its lanes for the first lane; a write does not."""
    from aiohttp import web

    from tests.k8s.localserver import serve

    async def list_pods(request: web.Request) -> web.Response:
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}})

    async def patch(request: web.Request) -> web.Response:
        return web.json_response({"metadata": {"name": "p"}})

    async def scenario() -> list[bool]:
        app = web.Application()
        app.router.add_get("/api/v1/pods", list_pods)
        app.router.add_patch("/api/v1/namespaces/n/pods/p", patch)
        runner, kube = await serve(app)
        lanes: list[bool] = []
        slot = kube.limit.slot

        def spy(background: bool | None = None, first: bool = False) -> Any:
            lanes.append(first)
            return slot(background, first)

        monkeypatch.setattr(kube.limit, "slot", spy)
        try:
            await kube.list("/api/v1/pods")
            await kube.merge_patch("/api/v1/namespaces/n/pods/p", {"metadata": {"labels": {"a": "b"}}})
        finally:
            await kube.close()
            await runner.cleanup()
        return lanes

    assert asyncio.run(scenario()) == [True, False]


def test_urgent_requests_of_an_older_chain_go_first_so_gangs_become_whole_one_after_another() -> None:
    async def run() -> list[str]:
        lanes = Lanes(1)
        order: list[str] = []
        older, newer = new_chain(), new_chain()

        async def request(name: str, chain: int | None) -> None:
            CHAIN.set(chain)
            async with lanes.slot(False):
                order.append(name)

        first, gate = await _occupy(lanes)
        # the newer chain's creates queued first, then the older chain's bind and a request of no chain
        names = [("new-create-1", newer), ("new-create-2", newer), ("old-bind", older), ("loose", None)]
        tasks = [asyncio.create_task(request(n, c)) for n, c in names]
        await asyncio.sleep(0)
        assert lanes.waiting() == (4, 0)
        gate.set()
        await asyncio.gather(first, *tasks)
        return order

    assert asyncio.run(run()) == ["old-bind", "new-create-1", "new-create-2", "loose"]


def test_a_chain_that_mends_a_running_gang_goes_before_every_chain_that_places_one() -> None:
    async def run() -> list[str]:
        lanes = Lanes(1)
        order: list[str] = []
        placing = new_chain()
        mending, later_mending = new_chain(mends=True), new_chain(mends=True)

        async def request(name: str, chain: int) -> None:
            CHAIN.set(chain)
            async with lanes.slot(False):
                order.append(name)

        first, gate = await _occupy(lanes)
        names = [("place", placing), ("mend-later", later_mending), ("mend", mending)]
        tasks = [asyncio.create_task(request(n, c)) for n, c in names]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(first, *tasks)
        return order

    assert asyncio.run(run()) == ["mend", "mend-later", "place"]


def test_a_job_chain_runs_in_a_chain_of_its_own_begun_after_the_ones_before() -> None:
    from paralleljob.k8s.runtime.executor import Executor

    chains: list[int | None] = []

    async def chain_of(self: Any, actions: Any, outcome: Any) -> None:
        chains.append(CHAIN.get())

    async def run() -> None:
        executor = Executor.__new__(Executor)  # _job reads nothing of the executor but its chain
        for phase in (Phase.QUEUED, Phase.PLACING, Phase.RUNNING, Phase.RECOVERING):
            await executor._job(_Actions(phase), None)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Executor, "_chain", chain_of)
        asyncio.run(run())
    queued, placing, running, recovering = chains
    assert queued is not None and placing is not None and running is not None and recovering is not None
    assert running < recovering < queued < placing  # jobs with pods at work first, each kind by age
    assert CHAIN.get() is None  # reset after each chain


class _Actions:
    only_records_waiting = False
    creates = binds = ()

    def __init__(self, phase: Phase) -> None:
        self.job = type("Job", (), {"phase": phase})()


def test_while_a_repair_runs_other_chains_keep_only_their_share_of_the_slots_and_get_the_rest_after() -> None:
    async def run() -> tuple[list[int], list[str], int]:
        lanes = Lanes(16)  # others may keep 16 // REPAIR_SHARE = 2 in flight while a repair runs
        in_flight: list[int] = []
        order: list[str] = []
        gate = asyncio.Event()
        placing, mending = new_chain(), new_chain(mends=True)

        async def request(name: str, chain: int, background: bool = False) -> None:
            CHAIN.set(chain)
            async with lanes.slot(background):
                order.append(name)
                in_flight.append(lanes.others)
                await gate.wait()

        with lanes.repairing():
            tasks = [asyncio.create_task(request(f"place-{i}", placing)) for i in range(4)]
            tasks.append(asyncio.create_task(request("status", placing, background=True)))
            tasks.append(asyncio.create_task(request("mend", mending)))
            await asyncio.sleep(0)
            held = lanes.waiting()
            assert lanes.free == 16 - 3, lanes.free  # two others and the repair's own request hold slots
        await asyncio.sleep(0)  # the repair ended: the held requests take the free slots
        gate.set()
        await asyncio.gather(*tasks)
        assert lanes.free == 16 and lanes.others == 0
        return [held[0], held[1]], order, max(in_flight[:3])

    held, order, most_others = asyncio.run(run())
    assert held == [2, 1]  # two of the placing chain's creates and the background status wait
    assert order[:3] == ["place-0", "place-1", "mend"] and set(order[3:]) == {"place-2", "place-3", "status"}
    assert most_others <= 16 // REPAIR_SHARE


def test_a_released_slot_goes_to_a_waiting_repair_request_and_others_only_below_their_share() -> None:
    async def run() -> None:
        lanes = Lanes(16)  # others keep 2 while a repair runs
        placing, mending = new_chain(), new_chain(mends=True)
        gates: dict[str, asyncio.Event] = {}

        async def request(name: str, chain: int) -> None:
            CHAIN.set(chain)
            gates[name] = asyncio.Event()
            async with lanes.slot(False):
                await gates[name].wait()

        async def release(*names: str) -> None:
            for name in names:
                gates[name].set()
            await asyncio.sleep(0)
            await asyncio.sleep(0)

        wave = [asyncio.create_task(request(f"wave-{i}", placing)) for i in range(16)]  # every slot taken
        await asyncio.sleep(0)
        with lanes.repairing():
            held = [asyncio.create_task(request(f"next-{i}", placing)) for i in range(4)]
            mend = asyncio.create_task(request("mend", mending))
            await asyncio.sleep(0)
            assert lanes.waiting() == (5, 0)
            await release("wave-0")  # the first slot freed goes to the repair, though it asked last
            assert lanes.waiting() == (4, 0) and lanes.others == 15
            await release(*(f"wave-{i}" for i in range(1, 14)))  # others down to 2: the rest stay free
            assert lanes.waiting() == (4, 0) and lanes.others == 2 and lanes.free == 13
            await release("wave-14")  # one below the share: one held request goes
            assert lanes.waiting() == (3, 0) and lanes.others == 2 and lanes.free == 13
            await release("mend", "wave-15")
        await asyncio.sleep(0)  # the repair ended: the held requests take free slots at once
        assert lanes.waiting() == (0, 0) and lanes.others == 4 and lanes.free == 12
        await release(*(f"next-{i}" for i in range(4)))
        await asyncio.gather(*wave, *held, mend)
        assert lanes.free == 16 and lanes.others == 0

    asyncio.run(run())


def test_the_executor_holds_the_others_back_only_around_a_chain_that_puts_pods_into_a_running_gang() -> None:
    from paralleljob.k8s.runtime.executor import Executor

    seen: list[int] = []

    async def chain_of(self: Any, actions: Any, outcome: Any) -> None:
        seen.append(self.kube.limit.repairs)

    class _Creating(_Actions):
        creates = ("pod",)  # type: ignore[assignment]

    async def run() -> None:
        executor = Executor.__new__(Executor)
        executor.kube = type("Kube", (), {"limit": Lanes(8)})()  # type: ignore[assignment]
        for actions in (_Creating(Phase.RECOVERING), _Creating(Phase.RUNNING), _Creating(Phase.PLACING)):
            await executor._job(actions, None)  # type: ignore[arg-type]
        await executor._job(_Actions(Phase.RUNNING), None)  # type: ignore[arg-type]  # a status write only
        assert executor.kube.limit.repairs == 0

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Executor, "_chain", chain_of)
        asyncio.run(run())
    assert seen == [1, 1, 0, 0]


def test_the_metrics_count_each_repair_chain_once_across_passes() -> None:
    from paralleljob.k8s.runtime.observe.reporting import PassReport

    async def run() -> None:
        metrics, lanes = Metrics(), Lanes(8)
        reporting = PassReport.__new__(PassReport)  # lane_figures reads nothing of it but these two
        reporting.metrics, reporting.repair_chains_counted = metrics, 0
        total = functools.partial(metrics.registry.get_sample_value, "paralleljob_repair_chains_total")
        reporting.lane_figures(lanes)
        assert total() == 0
        for _ in range(2):
            with lanes.repairing():
                pass
        reporting.lane_figures(lanes)
        reporting.lane_figures(lanes)  # a pass with no new repair adds nothing
        assert total() == 2
        with lanes.repairing():
            reporting.lane_figures(lanes)  # counted while it runs, not again when it ends
        reporting.lane_figures(lanes)
        assert total() == 3

    asyncio.run(run())


def test_a_repair_that_outlasts_its_hold_lets_the_held_requests_go_though_it_still_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lanes_module, "REPAIR_HOLD_S", 0.05)

    async def run() -> None:
        lanes = Lanes(8)  # others keep 1 while a repair runs
        placing = new_chain()
        gate = asyncio.Event()

        async def request() -> None:
            CHAIN.set(placing)
            async with lanes.slot(False):
                await gate.wait()

        with lanes.repairing():
            tasks = [asyncio.create_task(request()) for _ in range(3)]
            await asyncio.sleep(0.01)
            assert lanes.waiting() == (2, 0) and lanes.repairs == 1
            await asyncio.sleep(0.1)  # the hold has run out; the repair has not
            assert lanes.waiting() == (0, 0) and lanes.repairs == 0 and lanes.others == 3
        assert lanes.repairs == 0  # not given back twice
        gate.set()
        await asyncio.gather(*tasks)
        assert lanes.free == 8 and lanes.others == 0

    asyncio.run(run())
