"""What a recovery did, for its caller and the JSON report beside the target: each table's
counts, the rowid ranges that could not be read, the checks of the target, and the verdict
(complete, partial, accepted) with its one-line summary."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hermes_state.recover import lost_and_found
from hermes_state.store import schema
from hermes_state.store.errors import HermesStateError

Progress = Callable[[str, int, "int | None"], None]

POINT_SPAN = 100_000  # damaged ranges up to this wide are read rowid by rowid
# The title of a session made up so that messages whose session row was lost keep one.
PLACEHOLDER_TITLE = "[recovered {n}] session metadata was unreadable"


class RecoveryError(HermesStateError):
    """A recovery that was refused or could not run (nothing was installed)."""

    hint = "Nothing was changed; the source is untouched."


@dataclass
class TableResult:
    """How one table was copied."""

    name: str
    source_rows: int | None  # count(*) in the source copy; None when it could not be counted
    copied: int = 0
    status: str = "pending"  # copied, empty, partial, unreadable, absent
    rejected: int = 0  # rows the target's constraints refused (kept in lost_and_found)
    on_pages: int | None = None  # cells its b-tree's leaf pages hold (None: not walked)
    from_pages: int = 0  # rows its leaf pages hold that SQLite's cursor did not return
    from_orphan_pages: int = 0  # rows read from leaf pages cut off from the table's b-tree
    to_lost_and_found: int = 0  # rows of this table kept in lost_and_found instead
    unreadable_pages: int = 0  # pages of its b-tree that could not be read nor made up for
    unreadable_cells: int = 0  # cells seen on its pages whose record could not be decoded
    columns_dropped: list[str] = field(default_factory=list)  # source columns we have no use for
    errors: list[str] = field(default_factory=list)
    invalid: int = 0  # rows read but kept in lost_and_found for values the tool cannot use
    damaged_values: int = 0  # rows read but kept in lost_and_found: a value not read intact
    rowids_open: bool = False  # an unreadable span ran past every rowid known (rows uncounted)
    figures: dict[str, int] = field(default_factory=dict)  # basis -> rows it says the table held
    expected: int | None = None  # rows the table held before the damage (see expected_basis)
    expected_basis: str = ""  # the key of BASES the expected count comes from
    expected_estimated: bool = False  # expected is an estimate, not a count
    placeholders: int = 0  # rows made up so that others keep a parent (sessions), not copied

    @property
    def lost(self) -> int | None:
        """Return the rows the table held that are not in its copy (None: not settled)."""
        return None if self.expected is None else max(0, self.expected - self.copied)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            **asdict(self),
            "recovered": self.copied,
            "lost": self.lost,
            "expected_from": BASES.get(self.expected_basis),
        }


# What a table's expected row count was read from (TableResult.expected_basis, the keys of
# TableResult.figures). The first three are counts; the rest are estimates.
BASES = {
    "count": "SQLite's count of the source table",
    "pages": "the cells on the table's pages",
    "read": "the rows read",
    "placeholders": "the rows read plus one per lost session that other rows refer to",
    "message_count": "the sessions' message_count columns",
    "rowids": "the rows read plus the rowids that could not be read",
    "sequence": "the largest rowid handed out (sqlite_sequence)",
    "tree": "the b-tree's unreadable pages times its rows per page",
}


@dataclass(frozen=True)
class Totals:
    """The rows of every copied table taken together: expected = recovered + lost."""

    expected: int
    recovered: int
    lost: int
    estimated: bool  # some table's expected count is an estimate
    uncounted: list[str]  # what held rows that no figure could count

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return asdict(self)


@dataclass(frozen=True)
class SkippedRange:
    """A rowid range of a table that could not be read from the source."""

    table: str
    first_rowid: int
    last_rowid: int
    error: str

    @property
    def bounded(self) -> bool:
        """Tell whether the range is narrow enough to count its rowids as lost rows."""
        return self.last_rowid - self.first_rowid < POINT_SPAN

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return asdict(self)


@dataclass
class Verification:
    """Checks run on the finished target."""

    integrity: list[str] = field(default_factory=list)
    foreign_key_violations: int = 0
    fts_problems: list[str] = field(default_factory=list)
    fts_checked: bool = False
    schema_version: int | None = None
    expected_schema_version: int | None = schema.SCHEMA_VERSION
    count_mismatches: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)  # checks that could not run to the end

    @property
    def ok(self) -> bool:
        """Tell whether every check passed."""
        return (
            not self.incomplete
            and self.integrity == ["ok"]
            and self.foreign_key_violations == 0
            and not self.fts_problems
            and self.schema_version == self.expected_schema_version
            and not self.count_mismatches
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {**asdict(self), "ok": self.ok}


@dataclass
class RecoveryReport:
    """What recover() read, copied, skipped and verified."""

    source: str
    target: str
    report_path: str
    allow_partial: bool
    source_bundle: dict[str, int] = field(default_factory=dict)  # file name -> bytes copied
    source_fingerprint: dict[str, list[int]] = field(default_factory=dict)  # name -> [size, ns]
    source_unchanged: bool = True
    source_copy: str = "files"  # what was read: "files" (copied as they are) or "snapshot"
    source_readable: bool = True
    header_rewritten: bool = False  # the copy's header was repaired (see header_fixes)
    header_fixes: list[str] = field(default_factory=list)
    schema_from_pages: bool = False  # sqlite_master unreadable: its rows read off its leaf pages
    method: str = "salvage"  # "copy": a healthy source copied whole; "salvage": read around damage
    search_indexes: str = "rebuilt"  # "rebuilt", or "copied" (healthy source, checked after)
    wal: str = "none"  # none, replayed, ignored: what was done with the source's WAL, and why
    lost_and_found: dict[str, int] = field(default_factory=dict)  # reason -> rows kept there
    deleted_rows_seen: int = 0  # rows on free pages (deleted before the damage): not restored
    writable_schema: bool = False  # the source schema was only readable with writable_schema
    layout: str = "source"  # "source": the source's own schema; "fallback": a new schema-31 store
    tables: dict[str, TableResult] = field(default_factory=dict)
    excluded: dict[str, int | None] = field(default_factory=dict)  # ledger table -> source rows
    not_copied: dict[str, int | None] = field(default_factory=dict)  # tables that were lost
    objects_not_recreated: dict[str, str] = field(default_factory=dict)  # name -> why
    skipped_ranges: list[SkippedRange] = field(default_factory=list)
    placeholder_sessions: int = 0
    placeholder_ids: list[str] = field(default_factory=list)  # the placeholder sessions' ids
    parents_cleared: int = 0
    pages_missing: int = 0  # pages the source's header counts past the end of its file
    range_queries: int = 0
    verification: Verification = field(default_factory=Verification)
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    installed: bool = False  # the target is never swapped in for the live store

    @property
    def verified(self) -> bool:
        """Tell whether the target passed every check."""
        return self.verification.ok

    @property
    def partial(self) -> bool:
        """Tell whether some source data could not be read or kept."""
        if (not self.source_readable and not self.schema_from_pages) or self.not_copied:
            return True
        if self.skipped_ranges:
            return True
        if self.lost_and_found.get(lost_and_found.UNATTRIBUTED) and self.schema_incomplete:
            # With the schema intact, pages no table reaches hold nothing the file still shows.
            return True
        for t in self.tables.values():
            if t.status in ("partial", "unreadable") or t.rejected or t.columns_dropped:
                return True
            if t.to_lost_and_found or t.unreadable_cells or t.unreadable_pages:
                return True
            if t.copied < max(t.source_rows or 0, t.on_pages or 0):
                return True
        return False

    @property
    def schema_incomplete(self) -> bool:
        """Tell whether tables may have been missed because the schema was not read whole."""
        return not self.source_readable or self.schema_from_pages or self.layout == "fallback"

    def totals(self) -> Totals:
        """Return the rows every copied table held, recovered and lost, taken together."""
        expected = recovered = 0
        estimated = False
        uncounted: list[str] = []
        for t in self.tables.values():
            if t.status == "absent" or t.expected is None:
                continue
            expected += t.expected
            recovered += t.copied
            estimated = estimated or t.expected_estimated
            if _uncounted(t, self):
                uncounted.append(f"unreadable pages of {t.name}")
        for name, n in self.not_copied.items():
            if n is None:
                uncounted.append(f"table {name}")
            else:
                expected += n
        if self.schema_incomplete:
            # Rows that fit no table of the schema that was read: a table whose schema was lost.
            expected += self.lost_and_found.get(lost_and_found.UNATTRIBUTED, 0)
        return Totals(expected, recovered, expected - recovered, estimated, uncounted)

    def summary(self) -> str:
        """Say in one line whether everything came through, and if not, how much did not."""
        kept = sum(self.lost_and_found.values())
        aside = f"; {kept:,} kept aside in table lost_and_found" if kept else ""
        made = f"; {self._placeholders()} created" if self.placeholder_sessions else ""
        unchecked = (
            "; NOT VERIFIED: " + "; ".join(self.verification.incomplete)
            if self.verification.incomplete
            else ""
        )
        if not self.source_readable and not any(t.copied for t in self.tables.values()):
            return "PARTIAL: nothing in the source could be read as a database" + aside
        totals = self.totals()
        if not self.partial:
            extras = []
            if kept:
                extras.append(f"{kept} rows of unknown standing kept in lost_and_found")
            if self.deleted_rows_seen:
                extras.append(f"{self.deleted_rows_seen} deleted rows on free pages left deleted")
            extra = f" ({'; '.join(extras)})" if extras else ""
            return (
                f"Complete: every row the source shows was copied ({totals.recovered:,} rows)"
                f"{extra}{made}{unchecked}"
            )
        if totals.lost == 0 and not self.skipped_ranges and self.layout == "fallback":
            return (
                f"PARTIAL: the source's schema is damaged, so it was rebuilt as a new "
                f"schema-{schema.SCHEMA_VERSION} store; all {totals.expected:,} rows found were "
                "copied, but tables whose schema was lost may be missing" + aside + made + unchecked
            )
        how = []
        if totals.estimated:
            guessed = [t.name for t in self.tables.values() if t.expected_estimated]
            how.append(f"estimated for {', '.join(guessed)}")
        if totals.uncounted:
            how.append("plus rows that could not be counted")
        elif not self.source_readable and not self.schema_from_pages:
            how.append("the schema is unreadable: tables were found by the shape of their rows")
        note = f" ({'; '.join(how)})" if how else ""
        return (
            f"PARTIAL: lost {totals.lost:,} of {totals.expected:,} rows{note}, "
            f"recovered {totals.recovered:,}{made}{aside}{unchecked}"
        )

    def details(self) -> list[str]:
        """Say per table what was lost and where each expected count comes from, and how to find
        the placeholder sessions (the lines after the summary)."""
        lines = []
        for name, t in self.tables.items():
            if t.expected is None or t.status == "absent":
                continue
            if not t.lost and not t.expected_estimated and not t.to_lost_and_found:
                continue
            basis = BASES.get(t.expected_basis, t.expected_basis)
            how = f"estimated from {basis}" if t.expected_estimated else f"from {basis}"
            line = f"{name}: lost {t.lost:,} of {t.expected:,} ({how})"
            if _uncounted(t, self):
                line += "; more may be on pages that could not be counted"
            if t.to_lost_and_found:
                line += f"; {_rows(t.to_lost_and_found)} kept aside in lost_and_found"
            if t.damaged_values:
                line += (
                    f" ({t.damaged_values:,} of them with values that were not read intact: "
                    "a damaged overflow page, or columns the table's indexes disagree with)"
                )
            lines.append(line)
        for name, n in self.not_copied.items():
            lines.append(f"{name}: lost {'all' if n is None else f'{n:,} of {n:,}'} (not copied)")
        if self.placeholder_sessions:
            lines.append(
                f"{self._placeholders()} created (not recovered rows) so that messages "
                "whose session was lost still have one: source 'recovered', title "
                f"{PLACEHOLDER_TITLE.format(n='N')!r}; their ids are in the "
                "JSON report (once installed: hermes sessions list --source recovered)"
            )
        if self.pages_missing:
            lines.append(
                f"The file is cut short: {self.pages_missing:,} pages its header counts are "
                "missing from its end"
            )
        return lines

    def _placeholders(self) -> str:
        """Say how many placeholder sessions were made, in words."""
        n = self.placeholder_sessions
        return f"{n:,} placeholder session" + ("" if n == 1 else "s")

    @property
    def complete(self) -> bool:
        """Tell whether everything was copied and the target verified."""
        return self.verified and not self.partial

    @property
    def accepted(self) -> bool:
        """Tell whether the result is a success: complete, or verified with allow_partial."""
        return self.complete or (self.allow_partial and self.verified)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form written next to the target."""
        return {
            "operation": "recover",
            "source": self.source,
            "target": self.target,
            "report_path": self.report_path,
            "allow_partial": self.allow_partial,
            "source_bundle": dict(self.source_bundle),
            "source_fingerprint": {k: list(v) for k, v in self.source_fingerprint.items()},
            "source_unchanged": self.source_unchanged,
            "source_copy": self.source_copy,
            "source_readable": self.source_readable,
            "header_rewritten": self.header_rewritten,
            "header_fixes": list(self.header_fixes),
            "schema_from_pages": self.schema_from_pages,
            "method": self.method,
            "search_indexes": self.search_indexes,
            "wal": self.wal,
            "lost_and_found": dict(self.lost_and_found),
            "deleted_rows_seen": self.deleted_rows_seen,
            "summary": self.summary(),
            "writable_schema": self.writable_schema,
            "layout": self.layout,
            "tables": {name: t.to_dict() for name, t in self.tables.items()},
            "excluded": dict(self.excluded),
            "not_copied": dict(self.not_copied),
            "objects_not_recreated": dict(self.objects_not_recreated),
            "skipped_ranges": [r.to_dict() for r in self.skipped_ranges],
            "totals": self.totals().to_dict(),
            "placeholder_sessions": self.placeholder_sessions,
            "placeholder_session_ids": list(self.placeholder_ids),
            "parents_cleared": self.parents_cleared,
            "pages_missing": self.pages_missing,
            "range_queries": self.range_queries,
            "verification": self.verification.to_dict(),
            "notes": list(self.notes),
            "duration_s": round(self.duration_s, 3),
            "complete": self.complete,
            "partial": self.partial,
            "verified": self.verified,
            "accepted": self.accepted,
            "installed": self.installed,
        }


