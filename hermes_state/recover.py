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
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import json
import os
import re
import shutil
import sqlite3
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hermes_state import cjk, fts, pages, salvage, schema
from hermes_state.connection import Store, create_bare_store, is_open_in_process, open_store
from hermes_state.errors import HermesStateError, StoreNotFoundError, is_corruption_error
from hermes_state.salvage import ColumnInfo, SchemaEntry

Progress = Callable[[str, int, "int | None"], None]

BUNDLE_SUFFIXES = ("", "-wal", "-shm", "-journal")
TARGET_SIDECARS = ("-wal", "-shm", "-journal")
# Copied first, in this order; the source's other tables follow in its own order.
FIRST_TABLES = (
    "schema_version",
    "system_prompts",
    "sessions",
    "messages",
    "session_model_usage",
    "state_meta",
)
# When the source's schema is unreadable: the tables copied into a new schema-31 store.
FALLBACK_TABLES = (
    "sessions",
    "messages",
    "session_model_usage",
    "state_meta",
    "gateway_routing",
    "compression_locks",
    "async_delegations",
    "delivery_obligations",
)
# state_meta keys that say how far an index rebuild got: the target's indexes are rebuilt whole.
DERIVED_META_KEYS = frozenset(
    {
        fts.HIGH_WATER_KEY,
        fts.PROGRESS_KEY,
        fts.STALE_KEY,  # the target's indexes are rebuilt and their triggers restored
        "fts_cjk_rebuild_high_water",
        "fts_cjk_rebuild_progress",
        cjk.HIGH_WATER_KEY,
        cjk.LEGACY_HIGH_WATER_KEY,
    }
)
# Keys an index rebuild in progress leaves: a source that has one is not copied whole.
REBUILD_META_KEYS = frozenset(
    {
        fts.HIGH_WATER_KEY,
        fts.PROGRESS_KEY,
        fts.STALE_KEY,
        "fts_cjk_rebuild_high_water",
        "fts_cjk_rebuild_progress",
    }
)
CHUNK_ROWS = 2000
MAX_RANGE_QUERIES = 10_000
POINT_SPAN = 100_000  # damaged ranges up to this wide are read rowid by rowid
MAX_POINT_READS = 2_000_000
MIN_ROWID, MAX_ROWID = -(2**63), 2**63 - 1
MAX_REJECT_SAMPLES = 20
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
        if self.lost_and_found.get(salvage.UNATTRIBUTED) and self.schema_incomplete:
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
            self.lost_and_found.get(salvage.UNATTRIBUTED, 0) if self.schema_incomplete else 0
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


# --- preflight and the copy of the source bundle -------------------------------------------


def _sidecar(path: Path, suffix: str) -> Path:
    """Return the path of a store file's sidecar (suffix '-wal', '-shm', ...)."""
    return Path(str(path) + suffix)


def _check_paths(source: Path, target: Path, report_path: Path) -> None:
    """Refuse a missing source, a target that exists or is the source, an old report."""
    if not source.exists():
        raise StoreNotFoundError(f"No store at {source}")
    if not stat.S_ISREG(os.stat(source).st_mode):
        raise RecoveryError(f"{source} is not a regular file")
    real_source = source.resolve()
    bundle = {_sidecar(real_source, s) for s in BUNDLE_SUFFIXES}
    if target.resolve() in bundle:
        raise RecoveryError(
            f"The target {target} is the source store or one of its files",
            hint="Recover into a new file, e.g. --to ~/state.recovered.db",
        )
    for member in (target, *(_sidecar(target, s) for s in TARGET_SIDECARS)):
        if os.path.lexists(member):
            raise RecoveryError(
                f"{member} already exists; refusing to overwrite it",
                hint="Pick a target path that does not exist yet.",
            )
    if os.path.lexists(report_path):
        raise RecoveryError(
            f"The report {report_path} already exists; refusing to overwrite it",
            hint="Move the old report away or pass another --report path.",
        )
    if is_open_in_process(source):
        # Copying means open()/close() on the files, which would drop this process's locks.
        raise RecoveryError(
            f"This process has {source} open; close it before recovering from it",
        )


def _fingerprint(source: Path) -> dict[str, tuple[int, int]]:
    """Return (size, mtime_ns) of the main file and each sidecar that exists."""
    out = {}
    for suffix in BUNDLE_SUFFIXES:
        member = _sidecar(source, suffix)
        try:
            st = os.stat(member)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            out[member.name] = (st.st_size, st.st_mtime_ns)
    return out


def _copy_bundle(source: Path, work: Path, report: RecoveryReport) -> Path:
    """Copy the main file and its sidecars into work; refuse if they changed meanwhile."""
    before = _fingerprint(source)
    vanished = False
    for name in before:
        try:
            shutil.copyfile(source.parent / name, work / name)
        except FileNotFoundError:
            vanished = True  # a sidecar removed by its last connection closing
            break
        report.source_bundle[name] = os.stat(work / name).st_size
    after = _fingerprint(source)
    sizes = [report.source_bundle.get(n) == before[n][0] for n in before]
    if vanished or after != before or not all(sizes):
        report.source_unchanged = False
        raise RecoveryError(
            f"{source.name} changed while it was being copied (a process is writing it)",
            hint="Stop the gateway or other writers and retry.",
        )
    report.source_fingerprint = {k: list(v) for k, v in before.items()}
    return work / source.name


# --- reading the copy ------------------------------------------------------------------------


class _Budget:
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


def _open_copy(path: Path, report: RecoveryReport) -> sqlite3.Connection | None:
    """Open the work copy for reading, repairing what stands in the way of reading it."""
    repair = pages.repair_header(path, wal=_sidecar(path, "-wal").exists())
    report.header_fixes = list(repair.fixes)
    report.header_rewritten = bool(repair.fixes)
    conn = _connect_copy(path, report)
    if conn is None and repair.fixes:
        # The repair was judged on the pages; if SQLite still cannot read the copy, say so and
        # try the header as it was (the raw page reader still reads the repaired guess).
        report.notes.append("the repaired header did not make the copy readable")
    elif repair.fixes:
        report.notes.append("the database header was repaired: " + "; ".join(repair.fixes))
    if conn is None:
        report.source_readable = False
    return conn


def _connect_copy(path: Path, report: RecoveryReport) -> sqlite3.Connection | None:
    """Connect to the work copy and read its schema (writable_schema if needed)."""
    conn = sqlite3.connect(path, isolation_level=None)
    # Damaged text must not hide the rest of its row: undecodable bytes become U+FFFD.
    conn.text_factory = functools.partial(bytes.decode, encoding="utf-8", errors="replace")
    try:
        # Fold the copied WAL into the copy's main file so the page-level salvage reads the
        # committed content (this writes only the private copy).
        with contextlib.suppress(sqlite3.DatabaseError):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        conn.execute("PRAGMA query_only=ON")
        try:
            conn.execute("SELECT name FROM sqlite_master").fetchall()
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc).lower():
                raise
            report.notes.append(f"schema unreadable ({exc}); read again with writable_schema=ON")
            conn.execute("PRAGMA writable_schema=ON")
            report.writable_schema = True
            conn.execute("SELECT name FROM sqlite_master").fetchall()
        return conn
    except sqlite3.DatabaseError as exc:
        conn.close()
        report.notes.append(f"the source copy cannot be read as an SQLite database: {exc}")
        return None


