"""Salvage a damaged store into a new file: copy first, read what can be read, verify, report.

The source is never opened by SQLite: its files are copied into a work directory and only the
copy is read. The target is a new file in the source's own layout and schema version (SPEC
§19.7): the source's tables, indexes, views and triggers are created again from its schema, every
table's rows are copied with every column — the agent's, unknown plugin tables included — except
the runtime ledger's, and the search indexes are rebuilt in their own shape. Only when the
source's schema cannot be read is the target a new schema-31 store that the known tables are
copied into. The target is verified and reported, never installed in place of the live store.

A healthy copy (SQLite's quick_check passes) is copied whole with VACUUM INTO, its indexes
checked rather than rebuilt. A damaged one is read in layers, each used where the one before
failed: whole tables in rowid order; around damage, a galloping probe for where range reads work
again and then single-rowid reads of the damaged span; then every table's b-tree is walked page
by page (``pages``) and its leaf cells are counted, so rows SQLite's cursor did not return — an
out-of-order rowid ends an ordered scan without an error — are read from the pages; leaf pages no
b-tree reaches are attributed to tables by the shape of their records (``salvage``), and rows
that fit no table, break the tool's assumptions or may be deleted data are kept aside in the
target's ``lost_and_found`` table. The header is repaired from the file's real page layout, the
schema read off surviving sqlite_master leaves when page 1 is gone, and a WAL that may not belong
to the main file judged by salvaging with and without it.

A partial salvage (some rows unreadable) is kept as the target either way, because it is the
best copy of the data there is and redoing the work would give the same file. Without
``allow_partial`` such a salvage is not *accepted* (``report.accepted`` is False): the CLI then
exits 1 and tells the operator not to install it unless the listed losses are acceptable.

This module is the entry point and runs the steps in order; each step lives in a module of its
own: ``recover_source`` (the work copy), ``recover_whole`` (the healthy fast path),
``recover_target`` (the new store and its writers), ``recover_scan`` (reads through SQLite),
``recover_pages`` (reads off the pages), ``recover_expect`` (how many rows each table held
before the damage, so that lost = expected - recovered), ``recover_verify`` and
``recover_report``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
from pathlib import Path

from hermes_state.recover import lost_and_found, pages, recover_expect, salvage
from hermes_state.recover.recover_crosscheck import set_aside_disagreeing
from hermes_state.recover.recover_pages import (
    page_pass,
    prewalk,
    table_shapes,
)
from hermes_state.recover.recover_report import (
    PLACEHOLDER_TITLE,
    Progress,
    RecoveryError,
    RecoveryReport,
    SkippedRange,
    TableResult,
    Verification,
    score,
    table_status,
    write_report,
)
from hermes_state.recover.recover_scan import (
    Budget,
    RangeReader,
)
from hermes_state.recover.recover_source import (
    check_paths,
    count_rows,
    is_derived,
    master_entries,
    open_copy,
    raw_pages,
    read_schema,
    schema_from_pages,
    source_info,
    source_tables,
    take_source,
    wal_doubts,
)
from hermes_state.recover.recover_target import (
    FALLBACK_TABLES,
    Plan,
    TableWriter,
    copy_plain,
    fallback_layout,
    finish_layout,
    meta_keys_of,
    pause_fts_triggers,
    reconcile_orphans,
    remove_target,
    source_layout,
)
from hermes_state.recover.recover_verify import IndexCheck, verify
from hermes_state.recover.recover_whole import copy_healthy, healthy
from hermes_state.store import cjk, schema, workdirs
from hermes_state.store.connection import Store
from hermes_state.store.errors import is_corruption_error
from hermes_state.store.home import make_output_dir as make_target_dir
from hermes_state.store.sql import companion

# What callers import from here (the CLI, the tests, bench/); the rest is internal.
__all__ = [
    "PLACEHOLDER_TITLE",
    "Progress",
    "RecoveryError",
    "RecoveryReport",
    "SkippedRange",
    "TableResult",
    "Verification",
    "recover",
]


WORK_PREFIX = "hermes-recover-"


def recover(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    allow_partial: bool = False,
    report_path: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    copy_whole: bool = True,
) -> RecoveryReport:
    """Salvage every readable row of the store at source into a new verified store at target.

    ``copy_whole=False`` reads a healthy source row by row too (as a damaged one is read),
    instead of copying it whole.
    """
    started = time.monotonic()
    # Through a symlink the store's -wal/-journal sit beside the link's target, where SQLite
    # keeps them: the source is the file the link names.
    source = Path(os.path.realpath(Path(source).expanduser()))
    target = Path(target).expanduser().absolute()
    report_file = (
        Path(report_path).expanduser().absolute()
        if report_path is not None
        else Path(str(target) + ".recovery.json")
    )
    check_paths(source, target, report_file)
    make_target_dir(target.parent)
    workdirs.remove_stale_work_dirs(target.parent, (WORK_PREFIX,))
    report = RecoveryReport(
        source=str(source),
        target=str(target),
        report_path=str(report_file),
        allow_partial=allow_partial,
    )
    # Private (0700) and locked while in use: it holds a copy of every conversation, and the
    # next run removes it if this one is killed.
    scratch = workdirs.make_work_dir(target.parent, WORK_PREFIX)
    work = scratch.path
    try:
        copy = take_source(source, work, report)
        wal = companion(copy, "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            report = _judge_wal(copy, target, report, progress, copy_whole)
        else:
            _recover_copy(copy, target, report, progress, copy_whole)
    except sqlite3.DatabaseError as exc:
        remove_target(target)
        if is_corruption_error(exc):
            raise RecoveryError(f"Recovery stopped on unreadable data: {exc}") from exc
        raise
    finally:
        scratch.remove()
    report.duration_s = time.monotonic() - started
    write_report(report, report_file)
    return report


def _judge_wal(
    copy: Path,
    target: Path,
    report: RecoveryReport,
    progress: Progress | None,
    copy_whole: bool = True,
) -> RecoveryReport:
    """Salvage with the copied WAL and, when it may not belong, without it; keep the better."""
    bare_dir = copy.parent / "without-wal"
    bare_dir.mkdir()
    bare = bare_dir / copy.name
    shutil.copyfile(copy, bare)  # before SQLite folds the WAL into the copy
    doubts = wal_doubts(copy)
    _recover_copy(copy, target, report, progress, copy_whole)
    if not doubts and (report.method == "copy" or not copy_whole):
        report.wal = "replayed (its frames fit the main file)"
        return report
    alt_target = bare_dir / ("alt-" + target.name)
    alt = RecoveryReport(
        source=report.source,
        target=report.target,
        report_path=report.report_path,
        allow_partial=report.allow_partial,
        source_bundle=dict(report.source_bundle),
        source_fingerprint=dict(report.source_fingerprint),
    )
    try:
        _recover_copy(bare, alt_target, alt, None, copy_whole)
    except RecoveryError:
        report.wal = "replayed (without it the main file could not be read)"
        return report
    ours, theirs = score(report), score(alt)
    why = "; ".join(doubts) or "the salvage with it found damage"
    stale = any(d.startswith("stale") for d in doubts)
    if theirs > ours or (stale and any(t.copied for t in alt.tables.values())):
        # A WAL older than its main file would put old page images over newer ones.
        remove_target(target)
        os.replace(alt_target, target)
        alt.wal = (
            f"ignored: {why}"
            if stale
            else f"ignored: {why}; without it the salvage kept more ({theirs} vs {ours})"
        )
        alt.notes.append("the source's WAL was not replayed: " + alt.wal)
        return alt
    remove_target(alt_target)
    more = "more" if ours > theirs else "as much"
    report.wal = f"replayed: {why}, but with it the salvage kept {more} ({ours} vs {theirs})"
    return report


def _recover_copy(
    copy: Path,
    target: Path,
    report: RecoveryReport,
    progress: Progress | None,
    copy_whole: bool = True,
) -> None:
    """Salvage the work copy into the target; a whole copy that fails its checks is redone.

    The whole copy (VACUUM INTO) carries index pages over as they are, so damage quick_check
    does not see (an index entry with a flipped bit) reaches the target and fails its checks;
    read row by row instead, every index of the target is built from the rows themselves.
    """
    _salvage_into(copy, target, report, progress, copy_whole)
    if report.method != "copy" or report.verification.ok:
        return
    problems = [p for p in report.verification.integrity if p != "ok"]
    why = "; ".join([*problems, *report.verification.fts_problems][:3])
    remove_target(target)
    fresh = RecoveryReport(
        source=report.source,
        target=report.target,
        report_path=report.report_path,
        allow_partial=report.allow_partial,
        source_bundle=dict(report.source_bundle),
        source_fingerprint=dict(report.source_fingerprint),
    )
    _salvage_into(copy, target, fresh, progress, copy_whole=False)
    fresh.notes.append(f"a whole copy failed its checks ({why}); the source was read row by row")
    report.__dict__.update(fresh.__dict__)


def _salvage_into(
    copy: Path,
    target: Path,
    report: RecoveryReport,
    progress: Progress | None,
    copy_whole: bool = True,
) -> None:
    """Salvage the work copy into the target and verify it (the core of recover())."""
    src = open_copy(copy, report)
    try:
        store, plan, index_check = _make_target(copy, src, target, report, progress, copy_whole)
        report.layout = plan.layout
        expected: int | None = schema.SCHEMA_VERSION
        if plan.layout == "source" and src is not None:
            with contextlib.suppress(sqlite3.DatabaseError):
                expected = schema.stored_version(src)
        try:
            meta_keys: set[str] = set()
            lost = lost_and_found.LostAndFound(store)
            store.conn.execute("PRAGMA foreign_keys=OFF")  # rows arrive parents-last
            if report.method == "copy":
                meta_keys = meta_keys_of(store)
            else:
                if plan.gated:
                    pause_fts_triggers(store)
                meta_keys = _copy_tables(src, copy, store, plan, report, progress, lost)
            for table, n in lost_and_found.quarantine_invalid(store, lost).items():
                result = report.tables.get(table)
                if result is not None:
                    result.copied -= n
                    result.invalid += n
                    result.to_lost_and_found += n
                    result.status = "partial"
            placeholders, report.parents_cleared = store.write(reconcile_orphans)
            report.placeholder_sessions, report.placeholder_ids = len(placeholders), placeholders
            if report.method != "copy":
                finish_layout(store, plan, report)
            lost.flush()
            report.lost_and_found = dict(lost.counts)
            recover_expect.settle(report, store.conn)
            store.conn.execute("PRAGMA foreign_keys=ON")
            if report.schema_from_pages:
                expected = schema.stored_version(store.conn)  # whatever version the pages held
            if index_check is not None and report.lost_and_found.get(lost_and_found.INVALID):
                index_check.wait()
                index_check = None  # rows were moved out of the copy: check the target itself
            report.verification = verify(store, report, meta_keys, expected, index_check)
        except BaseException:
            if index_check is not None:
                index_check.cancel()
            store.close()
            remove_target(target)  # half-made and unreported: free the path for a retry
            raise
        store.close()
    finally:
        if src is not None:
            src.close()


def _make_target(
    copy: Path,
    src: sqlite3.Connection | None,
    target: Path,
    report: RecoveryReport,
    progress: Progress | None,
    copy_whole: bool,
) -> tuple[Store, Plan, IndexCheck | None]:
    """Create the target: a whole copy of a healthy source (with its index checks running),
    else an empty store in the source's layout, else in the fallback layout."""
    if copy_whole and src is not None and healthy(src, report):
        whole = copy_healthy(copy, src, target, report, progress)
        if whole is not None:
            store, index_check = whole
            return store, Plan(layout="source", tables=list(report.tables)), index_check
        report.method = "salvage"
        report.search_indexes = "rebuilt"
        report.tables.clear()
        report.excluded.clear()
    made = source_layout(src, target, report) if src is not None else None
    if made is None and (src is None or read_schema(src) is None):
        rows = schema_from_pages(copy)
        made = source_layout(None, target, report, rows) if rows else None
        if made is not None:
            report.schema_from_pages = True
            report.notes.append(
                "the schema was unreadable; it was read from the leaf pages of "
                "sqlite_master that survive, and each table from its own pages"
            )
    if made is None:
        if src is not None:
            report.notes.append(
                "the source's schema could not be used; its known tables were copied "
                f"into a new schema-{schema.SCHEMA_VERSION} store"
            )
        made = fallback_layout(target, src)
    store, plan = made
    return store, plan, None


