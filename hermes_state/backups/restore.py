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
import json
import os
import sqlite3
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hermes_state.backups.archive_check import (
    DatabaseFacts,
    Staged,
    check_database,
    check_members,
    member_is_database,
    read_manifest,
    stage_members,
)
from hermes_state.backups.archive_format import (
    LOST_SESSIONS_HINT,
    MANIFEST,
    MAX_MEMBER_BYTES,
    RESTORE_WORK_PREFIX,
    RUNTIME_FILES,
    BackupError,
    is_store_name,
    is_vault_name,
)
from hermes_state.backups.restore_apply import apply_restore
from hermes_state.backups.restore_plan import (
    MAX_REPORT_BYTES,
    SPACE_MARGIN_BYTES,
    CurrentStore,
    DatabaseChange,
    NotEnoughSpaceError,
    RestorePlan,
    RestoreResult,
    StoreState,
    current_state,
    file_bytes,
    free_bytes,
    holders_of,
    home_destination,
    space_needed,
)
from hermes_state.store import guard
from hermes_state.store.connection import read_only_uri, roll_back_own_journal
from hermes_state.store.errors import (
    StoreBusyError,
)
from hermes_state.store.home import STORE_FILE, ensure_private_dir
from hermes_state.store.snapshot import sqlite_snapshot
from hermes_state.store.store_file import refuse_write_protected
from hermes_state.store.workdirs import WorkDir, make_work_dir, remove_stale_work_dirs

# --- preparing the staged copies --------------------------------------------------------------


def _align(staged: Path, facts: DatabaseFacts, cur: CurrentStore, work: Path, n: int) -> list[str]:
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
                holders = holders_of([d.dest for d in plan.databases])
                if holders:
                    raise StoreBusyError(f"Another process has the store open: {holders}")
            with _vault_locks(plan):
                result = apply_restore(
                    plan, self._staged, self._dests, self._modes, self._work.path
                )
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
    free = free_bytes(home)
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
        dests = {i.filename: home_destination(home, i.filename) for i in members}
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in members}
        db_dests = [dests[i.filename] for i in members if member_is_database(i.filename)]
        for dest in db_dests:
            guard.check_store_path(dest)
            refuse_write_protected(dest)
        holders = holders_of(db_dests)
        if holders and not force:
            raise StoreBusyError(f"Another process has the store open: {holders}")
        for info in members:
            if is_vault_name(info.filename) and os.path.lexists(dests[info.filename]):
                # A killed move's journal in a vault store (ours): the plan reads it as it was.
                roll_back_own_journal(dests[info.filename])
        current = {
            i.filename: current_state(dests[i.filename], _is_store(i.filename))
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
    dest = home_destination(home, name)
    if os.path.lexists(dest) and os.path.samefile(source, dest):
        raise BackupError(
            f"{source} is the store a restore would replace",
            hint="Give the file to install instead, for example the copy `hermes sessions "
            "recover --to NEW.db` wrote.",
        )
    guard.check_store_path(dest)
    refuse_write_protected(dest)
    holders = holders_of([dest])
    if holders and not force:
        raise StoreBusyError(f"Another process has the store open: {holders}")
    cur = current_state(dest, True)
    size = file_bytes(source)
    old = file_bytes(dest) if os.path.lexists(dest) else 0
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
