"""A profile's stores as one: the live ``state.db`` and every vault year, for finding a session.

Every command names a session the same way — its id, a unique id prefix, or its exact title —
and the answer is the same whichever store holds it: an id is looked up in every store, a
prefix or a title that names sessions in several stores is ambiguous (and says how many), and a
session the agent resumed after it was vaulted is one session with parts in two stores.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_state.records.sessions import find_session_exact
from hermes_state.shapes.text import bindable
from hermes_state.store.connection import Store
from hermes_state.store.errors import AmbiguousSessionIdError, SessionNotFoundError
from hermes_state.store.patience import NO_WAITING, Waiting
from hermes_state.vault import vault_twins
from hermes_state.vault.vault_stores import open_vault, vault_paths

if TYPE_CHECKING:
    from hermes_state.reports import usage_report

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
    raise AmbiguousSessionIdError(
        f"{what} matches more than one session: {total:,} ({where}): {shown}"
    )


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


@contextlib.contextmanager
def _each_store(
    live: Store, home: Path, waiting: Waiting
) -> Iterator[list[tuple[str | None, Store, tuple[str, ...]]]]:
    """Yield (vault year or None, store, sessions to leave out) for the live store and every
    vault store (opened read-only), the stale copies of live sessions left out of each."""
    out: list[tuple[str | None, Store, tuple[str, ...]]] = [(None, live, ())]
    try:
        for year, path in vault_paths(home):
            store = open_vault(path, read_only=True, waiting=waiting)
            twins = vault_twins.twin_ids(live.conn, store.conn)
            stale = twins - set(vault_twins.unmatched(live.conn, store.conn, twins))
            out.append((year, store, tuple(sorted(stale))))
        yield out
    finally:
        for place, opened, _stale in out:
            if place is not None:
                opened.close()


def usage_across(
    live: Store,
    home: Path,
    by: str = "model",
    flt: usage_report.UsageFilter | None = None,
    *,
    order: str = "cost",
    waiting: Waiting = NO_WAITING,
) -> usage_report.UsageReport:
    """Return `hermes usage`'s report over the profile's stores: the live one and every vault
    year (a vault store's stale copy of a live session is not counted twice). A session the
    agent resumed after it was vaulted counts in both stores' session counts."""
    from hermes_state.reports import usage_report  # the reports only: listing and show skip it

    flt = flt or usage_report.UsageFilter()
    with _each_store(live, home, waiting) as stores:
        reports = [
            usage_report.usage_report(
                store,
                by,
                replace(flt, exclude_sessions=(*flt.exclude_sessions, *stale)),
                order=order,
            )
            for _year, store, stale in stores
        ]
        years = tuple(y for y, _store, _stale in stores if y is not None)
    totals = reports[0].totals
    for r in reports[1:]:
        totals = usage_report.add_figures(totals, r.totals)
    groups = usage_report.merge_groups(by, [r.groups for r in reports], order=order)
    return replace(reports[0], filter=flt, totals=totals, groups=groups, vault=years)


def stats_across(live: Store, home: Path, waiting: Waiting = NO_WAITING) -> dict[str, Any]:
    """Return `sessions stats`' figures over the profile's stores: sessions and messages by
    source, usage by model, the top sessions by tokens; plus what the vault holds. A vault
    store's stale copy of a live session is not counted twice."""
    from hermes_state.reports import stats, usage_report  # the reports only

    by_source: dict[str, dict[str, Any]] = {}
    vault: dict[str, Any] = {"years": [], "sessions": 0, "messages": 0, "bytes": 0}
    models: list[list[dict[str, Any]]] = []
    tops: list[list[dict[str, Any]]] = []
    with _each_store(live, home, waiting) as stores:
        for year, store, stale in stores:
            for row in stats.counts_by_source(store):
                slot = by_source.setdefault(
                    row["source"],
                    {"source": row["source"], "sessions": 0, "messages": 0, "stored_messages": 0},
                )
                for k in ("sessions", "messages", "stored_messages"):
                    slot[k] += row[k]
                if year is not None:
                    vault["sessions"] += row["sessions"]
                    vault["messages"] += row["stored_messages"]
            if year is not None:
                vault["years"].append(year)
                vault["bytes"] += stats.store_files(store)["total_bytes"]
            by_model, top = usage_report.usage_groupings(
                store,
                [("model", "cost", None), ("session", "tokens", 10)],
                usage_report.UsageFilter(exclude_sessions=stale),
            )
            models.append(by_model)
            tops.append(top)
    return {
        "by_source": sorted(by_source.values(), key=lambda r: (-r["sessions"], str(r["source"]))),
        "by_model": [stats.model_row(g) for g in usage_report.merge_groups("model", models)],
        "top_sessions": [
            stats.top_session_row(g)
            for g in usage_report.merge_groups("session", tops, order="tokens")[:10]
        ],
        "vault": vault,
    }


def sources_and_models(
    live: Store, home: Path, waiting: Waiting = NO_WAITING
) -> tuple[list[str], list[str]]:
    """Return every session source and every model with usage in any store of the profile."""
    from hermes_state.records.session_list import distinct_sources
    from hermes_state.reports import usage_report

    sources: set[str] = set()
    models: set[str] = set()
    with _each_store(live, home, waiting) as stores:
        for _year, store, _stale in stores:
            sources.update(distinct_sources(store))
            models.update(usage_report.models_with_usage(store))
    return sorted(sources), sorted(models)


def vault_only_count(live: Store, home: Path, waiting: Waiting = NO_WAITING) -> int:
    """Return how many sessions only the vault holds (those a live-only listing leaves out)."""
    total = 0
    for _year, path in vault_paths(home):
        store = open_vault(path, read_only=True, waiting=waiting)
        try:
            n = int(store.conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
            total += n - len(vault_twins.twin_ids(live.conn, store.conn))
        finally:
            store.close()
    return total
