"""Routing a query: the filters every candidate must pass, which indexes the store can serve,
and the candidate sources (index lookups, LIKE scans) of each route, in the order they are tried.

See :mod:`hermes_state.search.search` for the routes a query takes and why.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from hermes_state.search.query import (
    Query,
    Term,
    exclusion_sql,
    fold,
    has_words,
    query_like,
    term_like,
)
from hermes_state.shapes.content import STRUCTURED_SENTINEL, content_text
from hermes_state.shapes.text import scrub_surrogates
from hermes_state.store import cjk, fts
from hermes_state.store.sql import marks

if TYPE_CHECKING:
    from hermes_state.store.connection import Store

TRIGRAM_MIN_CHARS = 3
_LISTED = "SELECT value FROM json_each(?)"  # the ids of a json list bound as one parameter

_Sql = tuple[str, tuple[Any, ...]]


@dataclass(frozen=True)
class _Filters:
    """SQL conditions on a candidate message (alias m) that every source applies.

    Conditions on the hit's session are never a join: a join lets SQLite's planner start from
    the sessions side and revisit every message of the chosen sessions for each candidate. They
    name the sessions read once in the search's snapshot (see _SessionCond.resolved), or are
    subqueries SQLite runs once a statement.
    """

    sql: str
    params: tuple[Any, ...]
    visible: str  # the visibility condition alone, on alias p (context rows)
    roles: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    narrows: bool = False  # beyond visibility: most candidates may be rejected


@dataclass(frozen=True)
class _Indexes:
    """Which indexes this store can serve and which id windows they do not hold."""

    stale: bool
    word: fts.Index | None
    trigram: fts.Index | None
    cjk: bool
    gap: tuple[int, int] | None  # (progress, high_water]: not in word/trigram
    cjk_high_water: int
    cjk_pending: int
    min_id: int
    max_id: int
    # The sessions the sessions table names for a search (a session condition, the sessions an
    # agent's substring index leaves out), read once for as long as this report stands: it is
    # kept per store until the store changes (_indexes_of).
    session_sets: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class _Source:
    """One stream of candidate rows, walked by id: an FTS lookup, or a LIKE scan of messages.

    ``match`` selects candidates in ``table`` (None: every message); ``check`` is what each
    candidate must also satisfy. ``window`` (low, high] restricts a scan to the rows an index
    lacks.
    """

    table: str | None
    match: _Sql
    check: _Sql = ("1", ())
    window: tuple[int, int] | None = None
    rankable: bool = False  # BM25 over this table means something (word and CJK indexes)
    prefix: bool = False  # FTS5 re-merges prefix doclists for every statement
    # A scan of the rows an agent's substring index leaves out has this set: the ids of the
    # sessions whose rows it leaves out, as JSON once the search has read them (_bound), or ""
    # (a subquery, over every session row, that each statement runs again).
    left_out: str | None = None

    def condition(self) -> _Sql:
        """Return what each candidate must satisfy: the check, after the left-out rows' test."""
        if self.left_out is None:
            return self.check
        if not self.left_out:
            return f"{fts.trigram_left_out_superset('m')} AND {self.check[0]}", self.check[1]
        sql = f"{fts.trigram_left_out_superset('m', _LISTED)} AND {self.check[0]}"
        return sql, (self.left_out, *self.check[1])


@dataclass
class _Route:
    """The sources that serve a query, and how their hits get snippets."""

    name: str
    sources: list[_Source]
    snippet_table: str | None = None  # FTS table whose snippet() serves its own hits
    snippet_match: str = ""


# --- filters and indexes --------------------------------------------------------------------


def _as_list(value: Iterable[str] | str | None) -> list[str]:
    """Return filter values as a list of strings sqlite3 can bind (lone surrogates removed)."""
    if value is None:
        return []
    values = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)]
    return [scrub_surrogates(v) for v in values]


INLINE_SESSIONS = 1000  # a session condition matching at most this many is inlined