def _source_tables(conn: sqlite3.Connection) -> dict[str, str]:
    """Return {table name: create sql} of the source, best effort."""
    try:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    except sqlite3.DatabaseError:
        return {}
    return {name: sql or "" for name, sql in rows}


# Tables a virtual table keeps its data in (FTS5, R-tree): created again with the table itself.
SHADOW_SUFFIXES = ("_data", "_idx", "_content", "_docsize", "_config", "_node", "_parent", "_rowid")


def _shadow_of(name: str, virtual: set[str] | list[str]) -> bool:
    """Tell whether a table is a shadow table of one of the virtual tables."""
    return any(name == v + suffix for v in virtual for suffix in SHADOW_SUFFIXES)


def _is_derived(name: str, tables: dict[str, str]) -> bool:
    """Tell whether a table is an FTS index, an FTS shadow table or SQLite's own."""
    if name.startswith("sqlite_") or name == "schema_version":
        return True
    if name in (cjk.PENDING_TABLE, *cjk.LEGACY_TABLES):
        return True  # the CJK index's queue: rebuilt, not copied
    virtual = [n for n, sql in tables.items() if sql.upper().startswith("CREATE VIRTUAL TABLE")]
    return name in virtual or _shadow_of(name, virtual)


def _count(conn: sqlite3.Connection, table: str) -> int | None:
    """Count a source table's rows (None when even that cannot be read)."""
    # state_meta's rebuild markers are not copied, so they are not counted as source rows either.
    where = ""
    params: tuple[str, ...] = ()
    if table == "state_meta":
        where = f" WHERE key NOT IN ({', '.join('?' * len(DERIVED_META_KEYS))})"
        params = tuple(sorted(DERIVED_META_KEYS))
    try:
        return int(
            conn.execute(f"SELECT count(*) FROM {schema.quote(table)}{where}", params).fetchone()[0]
        )
    except sqlite3.DatabaseError:
        return None


def _bounds(conn: sqlite3.Connection, table: str) -> tuple[int, int] | None:
    """Return (min, max) rowid, falling back to the full range when the ends are unreadable."""
    lo, hi = MIN_ROWID, MAX_ROWID
    try:
        row = conn.execute(f'SELECT min(rowid) FROM "{table}"').fetchone()
        if row[0] is None:
            return None  # empty (or the first leaf is unreadable; max() tells which)
        lo = int(row[0])
    except sqlite3.DatabaseError:
        pass
    try:
        row = conn.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()
        if row[0] is not None:
            hi = int(row[0])
    except sqlite3.DatabaseError:
        pass
    return lo, hi


# A row as read from the source and written to the target: its rowid, then its values in the
# order of the writer's columns.
Row = tuple[Any, ...]


class _TableWriter:
    """Writes one table's salvaged rows into the target, keeping aside the ones it refuses."""

    def __init__(
        self,
        store: Store,
        result: TableResult,
        columns: Sequence[str],
        progress: Progress | None,
        lost: salvage.LostAndFound,
    ) -> None:
        self.store = store
        self.result = result
        self.table = result.name
        self.columns = list(columns)
        self.progress = progress
        quoted = ", ".join(f'"{c}"' for c in self.columns)
        verb = "INSERT OR REPLACE" if self.table == "state_meta" else "INSERT"
        marks = ", ".join("?" for _ in self.columns)
        self.insert = f'{verb} INTO "{self.table}" ({quoted}) VALUES ({marks})'
        self.meta_key = self.columns.index("key") if self.table == "state_meta" else None
        self.copied_rowids: set[int] = set()
        self.rejected_rowids: set[int] = set()
        self.ignored_rowids: set[int] = set()  # left out on purpose (index rebuild markers)
        # Values of cells whose rowid is damaged (outside their page's range), by rowid: when
        # SQLite's cursor returns one of them, it is kept aside instead of copied.
        self.strays: dict[int, tuple[Any, ...]] = {}
        self.diverted: set[int] = set()
        self.lost = lost
        self.meta_keys: set[str] = set()
        self.title_pos = (
            self.columns.index("title")
            if self.table == "sessions" and "title" in self.columns
            else None
        )

    def _keep(self, values: tuple[Any, ...]) -> bool:
        """Tell whether a row is copied (state_meta's index-rebuild markers are not)."""
        if self.meta_key is None:
            return True
        return values[self.meta_key] not in DERIVED_META_KEYS

    def flush(self, rows: list[Row]) -> None:
        """Write rows (rowid first, then the columns) into the target in one transaction."""
        if self.strays:
            rows = [r for r in rows if not self._divert(r)]
        dropped = [r[0] for r in rows if not self._keep(r[1:])]
        if dropped:
            self.ignored_rowids.update(dropped)
            rows = [r for r in rows if self._keep(r[1:])]
        if not rows:
            return
        values = [r[1:] for r in rows]
        try:
            self.store.write(lambda conn: conn.executemany(self.insert, values))
            kept = list(range(len(rows)))
            refused: list[tuple[int, str]] = []
        except sqlite3.IntegrityError:
            # The result is applied only after the commit: store.write may replay fn.
            kept, refused, notes = self.store.write(lambda c: self._insert_one_by_one(c, values))
            room = max(0, MAX_REJECT_SAMPLES - len(self.result.errors))
            self.result.errors.extend(notes[:room])
        for i in kept:
            self.copied_rowids.add(rows[i][0])
        for i, error in refused:
            self.rejected_rowids.add(rows[i][0])
            self.lost.add(
                self.table,
                "rejected by the target's constraints",
                rows[i][0],
                None,
                dict(zip(self.columns, values[i], strict=True)),
                error,
            )
        self.result.rejected += len(refused)
        self.result.to_lost_and_found += len(refused)
        self.result.copied += len(kept)
        if self.meta_key is not None:
            self.meta_keys.update(values[i][self.meta_key] for i in kept)
        if self.progress is not None:
            self.progress(self.table, self.result.copied, self.result.source_rows)

    def _divert(self, row: Row) -> bool:
        """Keep a row aside if it is a damaged-rowid cell's; tell whether it was."""
        values = self.strays.get(row[0])
        if values is None or tuple(row[1:]) != values:
            return False
        del self.strays[row[0]]
        self.diverted.add(row[0])
        self.lost.add(
            self.table,
            salvage.BAD_ROWID,
            row[0],
            None,
            dict(zip(self.columns, row[1:], strict=True)),
        )
        self.result.to_lost_and_found += 1
        return True

    def _insert_one_by_one(
        self, conn: sqlite3.Connection, values: list[tuple[Any, ...]]
    ) -> tuple[list[int], list[tuple[int, str]], list[str]]:
        """Insert rows one at a time; return (indexes kept, (index, error) refused, notes)."""
        kept: list[int] = []
        refused: list[tuple[int, str]] = []
        notes: list[str] = []
        for i, value in enumerate(values):
            try:
                conn.execute(self.insert, value)
                kept.append(i)
                continue
            except sqlite3.IntegrityError as exc:
                error = str(exc)
            if self.title_pos is not None and "sessions.title" in error:
                # A duplicate title must not cost the session: keep the row, drop the title.
                retitled = list(value)
                retitled[self.title_pos] = None
                try:
                    conn.execute(self.insert, retitled)
                    kept.append(i)
                    notes.append(f"title {value[self.title_pos]!r} cleared: {error}")
                    continue
                except sqlite3.IntegrityError as exc:
                    error = str(exc)
            refused.append((i, error))
            notes.append(f"row rejected: {error}")
        return kept, refused, notes


