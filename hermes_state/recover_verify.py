"""Checks of a finished recovery target: integrity, foreign keys, the search indexes (FTS5's
own checks on a second connection, in a thread), the schema version and each table's count."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Collection
from pathlib import Path

from hermes_state import cjk, fts, schema
from hermes_state.connection import Store
from hermes_state.recover_report import (
    RecoveryReport,
    Verification,
)
from hermes_state.recover_source import (
    DERIVED_META_KEYS,
)
from hermes_state.sql import quote


class IndexCheck:
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


def verify(
    store: Store,
    report: RecoveryReport,
    meta_keys: set[str],
    expected_version: int | None,
    index_check: IndexCheck | None = None,
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
        checks.append(IndexCheck(store.path, rest))  # on a connection of its own
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
            have = conn.execute(f"SELECT count(*) FROM {quote(name)}").fetchone()[0]
        want = t.copied + (report.placeholder_sessions if name == "sessions" else 0)
        if have != want:
            v.count_mismatches.append(f"{name}: target has {have} rows, expected {want}")
    return v