def write_report(report: RecoveryReport, path: Path) -> None:
    """Write the report as JSON, refusing to overwrite an existing file."""
    document = report.to_dict()
    try:
        data = json.dumps(document, indent=2, ensure_ascii=False).encode() + b"\n"
    except UnicodeEncodeError:
        # A path that is not UTF-8 carries surrogates: escape them so the
        # file stays valid UTF-8 JSON and json.load gives the same name back.
        data = json.dumps(document, indent=2).encode() + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _rows(n: int) -> str:
    """Say how many rows, in words."""
    return f"{n:,} row" if n == 1 else f"{n:,} rows"


def _uncounted(result: TableResult, report: RecoveryReport) -> bool:
    """Tell whether rows of a table may sit where no figure counts them (an unreadable span
    with no end known, or an unreadable page of its b-tree)."""
    if result.expected_basis == "count" or "tree" in result.figures:
        return False  # counted, or the unreadable pages' rows were estimated
    wide = any(r.table == result.name and not r.bounded for r in report.skipped_ranges)
    return wide or result.rowids_open or bool(result.unreadable_pages)


def table_status(result: TableResult, report: RecoveryReport) -> str:
    """Name how a table came through: copied, empty, partial or unreadable."""
    skipped = any(r.table == result.name for r in report.skipped_ranges)
    if skipped or result.rejected:
        return "partial" if result.copied else "unreadable"
    if result.copied < max(result.source_rows or 0, result.on_pages or 0):
        return "partial"
    if result.to_lost_and_found or result.unreadable_cells or result.unreadable_pages:
        return "partial"
    return "copied" if result.copied else "empty"


def score(report: RecoveryReport) -> int:
    """Rate a salvage for choosing between two readings of one source (higher is better)."""
    copied = sum(t.copied for t in report.tables.values())
    bad = sum(t.to_lost_and_found + t.unreadable_cells for t in report.tables.values())
    bad += sum(report.lost_and_found.values())
    bad += sum(r.last_rowid - r.first_rowid + 1 for r in report.skipped_ranges if r.bounded)
    bad += 100 * sum(t.unreadable_pages for t in report.tables.values())
    return copied - 2 * bad - 20 * report.placeholder_sessions - 20 * report.parents_cleared