class _RangeReader:
    """Reads one table of the work copy through SQLite, around rowid ranges it cannot read."""

    def __init__(
        self,
        src: sqlite3.Connection,
        writer: _TableWriter,
        report: RecoveryReport,
        budget: _Budget,
    ) -> None:
        self.src = src
        self.writer = writer
        self.table = writer.table
        self.result = writer.result
        self.report = report
        self.budget = budget
        quoted = ", ".join(f'"{c}"' for c in writer.columns)
        self.select = f'SELECT rowid, {quoted} FROM "{self.table}"'
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
            indexes = [r[1] for r in self.src.execute(f'PRAGMA index_list("{self.table}")')]
        except sqlite3.DatabaseError:
            indexes = []
        for index in indexes:
            try:
                first_col = self.src.execute(f'PRAGMA index_info("{index}")').fetchone()[2]
            except (sqlite3.DatabaseError, TypeError):
                continue
            if first_col is None:
                continue  # an expression index cannot be ordered by a column name
            # Both directions: a damaged index page cuts one scan, the other reaches past it.
            for order in ("ASC", "DESC"):
                self.report.range_queries += 1
                try:
                    for (rowid,) in self.src.execute(
                        f'SELECT rowid FROM "{self.table}" INDEXED BY "{index}" '
                        f'ORDER BY "{first_col}" {order}'
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


# --- the target ------------------------------------------------------------------------------


def _reconcile_orphans(conn: sqlite3.Connection) -> tuple[int, int]:
    """Give orphaned messages/usage a placeholder session; clear dangling parents."""
    orphans: dict[str, tuple[float | None, int]] = {}
    for sid, first, n in conn.execute(
        "SELECT m.session_id, MIN(m.timestamp), COUNT(*) FROM messages m "
        "WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = m.session_id) "
        "GROUP BY m.session_id"
    ):
        orphans[sid] = (first, n)
    has_usage = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'session_model_usage'"
    ).fetchone()
    usage = (
        conn.execute(
            "SELECT u.session_id, MIN(u.first_seen) FROM session_model_usage u "
            "WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = u.session_id) "
            "GROUP BY u.session_id"
        ).fetchall()
        if has_usage
        else []
    )
    for sid, first in usage:
        orphans.setdefault(sid, (first, 0))
    n = 0
    for sid in sorted(orphans, key=str):
        first, count = orphans[sid]
        while True:
            n += 1
            title = PLACEHOLDER_TITLE.format(n=n)
            taken = conn.execute("SELECT 1 FROM sessions WHERE title = ?", (title,)).fetchone()
            if taken is None:
                break
        conn.execute(
            "INSERT INTO sessions (id, source, started_at, title, message_count) "
            "VALUES (?, 'recovered', ?, ?, ?)",
            (sid, first if first is not None else time.time(), title, count),
        )
    cleared = conn.execute(
        "UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM sessions p WHERE p.id = sessions.parent_session_id)"
    ).rowcount
    return len(orphans), cleared


# --- the target's layout ------------------------------------------------------------------------

_VIRTUAL_RE = re.compile(r"^\s*CREATE\s+VIRTUAL\s+TABLE", re.IGNORECASE)
_WITHOUT_ROWID_RE = re.compile(r"WITHOUT\s+ROWID\s*$", re.IGNORECASE)


@dataclass
class _Plan:
    """How the target is laid out and filled."""

    layout: str  # "source" or "fallback"
    tables: list[str]  # ordinary tables whose rows are copied, in order
    without_rowid: set[str] = field(default_factory=set)
    late: list[tuple[str, str]] = field(default_factory=list)  # (name, DDL) after the copy
    rebuild: list[str] = field(default_factory=list)  # external-content FTS tables to rebuild
    cjk: bool = False  # the target has this package's CJK index (rebuilt by catch-up)
    gated: bool = False  # FTS insert triggers are paused during the copy (fallback layout)
    sequences: dict[str, int] = field(default_factory=dict)
    header: dict[str, int] = field(default_factory=dict)  # application_id, user_version


def _read_schema(src: sqlite3.Connection) -> list[SchemaEntry] | None:
    """Return the source's schema rows in their order, None when unreadable."""
    try:
        rows = src.execute(
            "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master ORDER BY rowid"
        ).fetchall()
    except sqlite3.DatabaseError:
        return None
    return [
        SchemaEntry(str(t), str(n), str(tb), int(r or 0), sql or "") for t, n, tb, r, sql in rows
    ]


def _pragma(src: sqlite3.Connection, name: str) -> int | None:
    try:
        row = src.execute(f"PRAGMA {name}").fetchone()
    except sqlite3.DatabaseError:
        return None
    return None if row is None else int(row[0])


def _references(sql: str, names: set[str]) -> set[str]:
    """Return which of names the SQL text mentions as a word."""
    return {n for n in names if re.search(rf"(?<![\w]){re.escape(n)}(?![\w])", sql)}


def _schema_from_pages(copy: Path) -> list[SchemaEntry] | None:
    """Return schema rows read off sqlite_master's surviving leaf pages (page 1 unreadable)."""
    fd = os.open(copy, os.O_RDONLY | os.O_CLOEXEC)  # the private copy
    try:
        raw = pages.Pages(fd, os.fstat(fd).st_size)
        found = salvage.schema_records(raw, raw.table_leaves(set()))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    order = {"table": 0, "index": 1, "view": 2, "trigger": 3}
    return sorted(found.values(), key=lambda entry: (order[entry.kind], entry.rootpage))


