"""Walking a route's candidate sources by message id within a work budget, and ranking them.

See :mod:`hermes_state.search.search` (the walk, ordering) for the design.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from hermes_state.search.query import Query
from hermes_state.search.routes import _Filters, _Indexes, _Route, _routes, _scan_route, _Source
from hermes_state.store.errors import SortUnavailableError, is_corruption_error, is_lock_error

RANK_CANDIDATES = 2000  # larger match sets are ranked among their newest N matches
COUNT_AHEAD = RANK_CANDIDATES  # matches a newest/oldest walk finds, to say how many there are
SEARCH_BUDGET_STEPS = 2_000_000  # SQLite VM steps one search may spend (~200,000 candidates)
PROGRESS_STEPS = 1000  # VM steps between progress-handler calls
FIRST_WINDOW_IDS = 1024  # the walk's first id window; each next one is twice as large...
MAX_WINDOW_IDS = 65_536  # ...up to this: a budget cut loses at most one window's progress


@dataclass
class _Walk:
    """What a walk found: ids in walk order, and how far it got."""

    ids: list[int]
    by_source: dict[int, int]  # id -> index of the first source that found it
    exhausted: bool  # every candidate was examined
    stopped: bool = False  # the budget stopped it first
    reached: int | None = None  # stopped: ids beyond this one (in walk order) were all examined
    ranks: dict[int, float] = field(default_factory=dict)  # BM25 of the first source's ids
    sessions: dict[int, Any] = field(default_factory=dict)  # id -> its session, as walked


# --- the walk -------------------------------------------------------------------------------


class _Budget:
    """A work budget for one search, checked by the connection's progress handler.

    ``steps`` (SQLite VM steps) is deterministic: the same store and query always stop at the
    same place. ``seconds`` (wall time) and ``should_stop`` serve interactive counting. None of
    them set: the work runs to the end.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        steps: int | None,
        *,
        seconds: float | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        """Prepare a budget for work on conn."""
        self.conn = conn
        self.ticks_left = None if steps is None else max(1, steps // PROGRESS_STEPS)
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.should_stop = should_stop
        self.spent = False
        self.suspended = False

    def _tick(self) -> int:
        if self.suspended:
            return 0
        if self.ticks_left is not None:
            self.ticks_left -= 1
            self.spent = self.spent or self.ticks_left < 0
        if self.deadline is not None:
            self.spent = self.spent or time.monotonic() > self.deadline
        if self.should_stop is not None:
            self.spent = self.spent or self.should_stop()
        return int(self.spent)

    def __enter__(self) -> _Budget:
        if self.ticks_left is not None or self.deadline is not None or self.should_stop:
            self.conn.set_progress_handler(self._tick, PROGRESS_STEPS)
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.set_progress_handler(None, 0)

    @contextlib.contextmanager
    def suspended_for(self) -> Iterator[None]:
        """Run bounded follow-up work (ranking what the walk found) outside the budget."""
        self.suspended = True
        try:
            yield
        finally:
            self.suspended = False

    def interrupted(self, exc: BaseException) -> bool:
        """Tell whether exc is this budget stopping a statement."""
        return self.spent and isinstance(exc, sqlite3.OperationalError)


def _source_select(
    source: _Source, filters: _Filters, with_rank: bool = False, with_session: bool = False
) -> tuple[str, str, tuple[Any, ...]]:
    """Return a source's filtered matches as (SELECT m.id ... WHERE ..., its id column, params);
    ``with_session`` selects the message's session next, ``with_rank`` the index's BM25 rank
    after that."""
    session = ", m.session_id" if with_session else ""
    if source.table is None:
        key = "m.id"
        head = f"SELECT m.id{session} FROM messages m"
    else:
        key = f"{source.table}.rowid"
        rank = f", {source.table}.rank" if with_rank else ""
        # CROSS JOIN keeps the index as the outer loop: candidates are walked in rowid order.
        head = (
            f"SELECT m.id{session}{rank} FROM {source.table} CROSS JOIN messages m ON m.id = {key}"
        )
    check = source.condition()
    where = [source.match[0], check[0], filters.sql]
    if source.window is not None:
        lo, hi = source.window
        where.append(f"m.id > {int(lo)} AND m.id <= {int(hi)}")
    params = (*source.match[1], *check[1], *filters.params)
    return f"{head} WHERE {' AND '.join(where)}", key, params


@functools.lru_cache(maxsize=256)
def _source_sql(
    source: _Source,
    filters: _Filters,
    window: tuple[int, int],
    newest: bool,
    with_rank: bool = False,
) -> tuple[str, tuple[Any, ...]]:
    """Return the statement finding a source's matches in the id window (low, high], in order:
    rows of (id, session[, rank])."""
    select, key, params = _source_select(source, filters, with_rank, with_session=True)
    low, high = window
    return (
        f"{select} AND {key} > {int(low)} AND {key} <= {int(high)} "
        f"ORDER BY {key} {'DESC' if newest else 'ASC'} LIMIT ?",
        params,
    )


_SECOND, _THIRD = itemgetter(1), itemgetter(2)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Tell whether two id windows (low, high] share an id."""
    return max(a[0], b[0]) < min(a[1], b[1])


def _walk_window(
    conn: sqlite3.Connection,
    sources: Sequence[_Source],
    filters: _Filters,
    window: tuple[int, int],
    newest: bool,
    need: int,
    budget: _Budget,
    ranks: dict[int, float] | None = None,
    sessions: dict[int, Any] | None = None,
) -> tuple[list[tuple[int, int]], int | None]:
    """Run every source over one id window; return (id, source) pairs and, when the budget cut
    the window short, the id beyond which (in walk order) every candidate was examined.

    Given ``ranks``, the first source's BM25 rank of each id it returns is put there (when that
    source can be ranked): the ranking needs no statement of its own. Given ``sessions``, each
    id's session is put there (counting the sessions then needs no statement either)."""
    got: dict[int, int] = {}
    # How far each source got: the window's far end once it ran to the end.
    reached: list[int] = []
    near = window[1] if newest else window[0]
    for i, source in enumerate(sources):
        if budget.spent:
            reached.append(near)
            continue
        if source.window is not None and not _overlap(source.window, window):
            reached.append(window[0] if newest else window[1])
            continue
        with_rank = ranks is not None and i == 0 and source.rankable and source.table is not None
        sql, params = _source_sql(source, filters, window, newest, with_rank)
        cursor = conn.cursor()
        cursor.row_factory = None  # plain tuples: the walk reads thousands of rows by position
        rows: list[tuple[Any, ...]] = []
        cut = False
        try:
            # extend() reads the cursor in C, and keeps the rows read before an interruption.
            rows.extend(cursor.execute(sql, (*params, need)))
        except sqlite3.OperationalError as exc:
            if not budget.interrupted(exc):
                raise
            cut = True
        ids = [row[0] for row in rows]
        if got:
            for row_id in ids:
                got.setdefault(row_id, i)
        else:
            got = dict.fromkeys(ids, i)
        if with_rank and ranks is not None:
            ranks.update(zip(ids, map(_THIRD, rows), strict=True))
        if sessions is not None:
            sessions.update(zip(ids, map(_SECOND, rows), strict=True))
        if cut:
            # Every candidate from the near end down to the last hit was examined.
            last = ids[-1] if ids else None
            reached.append(near if last is None else (last - 1 if newest else last + 1))
            continue
        reached.append(window[0] if newest else window[1])
    pairs = sorted(got.items(), reverse=newest)
    if not budget.spent:
        return pairs[:need], None
    edge = max(reached) if newest else min(reached)
    kept = [(i, s) for i, s in pairs if (i > edge if newest else i < edge)]
    return kept[:need], edge


