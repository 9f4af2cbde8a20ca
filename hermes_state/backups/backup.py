"""Backup archives of a profile home: consistent SQLite snapshots, a manifest, verify.

Every SQLite database is copied with the online backup API from a read-only connection in one
step, so the snapshot is one consistent read transaction even while a gateway writes; the live
-wal/-shm/-journal files are never archived. A store that cannot be read in full fails the
backup; any other file that cannot be read makes it incomplete (and older archives are kept).
Archive names carry the profile, and rotation only ever removes archives this tool made of the
same home (``archives``). Checking an archive (verify, and restore before it writes) is in
``archive_check``; restore itself in ``restore``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import stat
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hermes_state.backups.archive_format import (
    ARCHIVE_RE,
    BACKUP_WORK_PREFIX,
    COMPRESS_LEVEL,
    COPY_CHUNK,
    LOCKED_HINT,
    MANIFEST,
    MANIFEST_FORMAT,
    MAX_RATIO,
    NOT_WRITTEN,
    PATIENCE_S,
    RATIO_FLOOR_BYTES,
    REPLICATION_DIR_RE,
    RUNTIME_FILES,
    SKIP_DIRS,
    SKIP_SUFFIXES,
    VAULT_DIR,
    VAULT_TEMP_RE,
    WORK_DIR_PREFIXES,
    BackupError,
    Member,
    hermes_version,
    is_pre_restore_copy,
    is_sidecar_name,
    is_sqlite_name,
    is_store_name,
    is_vault_name,
    profile_store_of,
    session_ids_in,
    session_set_entry,
)
from hermes_state.backups.archives import (
    archive_label,
    backup_destination,
    remove_old_partials,
    rotate,
)
from hermes_state.store import schema
from hermes_state.store.connection import roll_back_own_journal
from hermes_state.store.errors import HermesStateError, StoreLockedError
from hermes_state.store.home import STORE_FILE, make_output_dir
from hermes_state.store.patience import NO_WAITING, Waiting
from hermes_state.store.snapshot import SNAPSHOT_MMAP_BYTES, sqlite_snapshot
from hermes_state.store.sql import quote
from hermes_state.store.store_file import access_error, resolve_store_path
from hermes_state.store.workdirs import make_work_dir, remove_stale_work_dirs


@dataclass
class BackupResult:
    """What create_backup wrote."""

    archive: Path
    base: Path
    created_at: str
    profile: str = "default"
    members: list[Member] = field(default_factory=list)
    databases: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # files that could not be read
    damaged: list[str] = field(default_factory=list)  # databases archived with damage
    vault: dict[str, dict[str, int]] = field(default_factory=dict)  # name -> sessions, messages
    removed: list[Path] = field(default_factory=list)  # older archives rotated away
    cleaned: list[Path] = field(default_factory=list)  # scratch left by killed runs
    warnings: list[str] = field(default_factory=list)
    bytes_in: int = 0
    archive_bytes: int = 0
    duration_s: float = 0.0

    @property
    def complete(self) -> bool:
        """Tell whether every file was archived and every database read back sound."""
        return not self.skipped and not self.damaged

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "archive": str(self.archive),
            "base": str(self.base),
            "profile": self.profile,
            "created_at": self.created_at,
            "complete": self.complete,
            "members": [m.to_dict() for m in self.members],
            "databases": self.databases,
            "vault": {k: dict(v) for k, v in self.vault.items()},
            "skipped": list(self.skipped),
            "damaged": list(self.damaged),
            "removed": [str(p) for p in self.removed],
            "cleaned": [str(p) for p in self.cleaned],
            "warnings": list(self.warnings),
            "bytes_in": self.bytes_in,
            "archive_bytes": self.archive_bytes,
            "duration_s": round(self.duration_s, 3),
        }


def _skip_file(name: str) -> bool:
    """Tell whether a file is never archived (locks, sidecars, runtime files, restore copies)."""
    return (
        name.endswith(SKIP_SUFFIXES)
        or is_sidecar_name(name)
        or name in RUNTIME_FILES
        or name == MANIFEST
        or is_pre_restore_copy(name)
        or VAULT_TEMP_RE.match(name) is not None
    )


def _backup_root(home: Path, all_profiles: bool) -> Path:
    """Return the directory an archive is taken of (the root for all profiles)."""
    if all_profiles and home.parent.name == "profiles":
        return home.parent.parent
    return home


def _store_paths(base: Path, all_profiles: bool) -> list[tuple[Path, str]]:
    """Return (path, archive name) of every store the archive must hold, present or not."""
    stores = [(base / STORE_FILE, STORE_FILE)]
    profiles = base / "profiles"
    if all_profiles and profiles.is_dir() and not profiles.is_symlink():
        for entry in sorted(profiles.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                stores.append((entry / STORE_FILE, f"profiles/{entry.name}/{STORE_FILE}"))
    return stores


def _walk(
    base: Path, *, skip_profiles: bool, notes: list[str], vault: bool = True
) -> Iterator[tuple[Path, str]]:
    """Yield (file to read, archive name) of every file to back up, in a stable order.

    Symlinked databases are followed to their file (SQLite keeps their WAL there); other
    symlinks, sockets and devices are left out and named in notes. Without vault, every
    profile's vault directory is left out.
    """
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        here = Path(dirpath)
        keep = []
        for d in sorted(dirnames):
            if d in SKIP_DIRS or (skip_profiles and here == base and d == "profiles"):
                continue
            if not vault and d == VAULT_DIR and (here == base or here.parent == base / "profiles"):
                continue
            if d.startswith(WORK_DIR_PREFIXES) or d == STORE_FILE:
                continue  # scratch of another run; a state.db directory is refused earlier
            if REPLICATION_DIR_RE.match(d):
                continue  # Litestream's local copy of changes, `hermes replicate`'s scratch
            if (here / d).is_symlink():
                rel_dir = (here / d).relative_to(base).as_posix()
                notes.append(f"{rel_dir}/: symbolic link, not followed")
                continue
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            path = here / name
            rel = path.relative_to(base).as_posix()
            if _skip_file(name) or ARCHIVE_RE.match(name):
                continue  # never an archive inside the next one
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode) and is_sqlite_name(name):
                yield Path(os.path.realpath(path)), rel
            elif stat.S_ISREG(st.st_mode):
                yield path, rel
            elif stat.S_ISLNK(st.st_mode):
                notes.append(f"{rel}: symbolic link, not archived")
            else:
                notes.append(f"{rel}: not a regular file, not archived")


def _count_tables(conn: sqlite3.Connection) -> dict[str, int]:
    """Count the rows of every ordinary table (FTS indexes and their shadows left out)."""
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    virtual = [n for n, sql in rows if (sql or "").upper().startswith("CREATE VIRTUAL")]
    counts = {}
    for name, _sql in rows:
        if name.startswith("sqlite_") or name in virtual:
            continue
        if any(name.startswith(v + "_") for v in virtual):
            continue
        counts[name] = conn.execute(f"SELECT count(*) FROM {quote(name)}").fetchone()[0]
    return counts


def _describe_snapshot(path: Path) -> dict[str, Any]:
    """Return a snapshot's schema version, per-table row counts and quick_check result."""
    conn = sqlite3.connect(path)
    try:
        # A private file nobody else writes: mapped, quick_check copies no page (~20 % less CPU).
        conn.execute(f"PRAGMA mmap_size={SNAPSHOT_MMAP_BYTES}")
        rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check(5)")]
        check = "ok" if rows == ["ok"] else "; ".join(rows)
        try:
            return {
                "schema_version": schema.stored_version(conn),
                "tables": _count_tables(conn),
                "quick_check": check,
            }
        except sqlite3.DatabaseError as exc:
            return {"schema_version": None, "tables": {}, "quick_check": f"{check} ({exc})"}
    except sqlite3.DatabaseError as exc:
        return {"schema_version": None, "tables": {}, "quick_check": f"unreadable: {exc}"}
    finally:
        conn.close()