def _source_layout(
    src: sqlite3.Connection | None,
    target: Path,
    report: RecoveryReport,
    rows: list[SchemaEntry] | None = None,
) -> tuple[Store, _Plan] | None:
    """Create the target with the source's own schema; None when the schema is unusable."""
    if rows is None:
        rows = _read_schema(src) if src is not None else None
    if not rows:
        return None
    tables = {e.name: e.sql for e in rows if e.kind == "table"}
    if not {"sessions", "messages", "schema_version"} <= set(tables):
        return None
    virtual = {n for n, sql in tables.items() if _VIRTUAL_RE.match(sql)}
    shadow = {n for n in tables if _shadow_of(n, virtual)}
    journal_mode = None
    if src is not None:
        with contextlib.suppress(sqlite3.DatabaseError):
            journal_mode = str(src.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    store = create_bare_store(
        target,
        page_size=_pragma(src, "page_size") if src is not None else None,
        journal_mode=journal_mode,
    )
    plan = _Plan(layout="source", tables=[])
    for key in ("application_id", "user_version"):
        value = _pragma(src, key) if src is not None else None
        if value:
            plan.header[key] = value
    if src is not None:
        with contextlib.suppress(sqlite3.DatabaseError):
            plan.sequences = {
                str(n): int(v) for n, v in src.execute("SELECT name, seq FROM sqlite_sequence")
            }
    failed: set[str] = set()

    def create(name: str, ddl: str) -> bool:
        try:
            store.write(lambda conn: conn.execute(ddl))
            return True
        except sqlite3.DatabaseError as exc:
            report.objects_not_recreated[name] = str(exc)
            failed.add(name)
            return False

    inline_fts: set[str] = set()
    for entry in rows:
        name, sql = entry.name, entry.sql
        if entry.kind != "table" or name.startswith("sqlite_") or name in shadow or not sql:
            continue
        if name in virtual:
            if create(name, sql):
                options = sql.lower()
                if name == cjk.TABLE:
                    plan.cjk = True
                elif "content=" in options.replace(" ", "") and "content=''" not in options:
                    plan.rebuild.append(name)
                else:
                    inline_fts.add(name)
            continue
        if create(name, sql):
            plan.tables.append(name)
            if _WITHOUT_ROWID_RE.search(sql.strip()):
                plan.without_rowid.add(name)
    for name in failed & set(tables) - virtual:
        report.not_copied[name] = _count(src, name) if src is not None else None
    for entry in rows:
        if entry.kind == "index" and entry.sql and not _references(entry.sql, failed):
            create(entry.name, entry.sql)
    # Triggers that feed an inline index run during the copy (the only way to rebuild such an
    # index is to insert the rows again); every other view and trigger comes after the copy.
    for entry in rows:
        name, sql = entry.name, entry.sql
        if entry.kind not in ("view", "trigger") or not sql:
            continue
        if _references(sql, failed):
            report.objects_not_recreated[name] = (
                "refers to " + ", ".join(sorted(_references(sql, failed))) + ", not recreated"
            )
            continue
        if entry.kind == "trigger" and _references(sql, inline_fts):
            create(name, sql)
        else:
            plan.late.append((name, sql))
    order = [t for t in FIRST_TABLES if t in plan.tables]
    plan.tables = order + [t for t in plan.tables if t not in order]
    for name, why in report.objects_not_recreated.items():
        report.notes.append(f"{name} was not recreated: {why}")
    return store, plan


def _fallback_layout(target: Path, src: sqlite3.Connection | None) -> tuple[Store, _Plan]:
    """Create a new schema-31 store for a source whose schema cannot be used."""
    store = open_store(target)
    have = _source_tables(src) if src is not None else {}
    known = [t for t in (*schema.TABLE_DDL, *schema.LAZY_TABLE_DDL) if t not in FALLBACK_TABLES]
    tables = [t for t in (*FALLBACK_TABLES, *known) if t in have and t != "schema_version"]
    return store, _Plan(
        layout="fallback", tables=tables, rebuild=list(fts.INDEX_TABLES), cjk=True, gated=True
    )


def _pause_fts_triggers(store: Store) -> None:
    """Gate the FTS insert triggers off for the bulk copy (the rebuild indexes every row once)."""
    # The triggers index a row only if id > high water OR id <= progress (fts module).
    store.write(
        lambda conn: conn.executemany(
            "INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
            [(fts.HIGH_WATER_KEY, str(MAX_ROWID)), (fts.PROGRESS_KEY, str(MIN_ROWID))],
        )
    )


def _finish_layout(store: Store, plan: _Plan, report: RecoveryReport) -> None:
    """Create the views and triggers left for after the copy, rebuild the search indexes, and
    carry over AUTOINCREMENT counters and the header's application id."""
    for name, ddl in plan.late:
        try:
            store.write(functools.partial(_execute, ddl))
        except sqlite3.DatabaseError as exc:
            report.objects_not_recreated[name] = str(exc)
            report.notes.append(f"{name} was not recreated: {exc}")

    def rebuild(conn: sqlite3.Connection) -> None:
        meta_keys = (fts.HIGH_WATER_KEY, fts.PROGRESS_KEY)
        conn.executemany("DELETE FROM state_meta WHERE key = ?", [(k,) for k in meta_keys])
        if fts.layout_of(conn) == "external":
            # A source whose agent had detached its indexes lacks their triggers: restore them.
            for name in fts.create_external(conn):
                report.notes.append(f"{name} was missing from the source and was recreated")
        for table in plan.rebuild:
            conn.execute(
                f"INSERT INTO {schema.quote(table)}({schema.quote(table)}) VALUES ('rebuild')"
            )
        if plan.cjk and cjk.is_installed(conn):
            cjk.reset(conn)
            cjk.catch_up(conn)

    # A full rebuild replaces whatever triggers indexed: every row exactly once.
    store.write(rebuild)

    def counters(conn: sqlite3.Connection) -> None:
        for name, seq in plan.sequences.items():
            row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (name,)).fetchone()
            if row is None:
                conn.execute("INSERT INTO sqlite_sequence(name, seq) VALUES (?, ?)", (name, seq))
            elif int(row[0] or 0) < seq:
                conn.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = ?", (seq, name))

    if (
        plan.sequences
        and store.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'"
        ).fetchone()
    ):
        store.write(counters)
    for key, value in plan.header.items():
        store.conn.execute(f"PRAGMA {key} = {int(value)}")


def _execute(sql: str, conn: sqlite3.Connection) -> None:
    """Run one statement (for store.write)."""
    conn.execute(sql)


