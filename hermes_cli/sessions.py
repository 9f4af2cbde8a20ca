"""`hermes sessions …`: list, search, show, export, import, prune, delete, rename, stats, recover.

Each command parses its flags, calls one library operation and hands the result to render.
"""

from __future__ import annotations

import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from hermes_cli import render
from hermes_cli.options import (
    AGE_HELP,
    ExcludeSources,
    ForceFlag,
    JsonFlag,
    OneSource,
    SessionRef,
    Sources,
    YesFlag,
    validate_age,
)

app = typer.Typer(
    help="Browse, search, export and maintain sessions.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


class ListSort(StrEnum):
    """Orderings of `sessions list`."""

    started = "started"
    active = "active"


class SearchSort(StrEnum):
    """Orderings of `sessions search`."""

    rank = "rank"
    newest = "newest"
    oldest = "oldest"


class ExportFormat(StrEnum):
    """Formats `sessions export` writes."""

    jsonl = "jsonl"
    json = "json"
    md = "md"


class Conflict(StrEnum):
    """What `sessions import` does with a session id that already exists."""

    skip = "skip"
    replace = "replace"


# --- list -----------------------------------------------------------------------------------


def _list_one(
    name: str, store: Any, *, filters: dict[str, Any], limit: int, offset: int
) -> tuple[list[dict[str, Any]], int]:
    from hermes_state import sessions as lib

    rows = lib.list_sessions(store, limit=limit, offset=offset, **filters)
    total = lib.count_sessions(
        store,
        sources=filters["sources"],
        exclude_sources=filters["exclude_sources"],
        include_archived=filters["include_archived"],
    )
    for r in rows:
        r["profile"] = name
    return rows, total


@app.command("list")
def list_sessions(
    source: Sources = None,
    exclude_source: ExcludeSources = None,
    limit: Annotated[
        int, typer.Option("--limit", min=0, metavar="N", help="Show at most N sessions.")
    ] = 20,
    offset: Annotated[
        int, typer.Option("--offset", min=0, metavar="N", help="Skip the first N sessions.")
    ] = 0,
    archived: Annotated[
        bool, typer.Option("--archived", help="Include archived sessions.")
    ] = False,
    sort: Annotated[
        ListSort, typer.Option("--sort", help="Newest start first, or most recently active first.")
    ] = ListSort.started,
    all_profiles: Annotated[
        bool,
        typer.Option(
            "--all-profiles", help="List the root and every named profile (adds Profile)."
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """List sessions (read-only): id, title or preview, source, model, size, last active."""
    from hermes_cli import stores
    from hermes_state.errors import StoreNotFoundError

    filters = {
        "sources": source or None,
        "exclude_sources": exclude_source or None,
        "include_archived": archived,
        "order": sort.value,
    }
    errors: list[dict[str, Any]] = []
    missing = False
    if all_profiles:
        pages, errors = stores.across_profiles(
            lambda name, store: _list_one(
                name, store, filters=filters, limit=limit + offset, offset=0
            )
        )
        key = "last_active" if sort is ListSort.active else "started_at"
        merged = [r for rows, _ in pages for r in rows]
        merged.sort(key=lambda r: (r.get(key) or 0, r["id"]), reverse=True)
        rows = merged[offset : offset + limit]
        total = sum(t for _, t in pages)
    else:
        try:
            with stores.read_store() as store:
                rows, total = _list_one(
                    stores.profile_name(), store, filters=filters, limit=limit, offset=offset
                )
        except StoreNotFoundError:
            rows, total, missing = [], 0, True
    if as_json:
        render.emit_json(
            {
                "sessions": [render.session_json(r) for r in rows],
                "total": total,
                "errors": errors,
            }
        )
        return
    stores.report_profile_errors(errors)
    if not rows:
        render.echo("No sessions yet." if missing else "No sessions found.")
        return
    render.session_list(rows, with_profile=all_profiles)
    render.more_rows_hint(len(rows), offset, total, limit)


# --- search ---------------------------------------------------------------------------------


@app.command("search")
def search(
    query: Annotated[
        str, typer.Argument(metavar="QUERY", help='Words, "a phrase", prefix*, or CJK text.')
    ],
    source: Sources = None,
    exclude_source: ExcludeSources = None,
    role: Annotated[
        list[str] | None,
        typer.Option(
            "--role", metavar="R", help="Only role R: user, assistant, tool (repeatable)."
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, metavar="N", help="Show at most N hits.")
    ] = 20,
    sort: Annotated[
        SearchSort, typer.Option("--sort", help="Best match first, or newest, or oldest.")
    ] = SearchSort.rank,
    as_json: JsonFlag = False,
) -> None:
    """Search message text (read-only); matches are highlighted."""
    from hermes_cli import stores
    from hermes_state import search as lib
    from hermes_state.errors import StoreNotFoundError

    try:
        with stores.read_store() as store:
            hits = lib.search_messages(
                store,
                query,
                source_filter=source or None,
                exclude_sources=exclude_source or None,
                role_filter=role or None,
                limit=limit,
                sort=sort.value,
            )
            titles = _titles(store, {h["session_id"] for h in hits})
    except StoreNotFoundError:
        hits, titles = [], {}
    if as_json:
        render.emit_json(
            {
                "query": query,
                "ordering": getattr(hits, "ordering", sort.value),
                "partial": bool(getattr(hits, "partial", False)),
                "hits": [render.hit_json(h, titles.get(h["session_id"])) for h in hits],
            }
        )
        return
    if getattr(hits, "partial", False):
        render.warn("the search stopped early; some older messages were not examined.")
    if not hits:
        render.echo(f"No messages match {query!r}.")
        return
    render.search_hits(hits, titles)


def _titles(store: Any, session_ids: set[str]) -> dict[str, str | None]:
    from hermes_state import sessions as lib
    from hermes_state.errors import SessionNotFoundError

    titles: dict[str, str | None] = {}
    for sid in session_ids:
        try:
            titles[sid] = lib.get_session_title(store, sid)
        except SessionNotFoundError:
            titles[sid] = None
    return titles


# --- show -----------------------------------------------------------------------------------


@app.command("show")
def show(
    session: SessionRef,
    include_all: Annotated[
        bool, typer.Option("--all", help="Also show rewound/superseded (inactive) messages.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Print the transcript of one session (read-only)."""
    from hermes_cli import stores
    from hermes_state import messages, portability
    from hermes_state import sessions as lib

    with stores.read_store() as store:
        sid = lib.find_session(store, session)
        row = lib.require_session(store, sid)
        rows = (
            m
            for m in messages.iter_messages(store, sid, include_inactive=True)
            if include_all or m.get("active", 1) or m.get("compacted")
        )
        if as_json:
            portability.write_record({**row, "messages": rows}, sys.stdout)
            sys.stdout.write("\n")
            return
        render.session_header(row)
        render.echo()
        shown = render.transcript(rows)
        if not shown:
            render.echo("(no messages)")


# --- export / import ------------------------------------------------------------------------


@app.command("export")
def export(
    output: Annotated[
        str,
        typer.Option(
            "-o",
            "--output",
            metavar="PATH",
            help="New file to write (never overwritten); - for stdout.",
        ),
    ] = "-",
    fmt: Annotated[ExportFormat, typer.Option("--format", help="Output format.")] = (
        ExportFormat.jsonl
    ),
    session_ids: Annotated[
        list[str] | None,
        typer.Option("--session-id", metavar="ID", help="Export this session (repeatable)."),
    ] = None,
    source: OneSource = None,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="AGE",
            callback=validate_age,
            help=f"Only sessions started before AGE ago. {AGE_HELP}",
        ),
    ] = None,
    newer_than: Annotated[
        str | None,
        typer.Option(
            "--newer-than",
            metavar="AGE",
            callback=validate_age,
            help=f"Only sessions started within AGE. {AGE_HELP}",
        ),
    ] = None,
) -> None:
    """Export sessions with every message (read-only, streamed: memory stays flat)."""
    from hermes_cli import stores
    from hermes_cli.options import cutoff
    from hermes_state import portability
    from hermes_state import sessions as lib
    from hermes_state.errors import StoreNotFoundError

    before = cutoff(older_than)
    after = cutoff(newer_than)
    writer = {
        ExportFormat.jsonl: portability.write_jsonl,
        ExportFormat.json: portability.write_json,
        ExportFormat.md: portability.write_markdown,
    }[fmt]
    to_stdout = output == "-"
    target = None if to_stdout else portability.check_export_target(Path(output))
    try:
        with stores.read_store() as store:
            ids = [lib.find_session(store, ref) for ref in session_ids] if session_ids else None
            records = portability.export_all(
                store, source=source, session_ids=ids, started_after=after, started_before=before
            )
            if to_stdout:
                counts = writer(records, sys.stdout)
            else:
                with render.progress("Exporting sessions") as bar:
                    counts = portability.export_to_path(
                        records, target, writer, progress=bar.advance
                    )
    except StoreNotFoundError:
        # A profile that never recorded anything exports an empty (but valid) file.
        if to_stdout:
            writer(iter(()), sys.stdout)
        else:
            portability.export_to_path(iter(()), target, writer)
        render.echo("No store yet: nothing to export.", err=True)
        return
    where = "stdout" if to_stdout else str(target)
    render.echo(
        f"Exported {counts.sessions} session{'s' if counts.sessions != 1 else ''} "
        f"({counts.messages} messages) to {where}",
        err=True,
    )


@app.command("import")
def import_(
    path: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            exists=True,
            dir_okay=False,
            readable=True,
            help="A jsonl or json export.",
        ),
    ],
    on_conflict: Annotated[
        Conflict,
        typer.Option("--on-conflict", help="For ids already in the store: keep or replace them."),
    ] = Conflict.skip,
) -> None:
    """Import an export made by `sessions export` (one transaction per session)."""
    from hermes_cli import stores
    from hermes_state import portability

    with stores.write_store(create=True) as store, render.progress("Importing sessions") as bar:
        result = portability.import_sessions(
            store, path, on_conflict=on_conflict.value, progress=bar.advance
        )
    render.echo(
        f"Imported {result.imported} session{'s' if result.imported != 1 else ''} "
        f"({result.messages} messages); replaced {result.replaced}; "
        f"skipped {result.skipped} already present."
    )
    for note in result.warnings:
        render.warn(note)
    for issue in result.errors:
        where = f" (session {issue.session_id})" if issue.session_id else ""
        render.echo(f"Error: line {issue.line}{where}: {issue.message}", err=True)
    if result.errors:
        render.echo(
            f"Hint: {len(result.errors)} session(s) were not imported; fix those lines and "
            "re-run (sessions already imported are skipped).",
            err=True,
        )
        raise typer.Exit(1)


# --- edits ----------------------------------------------------------------------------------


@app.command("delete")
def delete(session: SessionRef, yes: YesFlag = False) -> None:
    """Delete one session and all its messages."""
    from hermes_cli import stores
    from hermes_state import maintenance
    from hermes_state import sessions as lib

    with stores.write_store() as store:
        sid = lib.find_session(store, session)
        row = lib.require_session(store, sid)
        label = f"'{sid}'" + (f" ({row['title']})" if row.get("title") else "")
        pinned = " (it is PINNED)" if row.get("pinned") else ""
        render.confirm(
            f"Delete session {label}{pinned} and its {row.get('message_count') or 0} messages?",
            assume_yes=yes,
        )
        deleted = maintenance.delete_session(store, sid)
    render.echo(f"Deleted session '{sid}' ({deleted} messages).")


@app.command("rename")
def rename(
    session: SessionRef,
    title: Annotated[list[str], typer.Argument(metavar="TITLE", help="The new title.")],
) -> None:
    """Give a session a new (unique) title."""
    from hermes_cli import stores
    from hermes_state import sessions as lib

    text = " ".join(title)
    with stores.write_store() as store:
        sid = lib.find_session(store, session)
        stored = lib.set_session_title(store, sid, text)
    if stored is None:
        render.echo(f"Session '{sid}' title cleared.")
    else:
        render.echo(f"Session '{sid}' renamed to: {stored}")


# --- prune ----------------------------------------------------------------------------------


@app.command("prune")
def prune(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            metavar="AGE",
            callback=validate_age,
            help=f"Delete ended sessions last active before AGE ago. {AGE_HELP}",
        ),
    ] = "90d",
    source: OneSource = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be deleted; delete nothing.")
    ] = False,
    yes: YesFlag = False,
    force: ForceFlag = False,
) -> None:
    """Delete old ended sessions (never pinned ones), then give the space back."""
    from hermes_cli import stores
    from hermes_cli.durations import cutoff_to_days
    from hermes_cli.options import cutoff
    from hermes_state import maintenance
    from hermes_state.errors import StoreBusyError

    days = cutoff_to_days(cutoff(older_than) or time.time())
    with stores.write_store() as store:
        preview = maintenance.prune_sessions(store, days, source=source, dry_run=True)
        render.prune_preview(preview)
        if dry_run:
            render.echo("Dry run: nothing deleted.")
            return
        if not preview.sessions:
            return
        others = [] if force else maintenance.other_processes(store.path)
        if others:
            raise StoreBusyError(
                f"{store.path.name} is in use by {', '.join(others)}; refusing to prune under it"
            )
        render.confirm(
            f"Delete these {preview.sessions} session(s) ({preview.messages} messages)?",
            assume_yes=yes,
        )
        with render.progress("Pruning sessions"):
            result = maintenance.prune_sessions(store, days, source=source)
            optimized = (
                maintenance.optimize(store, vacuum=True, force=force) if result.sessions else None
            )
    render.prune_result(result, optimized)


