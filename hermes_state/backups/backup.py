"""Backup archives of a profile home: consistent SQLite snapshots, a manifest, verify.

Every SQLite database is copied with the online backup API from a read-only connection in one
step, so the snapshot is one consistent read transaction even while a gateway writes; the live
-wal/-shm/-journal files are never archived. A store that cannot be read in full fails the
backup; any other file that cannot be read makes it incomplete (and older archives are kept).
Archive names carry the profile, and rotation only ever removes archives this tool made of the
same home. The checks of an archive's members that verify and restore share live here too
(restore itself is in ``hermes_state.backups.restore``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
import stat
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from hermes_state.store import layout, releases, schema, store_objects
from hermes_state.store.connection import read_only_uri, roll_back_own_journal
from hermes_state.store.diagnosis import integrity_lines
from hermes_state.store.errors import HermesStateError, OutputDirectoryError, StoreLockedError
from hermes_state.store.home import STORE_FILE, make_output_dir, profile_name_of
from hermes_state.store.patience import NO_WAITING, Waiting
from hermes_state.store.snapshot import sqlite_snapshot
from hermes_state.store.sql import SIDECAR_SUFFIXES, SQLITE_MAGIC, quote
from hermes_state.store.store_file import access_error, resolve_store_path
from hermes_state.store.workdirs import make_work_dir, remove_stale_work_dirs

MANIFEST = "manifest.json"
# Archives this tool names: hermes-backup-[<profile>-]<YYYYmmdd-HHMMSS>[-N].zip (older releases
# wrote no profile). Rotation trusts the manifest, not the name: see _same_home.
ARCHIVE_RE = re.compile(r"^hermes-backup-(?:[a-z0-9][a-z0-9_-]*-)?\d{8}-\d{6}(?:-\d+)?\.zip$")
ALL_PROFILES_LABEL = "all-profiles"
BACKUP_WORK_PREFIX = ".hermes-backup-"
RESTORE_WORK_PREFIX = ".hermes-restore-"
VERIFY_WORK_PREFIX = ".hermes-verify-"
WORK_DIR_PREFIXES = (BACKUP_WORK_PREFIX, RESTORE_WORK_PREFIX, VERIFY_WORK_PREFIX)
PRE_RESTORE_MARK = ".pre-restore-"  # state.db.pre-restore-<stamp>: what a restore replaced
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
REPLICATION_DIR_RE = re.compile(r"\..+-litestream\Z|\.hermes-replica-")
SKIP_DIRS = frozenset({"__pycache__", ".cache", "backups"})
SKIP_SUFFIXES = (".lock", ".pyc", ".pyo", ".partial")
# Runtime files of a running gateway: never archived, never overwritten by a restore.
RUNTIME_FILES = frozenset({"gateway.pid", "cron.pid", "gateway_state.json", "processes.json"})
PRIVATE_FILES = frozenset({".env", "auth.json", "vault.key", "vault.json.enc"})
MAX_MEMBER_BYTES = 64 * 2**30
MAX_MANIFEST_BYTES = 16 * 2**20
# Deflate reaches ~1000:1 on zeros; real files (SQLite pages, text) stay far below this.
MAX_RATIO = 200
COMPRESS_LEVEL = 1  # --compress: zlib's fastest level (most of deflate's gain on SQLite pages)
RATIO_FLOOR_BYTES = 1 << 20  # smaller members are not worth a ratio check
COPY_CHUNK = 256 << 10
MANIFEST_FORMAT = 2
# The vault (hermes_state.vault.vault): <home>/vault/<YYYY>.db per profile, and the half-made store
# a
# killed move leaves (.<YYYY>.db.new-<pid>, never a store anyone reads, never archived).
VAULT_DIR = "vault"
VAULT_MEMBER_RE = re.compile(r"^(?:profiles/[^/]+/)?vault/\d{4}\.db$")
VAULT_TEMP_RE = re.compile(r"^\.\d{4}\.db\.new-\d+$")
# How long a backup waits, without --wait, for another process's lock on a store and for a
# running `hermes vault move` or `return` (as long as an edit waits for the store).
PATIENCE_S = 20.0
NOT_WRITTEN = "; no archive was written"
LOCKED_HINT = (
    "Another process holds it (see who with: hermes db lockowners). Retry when it is done, or "
    "wait longer with --wait SECONDS; nothing was written and no older archive was removed."
)
LOST_SESSIONS_HINT = (
    "The archive does not hold every session its manifest lists (made while sessions moved "
    "between the store and the vault, or changed since): restore another archive (see "
    "`hermes backup list`). Nothing was changed."
)


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


# --- helpers -------------------------------------------------------------------------------


def hermes_version() -> str:
    """Return this package's version."""
    try:
        from importlib.metadata import version

        return version("hermes-state")
    except Exception:  # not installed (running from a source tree)
        import hermes_state

        return str(getattr(hermes_state, "__version__", "unknown"))


