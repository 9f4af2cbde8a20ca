"""How much disk a profile takes: its store (with -wal/-shm/-journal), its vault and its backups.

Sizes are read with os.stat/os.lstat only (no store is opened), and symlinks are not followed:
a file counts where it lives.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hermes_state.backups.archives import backups_in
from hermes_state.store.home import STORE_FILE
from hermes_state.store.sql import companion
from hermes_state.vault.vault import vault_dir

STORE_SUFFIXES = ("", "-wal", "-shm", "-journal")


@dataclass(frozen=True)
class Footprint:
    """A profile's bytes on disk, by part."""

    store_bytes: int
    vault_bytes: int
    backup_bytes: int

    @property
    def total_bytes(self) -> int:
        """Every part together."""
        return self.store_bytes + self.vault_bytes + self.backup_bytes

    def to_dict(self) -> dict[str, Any]:
        """Return the parts and their total as plain JSON-ready data."""
        return {**asdict(self), "total_bytes": self.total_bytes}


def _size(path: Path) -> int:
    """Return a regular file's size (0 for anything else or nothing)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if (st.st_mode & 0o170000) == 0o100000 else 0


def _tree_size(folder: Path) -> int:
    """Return the bytes of the regular files under folder (symlinks not followed)."""
    if folder.is_symlink() or not folder.is_dir():
        return 0
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        total += sum(_size(Path(dirpath) / name) for name in files)
    return total


def profile_footprint(home: Path) -> Footprint:
    """Return how much disk a profile home's store, vault and backups take."""
    store = home / STORE_FILE
    return Footprint(
        store_bytes=sum(_size(companion(store, suffix)) for suffix in STORE_SUFFIXES),
        vault_bytes=_tree_size(vault_dir(home)),
        backup_bytes=sum(_size(p) for p in backups_in(home)),
    )
