"""Opening the store file: writable and read-only connections, the write retry loop, file modes."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import shlex
import shutil
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from hermes_state.store import guard, journal, layout, migrations, releases, schema
from hermes_state.store.errors import (
    SQLITE_IOERR,
    SQLITE_READONLY,
    SQLITE_READONLY_DIRECTORY,
    DiskFullError,
    HermesStateError,
    NotAHermesStoreError,
    SchemaTooNewError,
    StoreAccessError,
    StoreCorruptError,
    StoreLockedError,
    StoreNeedsMigrationError,
    StoreNotFoundError,
    StoreReadOnlyError,
    StoreWriteProtectedError,
    UnknownSchemaError,
    is_corruption_error,
    is_lock_error,
    translate_sqlite_error,
)
from hermes_state.store.home import ensure_private_dir
from hermes_state.store.sql import SIDECAR_SUFFIXES, SQLITE_MAGIC, companion, quote, store_files

if TYPE_CHECKING:
    from hermes_state.store.layout import Layout

log = logging.getLogger("hermes_state")

T = TypeVar("T")
# "agent": the agent's own store library (SessionDB) — creates, and migrates as the agent does.
# "edit": a command of the CLI — writes within the schema the store has (SPEC §19.4).
Role = Literal["agent", "edit"]

WRITE_PATIENCE_S = 20.0
TRANSCRIPT_WRITE_PATIENCE_S = 60.0
ACTIVITY_WRITE_PATIENCE_S = 0.5
BUSY_TIMEOUT_S = 1.0
READ_BUSY_TIMEOUT_S = 5.0
RETRY_FAST_S = (0.020, 0.150)
RETRY_SLOW_S = (0.250, 1.000)
RETRY_SLOW_AFTER_S = 2.0
CHECKPOINT_EVERY_N_WRITES = 50
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024
LOW_SPACE_BYTES = 1 << 20  # an I/O error opening a store with less free than this: disk full
WAIT_NOTICE_S = 1.0  # a wait for another process's lock this long is worth telling about


@dataclass(frozen=True)
class Waiting:
    """How a store handle waits for other processes' locks.

    ``patience`` (seconds) replaces the handle's default waits (None: keep them; 0: try once).
    ``notify(path, waited_s)`` is called once per wait that passes ``WAIT_NOTICE_S``, so an
    interactive caller can say who holds the lock instead of a silent pause.
    """

    patience: float | None = None
    notify: Callable[[Path, float], None] | None = None

    def limit(self, default: float) -> float:
        """Return how long to wait where the default would be ``default`` seconds."""
        return default if self.patience is None else max(0.0, self.patience)

    def tell(self, path: Path, waited: float) -> None:
        """Call notify (never letting it fail the wait)."""
        if self.notify is not None:
            with contextlib.suppress(Exception):
                self.notify(path, waited)


NO_WAITING = Waiting()

# Paths this process has an open connection to: raw byte probes of such a file are refused,
# because closing even a short-lived descriptor would drop this process's POSIX locks on it.
_open_counts: dict[str, int] = {}
_open_counts_lock = threading.Lock()


def _register_open(path: Path) -> None:
    with _open_counts_lock:
        _open_counts[str(path)] = _open_counts.get(str(path), 0) + 1


def _register_close(path: Path) -> None:
    with _open_counts_lock:
        left = _open_counts.get(str(path), 0) - 1
        if left > 0:
            _open_counts[str(path)] = left
        else:
            _open_counts.pop(str(path), None)


def is_open_in_process(path: Path) -> bool:
    """Tell whether this process holds a connection to the store at path."""
    with _open_counts_lock:
        return str(path) in _open_counts


@dataclass(frozen=True)
class Quarantine:
    """A damaged store file that was moved aside so a fresh store could be created."""

    kind: str  # "zeroed" or "notadb"
    original: Path
    moved_to: Path
    size: int

    def message(self) -> str:
        """Say what happened and how to get the old sessions back."""
        return (
            f"{self.original.name} was {'empty' if self.kind == 'zeroed' else 'not a database'} "
            f"({self.size} bytes) and has been moved aside to {self.moved_to}; a fresh, empty "
            f"store was created. To salvage old sessions run: hermes sessions recover --from "
            f"{self.moved_to} --to NEW.db"
        )


class Store:
    """One open connection to a store file, with the write retry loop."""

    def __init__(
        self,
        path: Path,
        conn: sqlite3.Connection,
        *,
        read_only: bool,
        too_new: bool = False,
        quarantine: Quarantine | None = None,
        journal_mode: str = "wal",
        found: Layout | None = None,
        role: Role = "agent",
        waiting: Waiting = NO_WAITING,
    ) -> None:
        self.path = path
        self.waiting = waiting
        self.conn = conn
        self.read_only = read_only
        self.too_new = too_new
        self.quarantine = quarantine
        self.journal_mode = journal_mode
        self.layout = found
        self.role = role
        # Set when writes are refused for what the store is (a legacy layout in the edit role).
        self.refusal: HermesStateError | None = None
        self.lock = threading.RLock()
        self._writes = 0
        self._columns: dict[str, tuple[str, ...]] = {}
        self._closed = False
        # Set once a read or write met damage: closing must then not checkpoint the WAL into
        # the main file (a stale WAL replayed onto a newer file would make things worse).
        self.damaged = False
        # How many writes this handle had made when a whole-file check last found it sound
        # (None: never checked); a check is not repeated until this handle writes again.
        self.verified_at: int | None = None
        # A read-only open of a WAL store that had no -wal/-shm makes them (SQLite must);
        # closing removes them again when nothing else has the store open (see close).
        self.made_sidecars = False
        # Per-handle caches of other modules, by name (e.g. search's index report); each entry
        # carries its own staleness key.
        self.memo: dict[str, tuple[object, object]] = {}
        # How long a statement outside the write loop waits inside SQLite for another
        # process's lock (set by the open: the handle's patience for reads).
        self.read_busy_ms = int(BUSY_TIMEOUT_S * 1000)

    def wait_for_reads(self, seconds: float) -> None:
        """Let every later statement outside a write wait up to seconds for a lock."""
        self.read_busy_ms = max(1, int(seconds * 1000))
        self.conn.execute(f"PRAGMA busy_timeout = {self.read_busy_ms}")

    @property
    def writes(self) -> int:
        """Return how many write transactions this handle has committed."""
        return self._writes

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def columns(self, table: str) -> tuple[str, ...]:
        """Return the live column names of table (empty if it does not exist), cached."""
        cols = self._columns.get(table)
        if cols is None:
            rows = self.conn.execute(f"PRAGMA table_info({quote(table)})").fetchall()
            cols = tuple(r[1] for r in rows)
            self._columns[table] = cols
        return cols

    def forget_columns(self) -> None:
        """Drop the column cache (after DDL)."""
        self._columns.clear()

    def has_table(self, name: str) -> bool:
        """Tell whether a table, view or virtual table of that name exists."""
        row = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = ? AND type IN ('table','view')", (name,)
        ).fetchone()
        return row is not None

    def write(
        self, fn: Callable[[sqlite3.Connection], T], *, patience: float = WRITE_PATIENCE_S
    ) -> T:
        """Run fn in one BEGIN IMMEDIATE transaction, replaying it while the store is locked."""
        if self.too_new:
            raise _schema_refusal(self.path, self.layout)
        if self.refusal is not None:
            raise type(self.refusal)(self.refusal.message, hint=self.refusal.hint)
        if self.read_only:
            raise StoreReadOnlyError(f"{self.path} is open read-only")
        with self.lock:
            result = _run_with_patience(self, fn, self.waiting.limit(patience))
            self._writes += 1
            if self._writes % CHECKPOINT_EVERY_N_WRITES == 0:
                self.checkpoint_passive()
            return result

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """Run a block's reads in one read transaction: they all see the same committed state,
        and the store is locked once for them, not once per statement (two to four fcntl and
        stat calls each). Inside a transaction already, the block simply joins it."""
        with self.lock:
            conn = self.conn
            if conn.in_transaction:
                yield conn
                return
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")  # nothing was written: this only ends the read

    def checkpoint_passive(self) -> None:
        """Copy committed WAL frames into the db without blocking anyone (never TRUNCATE)."""
        if self.read_only or self.journal_mode != "wal":
            return
        try:
            self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:  # maintenance only: never fail the write that triggered it
            log.debug("passive checkpoint failed: %s", exc)

    def mark_damaged(self) -> None:
        """Record that this store met corruption, so close() leaves its files as they are."""
        self.damaged = True

    def close(self) -> None:
        """Close the connection (a writable one checkpoints PASSIVE first, unless damaged)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.read_only:
                self.conn.close()
                if self.made_sidecars and not self.damaged:
                    remove_made_sidecars(self.path)
            elif self.damaged:
                close_without_checkpoint(self.conn, self.path)
            else:
                if not self.too_new:
                    self.checkpoint_passive()
                self.conn.close()
                roll_back_hot_journal(self.path)
        finally:
            _register_close(self.path)


