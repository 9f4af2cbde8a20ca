"""Putting a checked restore in place: all or nothing, each replaced store kept as a copy.

Each replaced store is kept as a dated ``state.db.pre-restore-<stamp>`` copy; databases are
written through SQLite's backup API (same inode, live readers see the change) and files
atomically; if any step fails everything is put back as it was.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from hermes_state.backups.archive_check import (
    Staged,
)
from hermes_state.backups.archive_format import (
    PRE_RESTORE_MARK,
    PRIVATE_FILES,
    BackupError,
)
from hermes_state.backups.restore_plan import (
    READ_TIMEOUT_S,
    DatabaseChange,
    RestorePlan,
    RestoreResult,
)
from hermes_state.store import guard
from hermes_state.store.connection import read_only_uri
from hermes_state.store.errors import (
    HermesStateError,
    StoreBusyError,
    is_lock_error,
    translate_os_error,
    translate_sqlite_error,
)
from hermes_state.store.home import ensure_private_dir
from hermes_state.store.sql import SIDECAR_SUFFIXES, companion, store_files
from hermes_state.store.store_file import secure_store_files

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


def apply_restore(
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
