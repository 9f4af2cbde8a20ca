"""Backup archives of a profile home: consistent SQLite snapshots, a manifest, verify, restore.

Every SQLite database is copied with the online backup API from a read-only connection in one
step, so the snapshot is one consistent read transaction even while a gateway writes; the live
-wal/-shm/-journal files are never archived. Restore validates the whole archive before it writes
anything and writes databases back through the backup API, so no live reader sees its inode
swapped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sqlite3
import stat
import tempfile
import time
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from hermes_state import guard, schema
from hermes_state.connection import read_only_uri, secure_store_files
from hermes_state.errors import (
    HermesStateError,
    StoreBusyError,
    is_corruption_error,
    is_lock_error,
)

MANIFEST = "manifest.json"
ARCHIVE_RE = re.compile(r"^hermes-backup-\d{8}-\d{6}(?:-\d+)?\.zip$")
WORK_DIR_PREFIXES = (".hermes-backup-", ".hermes-restore-", ".hermes-verify-")
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal")
SKIP_DIRS = frozenset({"__pycache__", ".cache", "backups"})
SKIP_SUFFIXES = (".lock", ".pyc", ".pyo", ".partial")
# Runtime files of a running gateway: never archived, never overwritten by a restore.
RUNTIME_FILES = frozenset({"gateway.pid", "cron.pid", "gateway_state.json", "processes.json"})
PRIVATE_FILES = frozenset({".env", "auth.json", "vault.key", "vault.json.enc"})
MAX_MEMBER_BYTES = 64 * 2**30
COPY_CHUNK = 256 << 10
READ_TIMEOUT_S = 10.0
SNAPSHOT_MMAP_BYTES = 256 * 2**20
MANIFEST_FORMAT = 1


class BackupError(HermesStateError):
    """A backup, verify or restore that was refused or failed."""

    hint = "Nothing was changed."


class UnsafeArchiveError(BackupError):
    """An archive with a member that could write outside the home (refused whole)."""

    hint = "The archive was refused before anything was written; do not trust its origin."


@dataclass(frozen=True)
class Member:
    """One file in an archive."""

    name: str
    size: int
    sha256: str
    kind: str  # "sqlite" or "file"

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return asdict(self)


@dataclass
class BackupResult:
    """What create_backup wrote."""

    archive: Path
    base: Path
    created_at: str
    members: list[Member] = field(default_factory=list)
    databases: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)  # older archives rotated away
    warnings: list[str] = field(default_factory=list)
    bytes_in: int = 0
    archive_bytes: int = 0
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "archive": str(self.archive),
            "base": str(self.base),
            "created_at": self.created_at,
            "members": [m.to_dict() for m in self.members],
            "databases": self.databases,
            "skipped": list(self.skipped),
            "removed": [str(p) for p in self.removed],
            "warnings": list(self.warnings),
            "bytes_in": self.bytes_in,
            "archive_bytes": self.archive_bytes,
            "duration_s": round(self.duration_s, 3),
        }


@dataclass
class VerifyResult:
    """What verify_backup found."""

    archive: Path
    members_checked: int = 0
    databases: dict[str, str] = field(default_factory=dict)  # name -> integrity_check result
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Tell whether the archive is intact."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "archive": str(self.archive),
            "ok": self.ok,
            "members_checked": self.members_checked,
            "databases": dict(self.databases),
            "problems": list(self.problems),
        }


@dataclass
class RestoreResult:
    """What restore_backup wrote."""

    archive: Path
    home: Path
    databases: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # runtime files left as they were
    forced: bool = False
    holders: str = ""  # other processes that had the store open (only when forced)
    warnings: list[str] = field(default_factory=list)

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
        }


# --- helpers -------------------------------------------------------------------------------


def hermes_version() -> str:
    """Return this package's version."""
    try:
        from importlib.metadata import version

        return version("hermes-state")
    except Exception:  # not installed (running from a source tree)
        import hermes_state

        return str(getattr(hermes_state, "__version__", "unknown"))


def _is_sqlite_name(name: str) -> bool:
    """Tell whether a file name is one of an SQLite database."""
    return name.endswith(SQLITE_SUFFIXES)


def _skip_file(name: str) -> bool:
    """Tell whether a file is never archived (locks, sidecars, runtime files)."""
    return (
        name.endswith(SKIP_SUFFIXES)
        or any(name.endswith(s) for s in SIDECAR_SUFFIXES)
        or name in RUNTIME_FILES
        or name == MANIFEST
    )


def _backup_root(home: Path, all_profiles: bool) -> Path:
    """Return the directory an archive is taken of (the root for all profiles)."""
    if all_profiles and home.parent.name == "profiles":
        return home.parent.parent
    return home