def roll_back_hot_journal(path: Path) -> None:
    """Roll back a rollback journal a failed write left behind, so the store is as it was.

    A write that fails midway on a full disk (VACUUM copying its result back, above all) puts
    SQLite's pager in its error state, and closing then leaves the journal hot for the next
    opener, which a read-only open refuses. A plain connection's first read rolls it back (it
    only writes the journal's old pages over the file and truncates it: no new space needed).
    A journal another process is writing is not hot: the read then sees committed data and
    changes nothing; a locked store is left alone (timeout 0).
    """
    try:
        if os.stat(companion(path, "-journal")).st_size == 0:
            return
    except OSError:
        return
    try:
        conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    except sqlite3.Error:
        return
    try:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    finally:
        conn.close()


def roll_back_own_journal(
    path: Path, waiting: Waiting = NO_WAITING, patience: float = READ_BUSY_TIMEOUT_S
) -> None:
    """Roll back the hot journal a killed writer left in a store this tool owns (a vault store).

    A read-only open refuses a store with a hot journal; a short writable open rolls it back at
    its first read, so the store reads as its last commit. Only for our own stores: the agent's
    state.db is left to its own next writer. Nothing happens without a non-empty -journal. A
    journal another process is still writing is not hot: the read then only sees committed
    data. A store locked past the patience raises StoreLockedError; a rollback this user
    cannot make (a directory it cannot write) is left for the read-only open to report.
    """
    try:
        if os.stat(companion(path, "-journal")).st_size == 0:
            return
    except OSError:
        return
    guard.check_store_path(path)
    limit = waiting.limit(patience)

    def roll_back() -> None:
        conn = sqlite3.connect(path, timeout=min(BUSY_TIMEOUT_S, limit), isolation_level=None)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()

    # Damage or a read-only place: the open that follows reports it as such.
    with contextlib.suppress(sqlite3.Error):
        retry_locked(path, roll_back, waiting, patience, "; its journal was not rolled back")