def _walk(
    conn: sqlite3.Connection,
    route: _Route,
    filters: _Filters,
    idx: _Indexes,
    *,
    newest: bool,
    need: int,
    budget: _Budget,
    with_rank: bool = False,
) -> _Walk:
    """Walk the route's sources window by window until need hits, the end, or the budget
    (``with_rank``: keeping the first source's BM25 rank of each of its ids)."""
    walk = _Walk([], {}, exhausted=False)
    low, high = idx.min_id - 1, idx.max_id
    prefix = any(s.prefix for s in route.sources)
    # When every candidate is a hit (no narrowing filter, no check beyond the index lookup), one
    # statement over every id streams the newest first and stops at need; a budget cut still
    # knows exactly how far it got.
    exact = not filters.narrows and all(s.check[0] == "1" for s in route.sources)
    size = high - low if exact and not prefix else FIRST_WINDOW_IDS
    pos = high if newest else low
    while len(walk.ids) < need:
        window = (max(low, pos - size), pos) if newest else (pos, min(high, pos + size))
        if window[0] >= window[1]:
            walk.exhausted = True
            break
        pairs, edge = _walk_window(
            conn,
            route.sources,
            filters,
            window,
            newest,
            need - len(walk.ids),
            budget,
            walk.ranks if with_rank else None,
            walk.sessions,
        )
        walk.ids.extend(map(itemgetter(0), pairs))
        walk.by_source.update(pairs)
        if edge is not None:
            walk.stopped, walk.reached = len(walk.ids) < need, edge
            break
        pos = window[0] if newest else window[1]
        # A prefix is merged again by every statement: after the first window, take the rest.
        # Candidates that may be rejected keep the doubling windows: a budget cut then loses at
        # most one window's precision.
        size = high - low if prefix or exact else min(size * 2, MAX_WINDOW_IDS)
    return walk


# --- ranking --------------------------------------------------------------------------------