def _describe_store(path: Path, store: bool) -> tuple[dict[str, Any], set[str] | None]:
    """Describe a snapshot, and for a store also return its session ids (None: unreadable)."""
    described = _describe_snapshot(path)
    if not store:
        return described, None
    try:
        return described, session_ids_in(path)
    except sqlite3.Error:
        return described, None


def _profile_homes(base: Path, all_profiles: bool) -> list[Path]:
    """Return the profile homes an archive of base covers (the root, and each profile)."""
    return [path.parent for path, _rel in _store_paths(base, all_profiles)]


def _add_file(
    zf: zipfile.ZipFile,
    path: Path,
    name: str,
    mode: int,
    hasher: ThreadPoolExecutor,
    compress: bool = False,
) -> tuple[int, str]:
    """Stream a file into the archive; return (size, sha256) of what was written."""
    info = zipfile.ZipInfo(name, date_time=time.localtime(os.stat(path).st_mtime)[:6])
    # Stored by default: databases dominate, and deflate costs several times the copy.
    info.compress_type = zipfile.ZIP_STORED
    if compress:
        info.compress_type = zipfile.ZIP_DEFLATED
        # The member's level is public (compress_level) only from Python 3.13.
        level = "compress_level" if sys.version_info >= (3, 13) else "_compresslevel"
        setattr(info, level, COMPRESS_LEVEL)
    info.external_attr = (stat.S_IFREG | (mode & 0o777)) << 16
    digest = hashlib.sha256()
    size = 0
    # sha256 of chunk i runs on the hasher thread (hashlib releases the GIL) while chunk i+1 is
    # read and written; two reused buffers, as big fresh allocations are slow on this kind of VM.
    bufs = (bytearray(COPY_CHUNK), bytearray(COPY_CHUNK))
    pending = None
    turn = 0
    with open(path, "rb", buffering=0) as src, zf.open(info, "w", force_zip64=True) as dst:
        while n := src.readinto(bufs[turn]):
            chunk = memoryview(bufs[turn])[:n]
            dst.write(chunk)
            if pending is not None:
                pending.result()  # the other buffer is free again
            pending = hasher.submit(digest.update, chunk)  # one worker: updates stay in order
            size += n
            turn ^= 1
        if pending is not None:
            pending.result()
    if compress and size > RATIO_FLOOR_BYTES and size / max(1, info.compress_size) > MAX_RATIO:
        # restore refuses a member that expands this much (a zip bomb looks the same).
        raise BackupError(
            f"{name} deflates more than {MAX_RATIO} times, so restore would refuse the archive",
            hint="Back up without --compress.",
        )
    return size, digest.hexdigest()


