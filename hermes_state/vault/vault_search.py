"""Reads spanning the live store and the vault: one search answer, one session list.

A session id the live store has is invisible in the vault (an interrupted move or return
leaves it in both places; the live copy counts), so a vault store's matches and rows of such
sessions are left out.

**One order, as if every session were in one store.** Message ids are kept by a move, so
``newest``/``oldest`` merge the stores' walks by message id, as one store walks them. A ranked
search takes the globally newest ``RANK_CANDIDATES`` matches (each store walks its own newest
that many) and ranks them by BM25 computed with the statistics of all the stores together
(:mod:`hermes_state.vault.vault_bm25`): one store holding everything gives the same scores, to
rounding.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hermes_state.records.session_list import count_sessions, list_sessions, message_counts
from hermes_state.search import search, walk as search_walk
from hermes_state.search.hits import HITS_PER_STATEMENT, _hits
from hermes_state.search.query import Query, parse_query, register_functions, tame_prefixes
from hermes_state.search.routes import (
    _bound,
    _filters,
    _indexes_of,
    _routes,
    _scan_route,
    shown_matches,
)
from hermes_state.search.walk import (
    _Budget,
    _Found,
    _fts_failed,
    _walk,
)
from hermes_state.store.connection import Store
from hermes_state.store.errors import SortUnavailableError
from hermes_state.vault import vault_stores, vault_twins
from hermes_state.vault.vault_bm25 import (
    _freqs,
    _phrase_hits,
    _starts,
    _TableStats,
    bm25,
    doc_lengths,
    idf,
    phrase_groups,
    table_totals,
)


def _read_vault(path: Path, live: Store) -> contextlib.closing[Store]:
    """Open a vault store read-only for one read, with the live store's patience; close after."""
    return contextlib.closing(vault_stores.open_vault(path, read_only=True, waiting=live.waiting))


# --- the search -----------------------------------------------------------------------------


@dataclass
class _Part:
    """One store of a spanning search: its snapshot, filters, routes and what its walk found."""

    year: str | None  # None: the live store
    store: Store
    conn: sqlite3.Connection
    filters: Any  # _Filters
    idx: Any  # _Indexes
    routes: list[Any]  # _Route
    walks: bool = True  # False: --since excludes every message of this store
    found: Any = None  # _Found
    bounded: bool = False  # walked only beyond the matches other stores had: counts are partial
    budget: Any = None
    scores: dict[int, float] = field(default_factory=dict)
    hides: Store | None = None  # the live store, whose sessions this one's walk must leave out


def _ready(part: _Part, query: Query) -> None:
    """Leave the live store's sessions out of a vault store's filters and routes, once, just
    before its first walk (a store no walk reaches never reads them)."""
    if part.hides is None:
        return
    hidden = hidden_sessions(part.hides, part.conn)
    part.hides = None
    if hidden:
        part.filters = _hiding(part.filters, hidden)
        part.routes = list(_routes(query, part.idx, part.filters))


def _year_end(year: str) -> float:
    """Return the epoch time at which the UTC year after `year` starts."""
    return datetime(int(year) + 1, 1, 1, tzinfo=UTC).timestamp()


def _hiding(filters: Any, hidden: set[str]) -> Any:
    """Add to the filters: not a session the live store has (it is seen there)."""
    if not hidden:
        return filters
    return replace(
        filters,
        sql=f"({filters.sql}) AND m.session_id NOT IN (SELECT value FROM json_each(?))",
        params=(*filters.params, json.dumps(sorted(hidden))),
        narrows=True,
    )


def hidden_sessions(
    live: Store | None, conn: sqlite3.Connection, *, resumed_too: bool = False
) -> set[str]:
    """Return the sessions of a vault store (read on conn) a reader leaves out there: those
    whose every message the live store has too (a stale copy). A session the agent resumed
    holds history only the vault has, so its vault part stays visible — unless resumed_too
    (a listing shows a session once: its live row)."""
    if live is None:
        return set()
    twins = vault_twins.twin_ids(live.conn, conn)
    if resumed_too or not twins:
        return twins
    return twins - set(vault_twins.unmatched(live.conn, conn, twins))