def _listed_sessions(
    conn: sqlite3.Connection,
    kept: dict[Any, Any],
    key: Any,
    select: str,
    params: tuple[Any, ...] = (),
    most: int | None = None,
) -> str | None:
    """Return the session ids a SELECT gives, as a json list for _LISTED, read on conn once
    while the store stands (``kept``: _Indexes.session_sets, under ``key``); None when there
    are more than ``most`` or an id is not text (a json list would not compare as the column
    does): the caller keeps its subquery."""
    if key not in kept:
        rows = conn.execute(select, params)
        ids = [r[0] for r in (rows if most is None else rows.fetchmany(most + 1))]
        fits = most is None or len(ids) <= most
        kept[key] = json.dumps(ids) if fits and all(isinstance(i, str) for i in ids) else None
    return cast("str | None", kept[key])


def _membership(sql: str, keep: bool) -> str:
    """Return the condition: a message's session is (keep) or is not in sql's sessions (a
    message whose session is missing, or whose id is NULL, is never "in")."""
    return sql if keep else f"({sql}) IS NOT 1"


@dataclass(frozen=True)
class _SessionCond:
    """A condition on the hit's session: its session is (keep) or is not among sessions WHERE
    where."""

    where: str
    params: tuple[Any, ...]
    keep: bool

    def subquery(self) -> _Sql:
        """Return the condition as a subquery on sessions (SQLite runs it once a statement)."""
        sql = f"m.session_id IN (SELECT id FROM sessions WHERE {self.where})"
        return _membership(sql, self.keep), self.params

    def resolved(self, conn: sqlite3.Connection, kept: dict[Any, Any]) -> _Sql | None:
        """Return the condition over the sessions it names, read on conn (None: it keeps every
        message); the subquery when they are many or not all text (see _listed_sessions).

        A search runs many statements (a walk's windows, its hits, its counts); the subquery
        would scan every session row once for each of them.
        """
        select = f"SELECT id FROM sessions WHERE {self.where}"
        key = ("condition", self.where, self.params)
        ids = _listed_sessions(conn, kept, key, select, self.params, INLINE_SESSIONS)
        if ids is None:
            return self.subquery()
        if ids == "[]":
            return None if not self.keep else ("0", ())
        return _membership(f"m.session_id IN ({_LISTED})", self.keep), (ids,)


def _filters(
    store: Store,
    source_filter: Iterable[str] | str | None,
    exclude_sources: Iterable[str] | str | None,
    role_filter: Iterable[str] | str | None,
    include_inactive: bool,
    after: float | None = None,
    before: float | None = None,
    *,
    archived: bool | None = None,
    pinned: bool | None = None,
    conn: sqlite3.Connection | None = None,
    idx: _Indexes | None = None,
) -> _Filters:
    """Build the filter conditions every source applies to candidate rows (given conn, the
    read snapshot the search runs in, conditions on the hit's session are resolved on it and
    kept with idx, the store's index report, _indexes_of's when not given)."""
    base, sessions = _filters_of(
        store.columns("messages"),
        store.columns("sessions"),
        tuple(_as_list(source_filter)),
        tuple(_as_list(exclude_sources)),
        tuple(_as_list(role_filter)),
        include_inactive,
        after,
        before,
        archived,
        pinned,
    )
    conds = [base.sql] if base.sql != "1" else []
    params = list(base.params)
    kept = (idx or _indexes_of(store)).session_sets if conn is not None else {}
    for cond in sessions:
        sql = cond.subquery() if conn is None else cond.resolved(conn, kept)
        if sql is not None:
            conds.append(sql[0])
            params += sql[1]
    narrowing = len(conds) > (1 if base.visible != "1" else 0)
    return replace(
        base,
        sql=" AND ".join(conds) or "1",
        params=tuple(params),
        narrows=base.narrows or narrowing,
    )


