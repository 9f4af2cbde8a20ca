"""Scratch directories of long operations (backup, restore, verify) and the ones killed runs left.

A run holds an exclusive ``flock`` on ``.lock`` inside its directory for as long as it works. The
kernel drops that lock when the process ends, however it ends (SIGKILL included), so the next run
can tell a directory in use from one left behind, without trusting pids that may be reused.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path

LOCK_NAME = ".lock"
# A directory with no lock file yet may be one another run has only just created.
YOUNG_S = 60.0


class WorkDir:
    """A private scratch directory (0700) that stays locked while this process uses it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def __enter__(self) -> WorkDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def remove(self) -> None:
        """Delete the directory and everything in it, then let go of its lock."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def make_work_dir(parent: Path, prefix: str) -> WorkDir:
    """Create a locked scratch directory ``<prefix><pid>-<random>`` (0700) in parent."""
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))
    try:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path / LOCK_NAME, flags, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return WorkDir(path, fd)


def in_use(directory: Path) -> bool:
    """Tell whether a live process holds this scratch directory (or it is too young to judge)."""
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            return time.time() - directory.stat().st_mtime < YOUNG_S
        except OSError:
            return False
    except OSError:
        return True  # cannot tell: leave it alone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def stale_work_dirs(parent: Path, prefixes: tuple[str, ...]) -> list[Path]:
    """Return the scratch directories in parent that killed runs left behind."""
    try:
        entries = list(parent.iterdir())
    except OSError:
        return []
    found = []
    for entry in sorted(entries):
        if not entry.name.startswith(prefixes) or entry.is_symlink() or not entry.is_dir():
            continue
        if not in_use(entry):
            found.append(entry)
    return found


def remove_stale_work_dirs(parent: Path, prefixes: tuple[str, ...]) -> list[Path]:
    """Delete the scratch directories killed runs left in parent; return the ones removed."""
    removed = []
    for entry in stale_work_dirs(parent, prefixes):
        with contextlib.suppress(OSError):
            shutil.rmtree(entry)
            removed.append(entry)
    return removed
