"""Views of the store for people: statistics, maintenance, lock and recovery reports, backups."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any

from hermes_cli.rendering import output
from hermes_cli.rendering.render import (
    MISSING,
    Column,
    count,
    echo,
    error,
    human_bytes,
    key_values,
    local_time,
    message_counts,
    money,
    plural,
    table,
    warn,
    write,
)
from hermes_state.store.home import display_hermes_home

# --- statistics -----------------------------------------------------------------------------


def _vault_line(vault: Mapping[str, Any] | None) -> str | None:
    """Return what the vault adds to the figures, for the stats header (None: no vault)."""
    if not vault or not vault.get("years"):
        return None
    return (
        f"{vault['sessions']:,} sessions, {vault['messages']:,} messages in"
        f" {', '.join(vault['years'])} ({human_bytes(vault['bytes'])}; counted in every figure)"
    )


def stats(report: Mapping[str, Any], *, title: str = "") -> None:
    """Print one profile's statistics (documented shape): totals, sources, models, top sessions."""
    settings = output.current()
    store = report["store"]
    files = store.get("files") or {}
    key_values(
        [
            ("Sessions", report["session_count"]),
            ("Messages", message_counts(report["message_count"], report["stored_message_count"])),
            ("Store", display_hermes_home(store["path"]) if store.get("path") else None),
            ("Database file", human_bytes(files.get("db"))),
            ("WAL file", human_bytes(files.get("wal")) if files.get("wal") else None),
            ("Schema version", store.get("schema_version")),
            ("Vault", _vault_line(report.get("vault"))),
        ],
        title=title,
    )
    write("\n")
    table(
        [
            Column("Source", shrink_to=10),
            Column("Sessions", "right"),
            Column("Live msgs", "right"),
            Column("Stored msgs", "right"),
        ],
        [
            [r["source"], r["session_count"], r["message_count"], r["stored_message_count"]]
            for r in report["by_source"]
        ],
        title="By source",
    )
    if report["by_model"]:
        write("\n")
        table(
            [
                Column("Model", shrink_to=12, prefer=32),
                Column("Sessions", "right", drop=4),
                Column("Input", "right", drop=2),
                Column("Output", "right", drop=3),
                Column("Cost", "right", drop=5),
            ],
            [
                [
                    r["model"],
                    r["session_count"],
                    count(r["input_tokens"], settings),
                    count(r["output_tokens"], settings),
                    money(r["cost_usd"]),
                ]
                for r in report["by_model"]
            ],
            title="By model",
        )
    if report["top_sessions"]:
        write("\n")
        table(
            [
                Column("ID", style="id"),
                Column("Title", style="title", shrink_to=12, prefer=40),
                Column("Tokens", "right", drop=2),
                Column("Cost", "right", drop=1),
            ],
            [
                [
                    r["id"],
                    r.get("title") or MISSING,
                    count(r["total_tokens"], settings),
                    money(r.get("cost_usd")),
                ]
                for r in report["top_sessions"]
            ],
            title="Top sessions by tokens",
        )
    files = store.get("files") or {}
    write("\n")
    table(
        [Column("File"), Column("Size", "right")],
        [[name, human_bytes(size)] for name, size in files.items()],
        title="Files",
    )


# --- maintenance results --------------------------------------------------------------------


def prune_preview(result: Any, *, limit: int = 15) -> None:
    """Print what a prune would delete (the first few sessions) and what it keeps."""
    what = f"ended sessions last active before {local_time(result.cutoff)}"
    sources = getattr(result, "sources", ()) or ((result.source,) if result.source else ())
    if sources:
        what += " from " + ", ".join(sources)
    if getattr(result, "exclude_sources", ()):
        what += " except from " + ", ".join(result.exclude_sources)
    if getattr(result, "started_after", None) is not None:
        what += f", started since {local_time(result.started_after)}"
    if getattr(result, "active_after", None) is not None:
        what += f", active since {local_time(result.active_after)}"
    if not result.sessions:
        echo(f"No {what}.")
        return
    echo(
        f"{result.sessions:,} {what}: {result.messages:,} stored messages (every "
        f"generation), about {human_bytes(result.bytes_reclaimable)} of data."
    )
    details = list(getattr(result, "details", ()))[:limit]
    if details:
        _prune_details(details)
    else:
        for sid in result.session_ids[:limit]:
            echo(f"  {sid}")
    if result.sessions > limit:
        echo(f"  … and {result.sessions - limit:,} more (--json lists them all)")
    for busy in result.busy:
        echo(f"Kept {busy['session_id']}: {busy['message']}", err=True)
    if result.kept_for_lineage:
        echo(
            f"Kept {len(result.kept_for_lineage)} compression ancestor(s) of sessions that stay.",
            err=True,
        )