@functools.lru_cache(maxsize=256)
def _filters_of(
    message_columns: tuple[str, ...],
    session_columns: tuple[str, ...],
    sources: tuple[str, ...],
    excluded: tuple[str, ...],
    roles: tuple[str, ...],
    include_inactive: bool,
    after: float | None,
    before: float | None,
    archived: bool | None,
    pinned: bool | None,
) -> tuple[_Filters, tuple[_SessionCond, ...]]:
    """Build _filters' conditions for these columns and values: those on the message, and
    those on its session (kept: searches repeat them)."""
    cols = set(message_columns)
    visible = []
    if not include_inactive and {"active", "compacted"} <= cols:
        visible.append("({a}.active = 1 OR {a}.compacted = 1)")
    elif not include_inactive and "active" in cols:
        visible.append("{a}.active = 1")  # schema 14-17: rewinds, but no compression archive
    if "display_kind" in cols:
        visible.append("({a}.display_kind IS NULL OR {a}.display_kind <> 'hidden')")
    conds = [v.format(a="m") for v in visible]
    params: list[str | float] = []
    sessions: list[_SessionCond] = []
    if sources:
        sessions.append(_SessionCond(f"source IN ({marks(len(sources))})", sources, True))
    if excluded:
        sessions.append(_SessionCond(f"source IN ({marks(len(excluded))})", excluded, False))
    if roles:
        conds.append(f"m.role IN ({marks(len(roles))})")
        params += roles
    if after is not None:
        conds.append("m.timestamp >= ?")
        params.append(float(after))
    if before is not None:
        conds.append("m.timestamp < ?")
        params.append(float(before))
    sessions += _session_flags(set(session_columns), archived, pinned)
    filters = _Filters(
        sql=" AND ".join(conds) or "1",
        params=tuple(params),
        visible=" AND ".join(v.format(a="p") for v in visible) or "1",
        roles=tuple(roles),
        sources=tuple(sources),
        narrows=len(conds) > len(visible),
    )
    return filters, tuple(sessions)


def _session_flags(
    cols: set[str], archived: bool | None, pinned: bool | None
) -> list[_SessionCond]:
    """Return conditions on the hit's session: archived or not, pinned or not (None: either)."""
    conds = []
    for column, wanted in (("archived", archived), ("pinned", pinned)):
        if wanted is None:
            continue
        if column in cols:
            conds.append(_SessionCond(f"COALESCE({column}, 0) <> 0", (), wanted))
        elif wanted:
            conds.append(_SessionCond("0", (), True))  # a layout without the column has none
    return conds


SHOWN_FUNCTION = "hermes_matches_shown"
_WORD_PIECES = re.compile(r"[^\W_]+")


def _term_shown(term: Term, values: Sequence[str]) -> bool:
    """Tell whether a term matches one of values: as words (as the word index reads them), or
    as folded text where it has CJK or no word at all."""
    if term.searchable and not cjk.cjk_runs(term.text):
        return bool(has_words(term.text, int(term.prefix), *values))
    folded = fold(term.text)
    return any(folded in fold(v) for v in values)


def shown_matches(
    conn: sqlite3.Connection, query: Query, filters: _Filters, hide: Callable[[str], str]
) -> tuple[Query, _Filters]:
    """Return the query to route and the filters that keep a message only where its match
    survives hide (text with the parts no match may reach blanked out, e.g. secrets).

    Candidates come from the query's wanted terms; each is then checked in Python on its text
    after hide: some OR-group with every term there, and no exclusion there (an exclusion that
    matched only inside a hidden part must not leave the message out either: that too would
    tell what the hidden part holds).
    """
    wanted, exclusions = query.wanted(), query.exclusions()
    # Every piece any term could match by (its words, or its folded text), for a cheap test
    # of which values may hold a match at all (a superset of every route's matches).
    pieces = {
        piece
        for t in [*exclusions, *(t for g in wanted.groups for t in g)]
        for piece in (_WORD_PIECES.findall(fold(t.text)) or [fold(t.text)])
        if piece
    }

    def shown(*columns: object) -> int:
        values = []
        for value in columns:
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if isinstance(value, str) and value:
                if value.startswith(STRUCTURED_SENTINEL):
                    value = content_text(value, sep=" ")
                values.append(value)
        # A value holding no piece of a term needs no hiding (tool calls, often long, mostly
        # hold none): nothing there can match, hidden or not.
        hidden = []
        for value in values:
            folded = fold(value)
            hidden.append(hide(value) if any(p in folded for p in pieces) else value)
        if hidden == values:
            return 1  # nothing hidden: the index's own match stands
        if any(_term_shown(t, hidden) for t in exclusions):
            return 0
        return int(any(all(_term_shown(t, hidden) for t in g) for g in wanted.groups))

    conn.create_function(SHOWN_FUNCTION, 3, shown)
    check = f"{SHOWN_FUNCTION}(m.content, m.tool_name, m.tool_calls)"
    return wanted, replace(filters, sql=f"({filters.sql}) AND {check}", narrows=True)


