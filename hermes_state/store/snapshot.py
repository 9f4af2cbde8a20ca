"""A consistent copy of a live store through SQLite's online backup API.

Used where the files themselves cannot be copied as they are because a process is writing
them (backup of a live profile, recover beside a running gateway): SQLite copies the database
as one read transaction sees it, the WAL's committed frames included.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from hermes_state.store import guard
from hermes_state.store.connection import read_only_uri
from hermes_state.store.errors import SQLITE_BUSY, SQLITE_LOCKED, StoreLockedError
from hermes_state.store.patience import (
    BUSY_TIMEOUT_S,
    NO_WAITING,
    WAIT_NOTICE_S,
    Waiting,
    report_lock_holders,
    retry_locked,
)

READ_TIMEOUT_S = 10.0
SNAPSHOT_MMAP_BYTES = 256 * 2**20
# Between two tries of a step that found the store locked (each try itself waits up to
# BUSY_TIMEOUT_S inside SQLite).
STEP_RETRY_S = 0.05


class _GaveUp(Exception):
    """The patience ran out while the source stayed locked (carries the seconds waited)."""


def sqlite_snapshot(
    path: Path,
    dest: Path,
    *,
    timeout: float = READ_TIMEOUT_S,
    waiting: Waiting = NO_WAITING,
    not_done: str = "",
) -> None:
    """Copy a live database into dest with the backup API, in one step, from a read-only handle.

    One step is one read transaction: on a rollback-journal store a writer waits for it (about
    as long as copying the file takes), and a step-by-step copy would restart at every commit
    of a busy writer and never finish. dest must not exist; it is made private (0600).

    A step that finds the source locked (another process's EXCLUSIVE lock, a commit in
    progress) is tried again until the patience runs out: ``waiting``'s (--wait) or else
    ``timeout`` seconds. Then StoreLockedError names the holder; ``not_done`` ends its message.
    A wait past WAIT_NOTICE_S is told once through ``waiting``.
    """
    guard.check_store_path(path)
    patience = waiting.limit(timeout)
    started = time.monotonic()
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)  # a fresh private file; SQLite opens it by name next
    # Short waits inside SQLite, the rest in the loop below: the wait is bounded and told.
    src = sqlite3.connect(read_only_uri(path), uri=True, timeout=min(BUSY_TIMEOUT_S, patience))
    told = False

    def progress(status: int, _remaining: int, _total: int) -> None:
        nonlocal told
        if status not in (SQLITE_BUSY, SQLITE_LOCKED):
            return
        waited = time.monotonic() - started
        if waited >= patience:
            raise _GaveUp(waited)  # CPython finishes the backup handle and re-raises
        if not told and waited >= WAIT_NOTICE_S:
            told = True
            waiting.tell(path, waited)

    try:
        # fewer read syscalls and copies
        retry_locked(
            path,
            lambda: src.execute(f"PRAGMA mmap_size={SNAPSHOT_MMAP_BYTES}"),
            waiting,
            timeout,
            not_done,
        )
        dst = sqlite3.connect(dest)
        try:
            # A scratch copy: no journal and no fsync (whoever keeps it syncs it once).
            dst.execute("PRAGMA journal_mode=OFF")
            dst.execute("PRAGMA synchronous=OFF")
            # pages=-1: the whole database in one step. Python's own loop would retry a
            # locked step forever; the progress callback bounds it.
            src.backup(dst, progress=progress, sleep=STEP_RETRY_S)
        except _GaveUp as exc:
            waited = float(exc.args[0])
            who = report_lock_holders(path, waited)
            raise StoreLockedError(
                f"{path.name} stayed locked by another process for {waited:.1f}s "
                f"(patience {patience:g}s){who}{not_done}"
            ) from None
        finally:
            dst.close()
    finally:
        src.close()