def remove_made_sidecars(path: Path) -> None:
    """Remove the empty -wal and the -shm a read-only open made, if no other process has them.

    A read-only connection cannot remove them itself. A plain connection that reads the schema
    and closes does: SQLite's last connection to close a WAL store takes the exclusive lock,
    checkpoints nothing (the WAL is empty) and deletes both files. If another process has the
    store open, that lock is refused and the files stay, as they must.
    """
    wal = companion(path, "-wal")
    try:
        if os.stat(wal).st_size != 0:
            return  # frames written since: not ours to checkpoint
    except FileNotFoundError:
        if not companion(path, "-shm").exists():
            return
    try:
        conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    except sqlite3.Error:
        return
    try:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    finally:
        conn.close()


def close_without_checkpoint(conn: sqlite3.Connection, path: Path) -> None:
    """Close a writable connection without SQLite's close-time checkpoint into the main file.

    The last connection to close a WAL store checkpoints it; a second, read-only connection
    holding a read transaction while the writable one closes keeps that from happening. An
    empty WAL has nothing to checkpoint: the plain close then removes the -wal/-shm it made.
    """
    try:
        if os.stat(str(path) + "-wal").st_size == 0:
            conn.close()
            return
    except FileNotFoundError:
        conn.close()
        return
    try:
        holder = sqlite3.connect(read_only_uri(path), uri=True, isolation_level=None)
    except sqlite3.Error:
        conn.close()
        return
    try:
        with contextlib.suppress(sqlite3.Error):
            holder.execute("BEGIN")
            holder.execute("PRAGMA schema_version").fetchall()
        conn.close()
    finally:
        holder.close()