def _copy_tables(
    src: sqlite3.Connection | None,
    copy: Path,
    store: Store,
    plan: Plan,
    report: RecoveryReport,
    progress: Progress | None,
    lost: lost_and_found.LostAndFound,
) -> set[str]:
    """Copy the rows of every planned table, then check each against the pages and read what
    SQLite could not; return the state_meta keys copied."""
    meta_keys: set[str] = set()
    tables = source_tables(src) if src is not None else {}
    budget = Budget()
    for name in schema.LEDGER_TABLES:
        report.excluded[name] = (
            count_rows(src, name) if src is not None and name in tables else None
        )
    if plan.layout == "fallback" and src is not None:
        for name in sorted(tables):
            if name in plan.tables or name in schema.LEDGER_TABLES or is_derived(name, tables):
                continue
            report.not_copied[name] = count_rows(src, name)
        for name in FALLBACK_TABLES:
            if name not in tables and name != "delivery_obligations":
                report.tables[name] = TableResult(name, None, status="absent")
    writers: dict[str, TableWriter] = {}
    scans: dict[str, pages.TreeScan | None] = {}
    raw = raw_pages(copy, report)
    master = master_entries(src)
    shapes: dict[str, salvage.Shape] = {}
    if raw is not None:
        if not {"sessions", "messages"} <= set(master):
            # The schema is damaged: its rows may still sit on leaf pages of sqlite_master.
            for name, rec in salvage.schema_records(raw, raw.table_leaves(set())).items():
                master.setdefault(name, rec)
        shapes = table_shapes(src, store, master)

    def make_writer(name: str, cols: list[str]) -> TableWriter:
        result = report.tables.get(name)
        if result is None or result.status == "absent":
            result = report.tables[name] = TableResult(name, None)
        return TableWriter(store, result, cols, progress, lost)

    for name in plan.tables:
        if src is None or name in schema.LEDGER_TABLES or name == cjk.PENDING_TABLE:
            continue  # the ledger is excluded; the CJK queue is rebuilt
        result = TableResult(name, count_rows(src, name))
        report.tables[name] = result
        if name == "delivery_obligations" and plan.layout == "fallback":
            store.write(schema.ensure_delivery_obligations)
            store.forget_columns()
        src_info = source_info(src, name)
        src_cols = [r[1] for r in src_info]
        target_cols = store.columns(name)
        cols = [c for c in target_cols if c in src_cols]
        result.columns_dropped = [c for c in src_cols if c not in target_cols]
        if not cols:
            result.status = "unreadable"
            result.errors.append("the source table's columns could not be read")
            continue
        if name in plan.without_rowid:
            copy_plain(src, store, result, cols)
            continue
        writer = TableWriter(store, result, cols, progress, lost)
        if raw is not None:
            scans[name] = prewalk(raw, master, shapes, name, writer)
        RangeReader(src, writer, report, budget).run()
        writers[name] = writer
    if raw is not None:
        try:
            page_pass(raw, master, shapes, scans, store, report, writers, make_writer, lost)
        except (OSError, ValueError) as exc:
            report.notes.append(f"page-level salvage stopped: {exc}")
    if src is not None and raw is not None:
        for name, writer in writers.items():
            moved = set_aside_disagreeing(src, raw, master, store, writer)
            if moved:
                report.notes.append(
                    f"{name}: {moved} rows whose columns two or more of its indexes say held "
                    "other values were kept in lost_and_found, not restored"
                )
    lost.flush()
    for writer in writers.values():
        meta_keys |= writer.meta_keys
    position = {name: i for i, name in enumerate(plan.tables)}
    report.skipped_ranges.sort(key=lambda r: (position.get(r.table, 0), r.first_rowid))
    for result in report.tables.values():
        if result.status == "pending":
            result.status = table_status(result, report)
    try:
        _count_figures(src, raw, master, report, writers)
    finally:
        if raw is not None:
            os.close(raw.fd)
    return meta_keys


def _count_figures(
    src: sqlite3.Connection | None,
    raw: pages.Pages | None,
    master: dict[str, salvage.SchemaEntry],
    report: RecoveryReport,
    writers: dict[str, TableWriter],
) -> None:
    """Note what the rowids and the pages say each damaged table held before the damage."""
    sequence = recover_expect.sequences(src)
    for name, writer in writers.items():
        result = writer.result
        read = writer.copied_rowids | writer.rejected_rowids
        recover_expect.rowid_figures(result, report.skipped_ranges, read, sequence.get(name))
        rec = master.get(name)
        mine = [r for r in report.skipped_ranges if r.table == name]
        if raw is None or rec is None or not recover_expect.damaged(result, mine):
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            recover_expect.tree_figure(result, raw, rec.rootpage, raw.count + report.pages_missing)