def _want(sort: str, need: int, complete: bool) -> int:
    """Return how many matches each store's walk collects (a ranked --all: every one)."""
    if sort == "rank":
        return 1 << 62 if complete else max(need, search_walk.RANK_CANDIDATES)
    return max(need, search_walk.COUNT_AHEAD)


def _walk_part(
    part: _Part, route: Any, sort: str, need: int, complete: bool, bound: int | None
) -> Any:
    """Walk one route of one store as _run does, keeping every candidate's source;
    only ids beyond bound (newer, or older for sort="oldest") when given."""
    rankable = sort == "rank" and route.sources[0].rankable
    route = _bound(part.conn, route, part.idx)  # only a route that is walked reads sessions
    idx = part.idx
    if bound is not None:
        idx = replace(idx, max_id=bound - 1) if sort == "oldest" else replace(idx, min_id=bound + 1)
    if rankable:
        want = _want(sort, need, complete)
        walk = _walk(
            part.conn,
            route,
            part.filters,
            idx,
            newest=True,
            need=want,
            budget=part.budget,
            with_rank=True,
        )
        ordering = "rank" if walk.exhausted else "rank_recent"
    else:
        newest = sort != "oldest"
        walk = _walk(
            part.conn,
            route,
            part.filters,
            idx,
            newest=newest,
            need=max(need, search_walk.COUNT_AHEAD),
            budget=part.budget,
        )
        if walk.stopped and len(walk.ids) >= need:
            walk.stopped = False  # every hit asked for was found: only the count stopped short
        ordering = "newest" if newest else "oldest"
    first = {i for i in walk.ids if walk.by_source[i] == 0}
    return _Found(list(walk.ids), ordering, route, walk, first, ranked=len(walk.ids))


def _run_part(
    part: _Part, route: Any, query: Query, sort: str, need: int, complete: bool, bound: int | None
) -> Any:
    """Run one route on one store; a foreign or damaged index fails open to a scan."""
    try:
        return _walk_part(part, route, sort, need, complete, bound)
    except sqlite3.DatabaseError as exc:
        if route.name == "scan" or not _fts_failed(exc):
            raise
        return _walk_part(part, _scan_route(query), sort, need, complete, bound)


def _find_all(parts: Sequence[_Part], query: Query, sort: str, need: int, complete: bool) -> None:
    """Try the routes in step in every store: the next route only when none found anything,
    as one store holding every session would."""
    oldest = sort == "oldest"
    # Newest ids first (oldest for sort="oldest"): once the stores walked so far hold `want`
    # matches, a later store can add only ids beyond the want-th, and often has none.
    walking = sorted(
        (p for p in parts if p.walks),
        key=lambda p: p.idx.min_id if oldest else -p.idx.max_id,
    )
    want = _want(sort, need, complete)
    longest = max((len(p.routes) for p in walking), default=0)
    for step in range(longest):
        best: list[int] = []  # the want best ids so far, as a heap (its worst first)
        for part in walking:
            if step >= len(part.routes):
                continue
            bound = None
            if len(best) >= want:
                bound = -best[0] if oldest else best[0]
                edge = part.idx.min_id if oldest else part.idx.max_id
                if (edge >= bound) if oldest else (edge <= bound):
                    part.found, part.bounded = None, True
                    continue
            _ready(part, query)
            with _Budget(
                part.conn, None if complete else search_walk.SEARCH_BUDGET_STEPS
            ) as part.budget:
                part.found = _run_part(part, part.routes[step], query, sort, need, complete, bound)
            part.bounded = bound is not None
            for i in part.found.walk.ids:
                key = -i if oldest else i
                if len(best) < want:
                    heapq.heappush(best, key)
                elif key > best[0]:
                    heapq.heapreplace(best, key)
        if any(
            p.found is not None and (p.found.ids or not p.found.walk.exhausted) for p in walking
        ):
            return


