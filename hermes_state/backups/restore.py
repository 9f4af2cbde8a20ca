"""Restoring a backup archive into a profile home: checked, summarised, then all or nothing.

What restore trusts: nothing in the archive. Every member is extracted into a private scratch
directory in the home and checked before anything in the home changes: its path (no absolute
paths, no '..', no links or devices, no SQLite journal or WAL files), its size (declared sizes
capped, extraction stopped at the declared size, expansion ratio capped), its sha256 against the
manifest; every database member is opened and must pass integrity_check, whatever the manifest
calls it; a store (state.db) must carry a Hermes schema a known release writes, with no trigger
or view outside the ones those releases define. The space the whole restore needs (scratch
copies, the copy of the replaced store, the journal of the write) is checked first.

A store file instead of an archive (what `hermes sessions recover --to NEW.db` writes, or a
``state.db.pre-restore-*`` copy) goes through the same checks as an archive's store, on a copy
SQLite takes of it, and is installed the same way.

Then ``prepare_restore`` returns a plan (sessions, messages and size of each store before and
after) for the caller to show and confirm; ``apply`` keeps each replaced store as a dated
``state.db.pre-restore-<stamp>`` copy, writes the databases through SQLite's backup API (same
inode, live readers see the change) and the files atomically, and puts everything back as it
was if any step fails.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import sqlite3
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from hermes_state.backups.backup import (
    LOST_SESSIONS_HINT,
    MANIFEST,
    MAX_MEMBER_BYTES,
    PRE_RESTORE_MARK,
    PRIVATE_FILES,
    RESTORE_WORK_PREFIX,
    RUNTIME_FILES,
    BackupError,
    DatabaseFacts,
    Staged,
    UnsafeArchiveError,
    check_database,
    check_members,
    is_store_name,
    is_vault_name,
    member_is_database,
    read_manifest,
    stage_members,
)
from hermes_state.store import guard
from hermes_state.store.connection import is_open_in_process, read_only_uri, roll_back_own_journal
from hermes_state.store.errors import (
    HermesStateError,
    StoreBusyError,
    is_lock_error,
    translate_os_error,
    translate_sqlite_error,
)
from hermes_state.store.home import STORE_FILE, ensure_private_dir
from hermes_state.store.snapshot import sqlite_snapshot
from hermes_state.store.sql import SIDECAR_SUFFIXES, SQLITE_MAGIC, companion, store_files
from hermes_state.store.store_file import (
    refuse_write_protected,
    resolve_store_path,
    secure_store_files,
)
from hermes_state.store.workdirs import WorkDir, make_work_dir, remove_stale_work_dirs

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
class _Current:
    """A database file in the home as it is now."""

    exists: bool
    state: StoreState | None = None
    problem: str | None = None
    page_size: int = 0
    wal: bool = False


def _file_bytes(path: Path) -> int:
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


def _current(dest: Path, store: bool) -> _Current:
    """Read what the database at dest holds now (read-only; an unreadable file is reported)."""
    if not os.path.lexists(dest):
        return _Current(exists=False)
    size = _file_bytes(dest)
    page_size, wal = _header_of(dest)
    uri = read_only_uri(dest)
    if not any(os.path.lexists(str(dest) + s) for s in ("-wal", "-journal")):
        uri += "&immutable=1"  # nothing beyond the main file to read: create no -shm for it
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=READ_TIMEOUT_S)
    except sqlite3.Error as exc:
        return _Current(True, StoreState(None, None, size), f"unreadable: {exc}", page_size, wal)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        sessions = messages = None
        if store:
            with contextlib.suppress(sqlite3.OperationalError):
                sessions = int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
                messages = int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
        return _Current(True, StoreState(sessions, messages, size), None, page_size, wal)
    except sqlite3.Error as exc:
        if is_lock_error(exc):
            raise StoreBusyError(f"{dest.name} stayed locked while reading it: {exc}") from exc
        return _Current(True, StoreState(None, None, size), f"unreadable: {exc}", page_size, wal)
    finally:
        conn.close()


def _destination(home: Path, name: str) -> Path:
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


def _free_bytes(path: Path) -> int:
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
    current: dict[str, _Current],
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
        old = _file_bytes(dests[info.filename]) if os.path.lexists(dests[info.filename]) else 0
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


def _holders(paths: list[Path]) -> str:
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


# --- preparing the staged copies --------------------------------------------------------------


def _align(staged: Path, facts: DatabaseFacts, cur: _Current, work: Path, n: int) -> list[str]:
    """Give a staged database the live store's page size (when it is in WAL mode) and journal
    mode, so writing it in place works and never switches the store's journal mode."""
    notes: list[str] = []
    if not cur.exists or cur.problem is not None:
        return notes
    if cur.wal and cur.page_size and facts.page_size != cur.page_size:
        converted = work / f"{n}.converted"
        conn = sqlite3.connect(staged)
        try:
            conn.execute(f"PRAGMA page_size = {int(cur.page_size)}")
            conn.execute("VACUUM INTO ?", (str(converted),))
        finally:
            conn.close()
        os.replace(converted, staged)
        notes.append(
            f"page size {facts.page_size} in the archive, written as {cur.page_size} to match "
            "the store in place (a WAL store cannot change its page size)"
        )
        facts.page_size = cur.page_size
        facts.wal = False  # VACUUM INTO writes a rollback-journal file
    if facts.wal != cur.wal:
        conn = sqlite3.connect(staged, isolation_level=None)
        try:
            conn.execute(f"PRAGMA journal_mode = {'WAL' if cur.wal else 'DELETE'}").fetchall()
        finally:
            conn.close()
        facts.wal = cur.wal
    return notes