def _prune_details(details: list[Mapping[str, Any]]) -> None:
    """Print the sessions a prune would delete: id, title, last active, messages, size."""
    from hermes_cli.rendering.render import when

    settings = output.current()
    columns = [
        Column("ID", style="id"),
        Column("Title", shrink_to=12, prefer=40),
        Column("Last active", "right", drop=1),
        Column("Msgs", "right", drop=2),
        Column("Size", "right", drop=3),
    ]
    rows = [
        [
            d["id"],
            d.get("title") or MISSING,
            when(d.get("last_active"), settings),
            count(d.get("messages"), settings),
            human_bytes(d.get("bytes")),
        ]
        for d in details
    ]
    table(columns, rows, settings=settings)


def deletion_json(
    result: Any, optimized: Any = None, *, shape: Callable[[Any], dict[str, Any]] = dict
) -> None:
    """Print what a prune or a vault move did, and the space reclaimed after, as one JSON
    (shape: the records function that puts the result in the documented vocabulary)."""
    done = shape(result.to_dict())
    done["reclaimed"] = optimized.to_dict() if optimized is not None else None
    output.emit_json(done)


def prune_result(result: Any, optimized: Any = None) -> None:
    """Print what a prune deleted and how much space came back."""
    echo(f"Pruned {result.sessions:,} session(s) ({result.messages:,} stored messages).")
    if result.children_repointed:
        echo(f"Re-pointed {result.children_repointed:,} child session(s) to their grandparent.")
    if optimized is not None:
        optimize_result(optimized)


def optimize_result(result: Any) -> None:
    """Print the database and WAL file sizes before and after a space reclaim."""
    if getattr(result, "reindexed", False):
        echo("Rebuilt every index and search index from the tables.")
    change = result.reclaimed
    how = f"reclaimed {human_bytes(change)}" if change >= 0 else f"grew by {human_bytes(-change)}"
    line = (
        f"Database file: {human_bytes(result.db_bytes_before)} -> "
        f"{human_bytes(result.db_bytes_after)}"
    )
    if result.wal_bytes_before or result.wal_bytes_after:
        line += (
            f"; WAL file: {human_bytes(result.wal_bytes_before)} -> "
            f"{human_bytes(result.wal_bytes_after)}"
        )
    echo(f"{line} ({how}).")
    if result.vacuum_skipped:
        warn(result.vacuum_skipped)
        echo(
            "Hint: run `hermes db optimize` while the other processes are stopped, or pass "
            "--force to rewrite the file now (their writes wait until it is done).",
            err=True,
        )
    if result.forced and result.other_processes:
        warn("rewrote the store while in use by: " + ", ".join(result.other_processes))
    if result.rewrite_deferred:
        echo(f"Note: {result.rewrite_deferred}.", err=True)
        echo(
            "Hint: `hermes db optimize` (or prune --compact) rewrites the file to give them back.",
            err=True,
        )


def migrate_result(outcome: Any) -> None:
    """Print what `db migrate` did, and which agent releases can use the store afterwards."""
    path, result = outcome.path, outcome.result
    if not outcome.existed:
        echo(f"Created {path} at schema v{result.after}.")
    elif not result.changed:
        echo(f"{path} is already at schema v{result.after} with everything hermes needs.")
    elif result.before == result.after:
        echo(f"Upgraded {path} (schema v{result.after}):")
    else:
        echo(f"Migrated {path} from schema v{result.before} to v{result.after}:")
    if outcome.existed:
        for step in result.steps:
            echo(f"  - {step}")
    echo("Compatible with: " + ", ".join(result.compatible_releases) + ".")


def cjk_index_state(state: Any) -> None:
    """Print where the CJK index stands: on or off, its size, how far it has indexed."""
    if not state.installed:
        why = "turned off (no migration adds it back)" if state.off else "not in this store"
        echo(f"CJK index: off, {why}.")
        echo("Hint: `hermes db cjk-index on` creates it and indexes every message.", err=True)
        return
    size = "size unknown (no dbstat here)"
    if state.index_bytes is not None:
        share = state.index_bytes / state.file_bytes if state.file_bytes else 0.0
        size = f"{human_bytes(state.index_bytes)}, {share:.1%} of the file"
    behind = f"; {state.behind:,} message(s) not indexed yet" if state.behind else ""
    echo(f"CJK index: on ({size}){behind}.")


