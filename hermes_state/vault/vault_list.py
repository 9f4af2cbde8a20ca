"""What the vault holds: each store's figures, and which store holds a session."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hermes_state.store.connection import Store
from hermes_state.store.patience import NO_WAITING, Waiting
from hermes_state.store.sql import chunks, marks
from hermes_state.upkeep.prune import last_activity_sql
from hermes_state.vault import vault_twins
from hermes_state.vault.vault_stores import open_vault, vault_dir, vault_paths


@dataclass(frozen=True)
class VaultStoreInfo:
    """One vault store: what it holds and how big it is."""

    year: str
    path: str
    sessions: int
    messages: int
    bytes: int
    first_started: float | None
    last_active: float | None
    hidden: int = 0  # stale copies of sessions the live store has (invisible here)
    resumed: int = 0  # sessions the agent resumed: their history here is read with the live part

    def to_dict(self) -> dict[str, Any]:
        """Return the store's figures as plain JSON-ready data."""
        return asdict(self)


def _held(store: Store, ids: Sequence[str]) -> set[str]:
    """Return which of these session ids the store has."""
    out: set[str] = set()
    for batch in chunks(ids):
        out.update(
            r[0]
            for r in store.conn.execute(
                f"SELECT id FROM sessions WHERE id IN ({marks(len(batch))})", batch
            )
        )
    return out


def _live_ids(live: Store | None, ids: Sequence[str]) -> set[str]:
    """Return which of these session ids the live store has."""
    return set() if live is None else _held(live, ids)


def live_ids(live: Store | None, ids: Sequence[str]) -> set[str]:
    """Return which of these session ids the live store has (those are invisible in the vault)."""
    return _live_ids(live, ids)


def list_vault(
    home: Path, live: Store | None = None, waiting: Waiting = NO_WAITING
) -> list[VaultStoreInfo]:
    """Describe every vault store of the profile (read-only), oldest year first."""
    out = []
    for year, path in vault_paths(home):
        store = open_vault(path, read_only=True, waiting=waiting)
        try:
            with store.snapshot() as conn:
                ids = [r[0] for r in conn.execute("SELECT id FROM sessions")]
                msgs = int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
                first, last = conn.execute(
                    f"SELECT MIN(s.started_at), MAX({last_activity_sql(conn)}) FROM sessions s"
                ).fetchone()
                twins = _live_ids(live, ids)
                resumed = (
                    len(vault_twins.unmatched(live.conn, conn, twins)) if live and twins else 0
                )
        finally:
            store.close()
        out.append(
            VaultStoreInfo(
                year=year,
                path=str(path),
                sessions=len(ids),
                messages=msgs,
                bytes=os.stat(path).st_size,
                first_started=first,
                last_active=last,
                hidden=len(twins) - resumed,
                resumed=resumed,
            )
        )
    return out


def locate(
    home: Path, ref: str, live: Store | None, waiting: Waiting = NO_WAITING
) -> tuple[str, Path, str] | None:
    """Find a session only the vault holds, named as every command names one (see
    :func:`hermes_state.vault.profile_stores.locate`): return (year, store path, session id), the
    newest year holding it; None when the live store has it (it is read there)."""
    from hermes_state.vault import profile_stores

    found = profile_stores.locate(live, home, ref, waiting)
    if found.year is None:
        return None
    return found.year, vault_dir(home) / f"{found.year}.db", found.session_id