# --- preparing -----------------------------------------------------------------------------


class PreparedRestore:
    """A checked, staged restore: show ``plan``, then ``apply()`` it or ``discard()`` it."""

    def __init__(
        self,
        plan: RestorePlan,
        work: WorkDir,
        staged: Staged,
        dests: dict[str, Path],
        modes: dict[str, int],
        created_home: bool,
    ) -> None:
        self.plan = plan
        self._work = work
        self._staged = staged
        self._dests = dests
        self._modes = modes
        self._created_home = created_home
        self._done = False

    def __enter__(self) -> PreparedRestore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()

    def discard(self) -> None:
        """Remove the scratch copies without changing the home (a no-op after apply)."""
        if self._done:
            return
        self._done = True
        self._work.remove()
        if self._created_home:
            with contextlib.suppress(OSError):
                self.plan.home.rmdir()  # only when still empty

    def apply(self) -> RestoreResult:
        """Write the staged databases and files into the home; undo everything on failure."""
        if self._done:
            raise BackupError("This restore was already applied or discarded")
        plan = self.plan
        started = time.monotonic()
        try:
            if not plan.forced:
                holders = _holders([d.dest for d in plan.databases])
                if holders:
                    raise StoreBusyError(f"Another process has the store open: {holders}")
            with _vault_locks(plan):
                result = _apply(plan, self._staged, self._dests, self._modes, self._work.path)
        finally:
            self._done = True
            self._work.remove()
        result.duration_s = time.monotonic() - started
        return result


@contextlib.contextmanager
def _vault_locks(plan: RestorePlan) -> Iterator[None]:
    """Hold the vault lock of every profile whose vault stores the restore writes, so no
    `hermes vault move` or `return` runs between them (refused when one is running)."""
    from hermes_state.vault.vault import vault_lock

    homes = sorted({c.dest.parent.parent for c in plan.databases if is_vault_name(c.name)})
    with contextlib.ExitStack() as stack:
        for home in homes:
            stack.enter_context(vault_lock(home))
        yield


def _require_space(home: Path, need: int, what: str) -> None:
    """Refuse (NotEnoughSpaceError) when fewer than need bytes are free under home; what says
    what is refused and what the space is for."""
    free = _free_bytes(home)
    if need > free:
        raise NotEnoughSpaceError(f"Refusing {what} but only {free} bytes are free under {home}")


def _open_work(home: Path) -> tuple[bool, list[Path], WorkDir]:
    """Make home (private) if needed, reap killed restores' scratch, open a new work dir.

    Returns whether home was created, the scratch reaped, and the work dir.
    """
    created_home = not home.exists()
    ensure_private_dir(home)
    cleaned = remove_stale_work_dirs(home, (RESTORE_WORK_PREFIX,))
    return created_home, cleaned, make_work_dir(home, RESTORE_WORK_PREFIX)


