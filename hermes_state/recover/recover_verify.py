"""Checks of a finished recovery target: integrity, foreign keys, the search indexes (FTS5's
own checks on a second connection, in a thread), the schema version and each table's count."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Collection
from pathlib import Path

from hermes_state.recover.recover_report import (
    RecoveryReport,
    Verification,
)
from hermes_state.recover.recover_source import (
    DERIVED_META_KEYS,
)
from hermes_state.store import cjk, fts, schema
from hermes_state.store.connection import Store
from hermes_state.store.errors import is_lock_error
from hermes_state.store.sql import quote

# How long a check waits for a lock another connection of the recovery holds: the longest
# statement of theirs it may meet is the VACUUM INTO of a whole store (about 100 MB/s).
CHECK_BUSY_S = 300.0
CHECK_LIMIT_S = 3600.0  # how long the search-index checks of one store may run in all
STOP_GRACE_S = 10.0  # how long an interrupted check has to stop


class IndexCheck:
    """FTS5's integrity checks of a store file, run in a thread beside the recovery's own work.

    Started on a healthy source copy during its whole copy: VACUUM INTO copies the indexes'
    shadow tables row for row, so the copy's deep checks (each index against the messages it
    covers) hold for the target too; the target's own b-trees and the indexes' row sets are
    checked on the target itself. Nothing waits for it without bound: past its deadline it is
    interrupted, and a check that could not finish says so (``incomplete``) instead of passing.
    """

    def __init__(
        self,
        copy: Path,
        tables: Collection[str] | None = None,
        *,
        busy_s: float = CHECK_BUSY_S,
        limit_s: float = CHECK_LIMIT_S,
    ) -> None:
        self.copy = copy
        self.tables = tables  # the FTS5 tables checked here (None: all of them)
        self.busy_s = busy_s
        self.limit_s = limit_s
        self.deadline = time.monotonic() + limit_s
        self.result: list[str] | BaseException | None = None
        self.incomplete: str | None = None  # why the checks could not run to the end
        self.conn: sqlite3.Connection | None = None
        self.ready = threading.Event()
        # A daemon: a check that does not stop when interrupted must not keep the process alive.
        self.thread = threading.Thread(target=self._run, name="recover-fts-check", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            conn = self.conn = sqlite3.connect(self.copy, isolation_level=None, timeout=self.busy_s)
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
        """Wait for the checks to end, at most until their deadline (then stop them)."""
        self.thread.join(max(0.0, self.deadline - time.monotonic()))
        if self.thread.is_alive():
            self._stop(f"it did not finish within {self.limit_s:g} s")

    def cancel(self) -> None:
        """Stop the checks (their result is not wanted) and wait for the thread, briefly."""
        self._stop("it was cancelled")

    def _stop(self, why: str) -> None:
        """Interrupt the checks and give the thread a moment to end."""
        if self.incomplete is None:
            self.incomplete = why
        self.ready.wait(STOP_GRACE_S)
        if self.conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self.conn.interrupt()
        self.thread.join(STOP_GRACE_S)

    def problems(self) -> list[str]:
        """Wait for the checks and return the problems they found (see ``incomplete`` too)."""
        self.wait()
        if self.incomplete is not None:
            return []
        if isinstance(self.result, sqlite3.OperationalError) and (
            is_lock_error(self.result) or "interrupt" in str(self.result).lower()
        ):
            self.incomplete = f"{self.result} (after waiting {self.busy_s:g} s for a lock)"
            return []
        if isinstance(self.result, BaseException):
            raise self.result
        return list(self.result or [])

    def describe(self) -> str:
        """Name what this check covers, for a report that it could not complete."""
        names = ", ".join(sorted(self.tables)) if self.tables else "every search index"
        return f"the FTS5 integrity-check of {names} could not complete: {self.incomplete}"


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
        if check.incomplete is not None:
            v.incomplete.append(check.describe())
    v.fts_checked = not v.incomplete
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
