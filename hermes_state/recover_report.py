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

from hermes_state import lost_and_found, schema
from hermes_state.errors import HermesStateError

Progress = Callable[[str, int, "int | None"], None]

POINT_SPAN = 100_000  # damaged ranges up to this wide are read rowid by rowid


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

    @property
    def ok(self) -> bool:
        """Tell whether every check passed."""
        return (
            self.integrity == ["ok"]
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
    parents_cleared: int = 0
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

    def rows_lost(self) -> tuple[int, int]:
        """Return (rows seen in the source but not in their table, rows seen in all)."""
        lost = seen = 0
        for t in self.tables.values():
            shown = max(t.source_rows or 0, t.on_pages or 0, t.copied)
            seen += shown
            lost += shown - t.copied
        lost += sum(r.last_rowid - r.first_rowid + 1 for r in self.skipped_ranges if r.bounded)
        lost += sum(n or 0 for n in self.not_copied.values())
        return lost, seen + sum(n or 0 for n in self.not_copied.values())

    def summary(self) -> str:
        """Say in one line whether everything came through, and if not, how much did not."""
        kept = sum(self.lost_and_found.values())
        aside = f"; {kept} kept aside in table lost_and_found" if kept else ""
        if not self.source_readable and not any(t.copied for t in self.tables.values()):
            return "PARTIAL: nothing in the source could be read as a database" + aside
        if not self.partial:
            extras = []
            if kept:
                extras.append(f"{kept} rows of unknown standing kept in lost_and_found")
            if self.deleted_rows_seen:
                extras.append(f"{self.deleted_rows_seen} deleted rows on free pages left deleted")
            extra = f" ({'; '.join(extras)})" if extras else ""
            return f"Complete: every row the source shows was copied{extra}"
        lost, seen = self.rows_lost()
        if lost == 0 and not self.skipped_ranges and self.layout == "fallback":
            return (
                f"PARTIAL: the source's schema is damaged, so it was rebuilt as a new "
                f"schema-{schema.SCHEMA_VERSION} store; all {seen:,} rows found were copied, "
                "but tables whose schema was lost may be missing" + aside
            )
        unbounded = any(not r.bounded for r in self.skipped_ranges)
        unattributed = (
            self.lost_and_found.get(lost_and_found.UNATTRIBUTED, 0) if self.schema_incomplete else 0
        )
        lost += unattributed
        seen += unattributed
        what = f"{lost:,} of {seen:,} rows the source shows were not copied into their tables"
        if unbounded or any(t.unreadable_pages for t in self.tables.values()):
            what += " (plus unreadable pages whose rows cannot be counted)"
        elif not self.source_readable and not self.schema_from_pages:
            what += " (the schema is unreadable: tables were found by the shape of their rows)"
        return f"PARTIAL: {what}{aside}"

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
            "placeholder_sessions": self.placeholder_sessions,
            "parents_cleared": self.parents_cleared,
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