def prepare_restore(
    archive: str | os.PathLike[str],
    home: str | os.PathLike[str],
    *,
    force: bool = False,
    max_member_bytes: int = MAX_MEMBER_BYTES,
    vault: bool = True,
) -> PreparedRestore:
    """Check and stage an archive or a store file for a restore into home (nothing changes).

    vault: restore the archive's vault stores too (as the store is: checked, the replaced ones
    kept as vault/<YYYY>.db.pre-restore-<stamp>); without it they are left out and the home's
    vault stays as it is.
    """
    started = time.monotonic()
    archive = Path(archive).expanduser().absolute()
    home = Path(home).expanduser().absolute()
    if not archive.name.lower().endswith(".zip") and is_database_file(archive):
        prepared = _prepare_database(archive, home, force=force)
    else:
        prepared = _prepare_archive(
            archive, home, force=force, max_member_bytes=max_member_bytes, vault=vault
        )
    prepared.plan.check_s = time.monotonic() - started
    return prepared


def _prepare_archive(
    archive: Path, home: Path, *, force: bool, max_member_bytes: int, vault: bool = True
) -> PreparedRestore:
    """Check and stage a backup archive (every member; the vault's only with vault) for a
    restore into home."""
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise BackupError(
            f"{archive} is neither a readable backup archive (zip) nor a store file (SQLite): "
            f"{exc}",
            hint="Give an archive `hermes backup` wrote (see `hermes backup list`) or a store "
            "file such as the copy `hermes sessions recover --to NEW.db` wrote.",
        ) from exc
    with zf:
        # Every member is judged before the first byte is written anywhere.
        files = check_members(zf, max_member_bytes)
        manifest = read_manifest(zf)
        left_out = [] if vault else sorted(i.filename for i in files if is_vault_name(i.filename))
        if left_out:
            files = [i for i in files if not is_vault_name(i.filename)]
            listed = {k: v for k, v in manifest["members"].items() if not is_vault_name(k)}
            # The sessions recorded span the vault stores left out: nothing to compare.
            manifest = {**manifest, "members": listed, "session_ids": None}
        members = [i for i in files if i.filename != MANIFEST]
        dests = {i.filename: _destination(home, i.filename) for i in members}
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in members}
        db_dests = [dests[i.filename] for i in members if member_is_database(i.filename)]
        for dest in db_dests:
            guard.check_store_path(dest)
            refuse_write_protected(dest)
        holders = _holders(db_dests)
        if holders and not force:
            raise StoreBusyError(f"Another process has the store open: {holders}")
        for info in members:
            if is_vault_name(info.filename) and os.path.lexists(dests[info.filename]):
                # A killed move's journal in a vault store (ours): the plan reads it as it was.
                roll_back_own_journal(dests[info.filename])
        current = {
            i.filename: _current(dests[i.filename], _is_store(i.filename))
            for i in members
            if member_is_database(i.filename)
        }
        need = space_needed(zf, files, dests, current)
        _require_space(
            home,
            need,
            f"the archive: restoring it needs {need} bytes (scratch copies of its members, a "
            "copy of each replaced store and the write's journal)",
        )
        created_home, cleaned, work = _open_work(home)
        try:
            staged = stage_members(zf, files, manifest, work.path)
            if staged.problems:
                raise BackupError(
                    "The archive failed verification: " + "; ".join(staged.problems[:10]),
                    hint=LOST_SESSIONS_HINT if staged.sessions_lost else None,
                )
            plan = RestorePlan(
                archive,
                home,
                created_at=_text(manifest.get("created_at")),
                profile=_text(manifest.get("profile")),
                forced=force,
                space_needed=need,
                cleaned=cleaned,
                vault_left_out=left_out,
            )
            for n, info in enumerate(members):
                name = info.filename
                dest = dests[name]
                if member_is_database(name):
                    facts = staged.facts[name]
                    cur = current[name]
                    notes = _align(staged.paths[name], facts, cur, work.path, n)
                    after = StoreState(
                        facts.sessions, facts.messages, os.stat(staged.paths[name]).st_size
                    )
                    if facts.legacy:
                        notes.append(LEGACY_NOTE)
                    plan.databases.append(
                        DatabaseChange(
                            name,
                            dest,
                            _is_store(name),
                            cur.state if cur.exists else None,
                            after,
                            cur.problem,
                            notes,
                        )
                    )
                elif dest.name in RUNTIME_FILES and os.path.lexists(dest):
                    plan.kept.append(name)
                elif os.path.lexists(dest):
                    plan.files_replaced.append(name)
                else:
                    plan.files_new.append(name)
            plan.holders = holders
        except BaseException:
            work.remove()
            if created_home:
                with contextlib.suppress(OSError):
                    home.rmdir()
            raise
    return PreparedRestore(plan, work, staged, dests, modes, created_home)