def is_sqlite_name(name: str) -> bool:
    """Tell whether a file name is one of an SQLite database."""
    return name.endswith(SQLITE_SUFFIXES)


def is_store_name(name: str) -> bool:
    """Tell whether an archive member or relative path is a Hermes store (a state.db)."""
    return PurePosixPath(name).name == STORE_FILE


def is_vault_name(name: str) -> bool:
    """Tell whether an archive member or relative path is a vault store (vault/<YYYY>.db)."""
    return VAULT_MEMBER_RE.match(name) is not None


def is_sidecar_name(name: str) -> bool:
    """Tell whether a name is an SQLite journal, WAL or shared-memory file."""
    return name.endswith(SIDECAR_SUFFIXES)


def is_pre_restore_copy(name: str) -> bool:
    """Tell whether a file is a copy of a store kept by a restore (state.db.pre-restore-…)."""
    return PRE_RESTORE_MARK in name


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


def profile_store_of(name: str) -> str:
    """Return the archive name of the live store whose profile a store member belongs to
    (vault/2025.db -> state.db, profiles/x/vault/2025.db -> profiles/x/state.db)."""
    if is_vault_name(name):
        return name[: name.rindex(VAULT_DIR + "/")] + STORE_FILE
    return name


def session_ids_in(path: Path) -> set[str]:
    """Return the session ids of a snapshot or staged store (not a live file: read immutable)."""
    conn = sqlite3.connect(read_only_uri(path) + "&immutable=1", uri=True)
    try:
        return {str(r[0]) for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()


def session_set_entry(ids: set[str]) -> dict[str, Any]:
    """Return the manifest's record of a profile's sessions: how many, and a digest of the ids."""
    digest = hashlib.sha256(json.dumps(sorted(ids), ensure_ascii=False).encode()).hexdigest()
    return {"count": len(ids), "sha256": digest}


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


def archive_label(home: Path, all_profiles: bool) -> str:
    """Return the name part that says whose archive it is: the profile, or all-profiles."""
    return ALL_PROFILES_LABEL if all_profiles else profile_name_of(home)


def backup_destination(
    home: Path, output: str | os.PathLike[str] | None, *, all_profiles: bool = False
) -> Path:
    """Return where a new archive goes (nothing is created).

    No output: a new name in <home>/backups. An existing directory, or a path written with a
    trailing '/': a new name in it. Anything else is the archive's own file name ('.zip' is
    added when it has no such suffix); an existing file is never replaced. Of a directory, only
    the last component may be missing (``make_output_dir`` creates it); an archive's own name
    needs its directory to exist. Anything more missing is a wrong path or a drive that is not
    mounted, refused here.
    """
    label = archive_label(home, all_profiles)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    if output is None:
        folder = home / "backups"
    else:
        text = os.fspath(output)
        if not text:
            raise BackupError("The output path is empty", hint="Give a directory or a .zip name.")
        target = Path(os.path.abspath(os.path.expanduser(text)))
        if text.endswith(("/", os.sep)) or target.is_dir():
            if target.exists() and not target.is_dir():
                raise BackupError(
                    f"{target} is a file, not a directory",
                    hint="Remove the trailing '/' to write the archive under that name, or "
                    "pick another directory.",
                )
            folder = target
        else:
            if target.suffix.lower() != ".zip":
                target = target.with_name(target.name + ".zip")
            if target.exists() or target.is_symlink():
                raise BackupError(
                    f"Refusing to overwrite existing file {target}",
                    hint="Remove it, pick another name, or give a directory.",
                )
            _check_parent(target.parent, may_create=False)
            return target
    _check_parent(folder)
    candidate = folder / f"hermes-backup-{label}-{stamp}.zip"
    n = 1
    while candidate.exists():
        candidate = folder / f"hermes-backup-{label}-{stamp}-{n}.zip"
        n += 1
    return candidate


# What releases before the locked scratch directories left when killed: the archive being
# written, named after it and the writer's pid.
_OLD_PARTIAL_RE = re.compile(r"^\.hermes-backup-[^/]*\.zip\.(\d+)\.partial$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def remove_old_partials(folder: Path) -> list[Path]:
    """Delete half-written archives older releases' killed backups left in folder."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            match = _OLD_PARTIAL_RE.match(entry.name)
            if match and entry.is_file() and not _pid_alive(int(match.group(1))):
                with contextlib.suppress(OSError):
                    entry.unlink()
                    removed.append(entry)
    return removed


def _check_parent(folder: Path, *, may_create: bool = True) -> None:
    """Refuse an output folder under a file, or missing beyond its last component."""
    probe = folder
    while not probe.exists():
        if probe.is_symlink():
            raise BackupError(f"{probe} is a symbolic link to nothing", hint="Pick another path.")
        probe = probe.parent
    if not probe.is_dir():
        raise BackupError(
            f"Cannot write under {folder}: {probe} is a file, not a directory",
            hint="Pick a path whose parents are directories.",
        )
    if probe != folder and (probe != folder.parent or not may_create):
        # Only the last directory is made: the rest missing means a drive not mounted, or a typo.
        missing = folder.parent if may_create else folder
        raise OutputDirectoryError(
            f"{missing} does not exist; no archive was written and nothing was created"
        )


def _read_manifest_of(path: Path) -> dict[str, Any] | None:
    """Return an archive's manifest, or None when it is not a readable hermes archive."""
    try:
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(MANIFEST)
            if info.file_size > MAX_MANIFEST_BYTES:
                return None
            data = json.loads(zf.read(info))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _same_home(manifest: dict[str, Any] | None, base: Path, all_profiles: bool) -> bool:
    """Tell whether an archive's manifest says it was made of this home, the same way."""
    if manifest is None or not isinstance(manifest.get("base"), str):
        return False
    if bool(manifest.get("all_profiles")) != all_profiles:
        return False
    return bool(os.path.realpath(manifest["base"]) == os.path.realpath(base))


def archives_of(folder: Path, base: Path, *, all_profiles: bool = False) -> list[Path]:
    """Return this tool's archives of the home base in folder, newest first (by mtime)."""
    found = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    for path in entries:
        if not ARCHIVE_RE.match(path.name):
            continue
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and _same_home(_read_manifest_of(path), base, all_profiles):
                found.append((st.st_mtime_ns, path.name, path))
    found.sort(reverse=True)
    return [path for _mtime, _name, path in found]


def _rotate(current: Path, keep: int, base: Path, all_profiles: bool) -> list[Path]:
    """Remove archives of the same home beyond the newest keep (never current); return them."""
    others = [p for p in archives_of(current.parent, base, all_profiles=all_profiles)]
    others = [p for p in others if p != current]
    removed = others[max(0, keep - 1) :]
    for path in removed:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return removed


@dataclass(frozen=True)
class ArchiveInfo:
    """One archive in a backup folder, as its manifest describes it (None where it cannot)."""

    path: Path
    bytes: int
    modified: float  # the file's mtime (epoch seconds)
    created_at: str | None  # the manifest's (ISO 8601, UTC)
    profile: str | None
    all_profiles: bool
    complete: bool | None
    sessions: int | None  # over every store in the archive
    messages: int | None
    hermes_version: str | None
    readable: bool  # a zip with a hermes manifest
    vault_stores: int = 0  # vault stores in the archive, and what they hold
    vault_sessions: int | None = None
    vault_messages: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {**asdict(self), "path": str(self.path)}


def _store_counts(
    manifest: dict[str, Any], *, vault: bool = False
) -> tuple[int | None, int | None]:
    """Sum the sessions and messages the manifest counted in every store (or every vault
    store) of the archive."""
    sessions = messages = None
    databases = manifest.get("databases")
    wanted = is_vault_name if vault else is_store_name
    for name, info in databases.items() if isinstance(databases, dict) else ():
        tables = info.get("tables") if isinstance(info, dict) else None
        if not wanted(name) or not isinstance(tables, dict):
            continue
        s, m = tables.get("sessions"), tables.get("messages")
        if isinstance(s, int) and isinstance(m, int):
            sessions, messages = (sessions or 0) + s, (messages or 0) + m
    return sessions, messages


def _created(manifest: dict[str, Any]) -> tuple[str | None, float | None]:
    """Return the manifest's creation time as written and as epoch seconds (None: unusable)."""
    text = manifest.get("created_at")
    if not isinstance(text, str):
        return None, None
    try:
        return text, datetime.fromisoformat(text).timestamp()
    except ValueError:
        return text, None


def list_archives(folder: Path) -> list[ArchiveInfo]:
    """Describe the archives in a backup folder, newest first (only their manifests are read)."""
    # This tool's archives by name, and any other zip that carries a hermes manifest.
    found: list[tuple[float, float, str, ArchiveInfo]] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    for path in entries:
        if not path.name.endswith(".zip"):
            continue
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        manifest = _read_manifest_of(path)
        if manifest is None and not ARCHIVE_RE.match(path.name):
            continue  # some other zip
        data = manifest or {}
        text, when = _created(data)
        sessions, messages = _store_counts(data)
        vault_sessions, vault_messages = _store_counts(data, vault=True)
        members = data.get("members")
        complete = data.get("complete")
        info = ArchiveInfo(
            path=path,
            bytes=st.st_size,
            modified=st.st_mtime,
            created_at=text,
            profile=_text_field(data.get("profile")),
            all_profiles=bool(data.get("all_profiles")),
            complete=complete if isinstance(complete, bool) else None,
            sessions=sessions,
            messages=messages,
            hermes_version=_text_field(data.get("hermes_version")),
            readable=manifest is not None and isinstance(members, dict),
            vault_stores=sum(map(is_vault_name, members)) if isinstance(members, dict) else 0,
            vault_sessions=vault_sessions,
            vault_messages=vault_messages,
        )
        found.append((when if when is not None else st.st_mtime, st.st_mtime, path.name, info))
    found.sort(key=lambda item: item[:3], reverse=True)
    return [item[3] for item in found]


def _text_field(value: Any) -> str | None:
    """Return a manifest string as it is, when it is printable text (else None)."""
    return value if isinstance(value, str) and value.isprintable() else None


def backups_in(home: Path) -> list[Path]:
    """Return the backups a profile home holds: archives under backups/ and pre-restore copies."""
    found: list[Path] = []
    folder = home / "backups"
    if folder.is_dir() and not folder.is_symlink():
        found += sorted(p for p in folder.iterdir() if p.name.endswith(".zip") and p.is_file())
    if home.is_dir():
        found += sorted(
            p for p in home.iterdir() if is_pre_restore_copy(p.name) and not is_sidecar_name(p.name)
        )
    return found


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
                    snap.unlink()
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
        result.removed = _rotate(archive, keep, base, all_profiles)
    result.duration_s = time.monotonic() - started
    return result


# --- checking an archive's members (verify and restore) ------------------------------------


def _safe_member_name(info: zipfile.ZipInfo, max_bytes: int) -> str | None:
    """Return why a member is unsafe to extract, or None when it is fine."""
    name = info.filename
    if not name or "\0" in name:
        return "empty or NUL in the name"
    if "\\" in name:
        return "backslash in the name"
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in name):
        return "control character in the name"
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    parts = PurePosixPath(name).parts
    if any(p in ("..", ".") for p in parts) or "//" in name:
        return "'..' or '.' component"
    if parts and parts[0].startswith(WORK_DIR_PREFIXES):
        return "a name this tool keeps for its scratch space"
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "symbolic link"
    kind = stat.S_IFMT(mode)
    if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):  # 0: a zip tool that records no type
        return "not a regular file"
    if not info.is_dir() and is_sidecar_name(name):
        return "an SQLite journal/WAL file (replayed over the restored store, it would rewrite it)"
    if info.file_size > max_bytes:
        return f"larger than the {max_bytes}-byte member limit"
    if name == MANIFEST and info.file_size > MAX_MANIFEST_BYTES:
        return f"a manifest larger than {MAX_MANIFEST_BYTES} bytes"
    ratio = info.file_size / max(1, info.compress_size)
    if info.file_size > RATIO_FLOOR_BYTES and ratio > MAX_RATIO:
        return (
            f"expands {ratio:.0f} times ({info.compress_size} bytes to {info.file_size}); "
            f"more than {MAX_RATIO} times is refused"
        )
    return None


