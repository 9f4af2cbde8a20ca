"""`hermes watch`: the rich renderables every part of the view is drawn with (the title, the
summary, active sessions, lock holders, the ledger, gateways), for the screen and for --once.

Stored text (titles, message previews, command lines of other processes) only ever reaches the
screen escaped, inside a rich `Text`, never as markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hermes_cli.rendering import render, sanitize

if TYPE_CHECKING:
    from rich.console import RenderableType

    from hermes_state.reports.watch_snapshot import Snapshot

WIDE = 110  # from this width the sessions table also shows the source and the last message
MEDIUM = 75  # from this width it shows the last message


def _text(value: Any, style: str | None = None) -> Any:
    """Return stored text as a one-line rich Text, its control characters shown escaped."""
    from rich.text import Text

    return Text(sanitize.one_line(value), style=style or "", no_wrap=True, overflow="ellipsis")


def header_text(snap: Snapshot, profile: str, *, paused: bool = False) -> Any:
    """Return the title line: profile, store, time of the snapshot, how long it took."""
    from rich.text import Text

    from hermes_state.store.home import display_hermes_home

    view = snap.view
    parts = [
        f"hermes watch · {profile}",
        render.local_time(snap.taken_at, "%H:%M:%S") + (" PAUSED" if paused else ""),
        f"store {snap.store_ms:.1f} ms",
    ]
    if view is not None:
        parts.append(f"journal {view.journal_mode}")
    parts.append(display_hermes_home(snap.path))  # last: the part a narrow screen can lose
    return Text(
        sanitize.one_line(" · ".join(parts)), style="bold", no_wrap=True, overflow="ellipsis"
    )


def summary_text(snap: Snapshot) -> Any:
    """Return the figures line: rate, active sessions, file sizes (or what is wrong)."""
    from rich.text import Text

    line = Text(no_wrap=False)
    if snap.problem is not None:
        line.append(f"Store {snap.problem}: ", style="bold red")
        line.append(sanitize.one_line(snap.problem_message))
        line.append("\n")
    view = snap.view
    if view is not None:
        line.append("Messages/min ", style="bold")
        line.append(f"{view.messages_per_minute:,}")
        line.append("  Active sessions ", style="bold")
        line.append(f"{view.active_count:,}")
        line.append("  ")
    sizes = [("DB", "db"), ("WAL", "wal"), ("SHM", "shm"), ("Journal", "journal")]
    for label, key in sizes:
        if key == "db" or snap.files.get(key):
            line.append(f"{label} ", style="bold")
            line.append(f"{render.human_bytes(snap.files.get(key))}  ")
    line.rstrip()
    return line


def sessions_table(
    snap: Snapshot, width: int | None, *, now: float | None = None
) -> RenderableType:
    """Return the active sessions as a table fitted to width (fewer columns when narrow;
    None: every column, every cell whole, as for a pipe)."""
    from rich.table import Table
    from rich.text import Text

    view = snap.view
    if view is None:
        return Text("")
    if not view.active:
        return Text("No session active in the last 5 minutes.", style="dim")
    now = snap.taken_at if now is None else now
    wide = width is None or width >= WIDE
    medium = width is None or width >= MEDIUM
    table = Table(
        box=None,
        padding=(0, 1),
        expand=width is not None,
        show_edge=False,
        title=f"Active now ({view.active_count:,})",
        title_justify="left",
        title_style="bold underline",
        caption_justify="left",
    )
    table.add_column("Session", no_wrap=True, overflow="ellipsis", style="cyan", ratio=None)
    table.add_column("Title", no_wrap=True, overflow="ellipsis", ratio=2, min_width=8)
    if wide:
        table.add_column("Source", no_wrap=True, overflow="ellipsis", max_width=12)
    table.add_column("/min", justify="right", no_wrap=True)
    table.add_column("Last", justify="right", no_wrap=True)
    if medium:
        table.add_column("Last message", no_wrap=True, overflow="ellipsis", ratio=3)
    for a in view.active:
        cells = [_text(a.session_id), _text(a.title or "—")]
        if wide:
            cells.append(_text(a.source))
        cells += [
            Text(f"{a.messages_last_minute:,}"),
            Text(
                render.relative_time(a.last_message_at, now=now)
                if a.last_message_at is not None
                else render.MISSING
            ),
        ]
        if medium:
            role = f"{a.last_role}: " if a.last_role else ""
            cells.append(_text(role + (a.last_preview or "")))
        table.add_row(*cells)
    if view.active_count > len(view.active):
        table.caption = f"… and {view.active_count - len(view.active):,} more"
    return table


def locks_text(snap: Snapshot) -> Any:
    """Return who holds locks on or has open the store files (other processes)."""
    import os

    from rich.text import Text

    report = snap.locks
    text = Text("Locks  ", style="bold")
    if not report.supported:
        text.append(sanitize.one_line(report.note), style="dim")
        return text
    me = os.getpid()
    holders = [h for h in report.holders if h.pid != me]
    opened = [o for o in report.open_files if o.pid != me]
    if not holders and not opened:
        text.append("none: no other process holds or has open the store", style="dim")
        return text
    for line in [h.describe() for h in holders] + [o.describe() for o in opened]:
        text.append("\n  " + sanitize.one_line(line))
    if report.uninspectable:
        text.append(f"\n  {len(report.uninspectable)} process(es) could not be inspected", "dim")
    return text


def ledger_text(snap: Snapshot) -> Any:
    """Return the runtime ledger's open work (admissions, worker executions) in one line."""
    from rich.text import Text

    view = snap.view
    text = Text("Ledger  ", style="bold")
    if view is None:
        return text
    ledger = view.ledger
    if not ledger.present:
        text.append("none in this store (a store of the agent's own layout)", style="dim")
        return text
    adm = " · ".join(f"{k} {v:,}" for k, v in ledger.admissions.items())
    exe = " · ".join(f"{k} {v:,}" for k, v in ledger.executions.items())
    text.append(f"admissions {adm}  |  executions {exe}")
    if ledger.epoch is not None:
        text.append(f"  |  epoch {ledger.epoch}")
    return text


def gateways_text(snap: Snapshot, *, now: float | None = None) -> Any:
    """Return the gateway heartbeats, one line each (stale ones marked)."""
    from rich.text import Text

    view = snap.view
    text = Text("Gateways  ", style="bold")
    if view is None or not view.heartbeats:
        text.append("no heartbeat recorded", style="dim")
        return text
    now = snap.taken_at if now is None else now
    for h in view.heartbeats:
        state = "stale" if h.stale else "live"
        if h.alive is False:
            state += ", process gone"
        line = (
            f"{h.backend_id} · pid {h.pid} · {h.host or '?'} · "
            f"beat {render.relative_time(h.last_heartbeat, now=now)} · {state}"
        )
        text.append("\n  ")
        text.append(sanitize.one_line(line), style="yellow" if h.stale else "")
    return text


def snapshot_parts(snap: Snapshot, width: int | None, profile: str) -> list[RenderableType]:
    """Return every part of the view, top to bottom, for a width."""
    return [
        header_text(snap, profile),
        summary_text(snap),
        sessions_table(snap, width),
        locks_text(snap),
        ledger_text(snap),
        gateways_text(snap),
    ]