def _is_store(name: str) -> bool:
    """Tell whether a member is a Hermes store: the profile's state.db or a vault store."""
    return is_store_name(name) or is_vault_name(name)


LEGACY_NOTE = (
    "in the layout older versions of hermes wrote: run `hermes db migrate` after the restore "
    "so the agent can write to it"
)


def is_database_file(path: Path) -> bool:
    """Tell, through SQLite only, whether path is an SQLite database (it may be a live store)."""
    if not path.is_file():
        return False
    try:
        conn = sqlite3.connect(read_only_uri(path) + "&immutable=1", uri=True)
    except sqlite3.Error:
        return False
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return True
    except sqlite3.DatabaseError as exc:
        return "not a database" not in str(exc).lower()  # a damaged one is still a database
    finally:
        conn.close()


def _recovery_notes(source: Path) -> list[str]:
    """Say what the report `hermes sessions recover` left beside the file tells of its losses."""
    report = source.with_name(source.name + ".recovery.json")
    try:
        if os.stat(report).st_size > MAX_REPORT_BYTES:
            return []
        data = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or not data.get("partial"):
        return []
    ranges = data.get("skipped_ranges")
    lost = data.get("not_copied")
    what = []
    if isinstance(ranges, list) and ranges:
        what.append(f"{len(ranges)} row range(s) could not be read")
    if isinstance(lost, dict) and lost:
        what.append(f"tables not copied: {', '.join(map(str, lost))}")
    accepted = "accepted with --allow-partial" if data.get("accepted") else "not accepted"
    return [
        f"the recovery that wrote it was partial ({'; '.join(what) or 'see its report'}; "
        f"{accepted}); report: {report}"
    ]


def _prepare_database(source: Path, home: Path, *, force: bool) -> PreparedRestore:
    """Check and stage a store file for a restore as home's state.db (an archive's checks)."""
    # The checks run on a consistent copy SQLite takes: intact, a schema a release writes, no
    # foreign trigger or view, sound search indexes.
    name = STORE_FILE
    dest = _destination(home, name)
    if os.path.lexists(dest) and os.path.samefile(source, dest):
        raise BackupError(
            f"{source} is the store a restore would replace",
            hint="Give the file to install instead, for example the copy `hermes sessions "
            "recover --to NEW.db` wrote.",
        )
    guard.check_store_path(dest)
    refuse_write_protected(dest)
    holders = _holders([dest])
    if holders and not force:
        raise StoreBusyError(f"Another process has the store open: {holders}")
    cur = _current(dest, True)
    size = _file_bytes(source)
    old = _file_bytes(dest) if os.path.lexists(dest) else 0
    # A staged copy, a copy of the replaced store, the journal of the write, a page-size copy.
    need = SPACE_MARGIN_BYTES + size + old + max(old, size) + (size if cur.wal else 0)
    _require_space(
        home,
        need,
        f"{source}: installing it needs {need} bytes (a checked copy, a copy of the replaced "
        "store and the write's journal)",
    )
    created_home, cleaned, work = _open_work(home)
    try:
        staged_path = work.path / "0.member"
        try:
            sqlite_snapshot(source, staged_path)
        except sqlite3.Error as exc:
            raise BackupError(f"{source} cannot be read as a database: {exc}") from exc
        facts = check_database(staged_path, store=True)
        if facts.problems:
            raise BackupError(f"{source} failed verification: " + "; ".join(facts.problems[:10]))
        notes = _align(staged_path, facts, cur, work.path, 0)
        if facts.legacy:
            notes.append(LEGACY_NOTE)
        notes += _recovery_notes(source)
        after = StoreState(facts.sessions, facts.messages, os.stat(staged_path).st_size)
        before = cur.state if cur.exists else None
        plan = RestorePlan(
            source, home, forced=force, space_needed=need, cleaned=cleaned, source="database"
        )
        plan.databases.append(DatabaseChange(name, dest, True, before, after, cur.problem, notes))
        plan.holders = holders
        staged = Staged(paths={name: staged_path}, facts={name: facts})
    except BaseException:
        work.remove()
        if created_home:
            with contextlib.suppress(OSError):
                home.rmdir()
        raise
    return PreparedRestore(plan, work, staged, {name: dest}, {name: 0o600}, created_home)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.isprintable() else None