def check_members(zf: zipfile.ZipFile, max_bytes: int = MAX_MEMBER_BYTES) -> list[zipfile.ZipInfo]:
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


def read_manifest(zf: zipfile.ZipFile) -> dict[str, Any]:
    """Read and sanity-check the archive's manifest.json."""
    try:
        data = json.loads(zf.read(MANIFEST))
    except KeyError:
        raise BackupError("The archive has no manifest.json (not a hermes backup)") from None
    except (ValueError, RecursionError, zipfile.BadZipFile) as exc:
        raise BackupError(f"The archive's manifest is unreadable: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("members"), dict):
        raise BackupError("The archive's manifest is not a hermes backup manifest")
    if not all(isinstance(v, dict) for v in data["members"].values()):
        raise BackupError("The archive's manifest lists a member without size and sha256")
    return data


def extract_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path) -> tuple[int, str]:
    """Write one member to dest (0600), never past its declared size; return (size, sha256)."""
    digest = hashlib.sha256()
    size = 0
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out, zf.open(info) as src:
        while chunk := src.read(COPY_CHUNK):
            size += len(chunk)
            if size > info.file_size:
                raise UnsafeArchiveError(f"{info.filename!r} is larger than it claims")
            digest.update(chunk)
            out.write(chunk)
    return size, digest.hexdigest()


