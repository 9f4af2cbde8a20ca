"""Healing a store whose schema SQLite cannot load (the agent's malformed-schema repair).

A duplicated ``sqlite_master`` row ("malformed database schema (messages_fts) - table
messages_fts already exists") or a damaged search index ("database disk image is malformed")
makes every statement fail, the first one of each connection included. The agent heals such a
store when it opens it, once per process; :func:`heal_on_open` does the same for ``SessionDB``.

:func:`repair_state_db_schema` changes the store only with a repaired copy proven good:

1. a backup ``state.db.malformed-backup-<stamp>`` (0600, with its -wal/-journal) comes first
   (an earlier backup of the very same bytes is reused);
2. one connection takes the store to itself (a store another connection is using is left
   alone), so no writer can commit a change the repair would overwrite;
3. SQLite's backup API copies the store into a scratch file beside it, where the strategies run,
   least destructive first: rebuild the search indexes; drop duplicate ``sqlite_master`` rows;
   drop the search indexes' objects and VACUUM (the next open recreates and reindexes them);
4. after each, every data table must still hold the rows it held before, and the copy must pass
   :func:`db_opens_cleanly`;
5. the good copy is written back with the backup API in one transaction of that connection, so
   the store keeps its inode and its journal mode.
"""

from __future__ import annotations

import contextlib
import fcntl
import filecmp
import glob
import logging
import os
import re
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

from hermes_state.store import cjk, fts
from hermes_state.store.connection import is_open_in_process
from hermes_state.store.errors import SQLITE_CORRUPT, is_lock_error
from hermes_state.store.sql import SIDECAR_SUFFIXES, chunks, companion, marks, quote, store_files

log = logging.getLogger("hermes_state")

T = TypeVar("T")

BACKUP_INFIX = ".malformed-backup-"
SCRATCH_SUFFIX = ".repair-scratch"
LOCK_SUFFIX = ".repair.lock"  # the agent's name too: its repair and ours never run at once
LOCK_WAIT_S = 30.0
GUARD_BUSY_S = 2.0
PROBE_BUSY_S = 5.0
COPY_PATIENCE_S = 60.0
# The sidecars holding content; a copied -shm would only be stale (SQLite rebuilds it).
BACKUP_SIDECARS = ("-wal", "-journal")

MALFORMED_MARKERS = ("malformed database schema", "database disk image is malformed")
AGENT_SEARCH_PREFIX = "messages_fts"  # every object of the agent's search indexes
OWN_SEARCH_OBJECTS = frozenset(n.lower() for n in (cjk.TABLE, cjk.PENDING_TABLE, *cjk.TRIGGERS))
OWN_SEARCH_TABLES = frozenset(n.lower() for n in (cjk.PENDING_TABLE, *cjk.LEGACY_TABLES))
FTS_SHADOW_SUFFIXES = ("_data", "_idx", "_content", "_docsize", "_config", "_segments", "_segdir")
# Bookkeeping of the agent's chunked reindex that a full rebuild clears: not data.
REBUILD_KEYS = (fts.HIGH_WATER_KEY, fts.PROGRESS_KEY)

STRATEGY_NAMES = ("already_healthy", "rebuild_fts", "dedup_schema", "drop_fts_rebuild")

# Stores this process has tried to heal on open (resolved paths): one attempt each.
attempted_paths: set[str] = set()
_attempted_lock = threading.Lock()

SchemaRow = tuple[int, str, str, str, str | None]  # rowid, type, name, tbl_name, sql
Counts = dict[str, int | None]
NO_PARAMS: tuple[str, ...] = ()
_EXTERNAL_RE = re.compile(r"\bcontent\s*=", re.IGNORECASE)  # an external-content FTS5 table


class _Refused(Exception):
    """The repair cannot go on safely; its message says why (the store is unchanged)."""


def _hook(name: str, default: T) -> T:
    """Return the package attribute ``hermes_state.<name>`` if set, else default."""
    import hermes_state

    # Upstream's tests replace these on the package, and expect the repair to use their stand-ins.
    return cast(T, getattr(hermes_state, name, default))


# --- recognising the damage ----------------------------------------------------------------------