def _indexes_of(store: Store) -> _Indexes:
    """Return the store's index report, kept on the handle until the store changes.

    Nine small statements otherwise run before every search; a change by another connection
    (data_version), by this one (total_changes) or to the schema makes the report stale.
    """
    conn = store.conn
    versions = conn.execute(
        "SELECT (SELECT data_version FROM pragma_data_version), "
        "(SELECT schema_version FROM pragma_schema_version)"
    ).fetchone()
    key = (versions[0], versions[1], conn.total_changes)
    kept = store.memo.get(_INDEXES_MEMO)
    if kept is not None and kept[0] == key:
        return cast("_Indexes", kept[1])
    idx = _indexes(conn)
    store.memo[_INDEXES_MEMO] = (key, idx)
    return idx


_INDEXES_MEMO = "search.indexes"


def _indexes(conn: sqlite3.Connection) -> _Indexes:
    """Report which indexes can serve this store and the id windows they lack."""
    idx = fts.indexes(conn)
    cjk_state = cjk.status(conn)
    low = conn.execute("SELECT min(id) FROM messages").fetchone()[0]
    return _Indexes(
        stale=idx.stale,
        word=idx.word if idx.word is not None and idx.word.flavor != "foreign" else None,
        trigram=(
            idx.trigram if idx.trigram is not None and idx.trigram.tokenizer == "trigram" else None
        ),
        cjk=cjk_state.installed,
        gap=idx.gap,
        cjk_high_water=cjk_state.high_water,
        cjk_pending=cjk_state.pending,
        min_id=int(low or 1),
        max_id=idx.max_id,
    )


# --- routes: which sources serve a query ----------------------------------------------------


def _scan(query: Query, window: tuple[int, int] | None = None) -> _Source:
    """A LIKE scan of the messages (of a window, when given) for the query's wanted terms."""
    return _Source(None, ("1", ()), query_like(query), window=window)


def _scan_route(query: Query) -> _Route:
    """The route of a whole-store scan, with the query's exclusions."""
    return _excluding(_Route("scan", [_scan(query)]), query)


def _excluding(route: _Route, query: Query) -> _Route:
    """Add the query's exclusions to the check of every source of the route.

    One check, the same on every route (see query.exclusion_sql): which index answers never
    changes what is left out.
    """
    sql, params = exclusion_sql(query.exclusions())
    if sql == "1":
        return route
    sources = [
        replace(
            s,
            check=(sql, params)
            if s.check[0] == "1"
            else (f"({s.check[0]}) AND {sql}", (*s.check[1], *params)),
        )
        for s in route.sources
    ]
    return replace(route, sources=sources)


def _with_gap(sources: list[_Source], query: Query, idx: _Indexes) -> list[_Source]:
    """Add a scan of the rows a chunked rebuild has not indexed yet, when there are any."""
    return sources + ([_scan(query, idx.gap)] if idx.gap is not None else [])