# --- writing -------------------------------------------------------------------------------


def _backup_into(source: Path, dest: Path, *, source_read_only: bool = False) -> None:
    """Copy a database into dest through the SQLite backup API."""
    uri = read_only_uri(source) if source_read_only else str(source)
    src = sqlite3.connect(uri, uri=source_read_only, timeout=READ_TIMEOUT_S)
    try:
        live = sqlite3.connect(dest, timeout=READ_TIMEOUT_S)
        try:
            src.backup(live)
        finally:
            live.close()
    finally:
        src.close()


def _new_private_file(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)  # brand new and empty: no lock of ours can be on it yet


def _pre_restore_path(dest: Path, stamp: str) -> Path:
    base = f"{dest.name}{PRE_RESTORE_MARK}{stamp}"
    candidate = dest.with_name(base)
    n = 1
    while os.path.lexists(candidate):
        candidate = dest.with_name(f"{base}-{n}")
        n += 1
    return candidate


def _move_with_sidecars(src: Path, dest: Path) -> None:
    os.replace(src, dest)
    for suffix in SIDECAR_SUFFIXES:
        side, target = companion(src, suffix), companion(dest, suffix)
        if os.path.lexists(side):
            os.replace(side, target)


def _remove_with_sidecars(path: Path) -> None:
    for p in store_files(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)


@dataclass
class _Undo:
    """What to put back if a later step fails."""

    dbs: list[tuple[Path, Path | None, bool]] = field(default_factory=list)  # dest, copy, raw
    files: list[tuple[Path, Path | None]] = field(default_factory=list)  # dest, saved copy


def _install_db(staged: Path, dest: Path) -> None:
    """Write a staged database into dest through the backup API (same inode when it exists)."""
    guard.check_store_path(dest)
    ensure_private_dir(dest.parent)
    created = not os.path.lexists(dest)
    if created:
        # A stale WAL without its database would be replayed onto the new file.
        for side in store_files(dest, SIDECAR_SUFFIXES):
            if os.path.lexists(side):
                os.unlink(side)
        _new_private_file(dest)
    try:
        _backup_into(staged, dest)
    except sqlite3.OperationalError as exc:
        if is_lock_error(exc):
            raise StoreBusyError(f"{dest.name} stayed locked during the restore: {exc}") from exc
        raise
    if created:
        secure_store_files(dest)  # ours; a store that was there keeps the mode it had


def _restore_file(staged: Path, dest: Path, mode: int) -> None:
    """Put a plain file in place atomically (temp file in the same directory, then rename)."""
    ensure_private_dir(dest.parent)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.restore")
    shutil.copyfile(staged, tmp)
    os.chmod(tmp, mode)
    os.replace(tmp, dest)


def _apply(
    plan: RestorePlan,
    staged: Staged,
    dests: dict[str, Path],
    modes: dict[str, int],
    work: Path,
) -> RestoreResult:
    result = RestoreResult(plan.archive, plan.home, forced=plan.forced, holders=plan.holders)
    result.changes = list(plan.databases)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    undo = _Undo()
    try:
        for change in plan.databases:
            dest = change.dest
            copy, raw = _keep_current(change, stamp)
            try:
                _install_db(staged.paths[change.name], dest)
            except BaseException:
                # The backup API writes in one transaction: dest is as it was. Drop the copy.
                _undo_db(dest, copy, raw, installed=False)
                raise
            undo.dbs.append((dest, copy, raw))
            if copy is not None:
                result.pre_restore[change.name] = copy
            result.databases.append(change.name)
            if change.shrinks and change.before is not None:
                result.warnings.append(
                    f"{change.name}: the restored store has fewer sessions/messages "
                    f"({change.after.sessions}/{change.after.messages}) than the one it "
                    f"replaced ({change.before.sessions}/{change.before.messages})"
                )
        rollback = work / "rollback"
        rollback.mkdir(mode=0o700)
        for n, name in enumerate([*plan.files_replaced, *plan.files_new]):
            dest = dests[name]
            saved = None
            if os.path.lexists(dest):
                saved = rollback / str(n)
                shutil.copy2(dest, saved, follow_symlinks=False)
            undo.files.append((dest, saved))
            private = dest.name in PRIVATE_FILES
            mode = 0o600 if private else (modes.get(name) or 0o600) & 0o755
            _restore_file(staged.paths[name], dest, mode)
            result.files.append(name)
    except BaseException as exc:
        problems = _roll_back(undo)
        raise _failure(exc, problems) from exc
    result.kept = list(plan.kept)
    result.earlier_copies = _earlier_copies(
        [c.dest for c in plan.databases], set(result.pre_restore.values())
    )
    return result


