"""How many rows each table held before the damage: the figures a salvage finds — SQLite's count
of the source table, the cells on its pages, the rows read plus the rowids that could not be
read, the largest rowid handed out (sqlite_sequence), the sessions' message_count columns, the
lost sessions that messages refer to, the b-tree's unreadable pages times its rows per page —
weighed into one expected count per table, with its basis and whether it is an estimate."""

from __future__ import annotations

import bisect
import sqlite3
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from hermes_state.recover import pages
from hermes_state.recover.recover_report import (
    PLACEHOLDER_TITLE,
    RecoveryReport,
    SkippedRange,
    TableResult,
)
from hermes_state.store.sql import quote

# A placeholder session's title, as a GLOB pattern ('[' opens a character class in GLOB).
PLACEHOLDER_GLOB = PLACEHOLDER_TITLE.replace("[", "[[]").replace("{n}", "*")


# --- figures gathered while the tables are copied --------------------------------------------


def rowid_figures(
    result: TableResult,
    ranges: Iterable[SkippedRange],
    read: set[int],
    sequence: int | None,
) -> None:
    """Note the rows read plus the rowids that could not be read (and those handed out after
    the last one known, by sqlite_sequence)."""
    mine = [r for r in ranges if r.table == result.name]
    known = sorted(read)
    unread = 0
    for r in mine:
        if not r.bounded:
            result.rowids_open = True
            continue
        inside = bisect.bisect_right(known, r.last_rowid) - bisect.bisect_left(known, r.first_rowid)
        unread += max(0, r.last_rowid - r.first_rowid + 1 - inside)
    base = read_rows(result)
    if unread:
        result.figures["rowids"] = base + unread
    if sequence is None or not damaged(result, mine):
        return
    # Rowids past the last one read or known unreadable were handed out too (AUTOINCREMENT
    # never reuses one); rows deleted at the end would be counted, so this is an estimate.
    last = max([*known[-1:], *(r.last_rowid for r in mine if r.bounded)], default=0)
    if sequence > last:
        result.figures["sequence"] = base + unread + sequence - last


@dataclass
class Census:
    """What a tolerant walk of a table b-tree found: its readable leaves, its unreadable pages."""

    cells: int = 0  # cells on the readable leaf pages
    leaves: int = 0
    missing: list[int] = field(default_factory=list)  # depth of each page that could not be read
    fanout: dict[int, list[int]] = field(default_factory=dict)  # depth -> children per interior
    leaf_depths: Counter[int] = field(default_factory=Counter)

    def rows(self) -> int | None:
        """Return the rows the tree held: its cells plus the missing pages times rows per leaf."""
        if not self.leaves:
            return None  # nothing says how many rows a page holds
        if not self.missing:
            return self.cells
        depth = self.leaf_depths.most_common(1)[0][0]
        every = [n for ns in self.fanout.values() for n in ns]
        leaves = 0.0
        for d in self.missing:
            below = 1.0
            for level in range(d, depth):
                at = self.fanout.get(level) or every
                below *= statistics.fmean(at) if at else 1.0
            leaves += below
        return self.cells + round(leaves * self.cells / self.leaves)


def census(raw: pages.Pages, root: int, max_page: int) -> Census:
    """Walk a table b-tree from its root, counting readable leaves' cells and unreadable pages.

    Unlike the salvage's walk, an interior page whose children lie past the end of the file
    (a file cut short) still counts: its readable children are walked and the others counted.
    """
    out = Census()
    seen: set[int] = set()
    stack = [(root, 0)]
    while stack:
        page, depth = stack.pop()
        if page in seen:
            continue  # a loop in the tree: damage
        seen.add(page)
        data = raw.read(page) if page != raw.lock_page else b""
        base = 100 if page == 1 else 0
        kind = data[base] if len(data) > base else 0
        slots = raw.slots(data, base) if kind in (pages.LEAF_TABLE, pages.INTERIOR_TABLE) else []
        if not slots and not (
            kind == pages.LEAF_TABLE and pages.looks_like_btree_page(data, base, raw.page_size)
        ):
            out.missing.append(depth)
            continue
        if kind == pages.LEAF_TABLE:
            out.leaves += 1
            out.cells += sum(1 for off in slots if off)
            out.leaf_depths[depth] += 1
            continue
        children = [pages.u32(data, off) for off in slots if off]
        children.append(pages.u32(data, base + 8))
        out.fanout.setdefault(depth, []).append(len(children))
        for child in children:
            if 2 <= child <= max_page:
                stack.append((child, depth + 1))
            else:
                out.missing.append(depth + 1)
    return out


def tree_figure(result: TableResult, raw: pages.Pages, root: int, max_page: int) -> None:
    """Note the rows the table's b-tree held by its readable and unreadable pages."""
    if root <= 0:
        return
    found = census(raw, root, max_page)
    rows = found.rows()
    if rows is not None and found.missing:
        result.figures["tree"] = rows


def sequences(src: sqlite3.Connection | None) -> dict[str, int]:
    """Return sqlite_sequence of the source copy (the largest rowid handed out, by table)."""
    if src is None:
        return {}
    try:
        rows = src.execute("SELECT name, seq FROM sqlite_sequence").fetchall()
    except sqlite3.DatabaseError:
        return {}
    return {str(n): int(s) for n, s in rows if isinstance(s, int)}