def _score(parts: Sequence[_Part], pool: Sequence[tuple[int, int]]) -> dict[tuple[int, int], float]:
    """Return the BM25 rank of each pooled (part, id) an index found, with the statistics of
    every store together."""
    by_table: dict[str, list[int]] = {}
    for n, part in enumerate(parts):
        found = part.found
        if found is None or found.ordering not in ("rank", "rank_recent"):
            continue
        by_table.setdefault(found.route.sources[0].table, []).append(n)
    out: dict[tuple[int, int], float] = {}
    for table, users in by_table.items():
        match = parts[users[0]].found.route.sources[0].match[1][0]
        groups = phrase_groups(match)
        phrases = [p for g in groups for p in g]
        stats: dict[int, _TableStats] = {}
        for n, part in enumerate(parts):
            # Every store holding the table counts, walked or not: one store would hold them all.
            try:
                rows, tokens = table_totals(part.conn, table)
                stats[n] = _TableStats(rows, tokens, _phrase_hits(part.conn, table, phrases))
            except sqlite3.DatabaseError:
                continue
        total_rows = sum(s.rows for s in stats.values())
        total_tokens = sum(s.tokens for s in stats.values())
        if not total_rows:
            continue
        avgdl = total_tokens / total_rows
        weights = [
            idf(total_rows, sum(s.hits[k] for s in stats.values())) for k in range(len(phrases))
        ]
        for n in users:
            part = parts[n]
            ids = [i for m, i in pool if m == n and part.found.walk.by_source.get(i) == 0]
            if not ids or n not in stats:
                continue
            lengths = doc_lengths(part.conn, table, ids)
            freqs = _freqs(part.conn, table, groups, stats[n], ids, lengths, part.found.walk.ranks)
            spans = [(at, at + len(g)) for at, g in zip(_starts(groups), groups, strict=True)]
            for i in ids:
                f = freqs[i]
                if len(spans) > 1:
                    # A phrase counts in a row only when its whole AND-group matches there.
                    f = [v for a, z in spans for v in (f[a:z] if all(f[a:z]) else [0.0] * (z - a))]
                out[(n, i)] = bm25(weights, f, lengths.get(i, 0), avgdl)
    return out


def search_spanning(
    live: Store,
    home: Path,
    query: str,
    *,
    vaulted: bool = True,
    source_filter: Iterable[str] | str | None = None,
    exclude_sources: Iterable[str] | str | None = None,
    role_filter: Iterable[str] | str | None = None,
    limit: int = 20,
    offset: int = 0,
    sort: str = "rank",
    include_inactive: bool = False,
    after: float | None = None,
    before: float | None = None,
    archived: bool | None = None,
    pinned: bool | None = None,
    context: bool = True,
    complete: bool = False,
    strict_sort: bool = False,
    hide: Callable[[str], str] | None = None,
) -> search.SearchResult:
    """Search the live store and (``vaulted``) every vault store as one; each hit gets
    ``"vault"``: its vault year, or None for the live store.

    Same arguments and result as :func:`hermes_state.search.search.search_messages`; counts are sums
    over the stores, and ``partial`` says that some store's walk stopped at its work budget.
    """
    paths = vault_stores.vault_paths(home) if vaulted else []
    if not paths:
        # The live store alone: its own search, exactly.
        return search.search_messages(
            live,
            query,
            source_filter=source_filter,
            exclude_sources=exclude_sources,
            role_filter=role_filter,
            limit=limit,
            offset=offset,
            sort=sort,
            include_inactive=include_inactive,
            after=after,
            before=before,
            archived=archived,
            pinned=pinned,
            context=context,
            complete=complete,
            strict_sort=strict_sort,
            hide=hide,
        )
    if sort not in search.SORTS:
        sort = "rank"
    parsed = tame_prefixes(parse_query(query if isinstance(query, str) else ""))
    limit, offset = max(0, int(limit)), max(0, int(offset))
    if not parsed.wanted().groups or limit == 0:
        return search.SearchResult(ordering=sort, route="none")
    kwargs = {
        "source_filter": source_filter,
        "exclude_sources": exclude_sources,
        "role_filter": role_filter,
        "include_inactive": include_inactive,
        "after": after,
        "before": before,
    }
    need = offset + limit
    with contextlib.ExitStack() as stack:
        flags = (archived, pinned)
        parts = [_open_part(stack, None, live, live, parsed, kwargs, *flags, hide=hide)]
        if paths:
            for year, path in reversed(paths):
                store = stack.enter_context(_read_vault(path, live))
                part = _open_part(stack, year, store, live, parsed, kwargs, *flags, hide=hide)
                # A store of year Y holds no message sent after Y: --since may rule it out.
                part.walks = after is None or float(after) < _year_end(year)
                parts.append(part)
        if hide is not None:
            parsed = parsed.wanted()  # exclusions: checked with the hidden parts blanked out
        _find_all(parts, parsed, sort, need, complete)
        return _merge(parts, parsed, sort, need, offset, complete, strict_sort, context)