def _word_route(query: Query, idx: _Indexes) -> _Route:
    """The word index (plus the rebuild window)."""
    match = query.fts()
    prefix = any(t.prefix for t in query.terms())
    source = _Source(
        fts.WORD_TABLE, (f"{fts.WORD_TABLE} MATCH ?", (match,)), rankable=True, prefix=prefix
    )
    route = _Route("word", _with_gap([source], query, idx))
    if not prefix:
        # A prefix's snippets would merge its doclists once more: they are cut in Python.
        route.snippet_table, route.snippet_match = fts.WORD_TABLE, match
    return route


def _trigram_phrase(term: Term) -> str | None:
    """Return the trigram-index phrase that finds a wanted term as a substring (None when the
    term is too short for trigrams)."""
    if len(term.text) < TRIGRAM_MIN_CHARS:
        return None
    return '"' + term.text.replace('"', '""') + '"'


def _trigram_ready(query: Query) -> bool:
    """Tell whether every OR-group has a positive term the trigram index can look up."""
    return all(any(_trigram_phrase(t) for t in group) for group in query.groups)


def _trigram_group(group: Sequence[Term]) -> tuple[_Sql, _Sql]:
    """Return an AND-group's trigram lookup (one MATCH) and its exact checks.

    A quoted phrase on the trigram index is a substring lookup answered by the index alone;
    the index's LIKE was re-checked by SQLite against each candidate's text, 2-4x slower, and
    could not take ``%`` or ``_`` literally. The phrase folds case as LIKE does (beyond ASCII
    too). The agent's trigram index holds no structured (multimodal) content: its tokenizer
    stops at the NUL that marks it, so only the word index and scans find those messages.
    """
    phrases: list[str] = []
    extra: list[str] = []
    extra_params: list[Any] = []
    for term in group:
        phrase = _trigram_phrase(term)
        if phrase is not None:
            phrases.append(f"content : {phrase}")
            continue  # the index answers this term exactly
        # Short terms are checked exactly on the candidates.
        sql, p = term_like(term)
        extra.append(sql)
        extra_params.extend(p)
    match = (f"{fts.TRIGRAM_TABLE} MATCH ?", (" AND ".join(phrases),))
    return match, (" AND ".join(extra) or "1", tuple(extra_params))


def _trigram_route(query: Query, idx: _Indexes, filters: _Filters) -> _Route:
    """The trigram index, one lookup per OR-group (plus the rebuild window and, when the
    filters ask for them, the rows the agent's substring index leaves out)."""
    sources = [_Source(fts.TRIGRAM_TABLE, *_trigram_group(group)) for group in query.groups]
    cover = idx.trigram.covers("m") if idx.trigram is not None else None
    if cover is not None:
        # The agent's substring index leaves rows out (tool output from schema 25, cron and
        # subagent sessions from 30; see releases): a scan of exactly those rows keeps the
        # answer whole, so no filter ever adds hits. It walks under the same budget as the
        # lookups: when the budget stops it, the answer says it is not complete.
        like_sql, like_params = query_like(query)
        check = f"{like_sql} AND NOT ({cover})"
        sources.append(_Source(None, ("1", ()), (check, like_params), left_out=""))
    return _Route("trigram", _with_gap(sources, query, idx))


def _cjk_parts(query: Query) -> tuple[list[str], list[_Sql]] | None:
    """Split a single-group query into CJK MATCH pieces and LIKE checks for everything else."""
    if len(query.groups) != 1:
        return None  # OR across scripts cannot be split between two indexes
    match: list[str] = []
    checks: list[_Sql] = []
    for term in query.groups[0]:
        runs = cjk.cjk_runs(term.text)
        if not runs:
            # Words without CJK are checked on the candidate rows.
            if term.searchable:
                checks.append(term_like(term))
            continue
        match.extend(cjk.cjk_match_expr(run) for run in runs)
        if term.phrase:
            checks.append(term_like(term))  # the runs narrow the rows; the phrase is exact
            continue
        rest = [p for p in cjk.non_cjk_parts(term.text) if any(c.isalnum() for c in p)]
        checks.extend(term_like(Term(p)) for p in rest)
    if not match:
        return None
    return match, checks