def cjk_index_change(change: Any) -> None:
    """Print what `db cjk-index on|off` did."""
    after = change.after
    if not after.installed:
        if not change.changed:
            echo("CJK index: already off.")
            return
        freed = change.before.index_bytes
        echo(
            "CJK index: turned off"
            + (f"; {human_bytes(freed)} of pages are free." if freed else ".")
        )
        echo("Hint: `hermes db optimize` gives the free pages back to the file system.", err=True)
        return
    if not change.changed:
        echo("CJK index: already on.")
    else:
        echo("CJK index: turned on; every message is indexed.")
    cjk_index_state(after)


def lock_report(report: Any) -> None:
    """Print who holds locks on, or has open, the store files."""
    where = display_hermes_home(report.db_path)
    if not report.supported:
        echo(f"Lock owners cannot be inspected here: {report.note}")
        return
    if not report.files:
        echo(f"No store files at {where}.")
        return
    if not report.holders and not report.open_files:
        echo(f"No process holds or has open {where}.")
    if report.holders:
        table(
            [
                Column("PID", "right"),
                Column("Command", shrink_to=16, prefer=50),
                Column("File"),
                Column("Lock", drop=2),
                Column("Access", drop=1),
            ],
            [
                [h.pid if h.pid is not None else "OFD", h.command, h.file, h.kind, h.access]
                for h in report.holders
            ],
            title="Locks held",
        )
    if report.open_files:
        if report.holders:
            write("\n")
        table(
            [Column("PID", "right"), Column("Command", shrink_to=16, prefer=50), Column("File")],
            [[o.pid, o.command, o.file] for o in report.open_files],
            title="Open without a lock",
        )
    if report.uninspectable:
        pids = ", ".join(str(p) for p in report.uninspectable)
        label = "PID" if len(report.uninspectable) == 1 else "PIDs"
        warn(f"could not inspect the open files of {label} {pids} (permission denied?)")
    if report.note:
        echo(report.note, err=True)


def check_report(result: Mapping[str, Any]) -> None:
    """Print `db check`: a line per check, then what is damaged, where, and what to do."""
    for check in result["checks"]:
        mark = "warn" if check["ok"] and check.get("warning") else "ok" if check["ok"] else "FAIL"
        echo(f"{mark:<4}  {check['name']}: {check['detail']}")
    problems = result.get("problems") or []
    if problems:
        echo("")
        echo("Damaged:")
        for p in problems:
            fix = "rebuild in place" if p["repair"] == "reindex" else "recover"
            echo(f"  {_damaged_place(p)}: {p['message']} [{fix}]")
    indexes = result.get("search_indexes") or []
    if problems and indexes:
        echo("Search indexes:")
        for s in indexes:
            echo(f"  {s['name']} ({s['kind']}): {s['state']}")
    advice = result.get("advice") or {}
    if problems and advice:
        echo("")
        echo(f"What to do: {advice['summary']}")
        for command in advice.get("commands") or []:
            echo(f"  {command}")
    echo("Store is healthy." if result["ok"] else "Problems found; see above.")


def _damaged_place(problem: Mapping[str, Any]) -> str:
    """Say where one problem is: `table messages (page 89)`, or what, for the file itself."""
    if problem["kind"] == "file" and not problem["object"] and problem["page"] is None:
        return str(problem["message"])
    where = str(problem["kind"]).replace("_", " ")
    if problem["object"]:
        where += f" {problem['object']}"
    if problem["page"] is not None:
        where += f" (page {problem['page']})"
    return where


def damage_line(result: Mapping[str, Any]) -> str:
    """Say in one line what `db check` found damaged (for the error line)."""
    places = list(dict.fromkeys(_damaged_place(p) for p in result["problems"]))
    shown = ", ".join(places[:4]) + (f" and {len(places) - 4} more" if len(places) > 4 else "")
    return f"{result['path']} is damaged: {shown}; nothing was changed"


def _hermes() -> str:
    """Return `hermes` with the -p flag that reaches this command's profile."""
    from hermes_state.store.home import current_profile_name

    name = current_profile_name()
    return "hermes" if name == "default" else f"hermes -p {name}"


