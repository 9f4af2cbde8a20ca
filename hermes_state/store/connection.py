"""Opening the store file: writable and read-only connections, the write retry loop, file modes."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from hermes_state.store import guard, journal, layout, releases, schema
from hermes_state.store.errors import (
    HermesStateError,
    NotAHermesStoreError,
    SchemaTooNewError,
    StoreCorruptError,
    StoreLockedError,
    StoreNeedsMigrationError,
    StoreNotFoundError,
    StoreReadOnlyError,
    UnknownSchemaError,
    is_corruption_error,
    is_lock_error,
    translate_sqlite_error,
)
from hermes_state.store.home import ensure_private_dir
from hermes_state.store.patience import (
    BUSY_TIMEOUT_S,
    NO_WAITING,
    READ_BUSY_TIMEOUT_S,
    RETRY_FAST_S,
    WAIT_NOTICE_S,
    WRITE_PATIENCE_S,
    Waiting,
    report_lock_holders,
    retry_locked,
    run_with_patience,
)
from hermes_state.store.sql import SQLITE_MAGIC, companion, quote, store_files
from hermes_state.store.store_file import (
    Quarantine,
    access_error,
    check_store_file,
    create_empty,
    creation_lock,
    quarantine_file,
    refuse_write_protected,
    remove_made_sidecars,
    resolve_store_path,
    roll_back_hot_journal,
    secure_file,
    secure_store_files,
)

if TYPE_CHECKING:
    from hermes_state.store.layout import Layout

log = logging.getLogger("hermes_state")

T = TypeVar("T")
# "agent": the agent's own store library (SessionDB) — creates, and migrates as the agent does.
# "edit": a command of the CLI — writes within the schema the store has (SPEC §19.4).
Role = Literal["agent", "edit"]

CHECKPOINT_EVERY_N_WRITES = 50
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024


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
            result = run_with_patience(self, fn, self.waiting.limit(patience))
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


# --- file handling --------------------------------------------------------------------------


def read_header(path: Path) -> bytes:
    """Read the first 16 bytes of a store file that this process does not have open."""
    if is_open_in_process(path):
        raise RuntimeError(f"refusing a raw read of {path}: this process has it open")
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.pread(fd, 16, 0)
    finally:
        os.close(fd)


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
    create_empty(path)
    conn = _connect_writable(path)
    try:
        # Choose the journal mode before anything is written, then write the whole schema so
        # no sibling process ever sees a zero-byte file.
        retry_locked(path, lambda: journal.apply_to_new_store(conn, path))
        conn.execute("PRAGMA foreign_keys=ON")

        def lay_out() -> None:
            from hermes_state.store import migrations  # writers only: reads never load it

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
            with creation_lock(path):
                problem = _header_problem(path) if path.exists() else None
                if problem:
                    quarantine = quarantine_file(path, problem)
    created = False
    if not path.exists():
        with creation_lock(path):
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
            from hermes_state.store import migrations  # writers only: reads never load it

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