def _walk(base: Path, *, skip_profiles: bool, skip: set[Path]) -> Iterator[tuple[Path, str]]:
    """Yield (path, archive name) of every regular file to back up, in a stable order."""
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        here = Path(dirpath)
        keep = []
        for d in sorted(dirnames):
            if d in SKIP_DIRS or (skip_profiles and here == base and d == "profiles"):
                continue
            if d.startswith(WORK_DIR_PREFIXES):
                continue  # another backup's or restore's scratch space
            if (here / d).is_symlink():
                continue
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            path = here / name
            if _skip_file(name) or path in skip:
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue  # symlinks, sockets, fifos
            yield path, path.relative_to(base).as_posix()


def _sqlite_snapshot(path: Path, dest: Path) -> None:
    """Copy a live database into dest with the backup API, in one step, from a read-only handle."""
    guard.check_store_path(path)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)  # a fresh private file; SQLite opens it by name next
    src = sqlite3.connect(read_only_uri(path), uri=True, timeout=READ_TIMEOUT_S)
    try:
        src.execute(f"PRAGMA mmap_size={SNAPSHOT_MMAP_BYTES}")  # fewer read syscalls and copies
        dst = sqlite3.connect(dest)
        try:
            # A scratch copy: no journal and no fsync (the finished archive is fsynced once).
            dst.execute("PRAGMA journal_mode=OFF")
            dst.execute("PRAGMA synchronous=OFF")
            src.backup(dst)  # pages=-1: the whole database in one step, one read transaction
        finally:
            dst.close()
    finally:
        src.close()


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
        counts[name] = conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
    return counts


def _describe_db(path: Path) -> dict[str, Any]:
    """Return a snapshot's schema version and per-table row counts."""
    conn = sqlite3.connect(read_only_uri(path), uri=True)
    try:
        return {"schema_version": schema.stored_version(conn), "tables": _count_tables(conn)}
    finally:
        conn.close()


def _add_file(
    zf: zipfile.ZipFile, path: Path, name: str, mode: int, hasher: ThreadPoolExecutor
) -> tuple[int, str]:
    """Stream a file into the archive; return (size, sha256) of what was written."""
    info = zipfile.ZipInfo(name, date_time=time.localtime(os.stat(path).st_mtime)[:6])
    info.compress_type = zipfile.ZIP_STORED  # databases dominate and deflate would cost 5x
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
    return size, digest.hexdigest()