# --- create --------------------------------------------------------------------------------


def _store_failure(rel: str, path: Path, exc: BaseException) -> BackupError:
    """Build the error that fails a backup whose store cannot be read in full."""
    typed = access_error(path, exc) if isinstance(exc, OSError | sqlite3.Error) else None
    why = typed.message if typed is not None else str(exc)
    hint = typed.hint if typed is not None and typed.hint else ""
    return BackupError(
        f"Cannot back up {rel}: {why}; no archive was written",
        hint=hint or "Nothing was written and no older archive was removed.",
    )


def _check_stores(base: Path, all_profiles: bool) -> list[tuple[Path, str]]:
    """Refuse a store path that exists but cannot be read; return the stores to archive."""
    present = []
    for path, rel in _store_paths(base, all_profiles):
        if not os.path.lexists(path):
            continue
        try:
            real = resolve_store_path(path)
        except HermesStateError as exc:
            raise BackupError(
                f"Cannot back up {rel}: {exc.message}; no archive was written", hint=exc.hint
            ) from None
        st = os.stat(real)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise BackupError(
                f"Cannot back up {rel}: it is {kind}, not a store file; no archive was written",
                hint="Move it out of the way: the store is a file named state.db.",
            )
        present.append((real, rel))
    return present


@contextlib.contextmanager
def _vault_locks(base: Path, all_profiles: bool, waiting: Waiting) -> Iterator[Callable[[], None]]:
    """Hold the vault lock of every profile the archive covers while its stores are copied;
    yield the check to call once they are.

    A running move or return is waited for (with the patience). A profile without a vault
    directory has no lock to take, and none is created: a move makes the directory before
    anything moves, so the check fails the backup when one appeared meanwhile.
    """
    from hermes_state.vault.vault import vault_dir, vault_lock_waiting

    homes = _profile_homes(base, all_profiles)
    absent = [h for h in homes if not vault_dir(h).is_dir()]
    patience = waiting.limit(PATIENCE_S)
    with contextlib.ExitStack() as stack:
        for h in homes:
            if h not in absent:
                stack.enter_context(vault_lock_waiting(h, patience, waiting, NOT_WRITTEN))

        def check() -> None:
            started = [h for h in absent if vault_dir(h).exists()]
            if started:
                raise StoreLockedError(
                    f"a `hermes vault move` started in {started[0]} while the backup copied "
                    f"its store, so the archive could miss what it moved{NOT_WRITTEN}",
                    hint="Retry when the move has finished.",
                )

        yield check