def recovery_report(report: Any) -> None:
    """Print a recovery's per-table counts, exclusions, skipped ranges and verdict."""

    def expected(t: Any) -> str:
        if t.expected is None:
            return "?"
        return f"~{t.expected:,}" if t.expected_estimated else f"{t.expected:,}"

    table(
        [
            Column("Table"),
            Column("Expected", "right"),
            Column("Recovered", "right"),
            Column("Lost", "right"),
            Column("Status"),
        ],
        [
            [name, expected(t), f"{t.copied:,}", "?" if t.lost is None else f"{t.lost:,}", t.status]
            for name, t in report.tables.items()
        ],
    )
    if any(t.expected_estimated for t in report.tables.values()):
        echo("~ an estimate (the lines above the table say from what)")
    if report.excluded:
        echo(
            "Excluded (runtime ledger, not copied): "
            + ", ".join(f"{k} ({'?' if v is None else v} rows)" for k, v in report.excluded.items())
        )
    for name, rows in report.not_copied.items():
        count = "?" if rows is None else rows
        echo(f"Lost: table {name} ({count} rows) could not be copied", err=True)
    for name, t in report.tables.items():
        if t.columns_dropped:
            echo(f"Lost: columns {', '.join(t.columns_dropped)} of table {name}", err=True)
    for r in report.skipped_ranges[:20]:
        echo(f"Skipped {r.table} rowids {r.first_rowid}..{r.last_rowid}: {r.error}", err=True)
    for note in report.notes:
        echo(note, err=True)
    v = report.verification
    echo(
        f"Verification: {'ok' if v.ok else 'FAILED'} (integrity {', '.join(v.integrity) or '?'}, "
        f"{v.foreign_key_violations} foreign key violations, "
        f"{len(v.fts_problems)} search index problems, schema v{v.schema_version})"
    )
    if report.source_copy == "snapshot":
        echo(
            "Source: a snapshot of the live store taken through SQLite while it was being "
            "written (the rows committed at that moment)"
        )
    else:
        echo("Source: a copy of the store's files")
    echo(f"Wrote {report.target}; report: {report.report_path}")
    if report.accepted:
        echo(
            "The live store was not replaced. To use the recovered copy, stop Hermes and "
            f"install it (checked again, the current store kept aside): {_hermes()} restore "
            f"{shlex.quote(str(report.target))}"
        )
    elif report.partial and report.verified:
        echo(
            f"Some data could not be read or kept (see above). The partial copy was kept at "
            f"{report.target}; do not install it unless those losses are acceptable (to accept "
            "such a copy, run again with --allow-partial and a new --to path).",
            err=True,
        )


# --- backup and restore ---------------------------------------------------------------------


def backup_result(result: Any) -> None:
    """Print where a backup went, what it holds, what was rotated away and what is missing."""
    echo(
        f"Wrote {display_hermes_home(result.archive)} ({human_bytes(result.archive_bytes)}, "
        f"{plural(len(result.members), 'file')}, {result.duration_s:.1f}s)"
    )
    for name, info in result.databases.items():
        tables = info.get("tables") or {}
        echo(
            f"  {name}: schema v{info.get('schema_version')}, {tables.get('sessions', 0)} "
            f"sessions, {tables.get('messages', 0)} messages"
        )
    for path in result.removed:
        echo(f"Removed old archive {display_hermes_home(path)}")
    for path in result.cleaned:
        echo(f"Removed {display_hermes_home(path)} (left by a backup that was killed)")
    for note in result.warnings:
        warn(note)
    if not result.complete:
        missing = len(result.skipped) + len(result.damaged)
        error(
            f"Backup incomplete: {plural(missing, 'file')} could not be archived whole "
            f"({', '.join([*result.skipped, *result.damaged])}).",
            "The archive was written and marked incomplete; older archives were kept.",
        )


def backup_list(folder: Any, archives: Any) -> None:
    """Print the archives of a backup folder, newest first: date, size, what they hold."""
    settings = output.current()
    if not archives:
        echo(f"No backup archives in {display_hermes_home(folder)}.")
        return
    rows = []
    for a in archives:
        notes = []
        if not a.readable:
            notes.append("unreadable (no hermes manifest)")
        elif a.complete is False:
            notes.append("incomplete")
        if a.vault_stores:
            held = plural(a.vault_sessions or 0, "session")
            notes.append(f"vault: {plural(a.vault_stores, 'store')}, {held}")
        if a.all_profiles:
            notes.append("all profiles")
        elif a.profile:
            notes.append(f"profile {a.profile}")
        rows.append(
            [
                a.path.name,
                local_time(_timestamp(a.created_at, a.modified)),
                human_bytes(a.bytes),
                count(a.sessions, settings) if a.sessions is not None else MISSING,
                count(a.messages, settings) if a.messages is not None else MISSING,
                ", ".join(notes) or MISSING,
            ]
        )
    table(
        [
            Column("Archive", shrink_to=20),
            Column("Created"),
            Column("Size", "right"),
            Column("Sessions", "right", drop=2),
            Column("Messages", "right", drop=3),
            Column("Notes", shrink_to=8, drop=1),
        ],
        rows,
        title=f"Backups in {display_hermes_home(folder)}",
    )


