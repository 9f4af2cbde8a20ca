"""Reading a table of the damaged copy through SQLite, around the damage: whole rowid ranges in
order; where a range fails, a galloping probe for where range reads work again, then the rows
of the damaged span one rowid at a time (or the rowids the table's indexes still list)."""

from __future__ import annotations

import sqlite3

from hermes_state.recover import pages
from hermes_state.recover.recover_report import POINT_SPAN, RecoveryReport, SkippedRange
from hermes_state.recover.recover_target import CHUNK_ROWS, Row, TableWriter
from hermes_state.store.sql import quote

MAX_RANGE_QUERIES = 10_000
MAX_POINT_READS = 2_000_000


class Budget:
    """Caps the range queries and single-row reads one salvage may spend."""

    def __init__(self, queries: int = MAX_RANGE_QUERIES, points: int = MAX_POINT_READS) -> None:
        self.queries = queries
        self.points = points

    def spend(self) -> bool:
        """Take one range query from the budget; False once it is used up."""
        self.queries -= 1
        return self.queries >= 0

    def spend_points(self, n: int) -> bool:
        """Take n single-row reads from the budget if that many are left."""
        if n > self.points:
            return False
        self.points -= n
        return True


def _bounds(conn: sqlite3.Connection, table: str) -> tuple[int, int] | None:
    """Return (min, max) rowid, falling back to the full range when the ends are unreadable."""
    lo, hi = pages.MIN_ROWID, pages.MAX_ROWID
    try:
        row = conn.execute(f"SELECT min(rowid) FROM {quote(table)}").fetchone()
        if row[0] is None:
            return None  # empty (or the first leaf is unreadable; max() tells which)
        lo = int(row[0])
    except sqlite3.DatabaseError:
        pass
    try:
        row = conn.execute(f"SELECT max(rowid) FROM {quote(table)}").fetchone()
        if row[0] is not None:
            hi = int(row[0])
    except sqlite3.DatabaseError:
        pass
    return lo, hi


