"""Checking an archive before anything of it is trusted: member names, hashes and databases.

verify re-checks an archive whole; restore stages its members with the same checks before it
puts anything in place. Every member is validated before one is written, and every database
is opened and checked for what its name says it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import stat
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from hermes_state.backups.archive_format import (
    COPY_CHUNK,
    MANIFEST,
    MAX_MANIFEST_BYTES,
    MAX_MEMBER_BYTES,
    MAX_RATIO,
    RATIO_FLOOR_BYTES,
    VERIFY_WORK_PREFIX,
    WORK_DIR_PREFIXES,
    BackupError,
    UnsafeArchiveError,
    is_sidecar_name,
    is_sqlite_name,
    is_store_name,
    is_vault_name,
    profile_store_of,
    session_ids_in,
    session_set_entry,
)
from hermes_state.store import layout, releases, schema, store_objects
from hermes_state.store.diagnosis import integrity_lines
from hermes_state.store.home import STORE_FILE
from hermes_state.store.sql import SQLITE_MAGIC
from hermes_state.store.workdirs import make_work_dir, remove_stale_work_dirs


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