def _open_part(
    stack: contextlib.ExitStack,
    year: str | None,
    store: Store,
    live: Store,
    query: Query,
    kwargs: dict[str, Any],
    archived: bool | None,
    pinned: bool | None,
    *,
    hide: Callable[[str], str] | None = None,
) -> _Part:
    """Open a read snapshot of one store and prepare its filters and routes (hide: as
    search_messages has it)."""
    conn = stack.enter_context(store.snapshot())
    register_functions(conn)
    idx = _indexes_of(store)
    filters = _filters(store, archived=archived, pinned=pinned, conn=conn, idx=idx, **kwargs)
    if hide is not None:
        query, filters = shown_matches(conn, query, filters, hide)
    # A vault store's routes are built again with its hidden sessions when it is walked
    # (_ready); these give how many there are.
    routes = list(_routes(query, idx, filters))  # bound to the snapshot when walked
    return _Part(year, store, conn, filters, idx, routes, hides=None if year is None else live)


def _merge(
    parts: Sequence[_Part],
    query: Query,
    sort: str,
    need: int,
    offset: int,
    complete: bool,
    strict_sort: bool,
    context: bool,
) -> search.SearchResult:
    """Merge the stores' walks into one answer: pick, rank, load the page's hits and count."""
    found = [(n, p.found) for n, p in enumerate(parts) if p.found is not None]
    if not found:
        return search.SearchResult(ordering=sort, route="none")
    newest = sort != "oldest"
    # Walk order across stores: by message id (kept by a move), as one store walks.
    streams = [[(-i if newest else i, n, i) for i in f.walk.ids] for n, f in found]
    merged = [(n, i) for _, n, i in heapq.merge(*streams)]
    ranking = [f for _, f in found if f.ordering in ("rank", "rank_recent")]
    ordering = found[0][1].ordering
    ranked: int | None = None
    if ranking:
        cap = len(merged) if complete else max(need, search_walk.RANK_CANDIDATES)
        pool = merged[:cap]
        exhausted = all(f.walk.exhausted for _, f in found) and len(merged) < cap
        ordering = "rank" if complete or exhausted else "rank_recent"
        ranked = len(pool)
        scores = _score(parts, pool)
        best = sorted((k for k in pool if k in scores), key=lambda k: (scores[k], -k[1]))
        ids = (best + [k for k in pool if k not in scores])[:need]
    else:
        ordering = "newest" if newest else "oldest"
        ids = merged[:need]
        if strict_sort and sort == "rank" and ids:
            kind = "substring" if found[0][1].route.name == "trigram" else "scanned"
            raise SortUnavailableError(
                f"{kind} matches have no relevance rank (sort them newest or oldest first)"
            )
    page = ids[offset:need]
    loaded: dict[tuple[int, int], dict[str, Any]] = {}
    for n, f in found:
        mine = [i for m, i in page if m == n]
        part = parts[n]
        for at in range(0, len(mine), HITS_PER_STATEMENT):
            for hit in _hits(
                part.store,
                f,
                query,
                part.filters,
                mine[at : at + HITS_PER_STATEMENT],
                with_context=context,
            ):
                hit["vault"] = part.year
                loaded[(n, hit["id"])] = hit
    matches = sessions = 0
    counted = True
    for n, f in found:
        m, s, exact = search._tally(parts[n].conn, f, parts[n].filters, complete=False)
        matches, sessions = matches + m, sessions + s
        counted = counted and exact and not parts[n].bounded
    result = search.SearchResult(
        [loaded[k] for k in page if k in loaded],
        ordering=ordering,
        route=_route_name(found),
        partial=any(f.walk.stopped for _, f in found),
        ranked=ranked,
        matches=matches,
        sessions=sessions,
        complete=counted,
    )
    stopped = [(n, f) for n, f in found if f.walk.stopped]
    if stopped:
        examined = candidates = 0
        back: list[float] = []
        for n, f in stopped:
            e, c, t = search._coverage(parts[n].conn, f.route, f.walk, newest)
            examined, candidates = examined + e, candidates + c
            if t is not None:
                back.append(float(t))
        result.examined, result.candidates = examined, candidates
        result.searched_back_to = (max(back) if newest else min(back)) if back else None
    return result