@dataclass
class DatabaseFacts:
    """What checking one staged database found."""

    problems: list[str] = field(default_factory=list)
    integrity: str = "not checked"
    page_size: int = 0
    wal: bool = False
    sessions: int | None = None
    messages: int | None = None
    layout: str = ""  # Layout.describe() of a store
    legacy: bool = False


def _header(path: Path) -> bytes:
    with open(path, "rb") as fp:
        return fp.read(100)


def _search_index_problems(conn: sqlite3.Connection) -> list[str]:
    """Return what is wrong with a staged store's search indexes (empty: sound)."""
    # A store put in place with a broken index fails the agent's next write.
    from hermes_state.store import cjk, fts

    if fts.indexes(conn).stale:
        return []  # detached by the agent, which rebuilds them at its next start
    return fts.integrity_check(conn) + cjk.integrity_problems(conn)


def check_database(path: Path, *, store: bool) -> DatabaseFacts:
    """Check a staged database: SQLite, intact, and for a store a Hermes schema this code knows,
    with no trigger or view outside the ones known releases define and sound search indexes."""
    facts = DatabaseFacts()
    head = _header(path)
    if head[:16] != SQLITE_MAGIC:
        facts.problems.append("not an SQLite database")
        return facts
    facts.wal = head[18:20] == b"\x02\x02"
    conn = sqlite3.connect(path)
    try:
        facts.page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        # SQLite stops the check at a page it cannot read: that is a finding, not an error.
        rows, stopped = integrity_lines(conn)
        rows = rows[:10] + ([f"stopped: {stopped}"] if stopped else [])
        facts.integrity = "ok" if rows == ["ok"] else "; ".join(rows)
        if facts.integrity != "ok":
            facts.problems.append(f"integrity_check: {facts.integrity}")
            return facts
        if not store:
            return facts
        found = layout.inspect(conn)
        facts.layout = found.describe()
        kind = found.kind
        if kind == "not_hermes":
            tables = sorted(t for t in found.tables if not t.startswith("sqlite_"))[:8]
            facts.problems.append(
                "not a Hermes session store (no sessions/messages schema; tables: "
                + (", ".join(tables) or "none")
                + ")"
            )
            return facts
        if kind == "unknown":
            shown = schema.shown_version(found.version_text)
            near = found.nearest_note()
            facts.problems.append(
                f"{shown}, which no Hermes Agent release this hermes "
                f"knows writes ({releases.known_list()})" + (f"; {near}" if near else "")
            )
            return facts
        facts.legacy = kind == "legacy"
        foreign = store_objects.foreign_objects(conn)
        if foreign:
            facts.problems.append(
                "carries triggers or views no Hermes release defines: " + "; ".join(foreign[:10])
            )
            return facts
        search = _search_index_problems(conn)
        if search:
            facts.problems.append("search indexes: " + "; ".join(search[:5]))
            return facts
        facts.sessions = int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
        facts.messages = int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        facts.problems.append(f"unreadable: {exc}")
    finally:
        conn.close()
    return facts