@contextlib.contextmanager
def _no_check() -> Iterator[Callable[[], None]]:
    """Stand in for _vault_locks when the vault is left out (nothing to hold or check)."""
    yield lambda: None


def _snapshot(source: Path, name: str, snap: Path, waiting: Waiting) -> None:
    """Take SQLite's snapshot of one database; a vault store's hot journal (a killed move's)
    is rolled back first, the store being ours."""
    if is_vault_name(name):
        roll_back_own_journal(source, waiting, PATIENCE_S)
    sqlite_snapshot(source, snap, timeout=PATIENCE_S, waiting=waiting)


def create_backup(
    home: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    *,
    keep: int | None = 3,
    all_profiles: bool = False,
    compress: bool = False,
    vault: bool = True,
    waiting: Waiting = NO_WAITING,
) -> BackupResult:
    """Archive the profile home (or the root with every profile) into a zip with a manifest.

    keep: how many archives of this home (the new one included) to keep in the output folder;
    0 or None keeps them all. Nothing is rotated away when the backup is incomplete.
    compress: deflate every member (fastest level) instead of storing it.
    vault: archive each profile's vault stores (vault/<YYYY>.db) as the store is archived,
    holding each profile's vault lock meanwhile, so no move or return runs between the
    snapshots: the archive is one consistent picture of every store. The manifest records each
    profile's sessions (count and digest of the ids) for restore and verify to check.
    waiting: how long (PATIENCE_S without --wait) every lock is waited for, and who is told.
    """
    started = time.monotonic()
    home = Path(home).expanduser().absolute()
    if not home.is_dir():
        raise BackupError(f"No Hermes home at {home}")
    if keep is not None and keep < 0:
        raise BackupError(f"keep must be 0 or more (got {keep})", hint="0 keeps every archive.")
    base = _backup_root(home, all_profiles)
    _check_stores(base, all_profiles)
    archive = backup_destination(home, output, all_profiles=all_profiles)
    make_output_dir(archive.parent)
    created = datetime.now(UTC).isoformat(timespec="seconds")
    result = BackupResult(
        archive=archive, base=base, created_at=created, profile=archive_label(home, all_profiles)
    )
    result.cleaned = remove_stale_work_dirs(archive.parent, (BACKUP_WORK_PREFIX,))
    result.cleaned += remove_old_partials(archive.parent)
    notes: list[str] = []
    with (
        make_work_dir(archive.parent, BACKUP_WORK_PREFIX) as work,
        _vault_locks(base, all_profiles, waiting) if vault else _no_check() as vault_check,
    ):
        partial = work.path / "archive.partial"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with (
            os.fdopen(fd, "wb") as raw,
            zipfile.ZipFile(raw, "w", allowZip64=True) as zf,
            ThreadPoolExecutor(max_workers=1) as hasher,
            ThreadPoolExecutor(max_workers=1) as checker,
        ):
            walked = _walk(base, skip_profiles=not all_profiles, notes=notes, vault=vault)
            sessions: dict[str, set[str] | None] = {}  # live store name -> its profile's ids
            removals: list[Future[None]] = []  # snapshots being removed
            for source, name in walked:
                if is_sqlite_name(name):
                    kind = "sqlite"
                    snap = work.path / f"{len(result.members)}.db"
                    store = is_store_name(name) or is_vault_name(name)
                    try:
                        mode = os.stat(source).st_mode
                        _snapshot(source, name, snap, waiting)
                    except StoreLockedError as exc:
                        if store:
                            raise StoreLockedError(
                                f"Cannot back up {name}: {exc.message}{NOT_WRITTEN}",
                                hint=LOCKED_HINT,
                            ) from exc
                        result.warnings.append(f"{name}: could not be read ({exc.message})")
                        result.skipped.append(name)
                        continue
                    except (sqlite3.Error, OSError) as exc:
                        # The vault holds sessions the store no longer has: as vital as it.
                        if is_store_name(name) or is_vault_name(name):
                            raise _store_failure(name, source, exc) from exc
                        result.warnings.append(f"{name}: could not be read ({exc})")
                        result.skipped.append(name)
                        continue
                    # The damage check reads the snapshot on its own thread while it is
                    # archived (both mostly wait on SQLite, zlib and I/O, which release the GIL).
                    checking = checker.submit(_describe_store, snap, store)
                    try:
                        size, digest = _add_file(zf, snap, name, mode, hasher, compress)
                    finally:
                        described, ids = checking.result()
                    result.databases[name] = described
                    if store:
                        key = profile_store_of(name)
                        known = sessions.setdefault(key, set())
                        if ids is None or known is None:
                            sessions[key] = None  # unreadable: nothing to record for it
                        else:
                            known |= ids
                    if is_vault_name(name):
                        tables = described["tables"]
                        result.vault[name] = {
                            "sessions": int(tables.get("sessions", 0)),
                            "messages": int(tables.get("messages", 0)),
                        }
                    if described["quick_check"] != "ok":
                        result.damaged.append(name)
                        result.warnings.append(
                            f"{name}: archived as it is, but it is damaged "
                            f"(quick_check: {described['quick_check']})"
                        )
                    # Freeing a big file's blocks takes a while: off the archive's path.
                    removals.append(checker.submit(snap.unlink))
                else:
                    kind = "file"
                    try:
                        mode = os.stat(source).st_mode
                        size, digest = _add_file(zf, source, name, mode, hasher, compress)
                    except OSError as exc:
                        result.warnings.append(f"{name}: could not be read ({exc.strerror})")
                        result.skipped.append(name)
                        continue
                result.members.append(Member(name, size, digest, kind))
                result.bytes_in += size
            vault_check()  # before anything is published
            manifest = {
                "format": MANIFEST_FORMAT,
                "created_at": created,
                "hermes_version": hermes_version(),
                "base": str(base),
                "profile": result.profile,
                "all_profiles": all_profiles,
                "complete": result.complete,
                "skipped": list(result.skipped),
                "databases": result.databases,
                "vault_included": vault,
                "vault": result.vault,
                # Each profile's sessions over its archived stores (live, and vault with
                # vault): restore and verify refuse an archive whose stores lost one.
                "session_ids": {
                    k: session_set_entry(v) for k, v in sessions.items() if v is not None
                },
                "members": {
                    m.name: {"size": m.size, "sha256": m.sha256, "kind": m.kind}
                    for m in result.members
                },
            }
            info = zipfile.ZipInfo(MANIFEST, date_time=time.localtime()[:6])
            info.external_attr = (stat.S_IFREG | 0o600) << 16
            zf.writestr(info, json.dumps(manifest, indent=2, ensure_ascii=False))
            raw.flush()
            os.fsync(raw.fileno())  # the link below must not publish an archive still in flight
            for removal in removals:
                removal.result()
        try:
            os.link(partial, archive)  # never replaces a file that appeared meanwhile
        except FileExistsError:
            raise BackupError(f"Refusing to overwrite existing file {archive}") from None
        except OSError:
            if archive.exists():
                raise BackupError(f"Refusing to overwrite existing file {archive}") from None
            os.replace(partial, archive)  # a file system without hard links
        os.chmod(archive, 0o600)
    result.warnings = notes + result.warnings
    result.archive_bytes = os.stat(archive).st_size
    if keep and result.complete and ARCHIVE_RE.match(archive.name):
        result.removed = rotate(archive, keep, base, all_profiles)
    result.duration_s = time.monotonic() - started
    return result
