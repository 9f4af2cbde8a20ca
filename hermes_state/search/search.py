"""Message search: routing a query to an index, walking its candidates within a work budget.

Routing (see also :mod:`hermes_state.store.fts`):

- a word query goes to ``messages_fts`` (BM25);
- a query with CJK characters goes to ``hermes_cjk`` (bigram phrases), other words of the
  query being checked on the candidate rows;
- zero word hits, or a query the word index cannot serve (``ocker`` inside ``docker``, emoji),
  goes to ``messages_fts_trigram`` (non-tool rows), each term of 3+ characters as a phrase
  ``MATCH``, when each OR-group has one; the other terms are checked exactly on its candidates;
- otherwise, and for stores whose indexes are stale, a LIKE scan of the messages.

Rows an index does not hold yet (a chunked rebuild's ``(progress, high_water]`` window, CJK rows
above the catch-up mark) are scanned as part of the same walk, so each hit appears once.

**The walk.** A route is a set of candidate sources (index lookups and LIKE scans). They are
walked together by message id, newest first (oldest first for ``sort="oldest"``), in id windows
that double in size (up to ``MAX_WINDOW_IDS``), with every filter applied inside the SQL of
each window. The walk stops when it has the hits it needs, when every candidate was examined, or
when the work budget is spent:
``SEARCH_BUDGET_STEPS`` SQLite VM steps (about 200,000 candidates here), counted by a progress
handler. Steps, not seconds, so the same store and query always give the same hits. A walk cut
by the budget is ``partial``: the result says how far it got (``examined`` of ``candidates``,
back to ``searched_back_to``). ``complete=True`` walks to the end.

**Ordering.** BM25 costs little per row scored, but ranking every match of a common word means
scoring all of them (~0.9 s for half of 1 M rows). So ``sort="rank"`` collects the newest
``RANK_CANDIDATES`` matches (filters applied) and ranks those: ``rank`` when that is every match,
``rank_recent`` when more exist (``ranked`` says how many were ranked). ``complete=True`` ranks
every match. The trigram and scan routes cannot rank: their hits come newest first, and
``strict_sort=True`` turns that into :class:`SortUnavailableError` instead.

**Exclusions and counts.** A query's wanted terms choose its route; its exclusions (``-word``,
``NOT word``) are one check added to every source of every route
(:func:`hermes_state.search.query.exclusion_sql`), so whichever index answers, the same messages are
left out. A result says how many messages match, in how many sessions: a walk goes on to its
``COUNT_AHEAD``-th match (a ranked one collects that many anyway), and the counts are exact
(``complete``) when it examined every candidate; ``complete=True`` counts every match in SQLite.

Hits carry the documented ``HIT_KEYS``; ``context`` is the hit in its surroundings: the visible
message (same visibility rules as the hits) just before it in its session, the hit itself and
the one just after, each ``{id, role, content}`` with content cut to ``CONTEXT_CHARS``. A
prefix shorter than ``MIN_PREFIX_CHARS`` (``th*``) is searched as a word. FTS5 expands a prefix
by merging the doclists of every matching term, once per statement, so a prefix query walks in
two windows (the newest, then all the rest). A query whose every candidate is a hit (an index
lookup with no narrowing filter and no further check) walks in one: a window per lookup is what a
rare word would otherwise pay for.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermes_state.search import walk
from hermes_state.search.hits import HITS_PER_STATEMENT, _hits
from hermes_state.search.query import (
    MAX_QUERY_CHARS as MAX_QUERY_CHARS,
    MIN_PREFIX_CHARS as MIN_PREFIX_CHARS,
    Query,
    QueryProblem as QueryProblem,
    parse_query as parse_query,
    query_problem as query_problem,
    query_warnings as query_warnings,
    register_functions,
    sanitize_fts5_query as sanitize_fts5_query,
    tame_prefixes,
)
from hermes_state.search.routes import (
    _Filters,
    _filters,
    _Indexes,
    _indexes_of,
    _Route,
    _routes,
    _scan_route,
    shown_matches,
)
from hermes_state.search.walk import (
    _Budget,
    _find,
    _Found,
    _fts_failed,
    _source_select,
    _Walk,
)
from hermes_state.store.sql import marks

if TYPE_CHECKING:
    from hermes_state.store.connection import Store

COUNT_CAP = 10_000_000  # count_matches stops counting here
COUNT_BUDGET_S = 1.0  # count_matches gives up after this long
SORTS = ("rank", "newest", "oldest")
HIT_KEYS = (
    "id",
    "session_id",
    "role",
    "snippet",
    "timestamp",
    "tool_name",
    "source",
    "model",
    "session_started",
    "context",
)

_Sql = tuple[str, tuple[Any, ...]]


# --- results --------------------------------------------------------------------------------


class SearchResult(list[dict[str, Any]]):
    """The hits of a search (dicts with HIT_KEYS), plus how they were found.

    ``ordering``: "rank" (BM25 over every match), "rank_recent" (BM25 over the newest ``ranked``
    matches; more exist), "newest" or "oldest" (by message id).
    ``route``: "word", "cjk", "trigram", "scan" or "none".
    ``partial``: the work budget stopped the search before it examined every candidate and
    before it had the hits asked for; then ``examined`` of ``candidates`` were examined (the
    candidates an index or scan offered, before filters), every one sent at or after
    ``searched_back_to`` (a message timestamp; before it for sort="oldest").
    ``matches`` and ``sessions``: how many messages match and in how many sessions; exact when
    ``complete``, else lower bounds (the walk stopped at its COUNT_AHEAD-th match, or at the
    work budget, before it had examined every candidate).
    """

    def __init__(
        self,
        hits: Iterable[dict[str, Any]] = (),
        *,
        ordering: str = "rank",
        route: str = "word",
        partial: bool = False,
        ranked: int | None = None,
        examined: int | None = None,
        candidates: int | None = None,
        searched_back_to: float | None = None,
        matches: int = 0,
        sessions: int = 0,
        complete: bool = True,
    ) -> None:
        """Wrap the hits with how they were found."""
        super().__init__(hits)
        self.ordering = ordering
        self.route = route
        self.partial = partial
        self.ranked = ranked
        self.examined = examined
        self.candidates = candidates
        self.searched_back_to = searched_back_to
        self.matches = matches
        self.sessions = sessions
        self.complete = complete


@dataclass(frozen=True)
class MatchCount:
    """How many messages a query matches with its filters, as count_matches found.

    ``count`` is None when counting took longer than its budget (or was stopped).
    ``complete`` is False when the count is only a lower bound (the cap was reached).
    """

    count: int | None
    complete: bool
    route: str


# --- searching ------------------------------------------------------------------------------


def _coverage(
    conn: sqlite3.Connection, route: _Route, walk: _Walk, newest: bool
) -> tuple[int, int, float | None]:
    """Count what a stopped walk examined: (candidates examined, candidates in all, and the
    timestamp of the last message it examined)."""
    assert walk.reached is not None
    beyond = ">" if newest else "<"
    examined = total = 0
    for source in route.sources:
        if source.table is None:
            base, key = "SELECT count(*) FROM messages m WHERE 1", "m.id"
            params: tuple[Any, ...] = ()
            if source.window is not None:
                lo, hi = source.window
                base += f" AND m.id > {int(lo)} AND m.id <= {int(hi)}"
        else:
            base, key = f"SELECT count(*) FROM {source.table} WHERE {source.match[0]}", "rowid"
            params = source.match[1]
        total += int(conn.execute(base, params).fetchone()[0])
        examined += int(
            conn.execute(f"{base} AND {key} {beyond} ?", (*params, walk.reached)).fetchone()[0]
        )
    row = conn.execute(
        f"SELECT timestamp FROM messages WHERE id {beyond} ? "
        f"ORDER BY id {'ASC' if newest else 'DESC'} LIMIT 1",
        (walk.reached,),
    ).fetchone()
    return examined, total, (row[0] if row else None)


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> Query:
    """Parse and tame a query (kept: a Query is immutable, and a search repeats its text)."""
    return tame_prefixes(parse_query(text))


def search_messages(
    store: Store,
    query: str,
    *,
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
) -> SearchResult:
    """Search message text; return hits (dicts with HIT_KEYS) and how they were found.

    after/before (epoch seconds) keep messages whose timestamp is in [after, before);
    ``archived`` and ``pinned`` keep messages of sessions that are (True) or are not (False)
    archived / pinned. ``context=False`` leaves each hit's context empty (saves two lookups a
    hit). ``complete=True`` lifts the work budget: every candidate is examined and every match
    ranked. ``strict_sort=True`` raises SortUnavailableError rather than return unranked hits
    for sort="rank". ``hide`` (text -> text with parts blanked out, such as secrets) keeps only
    messages whose match lies outside those parts, and counts only them (see shown_matches).
    """
    if sort not in SORTS:
        sort = "rank"
    parsed = _parsed(query if isinstance(query, str) else "")
    limit, offset = max(0, int(limit)), max(0, int(offset))
    if not parsed.wanted().groups or limit == 0:
        # Nothing wanted (only exclusions are no search: see query.query_problem).
        return SearchResult(ordering=sort, route="none")
    need = offset + limit
    with store.snapshot() as conn:
        idx = _indexes_of(store)
        filters = _filters(
            store,
            source_filter,
            exclude_sources,
            role_filter,
            include_inactive,
            after,
            before,
            archived=archived,
            pinned=pinned,
            conn=conn,
            idx=idx,
        )
        register_functions(conn)
        if hide is not None:
            parsed, filters = shown_matches(conn, parsed, filters, hide)
        with _Budget(conn, None if complete else walk.SEARCH_BUDGET_STEPS) as budget:
            found = _find(
                conn,
                parsed,
                idx,
                filters,
                sort,
                need,
                complete=complete,
                strict_sort=strict_sort,
                budget=budget,
            )
        page = found.ids[offset:need]
        hits = [
            hit
            for at in range(0, len(page), HITS_PER_STATEMENT)
            for hit in _hits(
                store,
                found,
                parsed,
                filters,
                page[at : at + HITS_PER_STATEMENT],
                with_context=context,
            )
        ]
        matches, sessions, counted = _tally(conn, found, filters, complete=complete)
        result = SearchResult(
            hits,
            ordering=found.ordering,
            route=found.route.name,
            partial=found.walk.stopped,
            ranked=found.ranked,
            matches=matches,
            sessions=sessions,
            complete=counted,
        )
        if found.walk.stopped:
            newest = sort != "oldest"
            result.examined, result.candidates, result.searched_back_to = _coverage(
                conn, found.route, found.walk, newest
            )
    return result


# --- counting -------------------------------------------------------------------------------


def _sessions_of(conn: sqlite3.Connection, walk: _Walk) -> int:
    """Count the distinct sessions of the messages a walk found."""
    ids = walk.ids
    if walk.sessions.keys() >= set(ids):
        return len({walk.sessions[i] for i in ids})  # the walk read them: no statement
    seen: set[Any] = set()
    for at in range(0, len(ids), HITS_PER_STATEMENT):
        chunk = ids[at : at + HITS_PER_STATEMENT]
        rows = conn.execute(
            f"SELECT DISTINCT session_id FROM messages WHERE id IN ({marks(len(chunk))})", chunk
        )
        seen.update(r[0] for r in rows)
    return len(seen)


def _tally(
    conn: sqlite3.Connection, found: _Found, filters: _Filters, *, complete: bool
) -> tuple[int, int, bool]:
    """Return (matches, sessions, exact) of a search, from its walk or, for --all, from SQLite.

    The walk's ids are every match when it examined every candidate; else a lower bound.
    """
    walk = found.walk
    if walk.exhausted and not (complete and found.ordering == "rank"):
        return len(walk.ids), _sessions_of(conn, walk), True
    if complete:
        # A complete ranked search ranked its index matches in SQL: its walk saw only the rest.
        parts: list[str] = []
        params: list[Any] = []
        for source in found.route.sources:
            select, _, p = _source_select(source, filters)
            parts.append(select)
            params += p
        row = conn.execute(
            "SELECT count(*), count(DISTINCT t.session_id) FROM messages t "
            f"WHERE t.id IN ({' UNION '.join(parts)})",
            params,
        ).fetchone()
        return int(row[0]), int(row[1]), True
    return len(walk.ids), _sessions_of(conn, walk), False


def _count_route(conn: sqlite3.Connection, route: _Route, filters: _Filters, cap: int) -> int:
    """Count the distinct filtered matches of a route's sources, up to cap (inside SQLite)."""
    parts: list[str] = []
    params: list[Any] = []
    for source in route.sources:
        select, _, p = _source_select(source, filters)
        parts.append(select)
        params += p
    union = " UNION ".join(parts)
    return int(
        conn.execute(f"SELECT count(*) FROM ({union} LIMIT ?)", (*params, cap)).fetchone()[0]
    )