class RangeReader:
    """Reads one table of the work copy through SQLite, around rowid ranges it cannot read."""

    def __init__(
        self,
        src: sqlite3.Connection,
        writer: TableWriter,
        report: RecoveryReport,
        budget: Budget,
    ) -> None:
        self.src = src
        self.writer = writer
        self.table = writer.table
        self.result = writer.result
        self.report = report
        self.budget = budget
        quoted = ", ".join(quote(c) for c in writer.columns)
        self.select = f"SELECT rowid, {quoted} FROM {quote(self.table)}"
        self.index_rowids: list[int] | None = None

    def run(self) -> None:
        """Copy the whole table, reading around rowid ranges that cannot be read."""
        bounds = _bounds(self.src, self.table)
        if bounds is None:
            return  # empty table
        lo, hi = bounds
        pos: int | None = lo
        while pos is not None and pos <= hi:
            restart, error = self._scan(pos, hi)
            if error is None:
                break
            resume = self._next_readable(restart, hi)
            self._read_points(restart, hi if resume is None else resume - 1, error)
            pos = resume

    def _scan(self, pos: int, hi: int) -> tuple[int, str | None]:
        """Copy rows from pos to hi; return (the rowid after the last good row, error or None)."""
        self.report.range_queries += 1
        batch: list[Row] = []
        restart = pos
        error = None
        try:
            cur = self.src.execute(
                f"{self.select} WHERE rowid >= ? AND rowid <= ? ORDER BY rowid", (pos, hi)
            )
            for row in cur:
                batch.append(row)
                restart = row[0] + 1
                if len(batch) >= CHUNK_ROWS:
                    self.writer.flush(batch)
                    batch = []
        except sqlite3.DatabaseError as exc:
            # The cursor reads one row ahead, so the row before the damage is lost here too;
            # the point reads of the damaged range pick it up again.
            error = str(exc)
        self.writer.flush(batch)
        return restart, error

    def _probe(self, pos: int, hi: int) -> bool:
        """Tell whether the first row at or after pos (up to hi) reads cleanly (or none exists)."""
        self.report.range_queries += 1
        try:
            self.src.execute(
                f"{self.select} WHERE rowid >= ? AND rowid <= ? ORDER BY rowid LIMIT 1", (pos, hi)
            ).fetchall()
            return True
        except sqlite3.DatabaseError:
            return False

    def _next_readable(self, start: int, hi: int) -> int | None:
        """Find a rowid after start from which range reads work again (None: none up to hi)."""
        failed = start  # a range read from start just failed
        step = 1
        while True:
            if not self.budget.spend():
                self.result.errors.append("range-query budget exhausted; rest of table skipped")
                return None
            probe = min(failed + step, hi)
            if probe <= failed:
                return None
            if self._probe(probe, hi):
                good = probe
                break
            if probe == hi:
                return None
            failed = probe
            step *= 2
        # Narrow the edge; readable islands skipped by the gallop are found by the point reads.
        while good - failed > 1:
            if not self.budget.spend():
                break
            mid = (failed + good) // 2
            if self._probe(mid, hi):
                good = mid
            else:
                failed = mid
        return good

    def _candidates(self, first: int, last: int) -> list[int] | None:
        """Return the rowids to read one by one in [first, last]; None when none can be named."""
        width = last - first + 1
        if width <= POINT_SPAN and self.budget.spend_points(width):
            return list(range(first, last + 1))
        # Too wide to try every rowid: ask the table's indexes which rowids exist there.
        wanted = [r for r in self._index_rowids() if first <= r <= last]
        if not wanted or not self.budget.spend_points(len(wanted)):
            return None
        return wanted

    def _index_rowids(self) -> list[int]:
        """Return every rowid the table's indexes still list (read without the table pages)."""
        if self.index_rowids is not None:
            return self.index_rowids
        found: set[int] = set()
        try:
            indexes = [r[1] for r in self.src.execute(f"PRAGMA index_list({quote(self.table)})")]
        except sqlite3.DatabaseError:
            indexes = []
        for index in indexes:
            try:
                first_col = self.src.execute(f"PRAGMA index_info({quote(index)})").fetchone()[2]
            except (sqlite3.DatabaseError, TypeError):
                continue
            if first_col is None:
                continue  # an expression index cannot be ordered by a column name
            # Both directions: a damaged index page cuts one scan, the other reaches past it.
            for order in ("ASC", "DESC"):
                self.report.range_queries += 1
                try:
                    for (rowid,) in self.src.execute(
                        f"SELECT rowid FROM {quote(self.table)} INDEXED BY "
                        f"{quote(index)} ORDER BY {quote(first_col)} {order}"
                    ):
                        found.add(rowid)
                except sqlite3.DatabaseError:
                    pass
        self.index_rowids = sorted(found)
        return self.index_rowids

    def _known_span(self) -> tuple[int, int] | None:
        """Return the lowest and highest rowid the indexes and sqlite_sequence know of."""
        known = self._index_rowids()
        lo = known[0] if known else None
        hi = known[-1] if known else None
        try:
            row = self.src.execute(
                "SELECT seq FROM sqlite_sequence WHERE name = ?", (self.table,)
            ).fetchone()
        except sqlite3.DatabaseError:
            row = None
        if row is not None and row[0] is not None:
            hi = int(row[0]) if hi is None else max(hi, int(row[0]))
            lo = 1 if lo is None else min(lo, 1)  # AUTOINCREMENT hands out rowids from 1
        else:
            # Only the indexes bound the span, and they may have lost their end too: rows
            # past it cannot be counted by rowid.
            self.result.rowids_open = True
        return None if lo is None or hi is None else (lo, hi)

    def _read_points(self, first: int, last: int, error: str) -> None:
        """Read the rows of a damaged range one rowid at a time; record what stays unreadable."""
        if last - first + 1 > POINT_SPAN:
            # An open-ended range (min() or max() unreadable): read densely only where rowids
            # are known to have been handed out, and report the rest as unreadable.
            span = self._known_span()
            if span is not None and span[0] <= last and span[1] >= first:
                lo, hi = max(first, span[0]), min(last, span[1])
                if (lo, hi) != (first, last):
                    # No index, sequence or readable page knows of rowids out there; a row
                    # that still hides there shows up as source_rows > copied.
                    self.report.notes.append(
                        f"{self.table}: rowids outside {lo}..{hi} were not probed one by one"
                    )
                first, last = lo, hi
        candidates = self._candidates(first, last)
        if candidates is None:
            self.report.skipped_ranges.append(SkippedRange(self.table, first, last, error))
            return
        query = f"{self.select} WHERE rowid = ?"
        batch: list[Row] = []
        run: list[int] = []  # consecutive unreadable rowids
        run_error = error
        for rowid in candidates:
            try:
                row = self.src.execute(query, (rowid,)).fetchone()
            except sqlite3.DatabaseError as exc:
                if not run:
                    run_error = str(exc)
                run.append(rowid)
                continue
            if run:
                self._skip(run, run_error)
                run = []
            if row is not None:
                batch.append(row)
                if len(batch) >= CHUNK_ROWS:
                    self.writer.flush(batch)
                    batch = []
        if run:
            self._skip(run, run_error)
        self.writer.flush(batch)

    def _skip(self, run: list[int], error: str) -> None:
        """Record a run of unreadable rowids as one skipped range."""
        self.report.skipped_ranges.append(SkippedRange(self.table, run[0], run[-1], error))
