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

import contextlib
import functools
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

from hermes_state.search.query import (
    MAX_QUERY_CHARS as MAX_QUERY_CHARS,
    MIN_PREFIX_CHARS as MIN_PREFIX_CHARS,
    Query,
    QueryProblem as QueryProblem,
    Term,
    exclusion_sql,
    fold,
    has_words,
    parse_query as parse_query,
    query_like,
    query_problem as query_problem,
    query_warnings as query_warnings,
    register_functions,
    sanitize_fts5_query as sanitize_fts5_query,
    tame_prefixes,
    term_like,
)
from hermes_state.shapes.content import STRUCTURED_SENTINEL, content_text
from hermes_state.shapes.text import scrub_surrogates
from hermes_state.store import cjk, fts, schema
from hermes_state.store.errors import SortUnavailableError, is_corruption_error, is_lock_error
from hermes_state.store.sql import marks

if TYPE_CHECKING:
    from hermes_state.store.connection import Store

RANK_CANDIDATES = 2000  # larger match sets are ranked among their newest N matches
COUNT_AHEAD = RANK_CANDIDATES  # matches a newest/oldest walk finds, to say how many there are
SEARCH_BUDGET_STEPS = 2_000_000  # SQLite VM steps one search may spend (~200,000 candidates)
PROGRESS_STEPS = 1000  # VM steps between progress-handler calls
FIRST_WINDOW_IDS = 1024  # the walk's first id window; each next one is twice as large...
MAX_WINDOW_IDS = 65_536  # ...up to this: a budget cut loses at most one window's progress
COUNT_CAP = 10_000_000  # count_matches stops counting here
COUNT_BUDGET_S = 1.0  # count_matches gives up after this long
HITS_PER_STATEMENT = 500  # hits loaded per statement (SQLite caps bound parameters)
SNIPPET_TOKENS = 40
SNIPPET_CHARS = 120
CONTEXT_CHARS = 200
TRIGRAM_MIN_CHARS = 3
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


@dataclass(frozen=True)
class _Filters:
    """SQL conditions on a candidate message (alias m) that every source applies.

    Conditions on the hit's session are subqueries evaluated once per statement, never a join:
    a join lets SQLite's planner start from the sessions side and revisit every message of the
    chosen sessions for each candidate.
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


@dataclass
class _Route:
    """The sources that serve a query, and how their hits get snippets."""

    name: str
    sources: list[_Source]
    snippet_table: str | None = None  # FTS table whose snippet() serves its own hits
    snippet_match: str = ""


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


# --- filters and indexes --------------------------------------------------------------------


def _as_list(value: Iterable[str] | str | None) -> list[str]:
    """Return filter values as a list of strings sqlite3 can bind (lone surrogates removed)."""
    if value is None:
        return []
    values = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)]
    return [scrub_surrogates(v) for v in values]


def _in_sessions(where: str, keep: bool) -> str:
    """Return a condition: the message's session is (keep) or is not among sessions WHERE where.

    A message whose session row is missing is never "in", so "not in" keeps it.
    """
    subquery = f"m.session_id IN (SELECT id FROM sessions WHERE {where})"
    return subquery if keep else f"({subquery}) IS NOT 1"


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
) -> _Filters:
    """Build the filter conditions every source applies to candidate rows."""
    cols = set(store.columns("messages"))
    visible = []
    if not include_inactive and {"active", "compacted"} <= cols:
        visible.append("({a}.active = 1 OR {a}.compacted = 1)")
    elif not include_inactive and "active" in cols:
        visible.append("{a}.active = 1")  # schema 14-17: rewinds, but no compression archive
    if "display_kind" in cols:
        visible.append("({a}.display_kind IS NULL OR {a}.display_kind <> 'hidden')")
    conds = [v.format(a="m") for v in visible]
    params: list[str | float] = []
    sources, excluded, roles = (
        _as_list(source_filter),
        _as_list(exclude_sources),
        _as_list(role_filter),
    )
    if sources:
        conds.append(_in_sessions(f"source IN ({marks(len(sources))})", True))
        params += sources
    if excluded:
        conds.append(_in_sessions(f"source IN ({marks(len(excluded))})", False))
        params += excluded
    if roles:
        conds.append(f"m.role IN ({marks(len(roles))})")
        params += roles
    if after is not None:
        conds.append("m.timestamp >= ?")
        params.append(float(after))
    if before is not None:
        conds.append("m.timestamp < ?")
        params.append(float(before))
    conds += _session_flags(set(store.columns("sessions")), archived, pinned)
    return _Filters(
        sql=" AND ".join(conds) or "1",
        params=tuple(params),
        visible=" AND ".join(v.format(a="p") for v in visible) or "1",
        roles=tuple(roles),
        sources=tuple(sources),
        narrows=len(conds) > len(visible),
    )


def _session_flags(cols: set[str], archived: bool | None, pinned: bool | None) -> list[str]:
    """Return conditions on the hit's session: archived or not, pinned or not (None: either)."""
    conds = []
    for column, wanted in (("archived", archived), ("pinned", pinned)):
        if wanted is None:
            continue
        if column in cols:
            conds.append(_in_sessions(f"COALESCE({column}, 0) <> 0", wanted))
        elif wanted:
            conds.append("0")  # a layout without the column has no such sessions
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
        left_out = fts.trigram_left_out_superset("m")
        check = f"{left_out} AND {like_sql} AND NOT ({cover})"
        sources.append(_Source(None, ("1", ()), (check, like_params)))
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