@dataclass
class Staged:
    """Members extracted into a scratch directory and checked."""

    paths: dict[str, Path] = field(default_factory=dict)
    facts: dict[str, DatabaseFacts] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    sessions_lost: bool = False  # the stores do not hold every session the manifest lists


def member_is_database(name: str) -> bool:
    """Tell whether a member is restored as a database (checked and written through SQLite)."""
    return is_sqlite_name(name)


def stage_members(
    zf: zipfile.ZipFile, files: list[zipfile.ZipInfo], manifest: dict[str, Any], stage: Path
) -> Staged:
    """Extract members into stage and check each against the manifest and for what it is.

    A member's kind comes from its name, whatever the manifest says: every database is opened
    and checked (a store must be a Hermes store), and a manifest that disagrees is refused.
    """
    out = Staged()
    listed = manifest["members"]
    names = {i.filename for i in files} - {MANIFEST}
    for missing in sorted(set(listed) - names):
        out.problems.append(f"{missing}: listed in the manifest but missing from the archive")
    for extra in sorted(names - set(listed)):
        out.problems.append(f"{extra}: in the archive but not in the manifest")
    for n, info in enumerate(files):
        name = info.filename
        if name == MANIFEST or name not in listed:
            continue
        entry = listed[name]
        database = member_is_database(name)
        declared = entry.get("kind")
        if declared != ("sqlite" if database else "file"):
            out.problems.append(
                f"{name}: the manifest calls it {declared!r}, but a member named like this is "
                f"{'a database' if database else 'a plain file'}"
            )
            continue
        dest = stage / f"{n}.member"
        try:
            size, digest = extract_member(zf, info, dest)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            out.problems.append(f"{name}: cannot be read ({exc})")
            continue
        if size != entry.get("size") or digest != entry.get("sha256"):
            out.problems.append(f"{name}: size or sha256 does not match the manifest")
            continue
        out.paths[name] = dest
        if database:
            # A vault store is a store in the live layout: the same checks, the same counts.
            facts = check_database(dest, store=is_store_name(name) or is_vault_name(name))
            out.facts[name] = facts
            out.problems += [f"{name}: {p}" for p in facts.problems]
    if not out.problems:
        lost = session_set_problems(manifest, out)
        out.problems += lost
        out.sessions_lost = bool(lost)
    return out


