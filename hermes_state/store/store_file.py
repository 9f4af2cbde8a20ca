"""The store file and its sidecars on disk: modes, write protection, why a file cannot be
opened or written, quarantine of a file that is no database, the creation lock, and the
cleanup of a hot journal or the empty -wal/-shm a read-only open made."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shlex
import shutil
import sqlite3
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_state.store import guard
from hermes_state.store.errors import (
    SQLITE_IOERR,
    SQLITE_READONLY,
    SQLITE_READONLY_DIRECTORY,
    DiskFullError,
    HermesStateError,
    StoreAccessError,
    StoreLockedError,
    StoreNotFoundError,
    StoreWriteProtectedError,
    translate_sqlite_error,
)
from hermes_state.store.sql import SIDECAR_SUFFIXES, companion, store_files

if TYPE_CHECKING:
    from hermes_state.store.connection import Store

log = logging.getLogger("hermes_state")


LOW_SPACE_BYTES = 1 << 20  # an I/O error opening a store with less free than this: disk full


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


def read_only_reason(path: Path) -> StoreAccessError:
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
        return read_only_reason(store.path)
    return translate_sqlite_error(exc, store.path)


def secure_store_files(path: Path) -> None:
    """Tighten state.db and its -wal/-shm to 0600."""
    secure_file(path)
    for suffix in SIDECAR_SUFFIXES:
        secure_file(Path(str(path) + suffix))


def create_empty(path: Path) -> None:
    """Create the store file empty and 0600, unless a sibling process just did."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return  # a sibling process created it first; SQLite will open theirs
    os.close(fd)  # brand-new empty file: nobody can hold a lock on it through this process


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


def quarantine_file(path: Path, kind: str) -> Quarantine:
    """Move a file that is no database (and its sidecars) aside, and say so in the log."""
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
def creation_lock(path: Path) -> Iterator[None]:
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