def _run_with_patience(store: Store, fn: Callable[[sqlite3.Connection], T], patience: float) -> T:
    conn = store.conn
    start = time.monotonic()
    deadline = start + patience
    busy_ms = store.read_busy_ms  # what the connection has now (its reads' patience)
    told = False
    while True:
        remaining = deadline - time.monotonic()
        # SQLite's own wait must not overrun a short budget (a 0.5 s activity write fails fast).
        want_ms = max(1, min(int(BUSY_TIMEOUT_S * 1000), int(remaining * 1000)))
        if want_ms != busy_ms:
            conn.execute(f"PRAGMA busy_timeout = {want_ms}")
            busy_ms = want_ms
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            if busy_ms != store.read_busy_ms:
                conn.execute(f"PRAGMA busy_timeout = {store.read_busy_ms}")
            return result
        except sqlite3.Error as exc:
            if is_corruption_error(exc):
                store.mark_damaged()
                raise StoreCorruptError(f"{store.path} is damaged: {exc}") from exc
            if not is_lock_error(exc):
                # A full disk or a read-only file or place is said as such, with the path.
                typed = write_error(store, exc)
                if typed is not None:
                    raise typed from exc
                raise
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                waited = now - start
                conn.execute(f"PRAGMA busy_timeout = {store.read_busy_ms}")
                who = report_lock_holders(store.path, waited)
                raise StoreLockedError(
                    f"{store.path.name} stayed locked by another process for {waited:.1f}s "
                    f"(patience {patience:g}s){who}; the write was not made"
                ) from exc
            if not told and now - start >= WAIT_NOTICE_S:
                told = True
                store.waiting.tell(store.path, now - start)
            fast = (now - start) < RETRY_SLOW_AFTER_S
            low, high = RETRY_FAST_S if fast else RETRY_SLOW_S
            time.sleep(min(random.uniform(low, high), remaining))


def report_lock_holders(db_path: Path, waited_s: float) -> str:
    """Log the one WARNING naming who holds the write lock (called when patience runs out);
    return ' (held by ...)' for the error message, or '' when nobody could be named."""
    from hermes_state.store.lockowners import log_write_lock_holders, write_holders_text

    log_write_lock_holders(db_path, waited_s)
    try:
        who = write_holders_text(db_path)
    except Exception:  # diagnostics must never turn a lock timeout into a crash
        return ""
    return f" (held by {who})" if who else ""


# --- file handling --------------------------------------------------------------------------


def secure_file(path: Path) -> None:
    """Take group and other access off a store file by path (never open/close it; not links)."""
    # Only ever removes bits: a mode the owner narrowed (0400) stays as it is.
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISREG(st.st_mode) or not mode & 0o077:
        return
    with contextlib.suppress(OSError):
        os.chmod(path, mode & 0o700)


def write_protected(path: Path) -> tuple[Path, int] | None:
    """Return (file, mode) of a store file its owner made read-only (no u+w), else None."""
    # Judged by the mode bits, not by access(2): root may write anything.
    for file in store_files(path):
        try:
            st = os.lstat(file)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and not st.st_mode & stat.S_IWUSR:
            return file, stat.S_IMODE(st.st_mode)
    return None


def refuse_write_protected(path: Path) -> None:
    """Raise StoreWriteProtectedError when the store's owner made it (or a sidecar) read-only."""
    found = write_protected(path)
    if found is None:
        return
    file, mode = found
    raise StoreWriteProtectedError(
        f"{file} is read-only (mode {mode:04o}); refusing to write to a store its owner "
        "made read-only, and its mode was left as it is",
        hint=f"Reading still works. To allow writes: chmod u+w {shlex.quote(str(file))}",
    )


def directory_not_writable(path: Path, journal_mode: str | None) -> StoreAccessError:
    """Say which file SQLite cannot create beside the store: -wal/-shm (WAL) or -journal."""
    where = shlex.quote(str(path.parent))
    if journal_mode == "wal":
        return StoreAccessError(
            f"{path} is in a directory this user cannot write ({path.parent}): SQLite must "
            "create the store's -wal and -shm files there (a WAL store needs them even to read)",
            hint=f"Make the directory writable (chmod u+w {where}) or run hermes as its owner.",
        )
    mode = journal_mode or "rollback"
    return StoreAccessError(
        f"Cannot write to {path}: its directory {path.parent} is not writable for this user, "
        f"and SQLite must create {path.name}-journal there for every write (the store is in "
        f"{mode} journal mode); nothing was written",
        hint=f"Reading still works. To write, make the directory writable (chmod u+w {where}) "
        "or run hermes as its owner.",
    )


def _read_only_reason(path: Path) -> StoreAccessError:
    """Say why SQLite opened a store read-only for a writable connection."""
    with contextlib.suppress(OSError):
        if os.statvfs(path.parent).f_flag & os.ST_RDONLY:
            return StoreAccessError(
                f"{path} is on a read-only file system; nothing was written",
                hint="Remount it read-write, or copy the store somewhere writable.",
            )
    with contextlib.suppress(OSError):
        st = os.stat(path)
        if not os.access(path, os.W_OK):
            return StoreAccessError(
                f"This user (uid {os.geteuid()}) may not write {path} (owner uid {st.st_uid}, "
                f"mode {stat.S_IMODE(st.st_mode):04o}); nothing was written",
                hint="Run hermes as the store's owner (for example with sudo -u).",
            )
    return StoreAccessError(f"{path} could not be written (SQLite opened it read-only)")