def session_set_problems(manifest: dict[str, Any], staged: Staged) -> list[str]:
    """Compare each profile's sessions over the staged stores (live and vault) with the set the
    manifest recorded at backup time; return what differs (empty: every one is there).

    Archives of releases before the record carry none: there is nothing to compare with.
    """
    recorded = manifest.get("session_ids")
    if not isinstance(recorded, dict):
        return []
    found: dict[str, set[str]] = {}
    for name, path in staged.paths.items():
        if is_store_name(name) or is_vault_name(name):
            try:
                ids = session_ids_in(path)
            except sqlite3.Error as exc:
                return [f"{name}: its sessions cannot be read ({exc})"]
            found.setdefault(profile_store_of(name), set()).update(ids)
    problems = []
    for key, entry in sorted(recorded.items()):
        ids = found.get(key, set())
        count = entry.get("count") if isinstance(entry, dict) else None
        if isinstance(entry, dict) and session_set_entry(ids) == entry:
            continue
        whose = "" if key == STORE_FILE else f" of {PurePosixPath(key).parent}"
        if isinstance(count, int) and len(ids) < count:
            problems.append(
                f"the stores{whose} (live and vault) hold {len(ids)} of the {count} sessions "
                f"the manifest lists: {count - len(ids)} or more are in no store of the archive"
            )
        else:
            problems.append(
                f"the stores{whose} (live and vault) hold {len(ids)} sessions, not the ones "
                f"the manifest lists ({count!r})"
            )
    return problems


def verify_backup(archive: str | os.PathLike[str]) -> VerifyResult:
    """Re-check every member's hash against the manifest and check each database."""
    archive = Path(archive).expanduser().absolute()
    result = VerifyResult(archive)
    scratch = Path(tempfile.gettempdir())
    remove_stale_work_dirs(scratch, (VERIFY_WORK_PREFIX,))
    with make_work_dir(scratch, VERIFY_WORK_PREFIX) as work:
        try:
            with zipfile.ZipFile(archive) as zf:
                files = check_members(zf)
                manifest = read_manifest(zf)
                staged = stage_members(zf, files, manifest, work.path)
            result.problems = staged.problems
            result.databases = {n: f.integrity for n, f in staged.facts.items()}
            result.members_checked = len(staged.paths)
        except (zipfile.BadZipFile, OSError) as exc:
            result.problems.append(f"not a readable zip archive: {exc}")
        except BackupError as exc:
            result.problems.append(str(exc))
    return result
