"""A consistent copy of a live store through SQLite's online backup API.

Used where the files themselves cannot be copied as they are because a process is writing
them (backup of a live profile, recover beside a running gateway): SQLite copies the database
as one read transaction sees it, the WAL's committed frames included.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from hermes_state import guard
from hermes_state.connection import read_only_uri

READ_TIMEOUT_S = 10.0
SNAPSHOT_MMAP_BYTES = 256 * 2**20


def sqlite_snapshot(path: Path, dest: Path, *, timeout: float = READ_TIMEOUT_S) -> None:
    """Copy a live database into dest with the backup API, in one step, from a read-only handle.

    One step is one read transaction: on a rollback-journal store a writer waits for it (about
    as long as copying the file takes), and a step-by-step copy would restart at every commit
    of a busy writer and never finish. dest must not exist; it is made private (0600).
    """
    guard.check_store_path(path)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)  # a fresh private file; SQLite opens it by name next
    src = sqlite3.connect(read_only_uri(path), uri=True, timeout=timeout)
    try:
        src.execute(f"PRAGMA mmap_size={SNAPSHOT_MMAP_BYTES}")  # fewer read syscalls and copies
        dst = sqlite3.connect(dest)
        try:
            # A scratch copy: no journal and no fsync (whoever keeps it syncs it once).
            dst.execute("PRAGMA journal_mode=OFF")
            dst.execute("PRAGMA synchronous=OFF")
            src.backup(dst)  # pages=-1: the whole database in one step
        finally:
            dst.close()
    finally:
        src.close()