def write_error(store: Store, exc: sqlite3.Error) -> HermesStateError | None:
    """Return the typed error of a failed write (place, permissions, full disk, damage)."""
    code = getattr(exc, "sqlite_errorcode", 0) or 0
    if code == SQLITE_READONLY_DIRECTORY:
        return directory_not_writable(store.path, store.journal_mode)
    if code == SQLITE_READONLY:
        return _read_only_reason(store.path)
    return translate_sqlite_error(exc, store.path)


def secure_store_files(path: Path) -> None:
    """Tighten state.db and its -wal/-shm to 0600."""
    secure_file(path)
    for suffix in SIDECAR_SUFFIXES:
        secure_file(Path(str(path) + suffix))


def _create_empty(path: Path) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return  # a sibling process created it first; SQLite will open theirs
    os.close(fd)  # brand-new empty file: nobody can hold a lock on it through this process


def read_header(path: Path) -> bytes:
    """Read the first 16 bytes of a store file that this process does not have open."""
    if is_open_in_process(path):
        raise RuntimeError(f"refusing a raw read of {path}: this process has it open")
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.pread(fd, 16, 0)
    finally:
        os.close(fd)


def resolve_store_path(path: str | os.PathLike[str]) -> Path:
    """Return the file a store path names, following a symlinked store file to its target.

    SQLite follows the link and keeps -wal/-shm/-journal beside the target, so every path this
    package builds from the store's (sidecars, lock owners, backups) must start from there. A
    link to nothing is refused: writing through it would create a store outside the home.
    """
    path = Path(path).expanduser().absolute()
    if not path.is_symlink():
        return path
    target = Path(os.path.realpath(path))
    if not target.exists():
        raise StoreNotFoundError(
            f"{path} is a symbolic link to {target}, which does not exist",
            hint="Point the link at an existing store, or remove it so a new store is made in "
            "the home.",
        )
    guard.check_store_path(target)
    return target