def _output_path(home: Path, output: Path | None) -> Path:
    """Return where the archive goes: output, a new name in it, or home/backups."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    if output is None:
        folder = home / "backups"
    elif output.is_dir():
        folder = output
    else:
        return output
    folder.mkdir(parents=True, exist_ok=True)
    candidate = folder / f"hermes-backup-{stamp}.zip"
    n = 1
    while candidate.exists():
        candidate = folder / f"hermes-backup-{stamp}-{n}.zip"
        n += 1
    return candidate


def _rotate(current: Path, keep: int) -> list[Path]:
    """Remove our own named archives beyond the newest keep (never current); return them."""
    others = []
    for path in current.parent.iterdir():
        if path == current or not ARCHIVE_RE.match(path.name):
            continue
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                others.append((st.st_mtime_ns, path.name, path))
    others.sort(reverse=True)
    removed = [path for _mtime, _name, path in others[max(0, keep - 1) :]]
    for path in removed:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return removed


# --- create --------------------------------------------------------------------------------


def create_backup(
    home: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    *,
    keep: int | None = 3,
    all_profiles: bool = False,
) -> BackupResult:
    """Archive the profile home (or the root with every profile) into a zip with a manifest."""
    started = time.monotonic()
    home = Path(home).expanduser().absolute()
    if not home.is_dir():
        raise BackupError(f"No Hermes home at {home}")
    if keep is not None and keep < 1:
        raise BackupError(f"keep must be at least 1 (got {keep})", hint="Pass --keep 1 or more.")
    base = _backup_root(home, all_profiles)
    archive = _output_path(home, Path(output).expanduser().absolute() if output else None)
    archive.parent.mkdir(parents=True, exist_ok=True)
    created = datetime.now(UTC).isoformat(timespec="seconds")
    result = BackupResult(archive=archive, base=base, created_at=created)
    partial = archive.with_name(f".{archive.name}.{os.getpid()}.partial")
    work = Path(tempfile.mkdtemp(prefix=".hermes-backup-", dir=archive.parent))
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with (
            os.fdopen(fd, "wb") as raw,
            zipfile.ZipFile(raw, "w", allowZip64=True) as zf,
            ThreadPoolExecutor(max_workers=1) as hasher,
        ):
            skip = {archive, partial}
            for path, name in _walk(base, skip_profiles=not all_profiles, skip=skip):
                mode = os.stat(path).st_mode
                if _is_sqlite_name(name):
                    snap = work / f"{len(result.members)}.db"
                    try:
                        _sqlite_snapshot(path, snap)
                    except sqlite3.DatabaseError as exc:
                        result.warnings.append(f"{name}: not a readable SQLite database ({exc})")
                        result.skipped.append(name)
                        continue
                    result.databases[name] = _describe_db(snap)
                    size, digest = _add_file(zf, snap, name, mode, hasher)
                    snap.unlink()
                    kind = "sqlite"
                else:
                    try:
                        size, digest = _add_file(zf, path, name, mode, hasher)
                    except OSError as exc:
                        result.warnings.append(f"{name}: could not be read ({exc})")
                        result.skipped.append(name)
                        continue
                    kind = "file"
                result.members.append(Member(name, size, digest, kind))
                result.bytes_in += size
            manifest = {
                "format": MANIFEST_FORMAT,
                "created_at": created,
                "hermes_version": hermes_version(),
                "base": str(base),
                "all_profiles": all_profiles,
                "databases": result.databases,
                "members": {
                    m.name: {"size": m.size, "sha256": m.sha256, "kind": m.kind}
                    for m in result.members
                },
            }
            info = zipfile.ZipInfo(MANIFEST, date_time=time.localtime()[:6])
            info.external_attr = (stat.S_IFREG | 0o600) << 16
            zf.writestr(info, json.dumps(manifest, indent=2, ensure_ascii=False))
            raw.flush()
            os.fsync(raw.fileno())  # the rename below must not publish an archive still in flight
        os.replace(partial, archive)
        os.chmod(archive, 0o600)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.archive_bytes = os.stat(archive).st_size
    if keep is not None and ARCHIVE_RE.match(archive.name):
        result.removed = _rotate(archive, keep)
    result.duration_s = time.monotonic() - started
    return result


# --- verify --------------------------------------------------------------------------------


def _safe_member_name(info: zipfile.ZipInfo, max_bytes: int) -> str | None:
    """Return why a member is unsafe to extract, or None when it is fine."""
    name = info.filename
    if not name or "\0" in name:
        return "empty or NUL in the name"
    if "\\" in name:
        return "backslash in the name"
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    parts = PurePosixPath(name).parts
    if any(p in ("..", ".") for p in parts) or "//" in name:
        return "'..' or '.' component"
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "symbolic link"
    kind = stat.S_IFMT(mode)
    if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):  # 0: a zip tool that records no type
        return "not a regular file"
    if info.file_size > max_bytes:
        return f"larger than the {max_bytes}-byte member limit"
    return None


def _check_members(zf: zipfile.ZipFile, max_bytes: int) -> list[zipfile.ZipInfo]:
    """Validate every member before anything is written; return the file members."""
    seen: set[str] = set()
    problems = []
    files = []
    for info in zf.infolist():
        why = _safe_member_name(info, max_bytes)
        key = info.filename.rstrip("/")
        if why is None and key in seen:
            why = "duplicate name"
        seen.add(key)
        if why is not None:
            problems.append(f"{info.filename!r}: {why}")
        elif not info.is_dir():
            files.append(info)
    if problems:
        raise UnsafeArchiveError("Refusing the archive: " + "; ".join(problems[:10]))
    return files


def _check_space(home: Path, files: list[zipfile.ZipInfo]) -> None:
    """Refuse an archive whose members would not fit on the disk (staging needs them all)."""
    declared = sum(i.file_size for i in files)
    free = shutil.disk_usage(home).free
    if declared > free:
        raise UnsafeArchiveError(
            f"Refusing the archive: its members declare {declared} bytes but only {free} bytes "
            f"are free under {home}"
        )


def _read_manifest(zf: zipfile.ZipFile) -> dict[str, Any]:
    """Read and sanity-check the archive's manifest.json."""
    try:
        data = json.loads(zf.read(MANIFEST))
    except KeyError:
        raise BackupError("The archive has no manifest.json (not a hermes backup)") from None
    except (ValueError, zipfile.BadZipFile) as exc:
        raise BackupError(f"The archive's manifest is unreadable: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("members"), dict):
        raise BackupError("The archive's manifest is not a hermes backup manifest")
    return data


def _extract(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path) -> tuple[int, str]:
    """Write one member to dest (0600); return (size, sha256) of the bytes read."""
    digest = hashlib.sha256()
    size = 0
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out, zf.open(info) as src:
        while chunk := src.read(COPY_CHUNK):
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
            if size > info.file_size:
                raise UnsafeArchiveError(f"{info.filename!r} is larger than it claims")
    return size, digest.hexdigest()


def _integrity(path: Path) -> str:
    """Run PRAGMA integrity_check on an extracted database; 'ok' or the problems."""
    conn = sqlite3.connect(path)
    try:
        rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
        return "ok" if rows == ["ok"] else "; ".join(rows[:5])
    except sqlite3.DatabaseError as exc:
        return f"unreadable: {exc}"
    finally:
        conn.close()


def _staged_check(
    zf: zipfile.ZipFile, files: list[zipfile.ZipInfo], manifest: dict[str, Any], stage: Path
) -> tuple[list[str], dict[str, str], dict[str, Path]]:
    """Extract members into stage and check them against the manifest."""
    problems: list[str] = []
    integrity: dict[str, str] = {}
    staged: dict[str, Path] = {}
    listed = manifest["members"]
    names = {i.filename for i in files} - {MANIFEST}
    for missing in sorted(set(listed) - names):
        problems.append(f"{missing}: listed in the manifest but missing from the archive")
    for extra in sorted(names - set(listed)):
        problems.append(f"{extra}: in the archive but not in the manifest")
    for n, info in enumerate(files):
        if info.filename == MANIFEST or info.filename not in listed:
            continue
        entry = listed[info.filename]
        dest = stage / f"{n}.member"
        try:
            size, digest = _extract(zf, info, dest)
        except (zipfile.BadZipFile, OSError) as exc:
            problems.append(f"{info.filename}: cannot be read ({exc})")
            continue
        if size != entry.get("size") or digest != entry.get("sha256"):
            problems.append(f"{info.filename}: size or sha256 does not match the manifest")
            continue
        staged[info.filename] = dest
        if entry.get("kind") == "sqlite":
            integrity[info.filename] = _integrity(dest)
            if integrity[info.filename] != "ok":
                problems.append(f"{info.filename}: integrity_check: {integrity[info.filename]}")
    return problems, integrity, staged


def verify_backup(archive: str | os.PathLike[str]) -> VerifyResult:
    """Re-check every member's hash against the manifest and open each database."""
    archive = Path(archive).expanduser().absolute()
    result = VerifyResult(archive)
    stage = Path(tempfile.mkdtemp(prefix=".hermes-verify-"))
    try:
        with zipfile.ZipFile(archive) as zf:
            files = _check_members(zf, MAX_MEMBER_BYTES)
            manifest = _read_manifest(zf)
            problems, integrity, staged = _staged_check(zf, files, manifest, stage)
        result.problems = problems
        result.databases = integrity
        result.members_checked = len(staged)
    except (zipfile.BadZipFile, OSError) as exc:
        result.problems.append(f"not a readable zip archive: {exc}")
    except UnsafeArchiveError as exc:
        result.problems.append(str(exc))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return result


# --- restore -------------------------------------------------------------------------------


def _store_user_pids(db_paths: list[Path]) -> str:
    """Name the other processes that hold or have open any of these databases."""
    from hermes_state.lockowners import lock_holders

    names = []
    for db in db_paths:
        if not db.exists():
            continue
        text = lock_holders(db).describe_other_processes()
        if text:
            names.append(f"{db.name}: {text}")
    return "; ".join(names)


def _counts(path: Path) -> tuple[int, int] | None:
    """Return (sessions, messages) of a store, or None when it cannot be read."""
    if not path.exists():
        return None
    try:
        conn = sqlite3.connect(read_only_uri(path), uri=True, timeout=READ_TIMEOUT_S)
    except sqlite3.Error:
        return None
    try:
        return (
            conn.execute("SELECT count(*) FROM sessions").fetchone()[0],
            conn.execute("SELECT count(*) FROM messages").fetchone()[0],
        )
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def _safe_destination(home: Path, name: str) -> Path:
    """Return home/name, refusing a path whose parents are symlinks or leave home."""
    dest = home / name
    parent = home
    for part in PurePosixPath(name).parts[:-1]:
        parent = parent / part
        if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
            raise UnsafeArchiveError(f"{name}: {parent} is a symlink or not a directory")
    if not dest.resolve().is_relative_to(home.resolve()):
        raise UnsafeArchiveError(f"{name}: resolves outside {home}")
    return dest


def _move_aside(dest: Path, why: str) -> Path:
    """Rename a database that cannot take the restore (and its sidecars) out of the way."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    aside = dest.with_name(f"{dest.name}.{why}-{stamp}-{os.getpid()}.bak")
    os.replace(dest, aside)
    for suffix in SIDECAR_SUFFIXES:
        side = Path(str(dest) + suffix)
        if side.exists():
            os.replace(side, Path(str(aside) + suffix))
    return aside


def _backup_into(staged: Path, dest: Path) -> None:
    """Copy a staged database into dest through the SQLite backup API."""
    src = sqlite3.connect(staged)
    try:
        live = sqlite3.connect(dest, timeout=READ_TIMEOUT_S)
        try:
            src.backup(live)
        finally:
            live.close()
    finally:
        src.close()


def _restore_db(staged: Path, dest: Path) -> str | None:
    """Write a staged database into place through the backup API (same inode when it exists).

    Returns a warning when the file in place was not a database and had to be moved aside.
    """
    guard.check_store_path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    warning = None
    if dest.exists():
        try:
            _backup_into(staged, dest)
        except sqlite3.OperationalError as exc:
            if is_lock_error(exc):
                raise StoreBusyError(
                    f"{dest.name} stayed locked during the restore: {exc}"
                ) from exc
            raise
        except sqlite3.DatabaseError as exc:
            if not is_corruption_error(exc):
                raise
            aside = _move_aside(dest, "unrestorable")
            warning = f"{dest.name} was not a readable database ({exc}); moved aside to {aside}"
    if not dest.exists():
        # A stale WAL without its database would be replayed onto the new file: move it aside.
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        for suffix in SIDECAR_SUFFIXES:
            side = Path(str(dest) + suffix)
            if side.exists():
                os.replace(side, side.with_name(f"{side.name}.stale-{stamp}"))
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.close(fd)  # brand new and empty: no lock of ours can be on it yet
        _backup_into(staged, dest)
    secure_store_files(dest)
    return warning


def _restore_file(staged: Path, dest: Path, mode: int) -> None:
    """Put a plain file in place atomically (temp file in the same directory, then rename)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.restore")
    shutil.copyfile(staged, tmp)
    os.chmod(tmp, mode)
    os.replace(tmp, dest)


def restore_backup(
    archive: str | os.PathLike[str],
    home: str | os.PathLike[str],
    *,
    force: bool = False,
    max_member_bytes: int = MAX_MEMBER_BYTES,
) -> RestoreResult:
    """Restore an archive into home: every database (ledger included) and every file."""
    archive = Path(archive).expanduser().absolute()
    home = Path(home).expanduser().absolute()
    result = RestoreResult(archive, home, forced=force)
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise BackupError(f"{archive} is not a readable zip archive: {exc}") from exc
    with zf:
        # Every member is judged before the first byte is written anywhere.
        files = _check_members(zf, max_member_bytes)
        manifest = _read_manifest(zf)
        destinations = {
            i.filename: _safe_destination(home, i.filename) for i in files if i.filename != MANIFEST
        }
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in files}
        home.mkdir(parents=True, exist_ok=True)
        _check_space(home, files)
        stage = Path(tempfile.mkdtemp(prefix=".hermes-restore-", dir=home))
        try:
            problems, _integrity, staged = _staged_check(zf, files, manifest, stage)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
    try:
        if problems:
            raise BackupError("The archive failed verification: " + "; ".join(problems[:10]))
        kinds = {name: manifest["members"][name].get("kind") for name in staged}
        db_names = [n for n in staged if kinds[n] == "sqlite"]
        holders = _store_user_pids([destinations[n] for n in db_names])
        if holders and not force:
            raise StoreBusyError(f"Another process has the store open: {holders}")
        result.holders = holders
        for name in db_names:
            dest = destinations[name]
            before = _counts(dest)
            moved = _restore_db(staged[name], dest)
            if moved:
                result.warnings.append(moved)
            after = _counts(dest)
            if before and after and (after[0] < before[0] or after[1] < before[1]):
                result.warnings.append(
                    f"{name}: the restored store has fewer sessions/messages "
                    f"({after[0]}/{after[1]}) than the one it replaced ({before[0]}/{before[1]})"
                )
            result.databases.append(name)
        for name, path in staged.items():
            if kinds[name] == "sqlite":
                continue
            dest = destinations[name]
            if dest.name in RUNTIME_FILES and dest.exists():
                result.kept.append(name)
                continue
            private = dest.name in PRIVATE_FILES
            mode = 0o600 if private else (modes.get(name) or 0o600) & 0o755
            _restore_file(path, dest, mode)
            result.files.append(name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return result