def _routes(query: Query, idx: _Indexes, filters: _Filters) -> Iterator[_Route]:
    """Yield the routes to try, in order: the next one serves when one finds nothing (each is
    built only when it is reached: most searches end at the first).

    The wanted terms choose the route; the exclusions are the same check on every one.
    """
    for route in _wanted_routes(query.wanted(), idx, filters):
        yield _excluding(route, query)


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
            f"SELECT m.id{session}{rank} FROM {source.table} "
            f"CROSS JOIN messages m ON m.id = {key}"
        )
    where = [source.match[0], source.check[0], filters.sql]
    if source.window is not None:
        lo, hi = source.window
        where.append(f"m.id > {int(lo)} AND m.id <= {int(hi)}")
    params = (*source.match[1], *source.check[1], *filters.params)
    return f"{head} WHERE {' AND '.join(where)}", key, params


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
    where = f"{source.match[0]} AND {source.check[0]} AND {filters.sql}"
    params: tuple[Any, ...] = (*source.match[1], *source.check[1], *filters.params)
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
    for route in _routes(query, idx, filters):
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


# --- hits -----------------------------------------------------------------------------------


def _needles(query: Query) -> re.Pattern[str] | None:
    """Return the pattern that marks the query's positive terms in a snippet."""
    parts = []
    for term in query.terms():
        if term.negated or not term.text.strip():
            continue
        parts.append(re.escape(term.text) + (r"\w*" if term.prefix else ""))
        parts.extend(re.escape(run) for run in cjk.cjk_runs(term.text))
    if not parts:
        return None
    return re.compile("|".join(sorted(set(parts), key=len, reverse=True)), re.IGNORECASE)


def highlight_pattern(query: str) -> re.Pattern[str] | None:
    """Return the pattern snippets use to mark a query's matches (None: nothing to mark)."""
    return _needles(tame_prefixes(parse_query(query if isinstance(query, str) else "")))


