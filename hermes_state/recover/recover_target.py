"""The new store a recovery writes: its layout (the source's own schema, or a new schema-31
store when that is unusable), the table writers that insert salvaged rows and keep aside the
ones the target refuses, and what is done after the copy — views and triggers, search indexes
rebuilt, counters carried over, placeholder sessions for orphaned messages."""

from __future__ import annotations

import contextlib
import functools
import re
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_state.recover import lost_and_found, pages
from hermes_state.recover.recover_report import (
    PLACEHOLDER_TITLE,
    Progress,
    RecoveryReport,
    TableResult,
)
from hermes_state.recover.recover_source import (
    DERIVED_META_KEYS,
    count_rows,
    is_derived,
    pragma_int,
    read_schema,
    shadow_of,
    source_tables,
)
from hermes_state.recover.salvage import SchemaEntry
from hermes_state.store import cjk, fts, schema
from hermes_state.store.connection import Store, create_bare_store, open_store
from hermes_state.store.diagnosis import is_litestream_table
from hermes_state.store.sql import SIDECAR_SUFFIXES, companion, quote

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

CHUNK_ROWS = 2000  # rows written per transaction
MAX_REJECT_SAMPLES = 20  # refusals quoted in a table's errors

# A row as read from the source and written to the target: its rowid, then its values in the
# order of the writer's columns.
Row = tuple[Any, ...]


class TableWriter:
    """Writes one table's salvaged rows into the target, keeping aside the ones it refuses."""

    def __init__(
        self,
        store: Store,
        result: TableResult,
        columns: Sequence[str],
        progress: Progress | None,
        lost: lost_and_found.LostAndFound,
    ) -> None:
        self.store = store
        self.result = result
        self.table = result.name
        self.columns = list(columns)
        self.progress = progress
        quoted = ", ".join(quote(c) for c in self.columns)
        verb = "INSERT OR REPLACE" if self.table == "state_meta" else "INSERT"
        marks = ", ".join("?" for _ in self.columns)
        self.insert = f"{verb} INTO {quote(self.table)} ({quoted}) VALUES ({marks})"
        self.meta_key = self.columns.index("key") if self.table == "state_meta" else None
        self.copied_rowids: set[int] = set()
        self.rejected_rowids: set[int] = set()
        self.ignored_rowids: set[int] = set()  # left out on purpose (index rebuild markers)
        # Values of cells whose rowid is damaged (outside their page's range), by rowid: when
        # SQLite's cursor returns one of them, it is kept aside instead of copied.
        self.strays: dict[int, tuple[Any, ...]] = {}
        self.diverted: set[int] = set()
        # Rowids whose values cannot have been read intact (a broken overflow chain), and why:
        # such a row is kept aside, never copied as if it were the row that was written.
        self.damaged: dict[int, tuple[str, int | None]] = {}  # rowid -> (why, its leaf page)
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
        if self.damaged:
            rows = [r for r in rows if not self._set_aside(r)]
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
                lost_and_found.REJECTED,
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
            lost_and_found.BAD_ROWID,
            row[0],
            None,
            dict(zip(self.columns, row[1:], strict=True)),
        )
        self.result.to_lost_and_found += 1
        return True

    def _set_aside(self, row: Row) -> bool:
        """Keep a row aside if its values were not read intact; tell whether it was."""
        damage = self.damaged.pop(row[0], None)
        if damage is None:
            return False
        why, page = damage
        self.diverted.add(row[0])
        self.lost.add(
            self.table,
            lost_and_found.DAMAGED_VALUE,
            row[0],
            page,
            dict(zip(self.columns, row[1:], strict=True)),
            why,
        )
        self.result.to_lost_and_found += 1
        self.result.damaged_values += 1
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


def copy_plain(src: sqlite3.Connection, store: Store, result: TableResult, cols: list[str]) -> None:
    """Copy a WITHOUT ROWID table in one read (no rowid to read around damage by)."""
    quoted = ", ".join(quote(c) for c in cols)
    table = quote(result.name)
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


VIRTUAL_RE = re.compile(r"^\s*CREATE\s+VIRTUAL\s+TABLE", re.IGNORECASE)

WITHOUT_ROWID_RE = re.compile(r"WITHOUT\s+ROWID\s*$", re.IGNORECASE)


@dataclass
class Plan:
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


