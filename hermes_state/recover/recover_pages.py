"""Reading what SQLite's cursor missed off the damaged copy's pages: each table's b-tree walked
and its leaf cells compared with what was copied, rows under damaged rowids kept aside, and leaf
pages no b-tree reaches matched to a table by the shape of their records (``salvage``) — or kept
in lost_and_found when they fit none, or may be deleted data."""

from __future__ import annotations

import bisect
import sqlite3
import struct
from collections.abc import Callable
from typing import Any

from hermes_state.recover import lost_and_found, pages, salvage
from hermes_state.recover.recover_report import (
    RecoveryReport,
    SkippedRange,
)
from hermes_state.recover.recover_source import (
    is_derived,
    source_info,
)
from hermes_state.recover.recover_target import (
    CHUNK_ROWS,
    VIRTUAL_RE,
    Row,
    TableWriter,
    target_tables,
)
from hermes_state.recover.salvage import ColumnInfo, SchemaEntry
from hermes_state.store import cjk, schema
from hermes_state.store.connection import Store
from hermes_state.store.sql import quote


def table_shapes(
    src: sqlite3.Connection | None, store: Store, master: dict[str, SchemaEntry]
) -> dict[str, salvage.Shape]:
    """Return the record shape of every table the source has or the target expects."""
    tables = {n: e.sql for n, e in master.items() if e.kind == "table"}
    out: dict[str, salvage.Shape] = {}
    for name, sql in tables.items():
        if VIRTUAL_RE.match(sql) or (name.startswith("sqlite_") and name != "sqlite_sequence"):
            continue
        derived = is_derived(name, tables) or name in schema.LEDGER_TABLES
        info: list[ColumnInfo] = source_info(src, name) if src is not None else []
        shape = (
            salvage.Shape.from_info(name, info, derived=derived)
            if info
            else salvage.shape_from_sql(name, sql, derived=derived)
        )
        if shape is not None:
            out[name] = shape
    for name in target_tables(store):
        if name not in out:
            info = [tuple(r) for r in store.conn.execute(f"PRAGMA table_info({quote(name)})")]
            derived = name in schema.LEDGER_TABLES or name in (cjk.PENDING_TABLE,)
            out[name] = salvage.Shape.from_info(name, info, derived=derived)
    return out


def prewalk(
    raw: pages.Pages,
    master: dict[str, SchemaEntry],
    shapes: dict[str, salvage.Shape],
    name: str,
    writer: TableWriter,
) -> pages.TreeScan | None:
    """Walk a table's b-tree before it is copied, so rows under damaged rowids are known."""
    rec = master.get(name)
    if rec is None or rec.rootpage <= 0 or name not in shapes:
        return None
    scan = raw.walk_table(rec.rootpage)
    for ref, why in scan.damaged.items():
        rowid = _rowid_of(raw, ref)
        if rowid is not None and scan.cells.get(rowid) == ref:
            writer.damaged[rowid] = (why, ref.page)
    if scan.mended:
        writer.result.errors.append(
            f"{len(scan.mended)} pages with a damaged header were read cell by cell"
        )
    shape = shapes[name]
    if shape.alias is None:
        return scan  # the rowid is not the row's identity: a damaged one changes no value
    for page, index in scan.strays:
        try:
            rowid, fields = raw.cell(page, index)
        except (ValueError, IndexError, struct.error):
            continue
        if shape.fits(fields):
            values = shape.row(rowid, fields)
            writer.strays[rowid] = tuple(values.get(c) for c in writer.columns)
    return scan


def _rowid_of(raw: pages.Pages, ref: pages.CellRef) -> int | None:
    """Return the rowid of a cell whose record cannot be decoded (None: not even that)."""
    data = raw.read(ref.page)
    base = 100 if ref.page == 1 else 0
    try:
        off = pages.u16(data, base + 8 + 2 * ref.slot)
        _, pos = pages.varint(data, off)
        return pages.signed(pages.varint(data, pos)[0])
    except IndexError:
        return None