def _text_snippet(text: str, pattern: re.Pattern[str] | None) -> str:
    """Cut a window of text around the first match, marking matches >>>like this<<<."""
    first = pattern.search(text) if pattern is not None else None
    if pattern is None or first is None:
        return text[:SNIPPET_CHARS] + ("..." if len(text) > SNIPPET_CHARS else "")
    start = max(0, first.start() - SNIPPET_CHARS // 3)
    end = min(len(text), start + SNIPPET_CHARS + (first.end() - first.start()))
    window = pattern.sub(lambda m: f">>>{m.group()}<<<", text[start:end])
    return ("..." if start > 0 else "") + window + ("..." if end < len(text) else "")


def _hit_sql(
    store: Store, filters: _Filters, count: int, snippet_table: str | None, with_context: bool
) -> str:
    """Return the one statement loading count hits with their session, snippet and context.

    With snippet_table, the hits are read through that FTS table (its MATCH, a rowid range and
    the ids as parameters), so snippet() serves each one; otherwise by id from messages, with
    the content and tool calls a snippet is then cut from. Each hit's context (the visible
    message before and after it in its session) is joined in, not looked up apart.
    """
    return _hit_statement(
        store.columns("messages"), filters.visible, count, snippet_table, with_context
    )


@functools.lru_cache(maxsize=64)
def _hit_statement(
    live: tuple[str, ...], visible: str, count: int, snippet_table: str | None, with_context: bool
) -> str:
    """Build _hit_sql's statement (kept: a search builds the same one again and again)."""
    wanted = ("id", "session_id", "role", "timestamp", "tool_name")
    cols = schema.projection(live, wanted, "m")
    if snippet_table is not None:
        text = f"snippet({snippet_table}, -1, '>>>', '<<<', '...', {SNIPPET_TOKENS}), NULL, NULL"
        source = f"{snippet_table} CROSS JOIN messages m ON m.id = {snippet_table}.rowid"
        # The rowid range is served by FTS5 itself; "+rowid IN" is then checked per row, which
        # costs far less than "rowid IN", where FTS5 restarts the whole query for every id.
        where = (
            f"{snippet_table} MATCH ? AND {snippet_table}.rowid BETWEEN ? AND ? "
            f"AND +{snippet_table}.rowid IN ({marks(count)})"
        )
    else:
        text = "NULL, " + schema.projection(live, ("content", "tool_calls"), "m")
        source = "messages m"
        where = f"m.id IN ({marks(count)})"
    context = "NULL, NULL, NULL, NULL, NULL, NULL, NULL"
    joins = ""
    if with_context:
        # Text is cut in SQL; structured content starts with a NUL, which ends SQLite's view of
        # the text (substr gives ''), so it is read whole and flattened in Python.
        cut = (
            "CASE WHEN substr({a}.content, 1, 1) = '' THEN {a}.content "
            f"ELSE substr({{a}}.content, 1, {CONTEXT_CHARS * 4}) END"
        )
        context = (
            f"b.id, b.role, {cut.format(a='b')}, a.id, a.role, {cut.format(a='a')}, "
            f"{cut.format(a='m')}"
        )
        neighbour = (
            "(SELECT p.id FROM messages p WHERE p.session_id = m.session_id AND p.id {op} m.id "
            f"AND {visible} ORDER BY p.id {{order}} LIMIT 1)"
        )
        joins = (
            f" LEFT JOIN messages b ON b.id = {neighbour.format(op='<', order='DESC')}"
            f" LEFT JOIN messages a ON a.id = {neighbour.format(op='>', order='ASC')}"
        )
    return (
        f"SELECT {cols}, s.source, s.model, s.started_at, {text}, {context} FROM {source} "
        f"LEFT JOIN sessions s ON s.id = m.session_id{joins} WHERE {where}"
    )


def _context_of(row: Sequence[Any]) -> list[dict[str, Any]]:
    """Return a hit row's context: the message before, the hit, the message after."""
    context = []
    if row[_BEFORE] is not None:
        text = content_text(row[_BEFORE + 2], sep=" ")[:CONTEXT_CHARS]
        context.append({"id": row[_BEFORE], "role": row[_BEFORE + 1], "content": text})
    hit = content_text(row[_HIT_TEXT], sep=" ")[:CONTEXT_CHARS]
    context.append({"id": row[0], "role": row[2], "content": hit})
    if row[_AFTER] is not None:
        text = content_text(row[_AFTER + 2], sep=" ")[:CONTEXT_CHARS]
        context.append({"id": row[_AFTER], "role": row[_AFTER + 1], "content": text})
    return context


# Column positions in _hit_sql's rows.
_SNIPPET, _CONTENT, _TOOL_CALLS, _BEFORE, _AFTER, _HIT_TEXT = 8, 9, 10, 11, 14, 17


def _hits(
    store: Store,
    found: _Found,
    query: Query,
    filters: _Filters,
    ids: list[int],
    *,
    with_context: bool = True,
) -> list[dict[str, Any]]:
    """Load the hit rows with their sessions, snippets and context (one statement per kind:
    hits an FTS table's snippet() serves, and the others)."""
    if not ids:
        return []
    cursor = store.conn.cursor()
    cursor.row_factory = None  # plain tuples: read by position below
    route = found.route
    indexed: list[int] = []
    if route.snippet_table:
        indexed = [i for i in ids if i in found.from_index]
    rows: dict[int, tuple[Any, ...]] = {}
    if indexed:
        sql = _hit_sql(store, filters, len(indexed), route.snippet_table, with_context)
        params = (route.snippet_match, min(indexed), max(indexed), *indexed)
        rows.update((r[0], r) for r in cursor.execute(sql, params).fetchall())
    rest = [i for i in ids if i not in rows]
    if rest:
        sql = _hit_sql(store, filters, len(rest), None, with_context)
        rows.update((r[0], r) for r in cursor.execute(sql, rest).fetchall())
    pattern: re.Pattern[str] | None = None
    hits = []
    for row_id in ids:
        row = rows.get(row_id)
        if row is None:
            continue
        snippet = row[_SNIPPET]
        if snippet is None:
            text = content_text(row[_CONTENT], sep=" ") or row[_TOOL_CALLS] or row[4] or ""
            pattern = pattern or _needles(query)
            snippet = _text_snippet(str(text), pattern)
        hits.append(
            {
                "id": row_id,
                "session_id": row[1],
                "role": row[2],
                "snippet": snippet,
                "timestamp": row[3],
                "tool_name": row[4],
                "source": row[5],
                "model": row[6],
                "session_started": row[7],
                "context": _context_of(row) if with_context else [],
            }
        )
    return hits


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
    )
    need = offset + limit
    with store.snapshot() as conn:
        register_functions(conn)
        if hide is not None:
            parsed, filters = shown_matches(conn, parsed, filters, hide)
        idx = _indexes_of(store)
        with _Budget(conn, None if complete else SEARCH_BUDGET_STEPS) as budget:
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
    )
    cap = max(1, int(cap))
    with store.snapshot() as conn:
        register_functions(conn)
        idx = _indexes_of(store)
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
    for route in _routes(query, idx, filters):
        try:
            n, name = _count_route(conn, route, filters, cap), route.name
        except sqlite3.DatabaseError as exc:
            if route.name == "scan" or not _fts_failed(exc) or "interrupt" in str(exc):
                raise
            n, name = _count_route(conn, _scan_route(query), filters, cap), "scan"
        if n:
            break
    return n, name