def _timestamp(created_at: str | None, modified: float) -> float:
    """Return when an archive was made: its manifest's time, else the file's mtime."""
    from datetime import datetime

    if created_at:
        try:
            return datetime.fromisoformat(created_at).timestamp()
        except ValueError:
            pass
    return modified


def _store_state(state: Any) -> str:
    """Say what a store holds: `12 sessions, 53 messages, 261.0 KB`."""
    if state is None:
        return "nothing yet"
    parts = []
    if state.sessions is not None:
        parts.append(f"{state.sessions:,} sessions")
    if state.messages is not None:
        parts.append(f"{state.messages:,} messages")
    parts.append(human_bytes(state.bytes))
    return ", ".join(parts)


def restore_plan(plan: Any, *, err: bool = False) -> None:
    """Print what a restore will replace, store by store (on stderr when err: --json)."""
    made = []
    if plan.profile:
        made.append(f"profile {plan.profile}")
    if plan.created_at:
        made.append(f"made {plan.created_at}")
    origin = f" ({', '.join(made)})" if made else ""
    label = "Store file" if getattr(plan, "source", "archive") == "database" else "Archive"
    echo(f"{label}: {display_hermes_home(plan.archive)}{origin}", err=err)
    echo(f"Restore into {display_hermes_home(plan.home)}:", err=err)
    for change in plan.databases:
        now = _store_state(change.before)
        if change.before_problem:
            now = f"unreadable ({change.before_problem})"
        echo(f"  {change.name}: now {now} -> {_store_state(change.after)}", err=err)
        for note in change.notes:
            echo(f"    note: {note}", err=err)
        if change.shrinks:
            warn(f"{change.name}: the new one holds fewer sessions or messages than the store now")
    for name in plan.files_replaced:
        echo(f"  {name}: replaces the current file", err=err)
    for name in plan.files_new:
        echo(f"  {name}: new file", err=err)
    for name in plan.kept:
        echo(f"  {name}: kept as it is (runtime file of a running gateway)", err=err)
    for name in getattr(plan, "vault_left_out", ()):
        echo(f"  {name}: left out (--no-vault); the vault stays as it is", err=err)
    for change in plan.databases:
        if change.before is not None or change.before_problem:
            echo(
                f"The current {change.name} will be kept as {change.name}.pre-restore-<date>.",
                err=err,
            )
    for path in plan.cleaned:
        echo(f"Removed {display_hermes_home(path)} (left by a restore that was killed)", err=err)
    if plan.forced and plan.holders:
        warn(f"restoring while in use by: {plan.holders}")


def _copies(n: int) -> str:
    """Return `1 copy is`, `2 copies are`."""
    return "1 copy is" if n == 1 else f"{n} copies are"


def restore_result(result: Any) -> None:
    """Print what a restore put back, and where the replaced stores are kept."""
    echo(
        f"Restored {len(result.databases)} store(s) and {len(result.files)} file(s) "
        f"from {display_hermes_home(result.archive)} into {display_hermes_home(result.home)}"
    )
    for change in result.changes:
        line = f"  {change.name}: {_store_state(change.after)}"
        copy = result.pre_restore.get(change.name)
        if copy is not None:
            line += f"; the replaced one is kept at {display_hermes_home(copy)}"
        echo(line)
    for name in result.kept:
        echo(f"  kept the current {name} (runtime file)")
    if result.forced and result.holders:
        warn(f"restored while in use by: {result.holders}")
    for note in result.warnings:
        warn(note)
    if result.earlier_copies:
        total = sum(n for _, n in result.earlier_copies)
        echo(
            f"Note: {_copies(len(result.earlier_copies))} kept by earlier restores "
            f"({human_bytes(total)}) still there; delete them when you no longer need them:",
            err=True,
        )
        for path, _ in result.earlier_copies:
            echo(f"  {display_hermes_home(path)}", err=True)
