"""``paralleljob describe``'s terminal picture (rich), from :class:`JobDescription`.

Drawn for the terminal it is printed on, 80 columns included: names, ranks and times are never broken
across lines (``no_wrap``), only free text (messages, notes, the devices of a DRA pod) wraps; a table whose
names alone are wider than the terminal puts its free text under it, then becomes a line per row, so a
narrow terminal gets taller output, never split node names or cut times. GPU indices are shown as runs (``0-7``),
costs rounded for reading (``records.rounded_ms``; ``-o json`` keeps the status's numbers), and the last
failure as a sentence. A whole-tray pod (NVL72) shows its clique, and the replica(s) and stage(s) its ranks
belong to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from paralleljob.clitools.describe import JobDescription, PodLine
from paralleljob.clitools.render import spans
from paralleljob.k8s.edge.parse.queues import format_time
from paralleljob.k8s.edge.status.records import rounded_ms

COST_TERMS = (("TP ms", "tpMs"), ("PP ms", "ppMs"), ("DP ms", "dpMs"), ("total ms", "totalMs"))


def failure_text(failure: Mapping[str, Any]) -> str:
    """``status.lastFailure`` (or ``lastDrain``) as a sentence: kind at time: message (action, nodes, pods,
    cost before -> after); keys this version does not know are added as ``key value``."""
    known = {"kind", "time", "message", "reason", "action", "nodes", "pods", "costBeforeMs", "costAfterMs"}
    head = str(failure.get("kind") or "failure")
    if failure.get("time"):
        head += f" at {failure['time']}"
    said = str(failure.get("message") or failure.get("reason") or "")
    details = []
    if failure.get("reason") and failure.get("message"):
        details.append(f"reason {failure['reason']}")
    if failure.get("action"):
        details.append(f"action {failure['action']}")
    for key in ("nodes", "pods"):
        if failure.get(key):
            details.append(f"{key} {', '.join(map(str, failure[key]))}")
    before, after = failure.get("costBeforeMs"), failure.get("costAfterMs")
    if isinstance(before, int | float) and isinstance(after, int | float):
        details.append(f"cost {rounded_ms(before)} -> {rounded_ms(after)} ms")
    details += [f"{k} {v}" for k, v in failure.items() if k not in known]
    return head + (f": {said}" if said else "") + (f" ({'; '.join(details)})" if details else "")


def _runs(values: tuple[int, ...]) -> str:
    return spans(list(dict.fromkeys(values)))


Column = tuple[str, bool]  # (name, wraps): a column that does not wrap holds names, numbers, times


def _table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]] = ()) -> Table:
    table = Table(title=title, title_justify="left")
    for name, wraps in columns:
        table.add_column(name, no_wrap=not wraps, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _min_width(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> int:
    """The narrowest the table can be drawn without breaking a name: a column that does not wrap is as wide
    as its widest cell, one that wraps as its longest word; plus borders and padding (3 a column, and 1)."""
    width = 1
    for i, (name, wraps) in enumerate(columns):
        cells = [name, *(row[i] for row in rows)]
        words = [w for cell in cells for w in cell.split()] if wraps else cells
        width += max(map(cell_len, words), default=0) + 3
    return width


def _as_lines(title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], keyed: bool = True) -> Group:
    """A table for a terminal too narrow for it: a line per row, ``first: name=value ...`` (``keyed``: the first
    column names the row) or ``name=value ...``, wrapped between pairs (a pair is only broken when it alone is
    wider than the terminal)."""
    skip = 1 if keyed else 0
    lines = []
    for row in rows:
        pairs = " ".join(f"{name}={cell}" for (name, _), cell in zip(columns[skip:], row[skip:], strict=True) if cell)
        lines.append(Text((f"{row[0]}: " if keyed else "") + pairs))
    return Group(Text(title, style="italic"), *lines)


def _fitting(
    title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], keyed: bool = True
) -> _FirstThatFits:
    """The table where it fits without breaking a name or a time, else its rows as lines."""
    narrow = _as_lines(title, columns, rows, keyed)
    return _FirstThatFits((_min_width(columns, rows), _table(title, columns, rows)), (0, narrow))


class _FirstThatFits:
    """The first of the pictures whose narrowest width fits the terminal, else the last (which always fits)."""

    def __init__(self, *choices: tuple[int, RenderableType]) -> None:
        self.choices = choices

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for width, choice in self.choices[:-1]:
            if width <= options.max_width:
                yield choice
                return
        yield self.choices[-1][1]


def _placement(d: JobDescription) -> RenderableType:
    """The placement: one table row per pod with every column when the terminal is wide enough; else the
    devices and notes under the table; else one wrapped line per pod (whole-tray pods' cliques are numbered
    in a legend: a clique's name, ``<ClusterUUID>.<CliqueID>``, would crowd every row)."""
    cliques = list(dict.fromkeys(p.clique for p in d.pods if p.clique))
    # DP and PP: the pod's replica(s) and stage(s), named as in the job's shape (TP x PP x DP)
    columns: list[Column] = [("pod", False), ("rank", False), ("DP", False), ("PP", False)]
    columns += [("clique", False)] if cliques else []
    columns += [("node", False), ("GPUs", False), ("ranks", False), ("phase", True)]
    rows = [_pod_cells(p, cliques) for p in d.pods]
    shown = (
        ("MIG slice", any(p.mig for p in d.pods)),
        ("MPS share", any(p.mps for p in d.pods)),
        ("devices", _any_devices(d)),
        ("note", _any_note(d)),
    )
    extras: list[Column] = [(name, True) for name, on in shown if on]
    extra_rows = [_extra_cells(p, [name for name, _ in extras]) for p in d.pods]
    full = [[*row, *extra] for row, extra in zip(rows, extra_rows, strict=True)]
    below = [
        Text(f"{p.name} {name}: {cell}", style="dim")
        for p, extra in zip(d.pods, extra_rows, strict=True)
        for (name, _), cell in zip(extras, extra, strict=True)
        if cell
    ]
    legend = [Text(f"clique {i}: {name}", style="dim") for i, name in enumerate(cliques)]
    title = "placement by rank"
    return _FirstThatFits(
        (_min_width([*columns, *extras], full), Group(_table(title, [*columns, *extras], full), *legend)),
        (_min_width(columns, rows), Group(_table(title, columns, rows), *below, *legend)),
        (0, Group(_as_lines(title, columns, rows), *below, *legend)),
    )


def _any_devices(d: JobDescription) -> bool:
    return any(p.devices for p in d.pods)


def _any_note(d: JobDescription) -> bool:
    return any(p.note for p in d.pods)


def _pod_cells(p: PodLine, cliques: list[str]) -> list[str]:
    groups = p.groups or ((p.replica, p.stage),)
    ranks = f"{p.ranks[0]}-{p.ranks[-1]}" if len(p.ranks) > 1 else ",".join(map(str, p.ranks))
    return [
        p.name,
        str(p.node_rank),
        _runs(tuple(r for r, _ in groups)),
        _runs(tuple(s for _, s in groups)),
        *((str(cliques.index(p.clique)) if p.clique else "",) if cliques else ()),
        p.node,
        spans(list(p.gpu_indices)),
        ranks,
        p.pod_phase or "-",
    ]


def _extra_cells(p: PodLine, names: list[str]) -> list[str]:
    cells = {
        "MIG slice": p.mig,
        "MPS share": p.mps,
        "devices": " ".join(f"{n}={u}" if u else n for n, u in zip(p.devices, p.uuids, strict=True)),
        "note": p.note,
    }
    return [cells[name] for name in names]


def _shape(d: JobDescription) -> str:
    if not d.shape:
        return d.invalid
    if d.mig_profile:
        return f"{d.shape}  = {d.gpus} MIG {d.mig_profile} slices (one per rank, GPUs shared)"
    if d.mps_percent:
        return f"{d.shape}  = {d.gpus} MPS shares of {d.mps_percent}% (one per rank, GPUs shared)"
    return f"{d.shape}  = {d.gpus} GPUs"


def description_renderable(d: JobDescription) -> Group:
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column()
    for key, value in (
        ("job", d.key),
        ("phase", d.phase + (f" ({d.message})" if d.message else "")),
        ("shape", _shape(d)),
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
        parts.append(_placement(d))
    if d.cost:
        terms = [d.cost.get(key) for _, key in COST_TERMS]
        row = [
            *(str(rounded_ms(v)) if isinstance(v, int | float) else "" for v in terms),
            str(d.cost.get("bottleneck", "")),
        ]
        columns = [*((name, False) for name, _ in COST_TERMS), ("bottleneck", False)]
        parts.append(
            _fitting(f"communication cost per step ({d.cost.get('model', '')} model)", columns, [row], keyed=False)
        )
    for reason in d.reasons:
        parts.append(Text(f"reason: {reason}", style="dim"))
    if d.conditions:
        keys = ("type", "status", "reason", "message", "lastTransitionTime")
        columns = [("type", False), ("status", False), ("reason", False), ("message", True), ("since", False)]
        parts.append(_fitting("conditions", columns, [[str(c.get(k, "")) for k in keys] for c in d.conditions]))
    if d.last_failure:
        parts.append(Text("last failure: " + failure_text(d.last_failure), style="red"))
    if d.last_drain:
        parts.append(Text("last drain: " + failure_text(d.last_drain), style="yellow"))
    parts.extend(_moves(d))
    columns = [("time", False), ("type", False), ("reason", False), ("message", True)]
    rows = [[e.time, e.type, e.reason, e.message + (f" (x{e.count})" if e.count > 1 else "")] for e in d.events]
    parts.append(_fitting("events (oldest first)", columns, rows) if d.events else Text("no events", style="dim"))
    return Group(*parts)  # type: ignore[arg-type]


def _moves(d: JobDescription) -> list[Any]:
    """The moves that free room: a waiting job's plan (each move: job, when, due, work it loses), the last
    "no" or dropped plan, and a moved job's record (``d.moves``, the parse the web view reads too)."""
    parts: list[Any] = []
    plan, check, last = d.moves.plan, d.moves.check, d.moves.last
    if plan is not None:
        parts.append(Text(f"move plan since {format_time(plan.created_s)}: {plan.message}", style="cyan"))
        columns = [("job", False), ("when", False), ("due", False), ("lost GPU-s", False)]
        rows = [[m.job, m.when.value, format_time(m.at_s), f"{m.lost_gpu_s:.0f}"] for m in plan.moves]
        parts.append(_fitting(f"planned moves (held: {', '.join(plan.held_nodes)})", columns, rows))
    if check is not None:
        checked = format_time(check.checked_s) if check.checked_s is not None else ""
        parts.append(Text(f"moves checked at {checked}: {check.answer}"))
    if last is not None:
        parts.append(
            Text(
                f"last moved for room: at {format_time(last.time_s)} for {last.made_room_for} ({last.domain}),"
                f" lost {last.lost_gpu_s:.0f} GPU-seconds",
                style="yellow",
            )
        )
    return parts