def is_malformed_db_error(exc: BaseException) -> bool:
    """Tell whether an error means SQLite cannot load the store's schema or an image in it."""
    if not isinstance(exc, sqlite3.DatabaseError) or is_lock_error(exc):
        return False
    if any(marker in str(exc).lower() for marker in MALFORMED_MARKERS):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) == SQLITE_CORRUPT


def _unloadable(exc: sqlite3.DatabaseError) -> bool:
    """Tell whether an FTS error only says this process lacks the index's module or tokenizer."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and (
        "no such tokenizer" in text or "no such module" in text
    )


def _connect(path: Path, busy_s: float) -> sqlite3.Connection:
    """Open an existing file (never creating one) in autocommit mode."""
    return sqlite3.connect(
        path.resolve().as_uri() + "?mode=rw", uri=True, timeout=busy_s, isolation_level=None
    )


def db_opens_cleanly(db_path: Path) -> str | None:
    """Return None when the store's schema loads and its pages and search indexes read, else why."""
    path = Path(db_path)
    if not path.is_file():
        return f"{path} is not a file"
    try:
        conn = _connect(path, PROBE_BUSY_S)
    except sqlite3.Error as exc:
        return str(exc)
    try:
        tables = fts.fts5_tables(conn)  # the first statement loads the schema
        problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check").fetchall()]
        if problems != ["ok"]:
            return "; ".join(problems[:3])
        for table in tables:
            q = quote(table)
            try:
                # An empty phrase matches nothing, yet the index must open its structure for it.
                conn.execute(f"SELECT 1 FROM {q} WHERE {q} MATCH '\"\"' LIMIT 1").fetchall()
            except sqlite3.DatabaseError as exc:
                if not _unloadable(exc):
                    return f"{table}: {exc}"
        return None
    except sqlite3.DatabaseError as exc:
        return str(exc)
    finally:
        conn.close()


# --- the schema's objects ------------------------------------------------------------------------


def _schema_rows(conn: sqlite3.Connection) -> list[SchemaRow]:
    return [
        (int(r[0]), str(r[1]), str(r[2]), str(r[3]), r[4])
        for r in conn.execute("SELECT rowid, type, name, tbl_name, sql FROM sqlite_master")
    ]


def _is_virtual(sql: str | None) -> bool:
    return (sql or "").lstrip().upper().startswith("CREATE VIRTUAL TABLE")


def _is_fts5(sql: str | None) -> bool:
    return _is_virtual(sql) and re.search(r"USING\s+fts5", sql or "", re.IGNORECASE) is not None


def _is_search_name(name: str) -> bool:
    low = name.lower()
    return low.startswith(AGENT_SEARCH_PREFIX) or low in OWN_SEARCH_OBJECTS


def _search_rowids(rows: list[SchemaRow]) -> set[int]:
    """Return the sqlite_master rows of the search indexes: the agent's ``messages_fts*`` virtual
    tables with their shadow tables, views and triggers, and this package's CJK index."""
    vtables = {n.lower() for _, t, n, _, sql in rows if t == "table" and _is_virtual(sql)}
    vtables = {n for n in vtables if _is_search_name(n)}
    tables = vtables | OWN_SEARCH_TABLES | {v + s for v in vtables for s in FTS_SHADOW_SUFFIXES}
    picked: set[int] = set()
    for rowid, kind, name, tbl_name, _sql in rows:
        if (
            (kind in ("view", "trigger") and _is_search_name(name))
            or (kind == "table" and name.lower() in tables)
            or (kind == "index" and tbl_name.lower() in tables)
        ):
            picked.add(rowid)
    return picked


def _row_counts(path: Path) -> Counts | None:
    """Count the rows of every data table (None for a table that cannot be read; None overall
    when not even the schema table can)."""
    try:
        conn = _connect(path, PROBE_BUSY_S)
    except sqlite3.Error:
        return None
    try:
        conn.execute("PRAGMA writable_schema=ON")  # reads past the schema errors under repair
        rows = _schema_rows(conn)
        search = _search_rowids(rows)
        counts: Counts = {}
        for rowid, kind, name, _tbl, sql in rows:
            if kind != "table" or rowid in search or _is_virtual(sql):
                continue
            where, params = "", NO_PARAMS
            if name == "state_meta":
                where, params = f" WHERE key NOT IN ({marks(len(REBUILD_KEYS))})", REBUILD_KEYS
            try:
                row = conn.execute(f"SELECT count(*) FROM {quote(name)}{where}", params).fetchone()
                counts[name.lower()] = int(row[0])
            except sqlite3.DatabaseError:
                counts[name.lower()] = None
        return counts
    except sqlite3.DatabaseError:
        return None
    finally:
        conn.close()