def _rank(
    conn: sqlite3.Connection,
    source: _Source,
    filters: _Filters,
    need: int,
    span: tuple[int, int] | None = None,
) -> list[int]:
    """Return the best need filtered matches of an index source by BM25 (within span, when given:
    ids [low, high], a range the walk examined in full)."""
    assert source.table is not None
    table = source.table
    check = source.condition()
    where = f"{source.match[0]} AND {check[0]} AND {filters.sql}"
    params: tuple[Any, ...] = (*source.match[1], *check[1], *filters.params)
    if span is not None:
        where += f" AND {table}.rowid BETWEEN ? AND ?"
        params += span
    rows = conn.execute(
        f"SELECT m.id FROM {table} CROSS JOIN messages m ON m.id = {table}.rowid "
        f"WHERE {where} ORDER BY {table}.rank, m.id DESC LIMIT ?",
        (*params, need),
    )
    return [r[0] for r in rows]


@dataclass
class _Found:
    """The ids a search returns, best first, and how they were found."""

    ids: list[int]
    ordering: str
    route: _Route
    walk: _Walk
    from_index: set[int] = field(default_factory=set)  # ids the route's first source found
    ranked: int | None = None


def _ranked(
    conn: sqlite3.Connection,
    route: _Route,
    filters: _Filters,
    idx: _Indexes,
    need: int,
    *,
    complete: bool,
    budget: _Budget,
) -> _Found:
    """Find the best need matches by BM25 (index hits first, then rows only a scan found)."""
    index = route.sources[0]
    if complete:
        ranked = _rank(conn, index, filters, need)
        rest = _Route(route.name, route.sources[1:])
        walk = _walk(conn, rest, filters, idx, newest=True, need=need, budget=budget)
        extra = [i for i in walk.ids if i not in set(ranked)]
        return _Found((ranked + extra)[:need], "rank", route, walk, set(ranked))
    walk = _walk(
        conn,
        route,
        filters,
        idx,
        newest=True,
        need=max(need, RANK_CANDIDATES),
        budget=budget,
        with_rank=True,
    )
    from_index = [i for i in walk.ids if walk.by_source[i] == 0]
    scanned = [i for i in walk.ids if walk.by_source[i] != 0]
    best: list[int] = []
    if from_index and walk.ranks.keys() >= set(from_index):
        # The walk read every one of them with its rank: the same order as _rank's
        # ORDER BY rank, id DESC over the span they fill, without a second lookup. The walk
        # went newest first, so a stable sort by rank keeps ties in id DESC order.
        best = sorted(from_index, key=walk.ranks.__getitem__)[:need]
    elif from_index:
        # Ranking scores the candidates the walk already examined: bounded by what it spent.
        with budget.suspended_for():
            best = _rank(conn, index, filters, need, (min(from_index), max(from_index)))
    ordering = "rank" if walk.exhausted else "rank_recent"
    ids = (best + scanned)[:need]
    return _Found(ids, ordering, route, walk, set(from_index), ranked=len(walk.ids))


def _fts_failed(exc: sqlite3.Error) -> bool:
    """Tell whether an FTS query error should fall back to scanning (not a lock error)."""
    if is_lock_error(exc):
        return False
    return isinstance(exc, sqlite3.OperationalError) or is_corruption_error(exc)


def _run(
    conn: sqlite3.Connection,
    route: _Route,
    filters: _Filters,
    idx: _Indexes,
    sort: str,
    need: int,
    *,
    complete: bool,
    budget: _Budget,
) -> _Found:
    """Run one route: ranked when asked and the route can rank, else in id order."""
    if sort == "rank" and route.sources[0].rankable:
        return _ranked(conn, route, filters, idx, need, complete=complete, budget=budget)
    newest = sort != "oldest"
    # The walk goes on past the page, as a ranked one does, so the result can say how many
    # matches there are.
    walk = _walk(
        conn, route, filters, idx, newest=newest, need=max(need, COUNT_AHEAD), budget=budget
    )
    if walk.stopped and len(walk.ids) >= need:
        walk.stopped = False  # every hit asked for was found: only the count stopped short
    first = {i for i in walk.ids if walk.by_source[i] == 0}
    return _Found(walk.ids[:need], "newest" if newest else "oldest", route, walk, first)


def _find(
    conn: sqlite3.Connection,
    query: Query,
    idx: _Indexes,
    filters: _Filters,
    sort: str,
    need: int,
    *,
    complete: bool,
    strict_sort: bool,
    budget: _Budget,
) -> _Found:
    """Try the query's routes in order: the next one when one finds nothing, or fails."""
    found: _Found | None = None
    for route in _routes(query, idx, filters, conn):
        try:
            found = _run(conn, route, filters, idx, sort, need, complete=complete, budget=budget)
        except sqlite3.DatabaseError as exc:
            if route.name == "scan" or not _fts_failed(exc):
                raise
            # A foreign or damaged index: fail open to a scan.
            scan = _scan_route(query)
            found = _run(conn, scan, filters, idx, sort, need, complete=complete, budget=budget)
        if found.ids or not found.walk.exhausted:
            break
    assert found is not None
    if (
        strict_sort
        and sort == "rank"
        and found.ids
        and found.ordering not in ("rank", "rank_recent")
    ):
        kind = "substring" if found.route.name == "trigram" else "scanned"
        raise SortUnavailableError(
            f"{kind} matches have no relevance rank (sort them newest or oldest first)"
        )
    return found