def _cjk_route(query: Query, idx: _Indexes, parts: tuple[list[str], list[_Sql]]) -> _Route:
    """The CJK bigram index (plus the rows its catch-up has not reached, and edited rows)."""
    match, checks = parts
    check = (
        " AND ".join(sql for sql, _ in checks) or "1",
        tuple(p for _, params in checks for p in params),
    )
    sources = [
        _Source(cjk.TABLE, (f"{cjk.TABLE} MATCH ?", (" ".join(match),)), check, rankable=True)
    ]
    if idx.max_id > idx.cjk_high_water:
        sources.append(_scan(query, (idx.cjk_high_water, idx.max_id)))  # not caught up yet
    if idx.cjk_pending:
        # Rows queued for re-indexing after an edit.
        pending = (f"m.id IN (SELECT id FROM {cjk.PENDING_TABLE})", ())
        sources.append(_Source(None, pending, query_like(query)))
    return _Route("cjk", sources)


def _indexed_route(query: Query, idx: _Indexes, filters: _Filters) -> _Route | None:
    """Return the index route for a query with CJK words (None when only a scan can serve it)."""
    parts = _cjk_parts(query) if idx.cjk else None
    if parts is not None:
        return _cjk_route(query, idx, parts)
    runs = [r for t in query.terms() for r in cjk.cjk_runs(t.text)]
    if idx.trigram and all(len(r) >= TRIGRAM_MIN_CHARS for r in runs) and _trigram_ready(query):
        return _trigram_route(query, idx, filters)
    return None


def _routes(
    query: Query, idx: _Indexes, filters: _Filters, conn: sqlite3.Connection | None = None
) -> Iterator[_Route]:
    """Yield the routes to try, in order: the next one serves when one finds nothing (each is
    built only when it is reached: most searches end at the first). Given conn, the search's
    snapshot, each route comes bound to it (see _bound).

    The wanted terms choose the route; the exclusions are the same check on every one.
    """
    n = 0
    while (route := _route_at(query, idx, filters, n)) is not None:
        yield route if conn is None else _bound(conn, route, idx)
        n += 1


def _bound(conn: sqlite3.Connection, route: _Route, idx: _Indexes) -> _Route:
    """Return the route with what its sources read of the sessions read on conn (the search's
    snapshot; once while the store is unchanged), instead of by every statement of the walk."""
    if not any(s.left_out == "" for s in route.sources):
        return route
    sessions = _listed_sessions(conn, idx.session_sets, "left_out", fts.TRIGRAM_LEFT_OUT_SESSIONS)
    if sessions is None:
        return route  # an id that is not text: the subquery compares it as the column does
    sources = [replace(s, left_out=sessions) if s.left_out == "" else s for s in route.sources]
    return replace(route, sources=sources)


@functools.lru_cache(maxsize=256)
def _route_at(query: Query, idx: _Indexes, filters: _Filters, n: int) -> _Route | None:
    """Return a query's n-th route (None past the last); kept, as a search repeats its query
    (routes are never changed once built)."""
    for i, route in enumerate(_wanted_routes(query.wanted(), idx, filters)):
        if i == n:
            return _excluding(route, query)
    return None


def _wanted_routes(query: Query, idx: _Indexes, filters: _Filters) -> Iterator[_Route]:
    """Yield the routes of a query of wanted terms only (see _routes)."""
    if idx.stale or not idx.word:
        yield _Route("scan", [_scan(query)])
        return
    if query.has_cjk:
        route = _indexed_route(query, idx, filters)
        yield route if route is not None else _Route("scan", [_scan(query)])
        return
    if query.fts():
        yield _word_route(query, idx)
    if idx.trigram and _trigram_ready(query):
        yield _trigram_route(query, idx, filters)
    else:
        yield _Route("scan", [_scan(query)])