def _route_name(found: Sequence[tuple[int, Any]]) -> str:
    """Return the route that served the most stores' matches (the live store's on a tie)."""
    names = [f.route.name for _, f in found if f.ids] or [found[0][1].route.name]
    return str(max(dict.fromkeys(names), key=names.count))


def count_spanning(
    live: Store,
    home: Path,
    query: str,
    *,
    source_filter: Iterable[str] | str | None = None,
    exclude_sources: Iterable[str] | str | None = None,
    role_filter: Iterable[str] | str | None = None,
    include_inactive: bool = False,
    after: float | None = None,
    before: float | None = None,
    archived: bool | None = None,
    pinned: bool | None = None,
    cap: int = search.COUNT_CAP,
    budget_s: float = search.COUNT_BUDGET_S,
    should_stop: Callable[[], bool] | None = None,
) -> search.MatchCount:
    """Count the matches of the live store and every vault store as :func:`search_spanning`
    pages through them, within one budget_s for all (None past it, as count_matches)."""
    kwargs: dict[str, Any] = {
        "source_filter": source_filter,
        "exclude_sources": exclude_sources,
        "role_filter": role_filter,
        "include_inactive": include_inactive,
        "after": after,
        "before": before,
        "archived": archived,
        "pinned": pinned,
    }
    deadline = time.monotonic() + budget_s
    found = search.count_matches(
        live, query, cap=cap, budget_s=budget_s, should_stop=should_stop, **kwargs
    )
    paths = vault_stores.vault_paths(home)
    if found.count is None or not found.complete or not paths:
        return found
    parsed = tame_prefixes(parse_query(query if isinstance(query, str) else ""))
    if not parsed.wanted().groups:
        return found
    total, route = found.count, found.route
    for year, path in reversed(paths):
        if after is not None and float(after) >= _year_end(year):
            continue  # a store of year Y holds no message sent after Y
        left = deadline - time.monotonic()
        if left <= 0:
            return search.MatchCount(None, False, "none")
        with (
            _read_vault(path, live) as s,
            s.snapshot() as conn,
        ):
            register_functions(conn)
            idx = _indexes_of(s)
            filters = _filters(s, conn=conn, idx=idx, **kwargs)
            kept = _hiding(filters, hidden_sessions(live, conn))
            with _Budget(conn, None, seconds=left, should_stop=should_stop) as budget:
                try:
                    n, name = search._count_routes(conn, parsed, idx, kept, cap - total)
                except sqlite3.DatabaseError as exc:
                    if not budget.interrupted(exc):
                        raise
                    return search.MatchCount(None, False, "none")
        if n and not total:
            route = name
        total += n
        if total >= cap:
            return search.MatchCount(cap, False, route)
    return search.MatchCount(total, True, route)


