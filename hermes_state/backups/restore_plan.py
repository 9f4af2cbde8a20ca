"""What a restore would change: the home's stores as they are, the plan, the space it needs.

``prepare_restore`` (in ``restore``) fills a RestorePlan for the caller to show and confirm;
the facts about the home come from here (sizes, page sizes, journal modes, free space).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from hermes_state.backups.archive_check import (
    member_is_database,
)
from hermes_state.backups.archive_format import (
    MANIFEST,
    BackupError,
    UnsafeArchiveError,
)
from hermes_state.store.connection import is_open_in_process, read_only_uri
from hermes_state.store.errors import (
    HermesStateError,
    StoreBusyError,
    is_lock_error,
)
from hermes_state.store.sql import SQLITE_MAGIC, store_files
from hermes_state.store.store_file import resolve_store_path

READ_TIMEOUT_S = 10.0
SPACE_MARGIN_BYTES = 1 << 20
MAX_REPORT_BYTES = 16 << 20  # a recovery report beside a store file (read for its verdict)


class NotEnoughSpaceError(BackupError):
    """The file system has less free space than the restore needs."""

    hint = "Free some space on that file system and retry; nothing was changed."


@dataclass(frozen=True)
class StoreState:
    """Sessions, messages and bytes of one store."""

    sessions: int | None
    messages: int | None
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {"sessions": self.sessions, "messages": self.messages, "bytes": self.bytes}


@dataclass
class DatabaseChange:
    """One database the restore writes: what is there now and what the archive holds."""

    name: str
    dest: Path
    store: bool  # a Hermes store (state.db), not another application's database
    before: StoreState | None  # None: nothing there yet
    after: StoreState
    before_problem: str | None = None  # the current file cannot be read (it is kept as is)
    notes: list[str] = field(default_factory=list)

    @property
    def shrinks(self) -> bool:
        """Tell whether the restored store has fewer sessions or messages than the current."""
        b, a = self.before, self.after
        if not self.store or b is None or b.sessions is None or b.messages is None:
            return False
        return (a.sessions or 0) < b.sessions or (a.messages or 0) < b.messages

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "name": self.name,
            "path": str(self.dest),
            "store": self.store,
            "before": None if self.before is None else self.before.to_dict(),
            "after": self.after.to_dict(),
            "before_problem": self.before_problem,
            "notes": list(self.notes),
        }


@dataclass
class RestorePlan:
    """What a restore will do, for the caller to show before it confirms."""

    archive: Path
    home: Path
    created_at: str | None = None  # as the manifest says (informational)
    profile: str | None = None  # as the manifest says (informational)
    databases: list[DatabaseChange] = field(default_factory=list)
    files_new: list[str] = field(default_factory=list)
    files_replaced: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # runtime files left as they are
    holders: str = ""
    forced: bool = False
    space_needed: int = 0
    cleaned: list[Path] = field(default_factory=list)  # scratch left by killed restores
    source: str = "archive"  # "archive" (a hermes backup) or "database" (a store file)
    check_s: float = 0.0  # how long checking and staging took
    vault_left_out: list[str] = field(default_factory=list)  # the archive's, with --no-vault

    @property
    def stores(self) -> list[DatabaseChange]:
        """Return the Hermes stores among the databases."""
        return [d for d in self.databases if d.store]

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "archive": str(self.archive),
            "home": str(self.home),
            "created_at": self.created_at,
            "profile": self.profile,
            "databases": [d.to_dict() for d in self.databases],
            "files_new": list(self.files_new),
            "files_replaced": list(self.files_replaced),
            "kept": list(self.kept),
            "holders": self.holders,
            "forced": self.forced,
            "space_needed": self.space_needed,
            "cleaned": [str(p) for p in self.cleaned],
            "source": self.source,
            "check_s": round(self.check_s, 3),
            "vault_left_out": list(self.vault_left_out),
        }


@dataclass
class RestoreResult:
    """What restore wrote."""

    archive: Path
    home: Path
    databases: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # runtime files left as they were
    forced: bool = False
    holders: str = ""  # other processes that had the store open (only when forced)
    warnings: list[str] = field(default_factory=list)
    changes: list[DatabaseChange] = field(default_factory=list)
    pre_restore: dict[str, Path] = field(default_factory=dict)  # name -> copy of what was there
    # Copies earlier restores kept beside the same stores (never removed by a restore).
    earlier_copies: list[tuple[Path, int]] = field(default_factory=list)
    duration_s: float = 0.0  # how long writing took (the checks are in the plan's check_s)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "archive": str(self.archive),
            "home": str(self.home),
            "databases": list(self.databases),
            "files": list(self.files),
            "kept": list(self.kept),
            "forced": self.forced,
            "holders": self.holders,
            "warnings": list(self.warnings),
            "changes": [c.to_dict() for c in self.changes],
            "pre_restore": {k: str(v) for k, v in self.pre_restore.items()},
            "earlier_copies": [{"path": str(p), "bytes": n} for p, n in self.earlier_copies],
            "duration_s": round(self.duration_s, 3),
        }


# --- the home as it is ------------------------------------------------------------------------


@dataclass(frozen=True)
class CurrentStore:
    """A database file in the home as it is now."""

    exists: bool
    state: StoreState | None = None
    problem: str | None = None
    page_size: int = 0
    wal: bool = False


def file_bytes(path: Path) -> int:
    total = 0
    for p in store_files(path):
        with contextlib.suppress(OSError):
            total += os.stat(p).st_size
    return total


def _header_of(dest: Path) -> tuple[int, bool]:
    """Return (page size, WAL flag) from a database file's header, without opening it in SQLite
    (so a refused restore leaves no -wal/-shm behind); (0, False) when it has none."""
    if not dest.is_file() or is_open_in_process(dest):
        return 0, False
    try:
        with open(dest, "rb") as fp:
            head = fp.read(100)
    except OSError:
        return 0, False
    if len(head) < 100 or head[:16] != SQLITE_MAGIC:
        return 0, False
    size = int.from_bytes(head[16:18], "big")
    return (65536 if size == 1 else size), head[18:20] == b"\x02\x02"


def current_state(dest: Path, store: bool) -> CurrentStore:
    """Read what the database at dest holds now (read-only; an unreadable file is reported)."""
    if not os.path.lexists(dest):
        return CurrentStore(exists=False)
    size = file_bytes(dest)
    page_size, wal = _header_of(dest)
    uri = read_only_uri(dest)
    if not any(os.path.lexists(str(dest) + s) for s in ("-wal", "-journal")):
        uri += "&immutable=1"  # nothing beyond the main file to read: create no -shm for it
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=READ_TIMEOUT_S)
    except sqlite3.Error as exc:
        return CurrentStore(
            True, StoreState(None, None, size), f"unreadable: {exc}", page_size, wal
        )
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        sessions = messages = None
        if store:
            with contextlib.suppress(sqlite3.OperationalError):
                sessions = int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
                messages = int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
        return CurrentStore(True, StoreState(sessions, messages, size), None, page_size, wal)
    except sqlite3.Error as exc:
        if is_lock_error(exc):
            raise StoreBusyError(f"{dest.name} stayed locked while reading it: {exc}") from exc
        return CurrentStore(
            True, StoreState(None, None, size), f"unreadable: {exc}", page_size, wal
        )
    finally:
        conn.close()


def home_destination(home: Path, name: str) -> Path:
    """Return where a member goes, refusing parents that are links, files or leave home.

    A store file that is itself a symlink is followed (the store lives where it points); any
    other symlink in the way of a plain file is replaced, never written through.
    """
    dest = home / name
    parent = home
    for part in PurePosixPath(name).parts[:-1]:
        parent = parent / part
        if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
            raise UnsafeArchiveError(f"{name}: {parent} is a symlink or not a directory")
    if not dest.parent.resolve().is_relative_to(home.resolve()):
        raise UnsafeArchiveError(f"{name}: resolves outside {home}")
    if member_is_database(name) and dest.is_symlink():
        try:
            dest = resolve_store_path(dest)
        except HermesStateError as exc:
            raise BackupError(f"Cannot restore {name}: {exc.message}", hint=exc.hint) from None
    if dest.is_dir() and not dest.is_symlink():
        raise BackupError(
            f"Cannot restore {name}: {dest} is a directory",
            hint="Move it out of the way and retry; nothing was changed.",
        )
    return dest


def free_bytes(path: Path) -> int:
    probe = path
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free


def _member_page_size(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
    """Return the page size an SQLite member's header declares (0 when it has none)."""
    try:
        with zf.open(info) as fp:
            head = fp.read(100)
    except (OSError, zipfile.BadZipFile, EOFError):
        return 0
    if len(head) < 18:
        return 0
    size = int.from_bytes(head[16:18], "big")
    return 65536 if size == 1 else size