def _verify(
    store: Store,
    report: RecoveryReport,
    meta_keys: set[str],
    expected_version: int | None,
    index_check: _IndexCheck | None = None,
) -> Verification:
    """Check the finished target: integrity, foreign keys, FTS, schema version, counts."""
    conn = store.conn
    v = Verification(expected_schema_version=expected_version)
    # The search-index checks take most of the time: they run on a second connection, beside
    # the b-tree checks (sqlite3 releases the GIL while SQLite works).
    # FTS5's own checks (the slowest part; each is a write statement, so one at a time) run on
    # a second connection while this one checks the b-trees and the indexes' row sets.
    checks = [index_check] if index_check is not None else []
    covered = set() if index_check is None else set(index_check.tables or fts.fts5_tables(conn))
    rest = set(fts.fts5_tables(conn)) - covered  # FTS5 tables the copy's check did not cover
    if rest:
        checks.append(_IndexCheck(store.path, rest))  # on a connection of its own
    try:
        v.integrity = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
        v.foreign_key_violations = len(conn.execute("PRAGMA foreign_key_check").fetchall())
        problems = fts.integrity_check(conn, tables=()) + cjk.integrity_problems(conn)
    finally:
        for check in checks:
            check.wait()
    for check in checks:
        problems.extend(check.problems())
    v.fts_checked = True
    v.fts_problems = list(dict.fromkeys(str(p) for p in problems))
    v.schema_version = schema.stored_version(conn)
    for name, t in report.tables.items():
        if t.status == "absent":
            continue
        if name == "state_meta" and report.layout == "fallback":
            # The fresh schema writes keys of its own; count only the keys that were copied.
            have = sum(1 for (k,) in conn.execute("SELECT key FROM state_meta") if k in meta_keys)
        elif name == "state_meta":
            have = sum(
                1
                for (k,) in conn.execute("SELECT key FROM state_meta")
                if k not in DERIVED_META_KEYS
            )
        else:
            have = conn.execute(f"SELECT count(*) FROM {schema.quote(name)}").fetchone()[0]
        want = t.copied + (report.placeholder_sessions if name == "sessions" else 0)
        if have != want:
            v.count_mismatches.append(f"{name}: target has {have} rows, expected {want}")
    return v


def _write_report(report: RecoveryReport, path: Path) -> None:
    """Write the report as JSON, refusing to overwrite an existing file."""
    data = json.dumps(report.to_dict(), indent=2, ensure_ascii=False).encode() + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _table_status(result: TableResult, report: RecoveryReport) -> str:
    """Name how a table came through: copied, empty, partial or unreadable."""
    skipped = any(r.table == result.name for r in report.skipped_ranges)
    if skipped or result.rejected:
        return "partial" if result.copied else "unreadable"
    if result.copied < max(result.source_rows or 0, result.on_pages or 0):
        return "partial"
    if result.to_lost_and_found or result.unreadable_cells or result.unreadable_pages:
        return "partial"
    return "copied" if result.copied else "empty"


def _copy_plain(
    src: sqlite3.Connection, store: Store, result: TableResult, cols: list[str]
) -> None:
    """Copy a WITHOUT ROWID table in one read (no rowid to read around damage by)."""
    quoted = ", ".join(schema.quote(c) for c in cols)
    table = schema.quote(result.name)
    try:
        rows = src.execute(f"SELECT {quoted} FROM {table}").fetchall()
    except sqlite3.DatabaseError as exc:
        result.errors.append(str(exc))
        result.status = "unreadable"
        return
    marks = ", ".join("?" * len(cols))
    store.write(
        lambda conn: conn.executemany(f"INSERT INTO {table} ({quoted}) VALUES ({marks})", rows)
    )
    result.copied = len(rows)


def _copy_tables(
    src: sqlite3.Connection | None,
    copy: Path,
    store: Store,
    plan: _Plan,
    report: RecoveryReport,
    progress: Progress | None,
    lost: salvage.LostAndFound,
) -> set[str]:
    """Copy the rows of every planned table, then check each against the pages and read what
    SQLite could not; return the state_meta keys copied."""
    meta_keys: set[str] = set()
    tables = _source_tables(src) if src is not None else {}
    budget = _Budget()
    for name in schema.LEDGER_TABLES:
        report.excluded[name] = _count(src, name) if src is not None and name in tables else None
    if plan.layout == "fallback" and src is not None:
        for name in sorted(tables):
            if name in plan.tables or name in schema.LEDGER_TABLES or _is_derived(name, tables):
                continue
            report.not_copied[name] = _count(src, name)
        for name in FALLBACK_TABLES:
            if name not in tables and name != "delivery_obligations":
                report.tables[name] = TableResult(name, None, status="absent")
    writers: dict[str, _TableWriter] = {}
    scans: dict[str, pages.TreeScan | None] = {}
    raw = _raw_pages(copy, report)
    master = _master(src)
    shapes: dict[str, salvage.Shape] = {}
    if raw is not None:
        if not {"sessions", "messages"} <= set(master):
            # The schema is damaged: its rows may still sit on leaf pages of sqlite_master.
            for name, rec in salvage.schema_records(raw, raw.table_leaves(set())).items():
                master.setdefault(name, rec)
        shapes = _shapes(src, store, master)

    def make_writer(name: str, cols: list[str]) -> _TableWriter:
        result = report.tables.get(name)
        if result is None or result.status == "absent":
            result = report.tables[name] = TableResult(name, None)
        return _TableWriter(store, result, cols, progress, lost)

    for name in plan.tables:
        if src is None or name in schema.LEDGER_TABLES or name == cjk.PENDING_TABLE:
            continue  # the ledger is excluded; the CJK queue is rebuilt
        result = TableResult(name, _count(src, name))
        report.tables[name] = result
        if name == "delivery_obligations" and plan.layout == "fallback":
            store.write(schema.ensure_delivery_obligations)
            store.forget_columns()
        src_info = _source_info(src, name)
        src_cols = [r[1] for r in src_info]
        target_cols = store.columns(name)
        cols = [c for c in target_cols if c in src_cols]
        result.columns_dropped = [c for c in src_cols if c not in target_cols]
        if not cols:
            result.status = "unreadable"
            result.errors.append("the source table's columns could not be read")
            continue
        if name in plan.without_rowid:
            _copy_plain(src, store, result, cols)
            continue
        writer = _TableWriter(store, result, cols, progress, lost)
        if raw is not None:
            scans[name] = _prewalk(raw, master, shapes, name, writer)
        _RangeReader(src, writer, report, budget).run()
        writers[name] = writer
    if raw is not None:
        try:
            _page_pass(src, raw, master, shapes, scans, store, report, writers, make_writer, lost)
        except (OSError, ValueError) as exc:
            report.notes.append(f"page-level salvage stopped: {exc}")
        finally:
            os.close(raw.fd)
    lost.flush()
    for writer in writers.values():
        meta_keys |= writer.meta_keys
    position = {name: i for i, name in enumerate(plan.tables)}
    report.skipped_ranges.sort(key=lambda r: (position.get(r.table, 0), r.first_rowid))
    for result in report.tables.values():
        if result.status == "pending":
            result.status = _table_status(result, report)
    return meta_keys