def page_pass(
    raw: pages.Pages,
    master: dict[str, SchemaEntry],
    shapes: dict[str, salvage.Shape],
    prewalked: dict[str, pages.TreeScan | None],
    store: Store,
    report: RecoveryReport,
    writers: dict[str, TableWriter],
    make_writer: Callable[[str, list[str]], TableWriter],
    lost: lost_and_found.LostAndFound,
) -> None:
    """Check each table against its leaf pages, read what SQLite missed, and read the leaf pages
    no b-tree reaches (by the shape of their records)."""
    scans: dict[str, pages.TreeScan] = {}
    for name, writer in writers.items():
        scan = prewalked.get(name)
        if scan is None:
            continue
        scans[name] = scan
        _complete_from_pages(writer, raw, scan, shapes[name], lost, report)
    # Tables of the target that SQLite could not read at all but whose root page is known
    # (a target in the source's layout takes the source's version row too).
    wanted = target_tables(store)
    if report.layout == "source" and "schema_version" not in writers:
        wanted.append("schema_version")
    for name in wanted:
        rec = master.get(name)
        if name in writers or rec is None or rec.rootpage <= 0 or name not in shapes:
            continue
        shape = shapes[name]
        writer = make_writer(name, [c for c in store.columns(name) if c in shape.columns])
        writers[name] = writer
        scans[name] = raw.walk_table(rec.rootpage)
        _complete_from_pages(writer, raw, scans[name], shape, lost, report)
    _unattached(raw, master, shapes, scans, writers, make_writer, store, report, lost)
    for name, scan in scans.items():
        _report_holes(writers[name], scan, report)


def _page_row(writer: TableWriter, shape: salvage.Shape, rowid: int, fields: list[Any]) -> Row:
    """Return a row for writer.flush from a decoded record."""
    values = shape.row(rowid, fields)
    return (rowid, *(values.get(c) for c in writer.columns))


def _complete_from_pages(
    writer: TableWriter,
    raw: pages.Pages,
    scan: pages.TreeScan,
    shape: salvage.Shape,
    lost: lost_and_found.LostAndFound,
    report: RecoveryReport,
) -> None:
    """Copy the rows the table's leaf pages hold that SQLite's cursor did not return."""
    result = writer.result
    result.on_pages = scan.count
    result.unreadable_cells += scan.bad_cells
    done = writer.copied_rowids | writer.rejected_rowids | writer.ignored_rowids | writer.diverted
    batch: list[Row] = []
    for rowid in sorted(r for r in scan.cells if r not in done):
        page, index = scan.cells[rowid]
        try:
            _, fields = raw.cell(page, index)
        except (ValueError, IndexError, struct.error):
            result.unreadable_cells += 1
            continue
        if not shape.fits(fields):
            lost.add(writer.table, lost_and_found.MISFIT, rowid, page, fields)
            result.to_lost_and_found += 1
        elif (page, index) in scan.strays and shape.alias is not None:
            # The rowid is the row's identity (messages.id): a damaged one would be a wrong row.
            lost.add(writer.table, lost_and_found.BAD_ROWID, rowid, page, shape.row(rowid, fields))
            result.to_lost_and_found += 1
        else:
            batch.append(_page_row(writer, shape, rowid, fields))
            if len(batch) >= CHUNK_ROWS:
                writer.flush(batch)
                batch = []
    writer.flush(batch)
    result.from_pages = sum(1 for r in scan.cells if r in writer.copied_rowids and r not in done)
    result.on_pages -= sum(1 for r in writer.ignored_rowids if r in scan.cells)
    for rowid, page, index in scan.duplicates:
        if rowid in writer.diverted and (page, index) in scan.strays:
            continue  # already kept aside when SQLite's cursor returned it
        try:
            _, fields = raw.cell(page, index)
        except (ValueError, IndexError, struct.error):
            result.unreadable_cells += 1
            continue
        lost.add(writer.table, lost_and_found.DUPLICATE, rowid, page, fields)
        result.to_lost_and_found += 1
    if result.from_pages:
        report_note = (
            f"{writer.table}: {result.from_pages} rows its leaf pages hold were read from the "
            "pages (SQLite's cursor did not return them)"
        )
        report.notes.append(report_note)


