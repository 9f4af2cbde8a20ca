"""`db check`: a store's integrity, its search indexes, journal and replication."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_state.store import diagnosis
from hermes_state.store.connection import Store
from hermes_state.store.diagnosis import Diagnosis
from hermes_state.store.errors import StoreCorruptError, is_lock_error
from hermes_state.store.patience import retry_locked
from hermes_state.store.sql import STORE_FILE_SUFFIXES, quote
from hermes_state.store.store_file import write_protected

DAMAGED_HINT = (
    "`hermes db check` says what is damaged and what repairs it; `hermes sessions recover "
    "--to NEW.db` salvages what can be read into a new file."
)


def require_intact(store: Store, table: str | None = None) -> None:
    """Raise StoreCorruptError (touching nothing) unless PRAGMA quick_check finds the file sound.

    Rewrites (VACUUM, FTS optimise, migrations, deletes) of a damaged file would spread the
    damage; such a store is for `hermes sessions recover`, which reads it without writing.
    ``table`` limits the check to that table's b-tree and its indexes: what an edit of one of
    its rows reads and writes. A whole-file check is not repeated until this handle writes.
    """
    if table is None and store.verified_at == store.writes:
        return
    pragma = "PRAGMA quick_check(5)" if table is None else f"PRAGMA quick_check({quote(table)})"
    try:
        # A lock is not damage: it is waited out with the handle's patience, then reported
        # as the lock it is (StoreLockedError).
        rows = retry_locked(
            store.path,
            lambda: [str(r[0]) for r in store.conn.execute(pragma)],
            store.waiting,
            not_done="; nothing was written",
        )
    except sqlite3.DatabaseError as exc:
        if is_lock_error(exc):
            raise
        rows = [str(exc)]
    # SQLite heads its findings with a "*** in database main ***" line: not a finding.
    lines = [line for r in rows for line in r.splitlines()]
    rows = [line for line in lines if not line.startswith("*** in database")] or rows
    if rows != ["ok"]:
        store.mark_damaged()
        where = "" if table is None else f" (in table {table} or its indexes)"
        raise StoreCorruptError(
            f"{store.path} is damaged{where}: {'; '.join(rows[:5])}; nothing was written",
            hint=DAMAGED_HINT,
        )
    if table is None:
        store.verified_at = store.writes


@dataclass(frozen=True)
class StoreCheck:
    """What check_store found: one {name, ok, detail, warning} per check, and the diagnosis."""

    path: str
    checks: tuple[dict[str, Any], ...]
    diagnosis: Diagnosis | None = None

    @property
    def ok(self) -> bool:
        """Whether every check passed and nothing is damaged."""
        damaged = self.diagnosis is not None and bool(self.diagnosis.problems)
        return all(c["ok"] for c in self.checks) and not damaged

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        out: dict[str, Any] = {
            "path": self.path,
            "ok": self.ok,
            "checks": [dict(c) for c in self.checks],
        }
        if self.diagnosis is not None:
            out.update(self.diagnosis.to_dict())
        return out


def check_store(store: Store) -> StoreCheck:
    """Run the read-only health checks and diagnose any damage (see ``diagnosis``)."""
    # Integrity, foreign keys, layout, search indexes, schema, journal mode, the -wal and file
    # modes. Warnings (a risky journal mode, loose modes, a torn -wal) do not fail the check:
    # they describe how the agent runs the store, not damage.
    import stat

    from hermes_state.store import journal, layout

    conn = store.conn
    checks: list[dict[str, Any]] = []

    def add(name: str, ok: bool, detail: str, *, warning: bool = False) -> None:
        checks.append({"name": name, "ok": ok, "detail": detail, "warning": warning})

    def attempt(name: str, fn: Callable[[], None]) -> None:
        # A damaged store fails one check, never the whole report.
        try:
            fn()
        except sqlite3.DatabaseError as exc:
            if is_lock_error(exc):
                raise
            add(name, False, f"could not be checked: {exc}")

    lines, stopped = diagnosis.integrity_lines(conn)
    shown = lines[:3] + ([f"… {len(lines) - 3} more"] if len(lines) > 3 else [])
    shown += [f"stopped: {stopped}"] if stopped else []
    add("integrity", lines == ["ok"] and stopped is None, "; ".join(shown))

    def foreign_keys() -> None:
        fk = conn.execute("PRAGMA foreign_key_check").fetchall()
        add("foreign_keys", not fk, f"{len(fk)} violations" if fk else "ok")

    attempt("foreign_keys", foreign_keys)
    found: list[Any] = []

    def store_layout() -> None:
        found.append(layout.inspect(conn))
        add("layout", found[0].kind in ("current", "upstream"), found[0].describe())

    attempt("layout", store_layout)
    diag = diagnosis.diagnose(
        conn, store.path, lines=lines, stopped=stopped, journal_mode=store.journal_mode
    )
    fts_problems = [p.message for p in diag.problems if p.kind == "search_index"]
    unchecked = [s.detail for s in diag.search_indexes if s.state == "unchecked"]
    detail = "; ".join(fts_problems + unchecked[:1]) or "ok"
    add("search_indexes", not fts_problems and not unchecked, detail)
    if not found:
        add("schema", False, "could not be read")
    elif found[0].family is not None:
        add("schema", True, f"v{found[0].version}: {found[0].family.name}")
    else:
        add("schema", False, found[0].describe())
    fam = found[0].family if found else None
    attempt("journal", lambda: _journal_check(journal.report(conn), add, fam))
    wal = diag.wal
    if wal.exists or store.journal_mode == "wal":
        wal_ok = not any(p.kind == "wal" for p in diag.problems)
        add("wal", wal_ok, wal.detail, warning=wal.warning)
    loose = []
    for suffix in STORE_FILE_SUFFIXES:
        try:
            mode = stat.S_IMODE(os.stat(str(store.path) + suffix).st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            loose.append(f"{store.path.name}{suffix} is {mode:04o}")
    notes = []
    if loose:
        notes.append("; ".join(loose) + " (readable by others; `chmod 600` makes them private)")
    protected = write_protected(store.path)
    if protected is not None:
        notes.append(
            f"{protected[0].name} is read-only ({protected[1]:04o}): hermes and the agent "
            "refuse to write to it (`chmod u+w` allows writes)"
        )
    add("permissions", True, "; ".join(notes) or "0600", warning=bool(notes))
    attempt("replication", lambda: _replication_check(conn, store.path, add))
    return StoreCheck(str(store.path), tuple(checks), diag)


def _replication_check(conn: sqlite3.Connection, path: Path, add: Callable[..., None]) -> None:
    traces = diagnosis.litestream_traces(conn, path)
    if traces is not None:
        add("replication", True, traces)


def _journal_check(report: Any, add: Callable[..., None], family: Any = None) -> None:
    # What the release that writes this layout does with the mode, so the advice is its own.
    policy = f"; the release ({family.short}) {family.journal_words}" if family else ""
    add("journal", True, report.describe() + policy, warning=report.at_risk)


def check_unopenable(path: Path, error: str) -> StoreCheck:
    """Report a store SQLite cannot open or whose schema it cannot read, and what to do."""
    diag = diagnosis.diagnose_unopenable(path, error)
    checks = [{"name": "integrity", "ok": False, "detail": error, "warning": False}]
    if diag.wal.exists:
        wal = diag.wal
        checks.append({"name": "wal", "ok": True, "detail": wal.detail, "warning": wal.warning})
    return StoreCheck(str(path), tuple(checks), diag)