def _source_info(conn: sqlite3.Connection, table: str) -> list[ColumnInfo]:
    """Return PRAGMA table_info rows of a source table (empty when unreadable)."""
    try:
        return [tuple(r) for r in conn.execute(f'PRAGMA table_info("{table}")')]
    except sqlite3.DatabaseError:
        return []


def _master(src: sqlite3.Connection | None) -> dict[str, SchemaEntry]:
    """Return the source's schema rows by name, best effort."""
    rows = _read_schema(src) if src is not None else None
    return {} if rows is None else {e.name: e for e in rows}


def _shapes(
    src: sqlite3.Connection | None, store: Store, master: dict[str, SchemaEntry]
) -> dict[str, salvage.Shape]:
    """Return the record shape of every table the source has or the target expects."""
    tables = {n: e.sql for n, e in master.items() if e.kind == "table"}
    out: dict[str, salvage.Shape] = {}
    for name, sql in tables.items():
        if _VIRTUAL_RE.match(sql) or (name.startswith("sqlite_") and name != "sqlite_sequence"):
            continue
        derived = _is_derived(name, tables) or name in schema.LEDGER_TABLES
        info: list[ColumnInfo] = _source_info(src, name) if src is not None else []
        shape = (
            salvage.Shape.from_info(name, info, derived=derived)
            if info
            else salvage.shape_from_sql(name, sql, derived=derived)
        )
        if shape is not None:
            out[name] = shape
    for name in _target_tables(store):
        if name not in out:
            info = [
                tuple(r) for r in store.conn.execute(f"PRAGMA table_info({schema.quote(name)})")
            ]
            derived = name in schema.LEDGER_TABLES or name in (cjk.PENDING_TABLE,)
            out[name] = salvage.Shape.from_info(name, info, derived=derived)
    return out


def _target_tables(store: Store) -> list[str]:
    """Return the ordinary rowid tables of the target (not FTS, not SQLite's own)."""
    rows = store.conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    tables = {n: sql or "" for n, sql in rows}
    return [
        n
        for n, sql in tables.items()
        if not _is_derived(n, tables)
        and not _WITHOUT_ROWID_RE.search(sql.strip())
        and n != salvage.LOST_AND_FOUND
        and n not in schema.LEDGER_TABLES
    ]


def _page_row(writer: _TableWriter, shape: salvage.Shape, rowid: int, fields: list[Any]) -> Row:
    """Return a row for writer.flush from a decoded record."""
    values = shape.row(rowid, fields)
    return (rowid, *(values.get(c) for c in writer.columns))