# --- figures from the finished target, and the weighing --------------------------------------


def read_rows(result: TableResult) -> int:
    """Return the rows of a table that were read: copied, or refused, invalid or damaged and
    kept aside."""
    return result.copied + result.rejected + result.invalid + result.damaged_values


def damaged(result: TableResult, ranges: Iterable[SkippedRange] = ()) -> bool:
    """Tell whether anything shows that the table lost rows or could not be read whole."""
    return bool(
        result.source_rows is None
        or result.status in ("partial", "unreadable")
        or result.unreadable_pages
        or result.unreadable_cells
        or result.rowids_open
        or any(True for _ in ranges)
    )


def target_figures(report: RecoveryReport, conn: sqlite3.Connection) -> None:
    """Note what the finished target shows of lost rows: placeholder sessions (each one stands
    for a session row that was lost) and the sessions' message_count columns."""
    sessions = report.tables.get("sessions")
    if sessions is not None and report.placeholder_sessions:
        sessions.placeholders = report.placeholder_sessions
        # A session kept aside for its invalid values is counted there already.
        aside = _aside_ids(conn, "sessions")
        fresh = sum(1 for sid in report.placeholder_ids if sid not in aside)
        sessions.figures["placeholders"] = read_rows(sessions) + fresh
    messages = report.tables.get("messages")
    if messages is None or not damaged(messages) or sessions is None:
        return
    cols = _columns(conn, "messages")
    if "session_id" not in cols or "message_count" not in _columns(conn, "sessions"):
        return
    live = " AND m.active = 1" if "active" in cols else ""
    try:
        (missing,) = conn.execute(
            "SELECT COALESCE(sum(max(0, COALESCE(s.message_count, 0) - (SELECT count(*) FROM "
            f"messages m WHERE m.session_id = s.id{live}))), 0) FROM sessions s "
            "WHERE NOT (s.source = 'recovered' AND s.title GLOB ?)",
            (PLACEHOLDER_GLOB,),
        ).fetchone()
    except sqlite3.DatabaseError:
        return
    if missing:
        # message_count counts a session's live rows: rows it counts that are not there were
        # lost (those kept aside for invalid values among them).
        messages.figures["message_count"] = max(read_rows(messages), messages.copied + int(missing))


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """Return a target table's column names."""
    return {str(r[1]) for r in conn.execute(f"PRAGMA table_info({quote(table)})")}


def _aside_ids(conn: sqlite3.Connection, table: str) -> set[str]:
    """Return the ids of a table's rows kept in lost_and_found."""
    try:
        rows = conn.execute(
            "SELECT json_extract(row_json, '$.id') FROM lost_and_found WHERE table_name = ?",
            (table,),
        ).fetchall()
    except sqlite3.DatabaseError:
        return set()
    return {str(r[0]) for r in rows if r[0] is not None}


# Figures that count rows there certainly were (a table held at least as many).
AT_LEAST = ("read", "pages", "placeholders", "message_count")
ESTIMATES = ("placeholders", "message_count", "rowids", "sequence", "tree")


def weigh(result: TableResult, report: RecoveryReport) -> None:
    """Settle a table's expected row count, its basis, and whether it is an estimate.

    SQLite's count wins when it is at least the rows seen. Otherwise the rowids that could not
    be read count the rows lost when every unreadable span is bounded (rowids are handed out
    in order, so a span's width is the rows it held); when one is not, the b-tree's unreadable
    pages times its rows per page estimate them. Never fewer than the rows there certainly were.
    """
    figures = result.figures
    figures["read"] = read_rows(result)
    if result.source_rows is not None:
        figures["count"] = result.source_rows
    if result.on_pages is not None:
        figures["pages"] = result.on_pages + result.from_orphan_pages
    mine = [r for r in report.skipped_ranges if r.table == result.name]
    hurt = damaged(result, mine)
    basis = max(
        (b for b in AT_LEAST if b in figures), key=lambda b: (figures[b], -AT_LEAST.index(b))
    )
    least = figures[basis]
    if "count" in figures and figures["count"] >= least:
        # SQLite counted the table whole (through the table or one of its indexes).
        _settle(result, "count", figures["count"], estimated=False)
        return
    spans = "sequence" if "sequence" in figures else "rowids" if "rowids" in figures else None
    bounded = spans is not None and not result.rowids_open
    candidates = [spans] if bounded else [spans, "tree"]
    best = least
    for name in candidates:
        if name is not None and figures.get(name, -1) > best:
            basis, best = name, figures[name]
    # On a damaged table the rows seen are only the least there were.
    _settle(result, basis, best, estimated=hurt or basis in ESTIMATES)


def _settle(result: TableResult, basis: str, rows: int, *, estimated: bool) -> None:
    """Record a table's expected row count."""
    result.expected = rows
    result.expected_basis = basis
    result.expected_estimated = estimated


def settle(report: RecoveryReport, conn: sqlite3.Connection) -> None:
    """Settle every table's expected row count from the figures found (after placeholders)."""
    target_figures(report, conn)
    for result in report.tables.values():
        if result.status == "absent":
            continue
        weigh(result, report)