def _earlier_copies(dests: list[Path], new: set[Path]) -> list[tuple[Path, int]]:
    """Return the pre-restore copies beside these stores that this restore did not make."""
    out = []
    for dest in dests:
        for path in sorted(dest.parent.glob(f"{glob.escape(dest.name)}{PRE_RESTORE_MARK}*")):
            if path not in new and not path.is_symlink() and path.is_file():
                out.append((path, path.stat().st_size))
    return out


def _keep_current(change: DatabaseChange, stamp: str) -> tuple[Path | None, bool]:
    """Copy the database in place to <name>.pre-restore-<stamp>; return (copy, moved raw)."""
    dest = change.dest
    if not os.path.lexists(dest):
        return None, False
    copy = _pre_restore_path(dest, stamp)
    if change.before_problem is None:
        _new_private_file(copy)
        try:
            _backup_into(dest, copy, source_read_only=True)
        except BaseException:
            copy.unlink()
            raise
        return copy, False
    # Not readable as a database: keep its bytes exactly, sidecars included.
    _move_with_sidecars(dest, copy)
    return copy, True


def _undo_db(dest: Path, copy: Path | None, raw: bool, *, installed: bool = True) -> None:
    """Put back the database a restore replaced (or remove the one it created)."""
    if copy is None:
        if installed:
            _remove_with_sidecars(dest)
    elif raw:
        _remove_with_sidecars(dest)
        _move_with_sidecars(copy, dest)
    else:
        if installed:
            _backup_into(copy, dest)
        _remove_with_sidecars(copy)


def _roll_back(undo: _Undo) -> list[str]:
    """Put back every file and database a failed restore changed; return what could not be."""
    problems: list[str] = []
    for dest, saved in reversed(undo.files):
        try:
            if saved is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(dest)
            else:
                os.replace(saved, dest)
        except OSError as exc:
            problems.append(f"{dest}: {exc}")
    for dest, copy, raw in reversed(undo.dbs):
        try:
            _undo_db(dest, copy, raw)
        except (OSError, sqlite3.Error) as exc:
            where = f"; the previous store is kept at {copy}" if copy is not None else ""
            problems.append(f"{dest}: {exc}{where}")
    return problems


def _failure(exc: BaseException, problems: list[str]) -> BaseException:
    """Return the error to raise for a failed restore, saying whether it was undone."""
    if not isinstance(exc, Exception):
        return exc  # KeyboardInterrupt and friends: let them through
    if problems:
        note = "the restore failed and could not be undone completely: " + "; ".join(problems)
    else:
        note = "nothing was changed: everything written was put back"
    typed: HermesStateError | None
    if isinstance(exc, HermesStateError):
        typed = exc
    else:
        typed = translate_sqlite_error(exc) or translate_os_error(exc)
    if typed is None:
        return BackupError(f"The restore failed ({exc}); {note}")
    try:
        return type(typed)(f"{typed.message} ({note})", hint=typed.hint)
    except TypeError:  # an error class with its own constructor
        return BackupError(f"{typed.message} ({note})", hint=typed.hint)


def restore_backup(
    archive: str | os.PathLike[str],
    home: str | os.PathLike[str],
    *,
    force: bool = False,
    max_member_bytes: int = MAX_MEMBER_BYTES,
) -> RestoreResult:
    """Restore an archive into home without asking: every database (ledger included) and file."""
    with prepare_restore(archive, home, force=force, max_member_bytes=max_member_bytes) as ready:
        return ready.apply()
