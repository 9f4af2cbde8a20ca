"""`hermes watch`: a live, read-only view of the store, refreshed about every second: the
sessions active now, messages per minute, file sizes, lock holders, the runtime ledger and
gateway heartbeats.

This module holds the command and the snapshot's machine forms (json, and the tidy rows of jsonl,
csv and tsv); the rich renderables of the view are in `watch_views`, the screen itself is
`watch_app` (Textual, imported only when it runs).
"""

from __future__ import annotations

import csv
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hermes_cli.rendering import output, records, render, sanitize
from hermes_cli.shared.options import ColorOption, FormatOption, JsonFlag, command, output_format

if TYPE_CHECKING:
    from hermes_state.reports.watch_snapshot import Snapshot

ROW_KEYS = records.WATCH_ROW_KEYS
EXIT_FOR_PROBLEM = {"busy": 75, "corrupt": 1, "error": 1}


def register(root: Any) -> None:
    """Add `hermes watch` to the app."""
    command(
        root,
        "watch",
        examples=[
            "hermes watch",
            "hermes -p coder watch --interval 2",
            "hermes watch --once --format json | jq .messages_per_minute",
            "hermes watch --format json --count 60 > minute.jsonl",
            "hermes watch --once --format tsv",
        ],
        keys="Keys:\n\n\b\n  q  quit\n  p  pause or resume\n  r  refresh now\n",
    )(watch)


def watch(
    once: Annotated[
        bool, typer.Option("--once", help="Print one snapshot and exit (for scripts and tests).")
    ] = False,
    count: Annotated[
        int | None,
        typer.Option(
            "--count",
            min=1,
            metavar="N",
            help="Print N snapshots, one every --interval, and exit (instead of the live view).",
        ),
    ] = None,
    interval: Annotated[
        float,
        typer.Option("--interval", min=0.2, metavar="SECONDS", help="Time between refreshes."),
    ] = 1.0,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    color: ColorOption = output.ColorMode.auto,
) -> None:
    """Watch the store live (read-only): sessions active now, messages per minute, sizes, locks.

    A session is active when it has a message (or started) within the last 5 minutes; its rate
    and the store's messages per minute count the last 60 seconds. Each refresh opens the store
    read-only, reads it in a few short statements (none holds a read across two of them, so an
    agent writing meanwhile waits for one short statement at most), and closes it: between
    refreshes the store is not open at all. Lock holders are the `hermes db lockowners` data.

    On a terminal this is a full-screen view. --once prints one snapshot; with --format json,
    jsonl, csv or tsv and no --once, snapshots stream every --interval until interrupted (or
    --count N): json prints one document per line, jsonl/csv/tsv the tidy rows (taken_at,
    section, item, metric, value). --once exits 75 when the store stayed busy and 1 when it
    cannot be read; a store not created yet is a snapshot saying so (exit 0).
    """
    from hermes_cli.shared import stores

    settings = output.configure(output_format(fmt, as_json), color=color)
    stores.require_home(stores.db_path().parent)
    refresh = make_refresh(stores.db_path())
    limit = 1 if once else count
    interactive = output.isatty(sys.stdin) and output.isatty(sys.stdout)
    if limit is None and not settings.machine:
        if not interactive:
            from hermes_state.store.errors import HermesStateError

            raise HermesStateError(
                "hermes watch needs a terminal (stdin and stdout) for its live view",
                hint="In scripts: hermes watch --once --format json (one snapshot), or "
                "--format json --count N (a stream).",
            )
        from hermes_cli.apps.watch_app import WatchApp

        WatchApp(refresh, interval=interval, profile=stores.profile_name()).run()
        return
    code = 0
    try:
        for i, snap in enumerate(_every(refresh, interval, limit)):
            _emit(snap, settings, first=i == 0, stream=limit != 1)
            code = EXIT_FOR_PROBLEM.get(snap.problem or "", 0)
    except KeyboardInterrupt:
        return  # Ctrl-C is how a stream of snapshots is meant to end
    if limit == 1 and code:
        raise typer.Exit(code)


def make_refresh(path: Path) -> Callable[[], Snapshot]:
    """Return the refresh of a watcher of the store at path: each call opens it read-only (as
    every read command does), takes a snapshot and closes it; state is kept between calls."""
    from functools import partial

    from hermes_cli.shared import stores
    from hermes_state.reports.watch_snapshot import WatchState, take_snapshot

    state = WatchState()
    opener = partial(stores.read_store, path)
    return lambda: take_snapshot(path, state, opener)


def _every(refresh: Any, interval: float, limit: int | None) -> Iterator[Snapshot]:
    """Yield a snapshot every interval seconds, limit times (None: until interrupted)."""
    n = 0
    due = time.monotonic()
    while limit is None or n < limit:
        if n:
            time.sleep(max(0.0, due - time.monotonic()))
        due = max(due + interval, time.monotonic())
        yield refresh()
        n += 1


# --- the machine forms ----------------------------------------------------------------------