def space_needed(
    zf: zipfile.ZipFile,
    files: list[zipfile.ZipInfo],
    dests: dict[str, Path],
    current: dict[str, CurrentStore],
) -> int:
    """Return the bytes a restore writes at its peak: scratch copies of every member, a copy of
    each replaced store, the journal/WAL of writing a store in place (as large as the larger of
    old and new), a page-size conversion copy where one is needed, and copies of the files it
    replaces (kept until the end, to undo)."""
    need = SPACE_MARGIN_BYTES
    largest_file = 0
    for info in files:
        if info.filename == MANIFEST:
            continue
        need += info.file_size  # staged copy
        cur = current.get(info.filename)
        old = file_bytes(dests[info.filename]) if os.path.lexists(dests[info.filename]) else 0
        if member_is_database(info.filename):
            need += old + max(old, info.file_size)  # pre-restore copy, then journal or WAL
            if cur is not None and cur.wal and cur.page_size:
                archived = _member_page_size(zf, info)
                if archived and archived != cur.page_size:
                    need += info.file_size  # converted to the live store's page size
        else:
            need += old
            largest_file = max(largest_file, info.file_size)
    return need + largest_file


def holders_of(paths: list[Path]) -> str:
    """Name the other processes that hold or have open any of these databases."""
    from hermes_state.store.lockowners import lock_holders

    names = []
    for db in paths:
        if not db.exists():
            continue
        text = lock_holders(db).describe_other_processes()
        if text:
            names.append(f"{db.name}: {text}")
    return "; ".join(names)
