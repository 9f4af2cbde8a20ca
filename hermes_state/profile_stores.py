"""A profile's stores as one: the live ``state.db`` and every vault year, for finding a session.

Every command names a session the same way — its id, a unique id prefix, or its exact title —
and the answer is the same whichever store holds it: an id is looked up in every store, a
prefix or a title that names sessions in several stores is ambiguous (and says how many), and a
session the agent resumed after it was vaulted is one session with parts in two stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hermes_state import vault_twins
from hermes_state.connection import NO_WAITING, Store, Waiting
from hermes_state.errors import AmbiguousSessionIdError, SessionNotFoundError
from hermes_state.sessions import find_session_exact
from hermes_state.text import bindable
from hermes_state.vault_stores import open_vault, vault_paths

SHOWN = 5  # candidates named in an ambiguity message


@dataclass(frozen=True)
class Found:
    """Where a session lives: the live store, and the vault years holding a part of it."""

    session_id: str
    live: bool
    vault: tuple[str, ...] = ()  # years whose store holds history the live store lacks
    stale: tuple[str, ...] = ()  # years holding only a leftover copy of live rows (hidden)

    @property
    def year(self) -> str | None:
        """The vault year a vault-only session is read from (None when it is live)."""
        return None if self.live or not self.vault else self.vault[-1]

    @property
    def resumed(self) -> bool:
        """Whether the agent resumed this vaulted session: one conversation in two stores."""
        return self.live and bool(self.vault)


def _prefix_rows(store: Store, prefix: str) -> tuple[int, list[str]]:
    """Return how many session ids start with prefix (not equal to it) and the first few."""
    hi = prefix + "\U0010ffff"
    conn = store.conn
    n = int(
        conn.execute(
            "SELECT count(*) FROM sessions WHERE id > ? AND id < ?", (prefix, hi)
        ).fetchone()[0]
    )
    first = [
        str(r[0])
        for r in conn.execute(
            "SELECT id FROM sessions WHERE id > ? AND id < ? ORDER BY id LIMIT ?",
            (prefix, hi, SHOWN + 1),
        )
    ]
    return n, first


def _has(store: Store, sid: str) -> bool:
    return store.conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone() is not None


def _titled(store: Store, title: str) -> list[str]:
    return [
        str(r[0]) for r in store.conn.execute("SELECT id FROM sessions WHERE title = ?", (title,))
    ]


def _ambiguous(what: str, places: dict[str, list[str]], counts: dict[str, int]) -> None:
    """Raise AmbiguousSessionIdError naming how many sessions each store has and a few ids."""
    ids = sorted({s for found in places.values() for s in found})
    total = sum(counts.values())
    where = ", ".join(
        f"{n:,} {'live' if place == 'live' else f'in vault {place}'}"
        for place, n in counts.items()
        if n
    )
    shown = ", ".join(ids[:SHOWN]) + (", …" if total > SHOWN else "")
    raise AmbiguousSessionIdError(f"{what} matches {total:,} sessions ({where}): {shown}")


def locate(live: Store | None, home: Path, ref: str, waiting: Waiting = NO_WAITING) -> Found:
    """Find the one session ref names in any store of the profile, by the rule every command
    shares: an exact id anywhere; else an id prefix matching one session across all stores;
    else an exact title held by one session across all stores. Raise otherwise."""
    ref = bindable(ref)
    vaults = [
        (year, open_vault(path, read_only=True, waiting=waiting))
        for year, path in vault_paths(home)
    ]
    try:
        stores: list[tuple[str, Store]] = ([("live", live)] if live is not None else []) + vaults
        sid = _by_id(stores, ref) if ref else None
        if sid is None:
            sid = _by_title(stores, ref)
        if sid is None:
            if live is not None:
                find_session_exact(live, ref)  # raises, naming near titles of the live store
            raise SessionNotFoundError(
                f"No session has the id, id prefix or exact title '{ref}'",
                hint="Name the session by its id (see: hermes sessions list --vault).",
            )
        return _where(live, vaults, sid)
    finally:
        for _year, store in vaults:
            store.close()


def _by_id(stores: list[tuple[str, Store]], ref: str) -> str | None:
    """Return the session an exact id or a prefix unique across the stores names, or None."""
    if any(_has(store, ref) for _place, store in stores):
        return ref
    places: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for place, store in stores:
        n, first = _prefix_rows(store, ref)
        if n:
            places[place], counts[place] = first, n
    distinct = {s for found in places.values() for s in found}
    if not distinct:
        return None
    # A session in two stores (resumed, or a leftover copy) is one session, counted once.
    if len(distinct) > 1:
        _ambiguous(f"'{ref}'", places, counts)
    return distinct.pop()


def _by_title(stores: list[tuple[str, Store]], ref: str) -> str | None:
    """Return the one session that holds exactly this title in any store, or None."""
    places = {place: ids for place, store in stores if (ids := _titled(store, ref))}
    distinct = {s for ids in places.values() for s in ids}
    if len(distinct) > 1:
        _ambiguous(f"the title '{ref}'", places, {p: len(v) for p, v in places.items()})
    return distinct.pop() if distinct else None


def _where(live: Store | None, vaults: list[tuple[str, Store]], sid: str) -> Found:
    """Return where the session's visible parts are (a leftover copy of live rows is hidden)."""
    in_live = live is not None and _has(live, sid)
    parts: list[str] = []
    stale: list[str] = []
    for year, store in vaults:
        if not _has(store, sid):
            continue
        if in_live and live is not None:
            lacking = vault_twins.unmatched(live.conn, store.conn, [sid])
            (parts if lacking else stale).append(year)
        else:
            parts.append(year)
    return Found(sid, in_live, tuple(parts), tuple(stale))


def resumed_sessions(
    live: Store, home: Path, waiting: Waiting = NO_WAITING
) -> dict[str, list[str]]:
    """Return every session the agent resumed after it was vaulted: id -> vault years."""
    out: dict[str, list[str]] = {}
    for year, path in vault_paths(home):
        store = open_vault(path, read_only=True, waiting=waiting)
        try:
            twins = vault_twins.twin_ids(live.conn, store.conn)
            for sid in vault_twins.unmatched(live.conn, store.conn, twins):
                out.setdefault(sid, []).append(year)
        finally:
            store.close()
    return out