def count_matches(
    store: Store,
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
    cap: int = COUNT_CAP,
    budget_s: float = COUNT_BUDGET_S,
    should_stop: Callable[[], bool] | None = None,
) -> MatchCount:
    """Count the messages a complete search_messages would page through (same routes).

    Counting a term that matches half of a large store costs far more than finding its first
    hits, so it runs under budget_s (and stops as soon as should_stop() returns True); past that
    the count is None.
    """
    parsed = _parsed(query if isinstance(query, str) else "")
    if not parsed.wanted().groups:
        return MatchCount(0, True, "none")
    cap = max(1, int(cap))
    with store.snapshot() as conn:
        idx = _indexes_of(store)
        filters = _filters(
            store,
            source_filter,
            exclude_sources,
            role_filter,
            include_inactive,
            after,
            before,
            archived=archived,
            pinned=pinned,
            conn=conn,
            idx=idx,
        )
        register_functions(conn)
        with _Budget(conn, None, seconds=budget_s, should_stop=should_stop) as budget:
            try:
                n, name = _count_routes(conn, parsed, idx, filters, cap)
            except sqlite3.DatabaseError as exc:
                if not budget.interrupted(exc):
                    raise
                return MatchCount(None, False, "none")
    return MatchCount(min(n, cap), n < cap, name)


def _count_routes(
    conn: sqlite3.Connection, query: Query, idx: _Indexes, filters: _Filters, cap: int
) -> tuple[int, str]:
    """Count as _find searches: the first route that matches anything (a scan if one fails)."""
    n, name = 0, "none"
    for route in _routes(query, idx, filters, conn):
        try:
            n, name = _count_route(conn, route, filters, cap), route.name
        except sqlite3.DatabaseError as exc:
            if route.name == "scan" or not _fts_failed(exc) or "interrupt" in str(exc):
                raise
            n, name = _count_route(conn, _scan_route(query), filters, cap), "scan"
        if n:
            break
    return n, name