def _lost_rows(before: Counts | None, after: Counts | None) -> str | None:
    """Say which data table lost rows between two counts (None: none did, or no count before)."""
    if before is None:
        return None
    if after is None:
        return "the data tables cannot be counted any more"
    for name, count in before.items():
        if count is not None and after.get(name) != count:
            return f"{name}: {count} rows before, {after.get(name)} after"
    return None


# --- the strategies (each runs on the scratch copy; returns whether it changed anything) --------


@contextlib.contextmanager
def _schema_edit(path: Path) -> Iterator[sqlite3.Connection]:
    """Yield a connection editing sqlite_master in one transaction, committed with a new schema
    cookie (every connection then reloads the schema)."""
    conn = _connect(path, 0)
    try:
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            cookie = int(conn.execute("PRAGMA schema_version").fetchone()[0])
            conn.execute(f"PRAGMA schema_version={(cookie + 1) & 0x7FFFFFFF}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()


def rebuild_fts(path: Path) -> bool:
    """Rebuild every search index from its content, in one transaction."""
    conn = _connect(path, 0)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            rows = _schema_rows(conn)  # loads the schema: raises while it is malformed
            search = _search_rowids(rows)
            tables = {n: sql or "" for r, t, n, _, sql in rows if r in search and _is_fts5(sql)}
            # The agent's gated indexes: a full rebuild also closes any chunked reindex window.
            gated = tuple(
                t for t, sql in tables.items() if t in fts.INDEX_TABLES and _EXTERNAL_RE.search(sql)
            )
            if gated:
                fts.rebuild_now(conn, gated)
            for table in tables:
                if table in gated:
                    continue
                try:
                    conn.execute(f"INSERT INTO {quote(table)}({quote(table)}) VALUES ('rebuild')")
                except sqlite3.OperationalError as exc:
                    if not _unloadable(exc):
                        raise
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()
    return bool(tables)


def dedup_schema(path: Path) -> bool:
    """Keep only the first of the sqlite_master rows that define the same object."""
    with _schema_edit(path) as conn:
        dupes = conn.execute(
            "SELECT type, lower(name), min(rowid) FROM sqlite_master "
            "GROUP BY type, lower(name) HAVING count(*) > 1"
        ).fetchall()
        for kind, name, keep in dupes:
            conn.execute(
                "DELETE FROM sqlite_master WHERE type = ? AND lower(name) = ? AND rowid <> ?",
                (kind, name, keep),
            )
    return bool(dupes)


def drop_fts_rebuild(path: Path) -> bool:
    """Delete the search indexes' objects from sqlite_master, then VACUUM away their pages."""
    with _schema_edit(path) as conn:
        victims = sorted(_search_rowids(_schema_rows(conn)))
        for part in chunks(victims):
            conn.execute(f"DELETE FROM sqlite_master WHERE rowid IN ({marks(len(part))})", part)
    conn = _connect(path, 0)
    try:
        conn.execute("VACUUM")
    finally:
        conn.close()
    return True


STRATEGIES: tuple[tuple[str, Callable[[Path], bool]], ...] = (
    ("rebuild_fts", rebuild_fts),
    ("dedup_schema", dedup_schema),
    ("drop_fts_rebuild", drop_fts_rebuild),
)


# --- files -----------------------------------------------------------------------------------


def _store_path(db_path: Path | str) -> Path:
    """Return the file a store path names (a symlinked store: its target)."""
    path = Path(db_path).expanduser().absolute()
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _held_here(path: Path) -> bool:
    """Tell whether this process has a connection to the store open (raw reads are then unsafe:
    closing our descriptor would drop that connection's POSIX locks)."""
    return is_open_in_process(path) or is_open_in_process(Path(os.path.realpath(path)))


def _new_private_file(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def _copy_bytes(source: Path, target: Path) -> None:
    """Copy a file byte for byte into a new 0600 file (missing source: FileNotFoundError)."""
    with open(source, "rb") as src, os.fdopen(_new_private_file(target), "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())


def _backup_target(path: Path) -> Path:
    """Return an unused backup name ``<db>.malformed-backup-<stamp>[-n]`` beside the store."""
    base = f"{path.name}{BACKUP_INFIX}{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    target, n = path.with_name(base), 1
    while any(p.exists() for p in store_files(target)):
        target, n = path.with_name(f"{base}-{n}"), n + 1
    return target


def _byte_backup(path: Path) -> Path:
    """Copy the store and its content sidecars as they are (no connection of ours may be open);
    the newest earlier backup is reused when it holds the very same bytes."""
    same = _identical_backup(path)
    if same is not None:
        return same
    target = _backup_target(path)
    _copy_bytes(path, target)
    for suffix in BACKUP_SIDECARS:
        with contextlib.suppress(FileNotFoundError):
            _copy_bytes(companion(path, suffix), companion(target, suffix))
    return target


def _identical_backup(path: Path) -> Path | None:
    """Return the newest backup whose files equal the store's, if any."""
    # A damage no strategy heals is met again by every process that starts: without this, each
    # would add a full copy of the store beside it.
    names = sorted(
        p.name
        for p in path.parent.glob(f"{glob.escape(path.name)}{BACKUP_INFIX}*")
        if not p.name.endswith(SIDECAR_SUFFIXES)
    )
    if not names:
        return None
    newest = path.with_name(names[-1])
    for suffix in ("", *BACKUP_SIDECARS):
        ours, theirs = companion(path, suffix), companion(newest, suffix)
        if ours.exists() != theirs.exists():
            return None
        if ours.exists() and not filecmp.cmp(ours, theirs, shallow=False):
            return None
    return newest


def _backup_api(source: sqlite3.Connection, dest: sqlite3.Connection) -> None:
    """Copy every page of source into dest in one transaction, giving up on a lock wait."""
    deadline = time.monotonic() + COPY_PATIENCE_S

    def progress(_status: int, remaining: int, _total: int) -> None:
        if remaining and time.monotonic() > deadline:
            raise TimeoutError(f"copying the store stayed locked for {COPY_PATIENCE_S:g}s")

    source.backup(dest, pages=-1, progress=progress, sleep=0.05)


def _sqlite_copy(source: sqlite3.Connection, target: Path) -> None:
    """Copy a store through SQLite into a new 0600 rollback-journal file."""
    os.close(_new_private_file(target))  # brand-new empty file: no locks to lose
    dest = _connect(target, 0)
    try:
        _backup_api(source, dest)
        # The copy carries the source's header: a WAL store's copy would open as WAL.
        dest.execute("PRAGMA writable_schema=ON")
        dest.execute("PRAGMA journal_mode=DELETE")
    finally:
        dest.close()


def _remove_files(path: Path) -> None:
    for file in store_files(path):
        with contextlib.suppress(FileNotFoundError):
            file.unlink()


@contextlib.contextmanager
def _repair_lock(path: Path) -> Iterator[None]:
    """Hold the cross-process repair lock ``<db>.repair.lock`` (flock) for the block."""
    lock = companion(path, LOCK_SUFFIX)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise _Refused(
                        f"another process has been repairing {path.name} for {LOCK_WAIT_S:g}s "
                        f"(it holds {lock.name})"
                    ) from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[sqlite3.Connection]:
    """Yield a connection that has the store to itself until the block ends."""
    conn = _connect(path, GUARD_BUSY_S)
    try:
        try:
            # EXCLUSIVE locking mode keeps the lock of the short transaction after it ends, so
            # the backup API can use this connection as source and later as destination.
            conn.execute("PRAGMA locking_mode=EXCLUSIVE")
            conn.execute("BEGIN EXCLUSIVE")
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            if is_lock_error(exc):
                raise _Refused(
                    f"another connection has {path.name} open; stop it (see: hermes db "
                    "lockowners) and retry"
                ) from exc
            raise
        yield conn
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA locking_mode=NORMAL")
        conn.close()


# --- the repair ------------------------------------------------------------------------------


def _new_report() -> dict[str, Any]:
    return {"repaired": False, "strategy": None, "backup_path": None, "error": None}


def repair_state_db_schema(db_path: Path, *, backup: bool = True) -> dict[str, Any]:
    """Heal a store whose schema or search indexes SQLite cannot load, keeping every data row.

    Returns ``repaired``, ``strategy`` (one of ``STRATEGY_NAMES``, or None), ``backup_path`` and
    ``error``; a damaged or unreadable file is reported, never raised.
    """
    report = _new_report()
    path = _store_path(db_path)
    check = _hook("_db_opens_cleanly", db_opens_cleanly)
    try:
        if not path.is_file():
            raise _Refused(f"no store file at {path}")
        if check(path) is None:
            report.update(repaired=True, strategy="already_healthy")
            return report
        with _repair_lock(path):
            if check(path) is None:  # another process repaired it while we waited
                report.update(repaired=True, strategy="already_healthy")
                return report
            _repair_locked(path, report, backup=backup, check=check)
    except (_Refused, sqlite3.Error, OSError) as exc:
        report["error"] = str(exc) if isinstance(exc, _Refused) else f"{type(exc).__name__}: {exc}"
    if report["repaired"]:
        log.info("%s: repaired by %s (backup: %s)", path, report["strategy"], report["backup_path"])
    else:
        log.info("%s: not repaired: %s (backup: %s)", path, report["error"], report["backup_path"])
    return report


def _repair_locked(
    path: Path, report: dict[str, Any], *, backup: bool, check: Callable[[Path], str | None]
) -> None:
    """Back up, copy, try the strategies on the copy and write a good copy back (under the lock)."""
    held = _held_here(path)
    if backup and not held:
        report["backup_path"] = str(_byte_backup(path))  # before our guard connection opens
    scratch = path.with_name(path.name + SCRATCH_SUFFIX)
    _remove_files(scratch)
    try:
        with _exclusive(path) as guard:
            if backup and held:
                target = _backup_target(path)
                _sqlite_copy(guard, target)
                report["backup_path"] = str(target)
            _sqlite_copy(guard, scratch)
            before = _row_counts(scratch)
            reason = "no strategy applied"
            for name, strategy in STRATEGIES:
                try:
                    if not strategy(scratch):
                        continue
                except sqlite3.Error as exc:
                    reason = f"{name}: {exc}"
                    log.debug("%s: strategy %s failed: %s", path, name, exc)
                    continue
                lost = _lost_rows(before, _row_counts(scratch))
                if lost:
                    raise _Refused(f"{name} would lose rows ({lost}); the store was not changed")
                problem = check(scratch)
                if problem is None:
                    source = _connect(scratch, 0)
                    try:
                        _backup_api(source, guard)
                    finally:
                        source.close()
                    report.update(repaired=True, strategy=name)
                    return
                reason = f"{name}: {problem}"
            report["error"] = reason
    finally:
        _remove_files(scratch)


# --- healing on open ---------------------------------------------------------------------------


def claim_repair_attempt(db_path: Path) -> bool:
    """Claim this process's one repair attempt for the store; tell whether it was still free."""
    attempted = _hook("_repair_attempted_paths", attempted_paths)
    key = str(_store_path(db_path))
    with _attempted_lock:
        if key in attempted:
            return False
        attempted.add(key)
        return True


def heal_on_open(db_path: Path, exc: BaseException) -> bool:
    """Repair a store whose open raised exc (once per process); tell whether to retry the open.

    False: exc is not of the malformed class, this process already tried, or the repair failed;
    the caller then raises exc.
    """
    if not is_malformed_db_error(exc):
        return False
    path = _store_path(db_path)
    if not claim_repair_attempt(path):
        log.debug("%s: %s; already tried to repair it in this process", path, exc)
        return False
    log.error(
        "%s cannot be opened (%s); repairing its schema, keeping a backup beside it", path, exc
    )
    repair = _hook("repair_state_db_schema", repair_state_db_schema)
    report = repair(path)
    if report.get("repaired"):
        log.error(
            "%s repaired by %s; backup of the damaged file: %s",
            path,
            report.get("strategy"),
            report.get("backup_path"),
        )
        return True
    log.error(
        "%s could not be repaired automatically: %s; backup of the damaged file: %s. Salvage "
        "what can be read with: hermes sessions recover --to NEW.db",
        path,
        report.get("error"),
        report.get("backup_path"),
    )
    return False