def _unattached(
    raw: pages.Pages,
    master: dict[str, SchemaEntry],
    shapes: dict[str, salvage.Shape],
    scans: dict[str, pages.TreeScan],
    writers: dict[str, TableWriter],
    make_writer: Callable[[str, list[str]], TableWriter],
    store: Store,
    report: RecoveryReport,
    lost: lost_and_found.LostAndFound,
) -> None:
    """Read table leaf pages that no b-tree reaches: cut off by damage, or deleted data."""
    roots = {rec.rootpage for rec in master.values() if rec.rootpage > 0} | {1}
    reach = raw.reachable(roots)
    for walked in scans.values():
        reach |= walked.pages
    free = raw.freelist()
    # A freelist the header no longer points to (pointer zeroed or repaired away) still shows
    # in the shape of its trunk pages among the pages no b-tree reaches.
    free |= raw.free_by_shape(set(range(2, raw.count + 1)) - reach - free)
    leaves = list(raw.table_leaves(reach | free | {1}))
    for page in raw.table_leaves(reach | {1}):
        if page in free:
            report.deleted_rows_seen += sum(1 for _ in raw.leaf_cells(page))
    targets = set(target_tables(store))
    candidates = [s for s in shapes.values() if s.table in targets or s.derived]
    candidates += salvage.derived_shapes()
    names = frozenset(shapes) | frozenset(master)
    found: dict[str, list[Row]] = {}
    for page in leaves:
        cells = list(raw.leaf_cells(page))
        shape = salvage.choose(candidates, cells, names)
        for _i, rowid, fields in cells:
            if fields is None:
                continue
            if shape is None or not shape.fits(fields):
                lost.add(None, lost_and_found.UNATTRIBUTED, rowid, page, fields)
                continue
            if shape.derived:
                continue  # an index's or the ledger's page: rebuilt or excluded anyway
            table = shape.table
            scan = scans.get(table)
            writer = writers.get(table)
            have = writer.copied_rowids if writer is not None else set()
            if rowid in have or (scan is not None and not scan.in_hole(rowid)):
                lost.add(table, lost_and_found.UNATTACHED, rowid, page, shape.row(rowid, fields))
                continue
            if writer is None:
                cols = [c for c in store.columns(table) if c in shape.columns]
                writer = writers[table] = make_writer(table, cols)
            found.setdefault(table, []).append(_page_row(writer, shape, rowid, fields))
    for table, rows in found.items():
        writer = writers[table]
        unique = {r[0]: r for r in rows}
        ordered = [unique[k] for k in sorted(unique)]
        before = set(writer.copied_rowids)
        for i in range(0, len(ordered), CHUNK_ROWS):
            writer.flush(ordered[i : i + CHUNK_ROWS])
        got = sorted(writer.copied_rowids - before)
        writer.result.from_orphan_pages += len(got)
        if got:
            report.notes.append(
                f"{table}: {len(got)} rows read from leaf pages cut off from its b-tree"
            )
        _subtract_rowids(report, table, got)
    unattached = lost.counts.get(lost_and_found.UNATTACHED)
    if unattached:
        report.notes.append(
            f"{unattached} rows on pages no b-tree reaches (deleted, or cut off) were kept in "
            "lost_and_found, not restored"
        )


def _report_holes(writer: TableWriter, scan: pages.TreeScan, report: RecoveryReport) -> None:
    """Report the parts of a table's b-tree that could not be read and were not made up for."""
    if not scan.holes:
        return
    copied = sorted(writer.copied_rowids)
    known = sorted(writer.copied_rowids | set(scan.cells))
    mine = [r for r in report.skipped_ranges if r.table == writer.table]
    for lo, hi in scan.holes:
        if any(r.first_rowid <= hi and r.last_rowid > lo for r in mine):
            continue  # already reported by the range reads
        at = bisect.bisect_right(copied, lo)
        if at < len(copied) and copied[at] <= hi:
            continue  # rows of that subtree came back from pages cut off from it
        first = max(lo + 1, known[0] if known else lo + 1)
        last = min(hi, known[-1] if known else hi)
        writer.result.unreadable_pages += 1
        if first <= last:
            report.skipped_ranges.append(
                SkippedRange(writer.table, first, last, "a page of its b-tree is unreadable")
            )


def _subtract_rowids(report: RecoveryReport, table: str, rowids: list[int]) -> None:
    """Remove salvaged rowids from a table's skipped ranges."""
    if not rowids:
        return
    out: list[SkippedRange] = []
    for r in report.skipped_ranges:
        if r.table != table:
            out.append(r)
            continue
        start = r.first_rowid
        lo = bisect.bisect_left(rowids, r.first_rowid)
        hi = bisect.bisect_right(rowids, r.last_rowid)
        for rowid in rowids[lo:hi]:
            if rowid > start:
                out.append(SkippedRange(table, start, rowid - 1, r.error))
            start = rowid + 1
        if start <= r.last_rowid:
            out.append(SkippedRange(table, start, r.last_rowid, r.error))
    report.skipped_ranges = out
