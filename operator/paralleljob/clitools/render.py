"""Terminal pictures with rich: the GPU map (one table per topology domain, one glyph per GPU, a letter per
job) and a job description. Colour is decoration only: every state also has its own glyph."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from paralleljob.clitools.describe import JobDescription
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
    job_order,
)

JOB_COLOURS = ("cyan", "magenta", "blue", "green", "yellow", "bright_cyan", "bright_magenta", "bright_blue")
GLYPHS = {FREE: ("·", "green"), CLOSED: ("-", "dim"), DEGRADED: ("!", "yellow"), DRAINED: ("D", "magenta")}
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _letters(gpu_map: GpuMap) -> dict[str, str]:
    return {holder: LETTERS[i % len(LETTERS)] for holder, i in job_order(gpu_map).items()}


def _glyph(cell: GpuCell, letters: dict[str, str]) -> Text:
    if cell.state == UNHEALTHY:
        return Text("x", style="bold red")
    if cell.state == USED and cell.holder:
        if cell.holder.startswith(OTHERS):
            return Text("#", style="grey50")
        letter = letters.get(cell.holder, "?")
        return Text(letter, style=f"bold {JOB_COLOURS[LETTERS.index(letter) % len(JOB_COLOURS)]}")
    char, style = GLYPHS.get(cell.state, ("?", ""))
    return Text(char, style=style)


def gpu_map_renderable(gpu_map: GpuMap) -> Group:
    letters = _letters(gpu_map)
    parts: list[object] = []
    for domain, rows in gpu_map.by_domain().items():
        table = Table(title=f"{gpu_map.domain_level} {domain}", title_justify="left", expand=False)
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
                if cell.holder:
                    held.setdefault(cell.holder, []).append(cell.index)
            jobs = ", ".join(f"{letters.get(h, '#')} {h} [{','.join(map(str, ix))}]" for h, ix in held.items())
            problems = [f"{c.index}: {c.reason}" for c in row.gpus if c.state in (UNHEALTHY, DEGRADED) and c.reason]
            notes = "; ".join(problems[:3]) or ("" if row.schedulable else row.why_closed)
            table.add_row(row.name, state, bar, Text(jobs + (f"  ({notes})" if notes else "")))
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
            "legend: A-Z job  · free  x unhealthy  ! degraded  D drained  - closed node  # other pod or claim;"
            " DRA: GPUs are ResourceSlice devices (-o json: names and UUIDs)",
            "dim",
        )
    )
    if gpu_map.jobs:
        job_table = Table(title="ParallelJobs", title_justify="left")
        for name in ("", "job", "phase", "TPxPPxDP", "GPUs", "nodes", "cost ms"):
            job_table.add_column(name, overflow="fold")
        for job in gpu_map.jobs:
            cost = "" if job.cost_ms is None else f"{job.cost_ms:.3f}"
            job_table.add_row(
                letters.get(job.key, ""), job.key, job.phase, job.shape, str(job.gpus), str(len(job.nodes)), cost
            )
        parts.append(job_table)
    for warning in gpu_map.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    return Group(*parts)  # type: ignore[arg-type]


def description_renderable(d: JobDescription) -> Group:
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    for key, value in (
        ("job", d.key),
        ("phase", d.phase + (f" ({d.message})" if d.message else "")),
        ("shape", f"{d.shape}  = {d.gpus} GPUs" if d.shape else d.invalid),
        ("queue / priority", f"{d.queue} / {d.priority}"),
        ("rank order", d.rank_order),
        ("recovery", f"{d.strategy}, {d.restarts} restarts"),
        ("placement epoch", "" if d.epoch is None else str(d.epoch)),
    ):
        head.add_row(key, value)
    if d.record_error:
        head.add_row("placement", Text(d.record_error, style="red"))
    parts: list[object] = [head]
    if d.pods:
        pods = Table(title="placement by rank", title_justify="left")
        claimed = any(p.devices for p in d.pods)
        noted = any(p.note for p in d.pods)
        for name in (
            "pod",
            "rank",
            "replica",
            "stage",
            "node",
            "GPUs",
            "ranks",
            "phase",
            *(("devices",) if claimed else ()),
            *(("note",) if noted else ()),
        ):
            pods.add_column(name, overflow="fold")
        for p in d.pods:
            ranks = f"{p.ranks[0]}-{p.ranks[-1]}" if len(p.ranks) > 1 else ",".join(map(str, p.ranks))
            devices = (
                (" ".join(f"{n}={u}" if u else n for n, u in zip(p.devices, p.uuids, strict=True)),) if claimed else ()
            )
            pods.add_row(
                p.name,
                str(p.node_rank),
                str(p.replica),
                str(p.stage),
                p.node,
                ",".join(map(str, p.gpu_indices)),
                ranks,
                p.pod_phase or "-",
                *devices,
                *((p.note,) if noted else ()),
            )
        parts.append(pods)
    if d.cost:
        cost = Table(title=f"communication cost per step ({d.cost.get('model', '')} model)", title_justify="left")
        for name in ("TP ms", "PP ms", "DP ms", "total ms", "bottleneck"):
            cost.add_column(name)
        cost.add_row(*(str(d.cost.get(k, "")) for k in ("tpMs", "ppMs", "dpMs", "totalMs", "bottleneck")))
        parts.append(cost)
    for reason in d.reasons:
        parts.append(Text(f"reason: {reason}", style="dim"))
    if d.conditions:
        conds = Table(title="conditions", title_justify="left")
        for name in ("type", "status", "reason", "message", "since"):
            conds.add_column(name)
        for c in d.conditions:
            conds.add_row(*(str(c.get(k, "")) for k in ("type", "status", "reason", "message", "lastTransitionTime")))
        parts.append(conds)
    if d.last_failure:
        parts.append(Text("last failure: " + ", ".join(f"{k}={v}" for k, v in d.last_failure.items()), style="red"))
    events = Table(title="events (oldest first)", title_justify="left")
    for name in ("time", "type", "reason", "message"):
        events.add_column(name)
    for e in d.events:
        events.add_row(e.time, e.type, e.reason, e.message + (f" (x{e.count})" if e.count > 1 else ""))
    parts.append(events if d.events else Text("no events", style="dim"))
    return Group(*parts)  # type: ignore[arg-type]


def print_renderable(renderable: Group, console: Console | None = None) -> None:
    (console or Console()).print(renderable)