def check_store_file(path: Path) -> None:
    """Refuse a store path that exists but is not a regular file this user may open."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except PermissionError as exc:
        raise StoreAccessError(
            f"Cannot reach {path}: permission denied on a directory above it",
            hint="Run hermes as the user who owns the Hermes home.",
        ) from exc
    if stat.S_ISDIR(st.st_mode):
        raise StoreAccessError(
            f"{path} is a directory, not a store file; nothing was read or written",
            hint="Move it out of the way: the store is a file named state.db in the home.",
        )
    if not stat.S_ISREG(st.st_mode):
        raise StoreAccessError(
            f"{path} is not a regular file (a device, socket or pipe); nothing was read or written"
        )


def access_error(path: Path, exc: OSError | sqlite3.Error) -> HermesStateError:
    """Say why this user cannot open the store at path (owner, read-only place, hot journal,
    no space left for its -shm or journal)."""
    typed = translate_sqlite_error(exc, path) if isinstance(exc, sqlite3.Error) else None
    if typed is not None and not isinstance(typed, StoreAccessError):
        return typed
    code = getattr(exc, "sqlite_errorcode", 0) or 0
    if code == SQLITE_READONLY_DIRECTORY:
        # Met while opening, which only reads: only a WAL store needs files made to read.
        return directory_not_writable(path, "wal")
    if code & 0xFF == SQLITE_IOERR:
        with contextlib.suppress(OSError):
            if shutil.disk_usage(path.parent).free < LOW_SPACE_BYTES:
                return DiskFullError(
                    f"No space left beside {path} for SQLite's shared-memory or journal file "
                    f"({exc}); nothing was written"
                )
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and st.st_uid != os.geteuid() and not os.access(path, os.R_OK | os.W_OK):
        return StoreAccessError(
            f"{path} belongs to another user (uid {st.st_uid}) and this user (uid "
            f"{os.geteuid()}) may not open it; nothing was read or written",
            hint="Run hermes as the store's owner (for example with sudo -u).",
        )
    if typed is not None:
        return typed
    return StoreAccessError(f"Cannot open {path}: {exc}")


def _header_problem(path: Path) -> str | None:
    """Return "zeroed"/"notadb" when the file at path cannot be an SQLite store, else None."""
    st = os.stat(path)
    if st.st_size == 0:
        wal = Path(str(path) + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            return None  # all content still in the WAL: SQLite recovers it
        return "zeroed"
    header = read_header(path)
    if header != SQLITE_MAGIC:
        return "notadb" if any(header) else "zeroed"
    return None


def _quarantine(path: Path, kind: str) -> Quarantine:
    size = os.stat(path).st_size
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = f"{path.name}.{kind}-{stamp}-{os.getpid()}"
    target = path.with_name(base + ".bak")
    n = 1
    while target.exists():
        target = path.with_name(f"{base}-{n}.bak")
        n += 1
    os.rename(path, target)
    for suffix in SIDECAR_SUFFIXES:
        side = Path(str(path) + suffix)
        if side.exists():
            os.rename(side, Path(str(target) + suffix))
    q = Quarantine(kind=kind, original=path, moved_to=target, size=size)
    log.error("%s", q.message())
    return q


@contextlib.contextmanager
def _creation_lock(path: Path) -> Iterator[None]:
    """Serialise creating or quarantining the store file across processes."""
    # The lock is on the store's directory, so no lock file is left beside the store.
    lock_path = path.parent
    fd = os.open(lock_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + 5.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StoreLockedError(
                        f"timed out waiting for the creation lock on {lock_path}"
                    ) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


# --- opening --------------------------------------------------------------------------------


def open_store(
    path: Path,
    *,
    read_only: bool = False,
    role: Role = "agent",
    create: bool = True,
    waiting: Waiting = NO_WAITING,
) -> Store:
    """Open the store at path read-only, or writable in a role (see ``Role``).

    ``create=False`` makes a missing store a StoreNotFoundError instead of a new store;
    ``waiting`` sets how long the handle waits for other processes' locks (see ``Waiting``).
    """
    path = Path(path).expanduser().absolute()
    guard.check_store_path(path)
    # Through a symlink, the file is the user's own arrangement (or someone else's trap):
    # write to it, but never change its mode (a chmod would follow the link).
    linked = path.is_symlink()
    path = resolve_store_path(path)
    check_store_file(path)
    if read_only:
        return _open_read_only(path, waiting)
    return _open_writable(path, role=role, create=create, tighten=not linked, waiting=waiting)


def _connect_writable(path: Path, waiting: Waiting = NO_WAITING) -> sqlite3.Connection:
    conn = sqlite3.connect(
        str(path),
        timeout=min(BUSY_TIMEOUT_S, waiting.limit(BUSY_TIMEOUT_S)),
        isolation_level=None,
        check_same_thread=False,
    )
    conn.row_factory = sqlite3.Row
    return conn


def inspect_layout(conn: sqlite3.Connection) -> Layout:
    """Read the store's layout; a damaged schema whose error text is not UTF-8 is an error too.

    SQLite quotes the damaged schema text in its message, and sqlite3 then raises
    UnicodeDecodeError instead of a DatabaseError: it is turned back into the DatabaseError it
    stands for, so every caller's handling of damage applies.
    """
    try:
        return layout.inspect(conn)
    except UnicodeDecodeError as exc:
        text = bytes(exc.object).decode("utf-8", "replace")
        raise sqlite3.DatabaseError(text) from exc


def _schema_refusal(path: Path, found: Layout | None) -> HermesStateError:
    """Return the error that refuses writes to a store of a schema this code does not write."""
    version = found.version if found is not None else None
    if found is not None and found.too_new:
        return SchemaTooNewError(
            f"{path} is at schema {version}, newer than this hermes knows "
            f"(up to {schema.SCHEMA_VERSION}); refusing to write to it"
        )
    shown = schema.shown_version(found.version_text if found is not None else None)
    near = found.nearest_note() if found is not None else None
    return UnknownSchemaError(
        f"{path} is at {shown}, which no Hermes Agent release this hermes knows "
        f"writes (known: {releases.known_list()}"
        + (f"; nearest: {releases.nearest(version).name}" if near and version else "")
        + "); refusing to write to it"
    )


def store_schema_refusal(store: Store) -> HermesStateError:
    """Return the error refusing writes to the store because of its schema number."""
    return _schema_refusal(store.path, store.layout)


def _create_new_store(path: Path) -> None:
    """Create the file and lay out a complete schema-31 store in it, under the creation lock."""
    _create_empty(path)
    conn = _connect_writable(path)
    try:
        # Choose the journal mode before anything is written, then write the whole schema so
        # no sibling process ever sees a zero-byte file.
        retry_locked(path, lambda: journal.apply_to_new_store(conn, path))
        conn.execute("PRAGMA foreign_keys=ON")

        def lay_out() -> None:
            if schema_is_empty(conn):
                conn.execute("BEGIN IMMEDIATE")
                try:
                    migrations.create_new(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise

        retry_locked(path, lay_out)
    finally:
        conn.close()


def schema_is_empty(conn: sqlite3.Connection) -> bool:
    """Tell whether the database has no schema objects at all (a brand-new file)."""
    return int(conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]) == 0


def _open_writable(
    path: Path, *, role: Role, create: bool, tighten: bool = True, waiting: Waiting = NO_WAITING
) -> Store:
    quarantine: Quarantine | None = None
    if not path.exists() and not create:
        raise StoreNotFoundError(f"No store yet at {path}")
    # A store its owner made read-only stays so: refused before anything (a chmod included).
    refuse_write_protected(path)
    ensure_private_dir(path.parent)
    # Probe the header only when no connection of ours has the file open (a raw read would
    # otherwise drop our POSIX locks); take the cross-process lock only when acting on it.
    if path.exists() and not is_open_in_process(path):
        try:
            problem = _header_problem(path)
        except PermissionError as exc:
            raise access_error(path, exc) from exc
        if problem and role == "edit":
            # Only the agent's own open may move a store aside; a command never replaces one.
            what = "empty (0 bytes)" if problem == "zeroed" else "not an SQLite database"
            raise StoreCorruptError(f"{path} is {what}; nothing was written to it")
        if problem:
            with _creation_lock(path):
                problem = _header_problem(path) if path.exists() else None
                if problem:
                    quarantine = _quarantine(path, problem)
    created = False
    if not path.exists():
        with _creation_lock(path):
            if not path.exists():
                _create_new_store(path)
                created = True
    # Modes are tightened on the agent's own files (its library's contract: a loose 0644 is
    # made 0600) and on a store made here; a command never changes the mode of the agent's.
    tighten = tighten and (role == "agent" or created)
    if tighten:
        secure_file(path)
    try:
        conn = _connect_writable(path, waiting)
    except sqlite3.Error as exc:
        raise access_error(path, exc) from exc
    _register_open(path)
    try:
        found = retry_locked(path, lambda: inspect_layout(conn), waiting)
        # The journal mode is the store's own: read it, never switch it (SPEC §19.5).
        mode = retry_locked(path, lambda: journal.current_mode(conn), waiting)
        store = Store(
            path,
            conn,
            read_only=False,
            quarantine=quarantine,
            journal_mode=mode,
            found=found,
            role=role,
            waiting=waiting,
        )
        kind = found.kind
        if kind == "not_hermes":
            if not retry_locked(path, lambda: schema_is_empty(conn), waiting):
                raise NotAHermesStoreError(
                    f"{path} is an SQLite database without a Hermes session schema; "
                    "nothing was written to it"
                )
            if role == "edit" and not create:
                raise StoreNotFoundError(f"No store yet at {path}")
        if kind == "unknown":
            store.too_new = True  # browse only; writes raise _schema_refusal
            store.wait_for_reads(waiting.limit(READ_BUSY_TIMEOUT_S))
            return store
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        if mode == "wal":
            conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
        if kind == "legacy" and role == "edit":
            store.refusal = StoreNeedsMigrationError(
                f"{path} is in the layout older versions of hermes wrote, which the agent "
                "cannot write to; upgrade it before editing"
            )
        elif kind == "old" and role == "edit":
            # A number no release writes: read only, as a newer unknown number is.
            store.refusal = _schema_refusal(path, found)
        elif kind != "current" and (role == "agent" or kind == "not_hermes"):
            store.write(migrations.migrate)
            store.layout = inspect_layout(conn)
            store.forget_columns()
        if tighten:
            secure_store_files(path)
        # Every later read of the handle waits as long as its writes may (a command's
        # patience, --wait included; the agent's library: as long as a read-only open).
        store.wait_for_reads(
            waiting.limit(WRITE_PATIENCE_S if role == "edit" else READ_BUSY_TIMEOUT_S)
        )
        return store
    except sqlite3.DatabaseError as exc:
        _register_close(path)
        if is_corruption_error(exc):
            close_without_checkpoint(conn, path)
            raise StoreCorruptError(f"{path} is damaged: {exc}") from exc
        conn.close()
        if not is_lock_error(exc) and translate_sqlite_error(exc, path) is not None:
            raise access_error(path, exc) from exc
        raise
    except StoreCorruptError:
        _register_close(path)
        close_without_checkpoint(conn, path)
        raise
    except BaseException:
        conn.close()
        _register_close(path)
        raise


def create_bare_store(
    path: Path, *, page_size: int | None = None, journal_mode: str | None = None
) -> Store:
    """Create an empty SQLite file (0600, never over an existing one) for a caller that lays out
    its own schema (recover copies the source's); the file gets the given page size and mode."""
    path = Path(path).expanduser().absolute()
    guard.check_store_path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    os.close(os.open(path, flags, 0o600))  # brand-new empty file: no locks to lose
    conn = _connect_writable(path)
    try:
        if page_size:
            conn.execute(f"PRAGMA page_size = {int(page_size)}")
        mode = journal_mode if journal_mode in ("wal", "delete", "truncate", "persist") else None
        got = (
            journal.apply_to_new_store(conn, path)
            if mode is None
            else (conn.execute(f"PRAGMA journal_mode = {mode.upper()}").fetchone()[0].lower())
        )
    except BaseException:
        conn.close()
        raise
    _register_open(path)
    return Store(path, conn, read_only=False, journal_mode=str(got), role="edit")


def retry_locked(
    path: Path,
    fn: Callable[[], T],
    waiting: Waiting = NO_WAITING,
    default_patience: float = WRITE_PATIENCE_S,
    not_done: str = "",
) -> T:
    """Call fn, retrying lock errors with jitter for up to the handle's patience.

    The one retry loop for work outside a write transaction (opening, laying out, VACUUM);
    ``not_done`` ends the lock error's message (e.g. "; VACUUM was not run").
    """
    patience = waiting.limit(default_patience)
    start = time.monotonic()
    told = False
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not is_lock_error(exc):
                raise
            waited = time.monotonic() - start
            if waited >= patience:
                who = report_lock_holders(path, waited)
                raise StoreLockedError(
                    f"{path.name} stayed locked for {waited:.1f}s{who}{not_done}"
                ) from exc
            if not told and waited >= WAIT_NOTICE_S:
                told = True
                waiting.tell(path, waited)
            time.sleep(min(random.uniform(*RETRY_FAST_S), patience - waited))


def read_only_uri(path: Path) -> str:
    """Return the URI that opens path read-only (as_uri escapes '?' and '#')."""
    return Path(path).resolve().as_uri() + "?mode=ro"


def _open_read_only(path: Path, waiting: Waiting = NO_WAITING) -> Store:
    if not path.exists():
        raise StoreNotFoundError(f"No store yet at {path}")
    patience = waiting.limit(READ_BUSY_TIMEOUT_S)
    start = time.monotonic()
    told = False
    io_errors = 0
    while True:
        had_sidecars = any(p.exists() for p in store_files(path, ("-wal", "-shm")))
        try:
            conn = sqlite3.connect(
                read_only_uri(path),
                uri=True,
                # Short waits inside SQLite, the rest here: a long wait is told about.
                timeout=min(BUSY_TIMEOUT_S, patience),
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise access_error(path, exc) from exc
        conn.row_factory = sqlite3.Row
        try:
            found = inspect_layout(conn)
            if found.kind == "not_hermes":
                size = path.stat().st_size
                if not size:
                    raise StoreCorruptError(f"{path} is empty (0 bytes)")
                raise NotAHermesStoreError(f"{path} holds no Hermes session schema ({size} bytes)")
            _register_open(path)
            mode = journal.current_mode(conn)
            store = Store(
                path,
                conn,
                read_only=True,
                too_new=found.kind == "unknown",
                journal_mode=mode,
                found=found,
                waiting=waiting,
            )
            # Later statements of the command wait as long as the open could.
            store.wait_for_reads(max(patience, 0.001))
            store.made_sidecars = mode == "wal" and not had_sidecars
            return store
        except sqlite3.DatabaseError as exc:
            conn.close()
            if is_corruption_error(exc):
                raise StoreCorruptError(f"{path} is damaged: {exc}") from exc
            if is_lock_error(exc):
                waited = time.monotonic() - start
                if waited >= patience:
                    who = report_lock_holders(path, waited)
                    raise StoreLockedError(
                        f"{path.name} stayed locked for {waited:.1f}s while opening it{who}"
                    ) from exc
                if not told and waited >= WAIT_NOTICE_S:
                    told = True
                    waiting.tell(path, waited)
                time.sleep(min(random.uniform(*RETRY_FAST_S), patience - waited))
                continue
            if "disk i/o error" in str(exc).lower() and io_errors < 3:
                io_errors += 1
                time.sleep(0.05)
                continue
            if translate_sqlite_error(exc, path) is not None:
                raise access_error(path, exc) from exc
            raise
        except BaseException:
            conn.close()
            raise