def _complete_from_pages(
    writer: _TableWriter,
    raw: pages.Pages,
    scan: pages.TreeScan,
    shape: salvage.Shape,
    lost: salvage.LostAndFound,
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
            lost.add(writer.table, salvage.MISFIT, rowid, page, fields)
            result.to_lost_and_found += 1
        elif (page, index) in scan.strays and shape.alias is not None:
            # The rowid is the row's identity (messages.id): a damaged one would be a wrong row.
            lost.add(writer.table, salvage.BAD_ROWID, rowid, page, shape.row(rowid, fields))
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
        lost.add(writer.table, salvage.DUPLICATE, rowid, page, fields)
        result.to_lost_and_found += 1
    if result.from_pages:
        report_note = (
            f"{writer.table}: {result.from_pages} rows its leaf pages hold were read from the "
            "pages (SQLite's cursor did not return them)"
        )
        report.notes.append(report_note)


def _raw_pages(copy: Path, report: RecoveryReport) -> pages.Pages | None:
    """Open the work copy's raw pages (the caller closes .fd); None when they cannot be read."""
    fd = os.open(copy, os.O_RDONLY | os.O_CLOEXEC)  # the private copy: no live locks to lose
    try:
        return pages.Pages(fd, os.fstat(fd).st_size)
    except (OSError, ValueError) as exc:
        os.close(fd)
        report.notes.append(f"page-level salvage skipped: {exc}")
        return None


def _prewalk(
    raw: pages.Pages,
    master: dict[str, SchemaEntry],
    shapes: dict[str, salvage.Shape],
    name: str,
    writer: _TableWriter,
) -> pages.TreeScan | None:
    """Walk a table's b-tree before it is copied, so rows under damaged rowids are known."""
    rec = master.get(name)
    if rec is None or rec.rootpage <= 0 or name not in shapes:
        return None
    scan = raw.walk_table(rec.rootpage)
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


def _page_pass(
    src: sqlite3.Connection | None,
    raw: pages.Pages,
    master: dict[str, SchemaEntry],
    shapes: dict[str, salvage.Shape],
    prewalked: dict[str, pages.TreeScan | None],
    store: Store,
    report: RecoveryReport,
    writers: dict[str, _TableWriter],
    make_writer: Callable[[str, list[str]], _TableWriter],
    lost: salvage.LostAndFound,
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
    wanted = _target_tables(store)
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


def _unattached(
    raw: pages.Pages,
    master: dict[str, SchemaEntry],
    shapes: dict[str, salvage.Shape],
    scans: dict[str, pages.TreeScan],
    writers: dict[str, _TableWriter],
    make_writer: Callable[[str, list[str]], _TableWriter],
    store: Store,
    report: RecoveryReport,
    lost: salvage.LostAndFound,
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
    targets = set(_target_tables(store))
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
                lost.add(None, salvage.UNATTRIBUTED, rowid, page, fields)
                continue
            if shape.derived:
                continue  # an index's or the ledger's page: rebuilt or excluded anyway
            table = shape.table
            scan = scans.get(table)
            writer = writers.get(table)
            have = writer.copied_rowids if writer is not None else set()
            if rowid in have or (scan is not None and not scan.in_hole(rowid)):
                lost.add(table, salvage.UNATTACHED, rowid, page, shape.row(rowid, fields))
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
    if lost.counts.get(salvage.UNATTACHED):
        report.notes.append(
            f"{lost.counts[salvage.UNATTACHED]} rows on pages no b-tree reaches (deleted, or "
            "cut off) were kept in lost_and_found, not restored"
        )


def _report_holes(writer: _TableWriter, scan: pages.TreeScan, report: RecoveryReport) -> None:
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


def _remove_target(target: Path) -> None:
    """Delete a target this recovery created and could not finish (with its sidecars)."""
    for member in (target, *(_sidecar(target, s) for s in TARGET_SIDECARS)):
        with contextlib.suppress(FileNotFoundError):
            member.unlink()


def _healthy(src: sqlite3.Connection, report: RecoveryReport) -> bool:
    """Tell whether the copy may be copied whole: intact header and schema, no index rebuild in
    progress (its b-trees are checked by _quick_check while the copy runs)."""
    if report.writable_schema:
        return False  # (a repaired header is fine: the b-trees are checked during the copy)
    try:
        tables = _source_tables(src)
        if not {"sessions", "messages", "schema_version"} <= set(tables):
            return False
        if "state_meta" in tables:
            marks = ", ".join("?" * len(REBUILD_META_KEYS))
            if src.execute(
                f"SELECT 1 FROM state_meta WHERE key IN ({marks}) LIMIT 1",
                tuple(sorted(REBUILD_META_KEYS)),
            ).fetchone():
                return False
    except sqlite3.DatabaseError:
        return False
    return True


class _IndexCheck:
    """FTS5's integrity checks of a healthy source copy, run in a thread during the copy.

    VACUUM INTO copies the indexes' shadow tables row for row, so the copy's deep checks (each
    index against the messages it covers) hold for the target too; the target's own b-trees
    and the indexes' row sets are checked on the target itself.
    """

    def __init__(self, copy: Path, tables: Collection[str] | None = None) -> None:
        self.copy = copy
        self.tables = tables  # the FTS5 tables checked here (None: all of them)
        self.result: list[str] | BaseException | None = None
        self.conn: sqlite3.Connection | None = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="recover-fts-check")
        self.thread.start()

    def _run(self) -> None:
        try:
            conn = self.conn = sqlite3.connect(self.copy, isolation_level=None, timeout=600)
        except BaseException as exc:
            self.result = exc
            return
        finally:
            self.ready.set()
        try:
            found = fts.integrity_check(conn, tables=self.tables, row_sets=False)
            self.result = [str(p) for p in found]
        except BaseException as exc:
            self.result = exc
        finally:
            conn.close()

    def wait(self) -> None:
        """Wait for the checks to end, whatever they found."""
        self.thread.join()

    def cancel(self) -> None:
        """Stop the checks (their result is not wanted) and wait for the thread."""
        self.ready.wait()
        if self.conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self.conn.interrupt()
        self.thread.join()

    def problems(self) -> list[str]:
        """Wait for the checks and return the problems they found."""
        self.thread.join()
        if isinstance(self.result, BaseException):
            raise self.result
        return list(self.result or [])


def _quick_check(copy: Path, out: list[bool]) -> None:
    """Append whether SQLite's quick_check passes on the copy (every page read, every b-tree's
    order checked): the condition for copying it whole."""
    conn = sqlite3.connect(f"{copy.resolve().as_uri()}?mode=ro", uri=True)
    try:
        out.append([r[0] for r in conn.execute("PRAGMA quick_check")] == ["ok"])
    except sqlite3.DatabaseError:
        out.append(False)
    finally:
        conn.close()


def _copy_whole(
    copy: Path,
    src: sqlite3.Connection,
    target: Path,
    report: RecoveryReport,
    progress: Progress | None,
) -> tuple[Store, _IndexCheck] | None:
    """Copy a healthy source into the target with VACUUM INTO, minus the runtime ledger, with
    the search indexes' checks running meanwhile; None (and no target) when the copy's b-trees
    turn out damaged."""
    try:
        mode = str(src.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    except sqlite3.DatabaseError:
        mode = "delete"
    # The largest index is checked on the copy from the start, on the other core; the others
    # on the target once it is written (FTS5 checks are write statements: one per file at once).
    largest = {fts.TRIGRAM_TABLE} & set(fts.fts5_tables(src))
    check = _IndexCheck(copy, largest or None)
    healthy: list[bool] = []
    _quick_check(copy, healthy)  # a damaged copy is salvaged instead of copied whole
    if not all(healthy):
        check.cancel()
        return None
    store = create_bare_store(target, journal_mode="delete")  # empty file: VACUUM INTO fills it
    try:
        try:
            src.execute("PRAGMA query_only=OFF")  # VACUUM INTO writes only the new file
            src.execute("VACUUM INTO ?", (str(target),))
            src.execute("PRAGMA query_only=ON")
        except sqlite3.DatabaseError:
            check.cancel()  # damage quick_check does not see: salvage instead
            store.close()
            _remove_target(target)
            return None
        tables = _source_tables(src)
        report.method = "copy"
        report.search_indexes = "copied"
        for name in schema.LEDGER_TABLES:
            report.excluded[name] = _count(src, name) if name in tables else None
        for name in (*[t for t in FIRST_TABLES if t in tables], *tables):
            if name in report.tables or _is_derived(name, tables) or name in schema.LEDGER_TABLES:
                continue
            n = _count(src, name)
            report.tables[name] = TableResult(
                name, n, copied=n or 0, status="copied" if n else "empty"
            )
            if progress is not None:
                progress(name, n or 0, n)

        def drop_ledger(conn: sqlite3.Connection) -> None:
            conn.execute("PRAGMA secure_delete=ON")  # excluded rows must not linger in free pages
            for name in schema.LEDGER_TABLES:
                if name in tables:
                    conn.execute(f"DELETE FROM {schema.quote(name)}")
            if "sqlite_sequence" in tables:
                conn.executemany(
                    "DELETE FROM sqlite_sequence WHERE name = ?",
                    [(n,) for n in schema.LEDGER_TABLES],
                )

        store.write(drop_ledger)
        store.forget_columns()
        if mode == "wal":
            store.conn.execute("PRAGMA journal_mode=WAL")
            store.journal_mode = "wal"
    except BaseException:
        check.cancel()
        store.close()
        _remove_target(target)
        raise
    return store, check


def _recover_copy(
    copy: Path,
    target: Path,
    report: RecoveryReport,
    progress: Progress | None,
    copy_whole: bool = True,
) -> None:
    """Salvage the work copy into the target and verify it (the core of recover())."""
    src = _open_copy(copy, report)
    try:
        store, plan, index_check = _make_target(copy, src, target, report, progress, copy_whole)
        report.layout = plan.layout
        expected: int | None = schema.SCHEMA_VERSION
        if plan.layout == "source" and src is not None:
            with contextlib.suppress(sqlite3.DatabaseError):
                expected = schema.stored_version(src)
        try:
            meta_keys: set[str] = set()
            lost = salvage.LostAndFound(store)
            store.conn.execute("PRAGMA foreign_keys=OFF")  # rows arrive parents-last
            if report.method == "copy":
                meta_keys = _meta_keys(store)
            else:
                if plan.gated:
                    _pause_fts_triggers(store)
                meta_keys = _copy_tables(src, copy, store, plan, report, progress, lost)
            for table, n in salvage.quarantine_invalid(store, lost).items():
                result = report.tables.get(table)
                if result is not None:
                    result.copied -= n
                    result.to_lost_and_found += n
                    result.status = "partial"
            report.placeholder_sessions, report.parents_cleared = store.write(_reconcile_orphans)
            if report.method != "copy":
                _finish_layout(store, plan, report)
            lost.flush()
            report.lost_and_found = dict(lost.counts)
            store.conn.execute("PRAGMA foreign_keys=ON")
            if report.schema_from_pages:
                expected = schema.stored_version(store.conn)  # whatever version the pages held
            if index_check is not None and report.lost_and_found.get(salvage.INVALID):
                index_check.wait()
                index_check = None  # rows were moved out of the copy: check the target itself
            report.verification = _verify(store, report, meta_keys, expected, index_check)
        except BaseException:
            if index_check is not None:
                index_check.wait()
            store.close()
            _remove_target(target)  # half-made and unreported: free the path for a retry
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
) -> tuple[Store, _Plan, _IndexCheck | None]:
    """Create the target: a whole copy of a healthy source (with its index checks running),
    else an empty store in the source's layout, else in the fallback layout."""
    if copy_whole and src is not None and _healthy(src, report):
        whole = _copy_whole(copy, src, target, report, progress)
        if whole is not None:
            store, index_check = whole
            return store, _Plan(layout="source", tables=list(report.tables)), index_check
        report.method = "salvage"
        report.search_indexes = "rebuilt"
        report.tables.clear()
        report.excluded.clear()
    made = _source_layout(src, target, report) if src is not None else None
    if made is None and (src is None or _read_schema(src) is None):
        rows = _schema_from_pages(copy)
        made = _source_layout(None, target, report, rows) if rows else None
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
        made = _fallback_layout(target, src)
    store, plan = made
    return store, plan, None


def _meta_keys(store: Store) -> set[str]:
    """Return the state_meta keys of a whole copy."""
    if not store.has_table("state_meta"):
        return set()
    return {str(k) for (k,) in store.conn.execute("SELECT key FROM state_meta")}


def _score(report: RecoveryReport) -> int:
    """Rate a salvage for choosing between two readings of one source (higher is better)."""
    copied = sum(t.copied for t in report.tables.values())
    bad = sum(t.to_lost_and_found + t.unreadable_cells for t in report.tables.values())
    bad += sum(report.lost_and_found.values())
    bad += sum(r.last_rowid - r.first_rowid + 1 for r in report.skipped_ranges if r.bounded)
    bad += 100 * sum(t.unreadable_pages for t in report.tables.values())
    return copied - 2 * bad - 20 * report.placeholder_sessions - 20 * report.parents_cleared


def _wal_doubts(copy: Path) -> list[str]:
    """Return reasons to doubt that the copied WAL belongs to the copied main file."""
    wal = _sidecar(copy, "-wal")
    doubts: list[str] = []
    with open(wal, "rb") as f:  # the private copy
        head = f.read(32)
    with open(copy, "rb") as f:
        main = f.read(100)
    if len(head) < 32 or int.from_bytes(head[0:4], "big") not in (0x377F0682, 0x377F0683):
        return ["its header is not a WAL header (SQLite ignores it)"]
    wal_page = int.from_bytes(head[8:12], "big")
    raw = int.from_bytes(main[16:18], "big")
    if main[:16] == pages.SQLITE_MAGIC and wal_page != (65536 if raw == 1 else raw):
        doubts.append(f"its page size {wal_page} is not the main file's")
    frames = _wal_frames(wal, head)
    if frames is not None:
        db_pages, counter = frames
        main_pages = copy.stat().st_size // max(512, wal_page)
        main_counter = int.from_bytes(main[24:28], "big")
        newer_wal = counter is not None and counter > main_counter  # e.g. a VACUUM's WAL
        if counter is not None and main_counter > counter:
            doubts.append("stale: the main file was changed after the WAL's last commit")
        elif db_pages and main_pages > db_pages and not newer_wal:
            doubts.append(
                f"stale: the main file has {main_pages} pages, more than the WAL's last "
                f"commit leaves ({db_pages})"
            )
    shm = _sidecar(copy, "-shm")
    if shm.exists() and shm.stat().st_size >= 136:
        with open(shm, "rb") as f:
            index = f.read(48)
        # The wal-index header repeats the salts of the WAL it indexes.
        if int.from_bytes(index[12:16], "little") == 1 and index[40:48] != head[16:24]:
            doubts.append("its salts are not the ones the shared-memory index records")
    return doubts


def _wal_frames(wal: Path, head: bytes) -> tuple[int, int | None] | None:
    """Return (database pages after the WAL's last commit, its page 1 change counter)."""
    page_size = int.from_bytes(head[8:12], "big")
    if page_size < 512 or page_size & (page_size - 1):
        return None
    salts = head[16:24]
    db_pages = 0
    counter: int | None = None
    pending: int | None = None
    with open(wal, "rb") as f:  # the private copy
        f.seek(32)
        while True:
            frame = f.read(24 + page_size)
            if len(frame) < 24 + page_size or frame[8:16] != salts:
                break  # the end of the frames this WAL header vouches for
            page = int.from_bytes(frame[0:4], "big")
            if page == 1:
                pending = int.from_bytes(frame[24 + 24 : 24 + 28], "big")
            commit = int.from_bytes(frame[4:8], "big")
            if commit:
                db_pages = commit
                if pending is not None:
                    counter = pending
    return db_pages, counter


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
    doubts = _wal_doubts(copy)
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
    ours, theirs = _score(report), _score(alt)
    why = "; ".join(doubts) or "the salvage with it found damage"
    stale = any(d.startswith("stale") for d in doubts)
    if theirs > ours or (stale and any(t.copied for t in alt.tables.values())):
        # A WAL older than its main file would put old page images over newer ones.
        _remove_target(target)
        os.replace(alt_target, target)
        alt.wal = (
            f"ignored: {why}"
            if stale
            else f"ignored: {why}; without it the salvage kept more ({theirs} vs {ours})"
        )
        alt.notes.append("the source's WAL was not replayed: " + alt.wal)
        return alt
    _remove_target(alt_target)
    report.wal = f"replayed: {why}, but with it the salvage kept more ({ours} vs {theirs})"
    return report


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
    source = Path(source).expanduser().absolute()
    target = Path(target).expanduser().absolute()
    report_file = (
        Path(report_path).expanduser().absolute()
        if report_path is not None
        else Path(str(target) + ".recovery.json")
    )
    _check_paths(source, target, report_file)
    target.parent.mkdir(parents=True, exist_ok=True)
    report = RecoveryReport(
        source=str(source),
        target=str(target),
        report_path=str(report_file),
        allow_partial=allow_partial,
    )
    work = Path(tempfile.mkdtemp(prefix="hermes-recover-", dir=target.parent))
    try:
        copy = _copy_bundle(source, work, report)
        wal = _sidecar(copy, "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            report = _judge_wal(copy, target, report, progress, copy_whole)
        else:
            _recover_copy(copy, target, report, progress, copy_whole)
    except sqlite3.DatabaseError as exc:
        _remove_target(target)
        if is_corruption_error(exc):
            raise RecoveryError(f"Recovery stopped on unreadable data: {exc}") from exc
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.duration_s = time.monotonic() - started
    _write_report(report, report_file)
    return report
