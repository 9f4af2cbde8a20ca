"""Where a profile's vault stores are, and how one is opened.

``<home>/vault/<YYYY>.db`` holds the session groups whose last activity fell in that UTC year
(see :mod:`hermes_state.vault.vault_move` for moving them).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from hermes_state.store.connection import Store, open_store, roll_back_own_journal
from hermes_state.store.errors import StoreNotFoundError
from hermes_state.store.patience import NO_WAITING, Waiting

VAULT_DIR = "vault"
STORE_NAME = re.compile(r"^(\d{4})\.db$")


def vault_dir(home: Path) -> Path:
    """Return the profile's vault directory."""
    return Path(home) / VAULT_DIR


def vault_paths(home: Path) -> list[tuple[str, Path]]:
    """Return (year, path) of every vault store of the profile, oldest year first."""
    where = vault_dir(home)
    if not where.is_dir():
        return []
    found = []
    for path in where.iterdir():
        m = STORE_NAME.match(path.name)
        if m and path.is_file():
            found.append((m.group(1), path))
    return sorted(found)


def year_of(ts: float) -> str:
    """Return the UTC calendar year of an epoch time, as a vault store is named."""
    return f"{datetime.fromtimestamp(float(ts), UTC).year:04d}"


def open_vault(path: Path, *, waiting: Waiting = NO_WAITING, read_only: bool = False) -> Store:
    """Open one vault store (for edits in the edit role: never migrated)."""
    if not path.exists():
        raise StoreNotFoundError(f"No vault store at {path}")
    roll_back_own_journal(path, waiting)  # a killed move's journal: a reader must not fail on it
    return open_store(path, read_only=read_only, role="edit", create=False, waiting=waiting)