# --- stats ----------------------------------------------------------------------------------


def _stats_one(name: str, store: Any) -> dict[str, Any]:
    from hermes_state import sessions as lib

    by_source = lib.counts_by_source(store)
    return {
        "profile": name,
        "total_sessions": sum(r["sessions"] for r in by_source),
        "total_messages": sum(r["messages"] for r in by_source),
        "by_source": by_source,
        "by_model": lib.usage_by_model(store),
        "top_sessions": lib.top_sessions_by_tokens(store, 10),
        "store": lib.store_stats(store),
    }


def _empty_stats(name: str, path: Path) -> dict[str, Any]:
    return {
        "profile": name,
        "total_sessions": 0,
        "total_messages": 0,
        "by_source": [],
        "by_model": [],
        "top_sessions": [],
        "store": {"path": str(path), "exists": False, "files": {}, "total_bytes": 0},
    }


@app.command("stats")
def stats(
    all_profiles: Annotated[
        bool, typer.Option("--all-profiles", help="Report the root and every named profile.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Show counts by source, tokens and cost by model, top sessions and file sizes (read-only)."""
    from hermes_cli import stores
    from hermes_state.errors import StoreNotFoundError

    if all_profiles:
        reports, errors = stores.across_profiles(_stats_one)
        if as_json:
            render.emit_json({"profiles": reports, "errors": errors})
            return
        stores.report_profile_errors(errors)
        for i, report in enumerate(reports):
            if i:
                render.echo()
            render.stats(report, title=f"Profile: {report['profile']}")
        return
    try:
        with stores.read_store() as store:
            report = _stats_one(stores.profile_name(), store)
    except StoreNotFoundError:
        report = _empty_stats(stores.profile_name(), stores.db_path())
        if not as_json:
            render.echo("No sessions yet.")
            render.key_values([("Total sessions", 0), ("Total messages", 0)])
            return
    if as_json:
        render.emit_json(report)
        return
    render.stats(report)


# --- recover --------------------------------------------------------------------------------


@app.command("recover")
def recover(
    to: Annotated[
        Path,
        typer.Option("--to", metavar="NEW.db", help="The new store to write (must not exist)."),
    ],
    source: Annotated[
        Path | None,
        typer.Option("--from", metavar="PATH", help="Store to salvage (default: this profile's)."),
    ] = None,
    allow_partial: Annotated[
        bool, typer.Option("--allow-partial", help="Accept a result that lost unreadable rows.")
    ] = False,
    report: Annotated[
        Path | None,
        typer.Option("--report", metavar="PATH", help="Where to write the JSON report."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Copy everything readable from a store into a new file; the source is never written."""
    from hermes_cli import stores
    from hermes_state import recover as lib

    src = source or stores.db_path()
    with render.progress("Recovering") as bar:
        result = lib.recover(
            src,
            to,
            allow_partial=allow_partial,
            report_path=report,
            progress=lambda table, copied, total: bar.set(f"Recovering {table}", copied, total),
        )
    if as_json:
        render.emit_json(result.to_dict())
    else:
        render.echo(result.summary())  # first line: whether anything was lost, and how much
        render.recovery_report(result)
    if not result.accepted:
        raise typer.Exit(1)