# --- listing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpanningList:
    """A page of sessions from the live store and the vault, and how many there are."""

    rows: list[dict[str, Any]]
    total: int


def list_spanning(
    live: Store,
    home: Path,
    *,
    limit: int,
    offset: int = 0,
    order: str = "started",
    reverse: bool = False,
    **filters: Any,
) -> SpanningList:
    """List sessions of the live store and every vault store as one list (each row with
    ``"vault"``: its year, None for live) in the listing's order, with message counts."""
    key = "last_active" if order == "active" else "started_at"
    want = limit + offset
    pages: list[list[dict[str, Any]]] = []
    total = 0
    stores: list[tuple[str | None, Path | None]] = [(None, None)]
    stores += [(y, p) for y, p in reversed(vault_stores.vault_paths(home))]
    for year, path in stores:
        with contextlib.ExitStack() as stack:
            store = live
            if path is not None:
                store = stack.enter_context(_read_vault(path, live))
            conn = stack.enter_context(store.snapshot())
            hidden = hidden_sessions(live, conn, resumed_too=True) if year is not None else set()
            rows = list_sessions(
                store, limit=want + len(hidden), offset=0, order=order, reverse=reverse, **filters
            )
            kept = [r for r in rows if r["id"] not in hidden]
            # Hidden sessions beyond the rows read are not known here: exact unless an
            # interrupted move left more than that many sessions in both places.
            total += count_sessions(store, **filters) - (len(rows) - len(kept))
            counts = message_counts(store, [r["id"] for r in kept])
            for r in kept:
                r["vault"] = year
                r["message_count"] = counts[r["id"]].live
                r["stored_message_count"] = counts[r["id"]].stored
            pages.append(kept)
    merged = [r for rows in pages for r in rows]
    merged.sort(key=lambda r: (r.get(key) or 0, r["id"]), reverse=not reverse)
    return SpanningList(merged[offset : offset + limit], total)


# --- what the CLI shows beside hits ---------------------------------------------------------


def hit_titles(live: Store, home: Path, hits: Iterable[dict[str, Any]]) -> dict[str, str | None]:
    """Return the title of each hit's session, read from the store the hit came from."""
    from hermes_state.records.sessions import get_session_title
    from hermes_state.store.errors import SessionNotFoundError

    by_year: dict[str | None, set[str]] = {}
    for h in hits:
        by_year.setdefault(h.get("vault"), set()).add(str(h["session_id"]))
    paths = dict(vault_stores.vault_paths(home))
    out: dict[str, str | None] = {}
    for year, ids in by_year.items():
        with contextlib.ExitStack() as stack:
            store = live
            if year is not None:
                store = stack.enter_context(
                    contextlib.closing(
                        vault_stores.open_vault(paths[year], read_only=True, waiting=live.waiting)
                    )
                )
            for sid in ids:
                try:
                    out[sid] = get_session_title(store, sid)
                except SessionNotFoundError:
                    out[sid] = None
    return out


def vault_sources(live: Store, home: Path) -> set[str]:
    """Return the sources of the sessions in every vault store."""
    from hermes_state.records.session_list import distinct_sources

    found: set[str] = set()
    for _year, path in vault_stores.vault_paths(home):
        with _read_vault(path, live) as s:
            found.update(distinct_sources(s))
    return found