def snapshot_document(snap: Snapshot, profile: str | None = None) -> dict[str, Any]:
    """Return a snapshot in the documented JSON shape (times ISO `_at`, flags booleans)."""
    from hermes_cli.shared import stores

    view = snap.view
    locks = snap.locks.to_dict()
    locks.pop("db_path", None)
    doc: dict[str, Any] = {
        "profile": profile or stores.profile_name(),
        "path": str(snap.path),
        "taken_at": records.iso_utc(snap.taken_at),
        "store_ms": round(snap.store_ms, 2),
        "problem": None
        if snap.problem is None
        else {"error": snap.problem, "message": snap.problem_message},
        "files": dict(snap.files),
        "total_bytes": sum(snap.files.values()),
        "schema_version": view.schema_version if view else None,
        "journal_mode": view.journal_mode if view else None,
        "newest_message_id": view.newest_message_id if view else None,
        "messages_per_minute": view.messages_per_minute if view else None,
        "active_session_count": view.active_count if view else None,
        "active_sessions": [
            {
                "session_id": a.session_id,
                "title": a.title,
                "source": a.source,
                "model": a.model,
                "last_message_at": records.iso_utc(a.last_message_at),
                "last_role": a.last_role,
                "last_preview": a.last_preview,
                "messages_last_minute": a.messages_last_minute,
            }
            for a in (view.active if view else [])
        ],
        "locks": locks,
        "ledger": None,
        "gateways": [],
    }
    if view is not None:
        ledger = view.ledger
        doc["ledger"] = {
            "present": ledger.present,
            "epoch": ledger.epoch,
            "admissions": dict(ledger.admissions),
            "executions": dict(ledger.executions),
        }
        doc["gateways"] = [
            {
                "backend_id": h.backend_id,
                "pid": h.pid,
                "host": h.host,
                "profile": h.profile,
                "started_at": records.iso_utc(h.started_at),
                "last_heartbeat_at": records.iso_utc(h.last_heartbeat),
                "age_s": None if h.age_s is None else round(h.age_s, 1),
                "stale": h.stale,
                "alive": h.alive,
            }
            for h in view.heartbeats
        ]
    return doc


def snapshot_rows(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Yield a snapshot document as tidy {taken_at, section, item, metric, value} rows."""
    at = doc["taken_at"]

    def row(section: str, item: Any, metric: str, value: Any) -> dict[str, Any]:
        return {"taken_at": at, "section": section, "item": item, "metric": metric, "value": value}

    if doc["problem"]:
        yield row("store", None, "problem", doc["problem"]["error"])
    for metric in (
        "messages_per_minute",
        "active_session_count",
        "newest_message_id",
        "schema_version",
        "journal_mode",
        "total_bytes",
        "store_ms",
    ):
        yield row("store", None, metric, doc[metric])
    for name, size in doc["files"].items():
        yield row("files", name, "bytes", size)
    for a in doc["active_sessions"]:
        for metric in ("messages_last_minute", "last_message_at", "last_role", "title", "source"):
            yield row("active", a["session_id"], metric, a[metric])
    for h in doc["locks"]["holders"]:
        yield row("locks", h["pid"], h["kind"], f"{h['access']} {h['file']}")
    for o in doc["locks"]["open_files"]:
        yield row("locks", o["pid"], "open (no lock)", o["file"])
    if doc["ledger"] and doc["ledger"]["present"]:
        for part in ("admissions", "executions"):
            for status, n in doc["ledger"][part].items():
                yield row("ledger", part, status, n)
    for g in doc["gateways"]:
        yield row("gateways", g["backend_id"], "last_heartbeat_at", g["last_heartbeat_at"])
        yield row("gateways", g["backend_id"], "stale", g["stale"])


def _emit(snap: Snapshot, settings: output.Settings, *, first: bool, stream: bool) -> None:
    """Print one snapshot in the chosen format (a stream: one line each, one header)."""
    doc = snapshot_document(snap)
    fmt = settings.format
    if fmt is output.Format.json:
        if stream:
            sys.stdout.write(output.dumps(doc) + "\n")
        else:
            output.emit_json(doc)
    elif fmt is output.Format.jsonl:
        output.emit_jsonl(snapshot_rows(doc))
    elif fmt in (output.Format.csv, output.Format.tsv):
        _emit_delimited(list(snapshot_rows(doc)), fmt, header=first)
    else:
        if not first:
            render.echo()
        print_snapshot(snap, settings)
    sys.stdout.flush()  # a reader at the other end of a pipe sees each snapshot as it comes


def _emit_delimited(rows: list[dict[str, Any]], fmt: output.Format, *, header: bool) -> None:
    """Print tidy rows as CSV or TSV, the header line only before the first snapshot."""
    safe = sanitize.multiline if output.isatty(sys.stdout) else str
    if fmt is output.Format.tsv:
        lines = ["\t".join(ROW_KEYS)] if header else []
        lines += [
            "\t".join(safe(output.tsv_field(output.cell(r[k]))) for k in ROW_KEYS) for r in rows
        ]
        sys.stdout.write("".join(line + "\n" for line in lines))
        return
    writer = csv.writer(sys.stdout, lineterminator="\n")
    if header:
        writer.writerow(ROW_KEYS)
    for r in rows:
        writer.writerow([safe(output.cell(r[k])) for k in ROW_KEYS])


def print_snapshot(snap: Snapshot, settings: output.Settings) -> None:
    """Print one snapshot for people: fitted to a terminal, whole into a pipe or a file."""
    from rich.text import Text

    from hermes_cli.apps.watch_views import snapshot_parts
    from hermes_cli.shared import stores

    # Into a pipe nothing is cut, as in every command.
    console = render.stdout_console(settings, settings.width or 100_000)
    with console.capture() as captured:
        for part in snapshot_parts(snap, settings.width, stores.profile_name()):
            if isinstance(part, Text) and settings.width is None:
                part.no_wrap = False
            console.print(part)
    # Rich pads every line to the width; into a pipe or a file that is only noise.
    sys.stdout.write("".join(line.rstrip(" ") + "\n" for line in captured.get().splitlines()))