def _references(sql: str, names: set[str]) -> set[str]:
    """Return which of names the SQL text mentions as a word."""
    return {n for n in names if re.search(rf"(?<![\w]){re.escape(n)}(?![\w])", sql)}


def source_layout(
    src: sqlite3.Connection | None,
    target: Path,
    report: RecoveryReport,
    rows: list[SchemaEntry] | None = None,
) -> tuple[Store, Plan] | None:
    """Create the target with the source's own schema; None when the schema is unusable."""
    if rows is None:
        rows = read_schema(src) if src is not None else None
    if not rows:
        return None
    tables = {e.name: e.sql for e in rows if e.kind == "table"}
    if not {"sessions", "messages", "schema_version"} <= set(tables):
        return None
    virtual = {n for n, sql in tables.items() if VIRTUAL_RE.match(sql)}
    shadow = {n for n in tables if shadow_of(n, virtual)}
    journal_mode = None
    if src is not None:
        with contextlib.suppress(sqlite3.DatabaseError):
            journal_mode = str(src.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    store = create_bare_store(
        target,
        page_size=pragma_int(src, "page_size") if src is not None else None,
        journal_mode=journal_mode,
    )
    plan = Plan(layout="source", tables=[])
    for key in ("application_id", "user_version"):
        value = pragma_int(src, key) if src is not None else None
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
        if is_litestream_table(name):  # Litestream's bookkeeping of the source
            report.excluded[name] = count_rows(src, name) if src is not None else None
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
            if WITHOUT_ROWID_RE.search(sql.strip()):
                plan.without_rowid.add(name)
    for name in failed & set(tables) - virtual:
        report.not_copied[name] = count_rows(src, name) if src is not None else None
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


def fallback_layout(target: Path, src: sqlite3.Connection | None) -> tuple[Store, Plan]:
    """Create a new schema-31 store for a source whose schema cannot be used."""
    store = open_store(target)
    have = source_tables(src) if src is not None else {}
    known = [t for t in (*schema.TABLE_DDL, *schema.LAZY_TABLE_DDL) if t not in FALLBACK_TABLES]
    tables = [t for t in (*FALLBACK_TABLES, *known) if t in have and t != "schema_version"]
    return store, Plan(
        layout="fallback", tables=tables, rebuild=list(fts.INDEX_TABLES), cjk=True, gated=True
    )


def pause_fts_triggers(store: Store) -> None:
    """Gate the FTS insert triggers off for the bulk copy (the rebuild indexes every row once)."""
    # The triggers index a row only if id > high water OR id <= progress (fts module).
    store.write(
        lambda conn: conn.executemany(
            "INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
            [(fts.HIGH_WATER_KEY, str(pages.MAX_ROWID)), (fts.PROGRESS_KEY, str(pages.MIN_ROWID))],
        )
    )


def finish_layout(store: Store, plan: Plan, report: RecoveryReport) -> None:
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
            conn.execute(f"INSERT INTO {quote(table)}({quote(table)}) VALUES ('rebuild')")
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


def reconcile_orphans(conn: sqlite3.Connection) -> tuple[list[str], int]:
    """Give orphaned messages/usage a placeholder session; clear dangling parents.

    Return the placeholder sessions' ids and how many parent links were cleared.
    """
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
    return [str(sid) for sid in sorted(orphans, key=str)], cleared


def target_tables(store: Store) -> list[str]:
    """Return the ordinary rowid tables of the target (not FTS, not SQLite's own)."""
    rows = store.conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    tables = {n: sql or "" for n, sql in rows}
    return [
        n
        for n, sql in tables.items()
        if not is_derived(n, tables)
        and not WITHOUT_ROWID_RE.search(sql.strip())
        and n != lost_and_found.LOST_AND_FOUND
        and n not in schema.LEDGER_TABLES
    ]


def meta_keys_of(store: Store) -> set[str]:
    """Return the state_meta keys of a whole copy."""
    if not store.has_table("state_meta"):
        return set()
    return {str(k) for (k,) in store.conn.execute("SELECT key FROM state_meta")}


def remove_target(target: Path) -> None:
    """Delete a target this recovery created and could not finish (with its sidecars)."""
    for member in (target, *(companion(target, s) for s in SIDECAR_SUFFIXES)):
        with contextlib.suppress(FileNotFoundError):
            member.unlink()
