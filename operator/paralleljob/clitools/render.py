"""Terminal pictures with rich: the GPU map (one table per topology domain, one glyph per GPU, a letter per
job). Colour is decoration only: every state also has its own glyph. A job's description is drawn by
``clitools.jobrender``."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from paralleljob.clitools.gpumap import (
    CLOSED,
    DEGRADED,
    DRAINED,
    FREE,
    OTHERS,
    UNHEALTHY,
    USED,
    GpuCell,
    GpuMap,
    NodeRow,
    job_order,
    sharing_kind,
)
from paralleljob.k8s.edge.status.records import rounded_ms

JOB_COLOURS = ("cyan", "magenta", "blue", "green", "yellow", "bright_cyan", "bright_magenta", "bright_blue")
GLYPHS = {FREE: ("·", "green"), CLOSED: ("-", "dim"), DEGRADED: ("!", "yellow"), DRAINED: ("D", "magenta")}
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _letters(gpu_map: GpuMap) -> dict[str, str]:
    return {holder: LETTERS[i % len(LETTERS)] for holder, i in job_order(gpu_map).items()}


def _glyph(cell: GpuCell, letters: dict[str, str]) -> Text:
    if cell.state == UNHEALTHY:
        return Text("x", style="bold red")
    if cell.state == USED and cell.holder:
        if cell.slices:
            return Text("s", style="bold cyan")
        if cell.holder.startswith(OTHERS):
            return Text("#", style="grey50")
        letter = letters.get(cell.holder, "?")
        return Text(letter, style=f"bold {JOB_COLOURS[LETTERS.index(letter) % len(JOB_COLOURS)]}")
    char, style = GLYPHS.get(cell.state, ("?", ""))
    return Text(char, style=style)


def spans(indices: list[int]) -> str:
    """``0-7``, ``1,3``, ``0-2,5``: GPU indices in runs."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _problems(row: NodeRow) -> str:
    """Each reason a node's GPUs are out once, with the GPUs it holds for (a NotReady node: all, one line)."""
    by_reason: dict[str, list[int]] = {}
    for cell in row.gpus:
        if cell.state in (UNHEALTHY, DEGRADED) and cell.reason:
            by_reason.setdefault(cell.reason, []).append(cell.index)
    return "; ".join(f"{spans(ix)}: {reason}" for reason, ix in by_reason.items())


def gpu_map_renderable(gpu_map: GpuMap) -> Group:
    letters = _letters(gpu_map)
    parts: list[object] = []
    for domain, rows in gpu_map.by_domain().items():
        level = rows[0].level or gpu_map.domain_level
        table = Table(title=f"{level} {domain}", title_justify="left", expand=False)
        table.add_column("node", overflow="fold")
        table.add_column("state")
        table.add_column("GPUs", no_wrap=True)
        table.add_column("jobs", overflow="fold")
        for row in rows:
            state = Text("Ready" if row.ready else "NotReady", style="green" if row.ready else "bold red")
            if row.ready and not row.schedulable:
                state = Text("closed", style="yellow")
            if row.condition == "False":
                state.append(" GPUHealthy=False", style="red")
            if any(cell.device for cell in row.gpus):
                state.append(" DRA", style="dim")
            bar = Text()
            for i, cell in enumerate(row.gpus):
                if i and i % 8 == 0:
                    bar.append(" ")
                bar.append_text(_glyph(cell, letters))
            held: dict[str, list[int]] = {}
            for cell in row.gpus:
                if cell.holder and not cell.slices:
                    held.setdefault(cell.holder, []).append(cell.index)
            jobs = ", ".join(f"{letters.get(h, '#')} {h} [{','.join(map(str, ix))}]" for h, ix in held.items())
            sliced = "; ".join(f"s [{c.index}] {sharing_kind(c)} {', '.join(c.slices)}" for c in row.gpus if c.slices)
            jobs = ", ".join(filter(None, (jobs, sliced)))
            notes = _problems(row) or ("" if row.schedulable else row.why_closed)
            table.add_row(row.name, state, bar, Text("  ".join(filter(None, (jobs, f"({notes})" if notes else "")))))
        parts.append(table)
    t = gpu_map.totals
    parts.append(
        Text(
            f"GPUs: {t.get('total', 0)} total, {t.get(USED, 0)} used, {t.get(FREE, 0)} free,"
            f" {t.get(UNHEALTHY, 0)} unhealthy, {t.get(DEGRADED, 0)} degraded, {t.get(DRAINED, 0)} drained,"
            f" {t.get(CLOSED, 0)} on closed nodes"
        )
    )
    parts.append(
        Text(
            "legend: A-Z job  · free  x unhealthy  ! degraded  D drained  - closed node  # other pod or claim"
            "  s MIG slices or MPS shares of jobs (listed);"
            " DRA: GPUs are ResourceSlice devices (-o json: names and UUIDs)",
            "dim",
        )
    )
    if gpu_map.pools:
        parts.append(pools_renderable(gpu_map))
    if gpu_map.jobs:
        job_table = Table(title="ParallelJobs", title_justify="left")
        for name in ("", "job", "phase", "TPxPPxDP", "GPUs", "nodes", "cost ms"):
            job_table.add_column(name, overflow="fold")
        for job in gpu_map.jobs:
            cost = "" if job.cost_ms is None else str(rounded_ms(job.cost_ms))
            job_table.add_row(
                letters.get(job.key, ""), job.key, job.phase, job.shape, str(job.gpus), str(len(job.nodes)), cost
            )
        parts.append(job_table)
    for warning in gpu_map.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    return Group(*parts)  # type: ignore[arg-type]


def pools_renderable(gpu_map: GpuMap) -> Table:
    """The device plugin's MIG nodes: slices held of those offered, per profile, and whose they are (the
    device plugin picks each slice's GPU, so they are not drawn on GPUs)."""
    table = Table(title="MIG slices on device-plugin nodes (the device plugin picks each GPU)", title_justify="left")
    for name in ("node", "mig.config", "held / offered", "jobs"):
        table.add_column(name, overflow="fold")
    for row in gpu_map.pools:
        counts = ", ".join(f"{row.held.get(p, 0)}/{n} {p}" for p, n in row.offered.items())
        jobs = ", ".join(row.slices) + (f"  ({row.closed})" if row.closed else "")
        table.add_row(row.name, row.config, counts, jobs)
    return table


def print_renderable(renderable: Group, console: Console | None = None) -> None:
    (console or Console()).print(renderable)
