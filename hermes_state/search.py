"""Message search: the FTS5 query sanitizer and search_messages with its index routing.

Routing (see also :mod:`hermes_state.fts`):

- a word query goes to ``messages_fts`` (BM25);
- a query with CJK characters goes to ``messages_fts_cjk`` (bigram phrases), other words of the
  query being checked on the candidate rows;
- zero word hits, or a query the word index cannot serve (``ocker`` inside ``docker``, emoji),
  goes to ``messages_fts_trigram`` (non-tool rows) when each OR-group has a positive term with a
  literal piece of 3+ characters; the other terms are checked exactly on its candidates;
- otherwise, and for stores whose indexes are stale, a LIKE scan over at most ``SCAN_CAP`` rows.

Hits carry the documented ``HIT_KEYS``; ``context`` lists the visible messages (same visibility
rules as the hits) just before and after the hit in its session, each ``{id, role, content}``
with content cut to ``CONTEXT_CHARS``. A prefix shorter than ``MIN_PREFIX_CHARS`` (``th*``) is
searched as a word, and prefix queries are ordered newest first: FTS5 expands a prefix by merging
the doclists of every matching term, once per statement (``the*`` still costs ~250 ms at 1 M
messages; a prefix index would double the word index).

Every index route runs under a time budget (``INDEX_BUDGET_S``, enforced by an SQLite progress
handler): a filter that rejects nearly every match of a huge match set would otherwise walk the
whole doclist, so past the budget the search falls back to the bounded scan and says ``partial``.

Rows an index does not hold yet (a chunked rebuild's ``(progress, high_water]`` window, CJK rows
above the catch-up mark) are found by a bounded scan of exactly that window, so each hit appears
once.

Ordering (reported as ``SearchResult.ordering``) stays fast on huge match sets. BM25 costs little
per row scored, but its IDF step reads every match of every phrase in the query, whatever rows are
scored (ranking "the" costs 33 ms at 1 M messages even for 100 rows). So each phrase's matches are
counted up to a shared ``RANK_DOCLIST_BUDGET``: within it, a query with at most ``RANK_CANDIDATES``
matches is ranked over all of them (``rank``), a larger one over its newest ``RANK_CANDIDATES``
matches (``rank_recent``); beyond the budget the newest matches are returned (``newest``).
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hermes_state import cjk, fts
from hermes_state.errors import is_corruption_error, is_lock_error
from hermes_state.text import scrub_surrogates

if TYPE_CHECKING:
    from hermes_state.connection import Store

MAX_QUERY_CHARS = 2048
# Terms past this are dropped: each becomes one SQL expression node in a fallback scan, and
# SQLite refuses an expression tree deeper than 1000 ("Expression tree is too large").
MAX_QUERY_TERMS = 64
RANK_CANDIDATES = 2000  # larger match sets are ranked among their newest N matches
COUNT_CAP = 10_000_000  # count_matches stops counting here
COUNT_BUDGET_S = 1.0  # count_matches gives up after this long
RANK_DOCLIST_BUDGET = 150_000  # BM25 only while its phrases match at most this many rows
SCAN_CAP = 20_000  # rows a LIKE scan may examine
INDEX_BUDGET_S = 0.05  # index routes over this fall back to the bounded scan (partial)
PROGRESS_STEPS = 20_000  # SQLite VM steps between deadline checks
SNIPPET_TOKENS = 40
SNIPPET_CHARS = 120
CONTEXT_CHARS = 200
TRIGRAM_MIN_CHARS = 3
MIN_PREFIX_CHARS = 3  # a shorter prefix merges the doclists of a large part of the vocabulary
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

_OPERATORS = frozenset({"AND", "OR", "NOT"})
_KEYWORDS = frozenset({"AND", "OR", "NOT", "NEAR"})
_JOINERS = "-._"
_STRUCTURED_PREFIX = "\x00json:"  # upstream's marker for structured (multimodal) content


# --- query parsing and the sanitizer -------------------------------------------------------


@dataclass(frozen=True)
class Term:
    """One search term: a word or a quoted phrase, maybe a prefix, maybe negated (NOT)."""

    text: str
    phrase: bool = False
    prefix: bool = False
    negated: bool = False

    @property
    def searchable(self) -> bool:
        """Tell whether the word index can match this term (it has a letter or digit)."""
        return any(ch.isalnum() for ch in self.text)

    def fts(self) -> str:
        """Render the term as FTS5 query syntax (quoted unless it is a plain bareword)."""
        text = self.text
        quote = self.phrase or any(c in text for c in _JOINERS) or text.upper() in _KEYWORDS
        out = '"' + text.replace('"', '""') + '"' if quote else text
        return out + "*" if self.prefix else out


@dataclass(frozen=True)
class Query:
    """A parsed query: OR-groups of AND-ed terms (FTS5 precedence: NOT > AND > OR)."""

    groups: tuple[tuple[Term, ...], ...] = ()

    def terms(self) -> list[Term]:
        """Return every term, in order."""
        return [t for g in self.groups for t in g]

    @property
    def has_cjk(self) -> bool:
        """Tell whether any term contains a CJK word (CJK punctuation alone does not count)."""
        return any(cjk.cjk_runs(t.text) for t in self.terms())

    def fts(self) -> str:
        """Render the query for FTS5 ('' when nothing in it can be matched by words)."""
        parts = []
        for group in self.groups:
            pos = [t.fts() for t in group if not t.negated and t.searchable]
            neg = [t.fts() for t in group if t.negated and t.searchable]
            if pos:
                parts.append(" ".join(pos) + "".join(f" NOT {n}" for n in neg))
        return " OR ".join(parts)


def _clean(text: str) -> str:
    """Cap the query length and blank out what can never be query syntax."""
    text = text[:MAX_QUERY_CHARS]
    # Lone surrogates cannot be bound by sqlite3; control characters are never query syntax.
    return "".join(
        " " if (ch < " " or ch == "\x7f") else ch for ch in text if not ("\ud800" <= ch <= "\udfff")
    )


def _split_word(raw: str) -> list[tuple[str, str, bool]]:
    """Split an unquoted chunk into ("op", OP, False) and ("word", text, prefix) tokens."""
    # Operator punctuation becomes a space; letters, digits, non-ASCII, joiners and '*' stay.
    kept = "".join(
        ch if (ord(ch) > 127 or ch.isalnum() or ch in _JOINERS or ch == "*") else " " for ch in raw
    )
    out: list[tuple[str, str, bool]] = []
    for piece in kept.split():
        if piece in _OPERATORS:
            out.append(("op", piece, False))
            continue
        parts = piece.split("*")
        for i, part in enumerate(parts):
            word = part.strip(_JOINERS)
            if word:  # a '*' with no word before it is stray and dropped
                out.append(("word", word, i < len(parts) - 1))
    return out


def _tokens(text: str) -> list[tuple[str, str, bool]]:
    """Scan text into operator, word and phrase tokens (unbalanced quotes dropped)."""
    tokens: list[tuple[str, str, bool]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            end = text.find('"', i + 1)
            if end == -1:
                i += 1  # an unbalanced quote is dropped
                continue
            inner = text[i + 1 : end]
            i = end + 1
            prefix = i < n and text[i] == "*"
            while i < n and text[i] == "*":
                i += 1
            tokens.append(("phrase", inner, prefix))
        elif ch.isspace():
            i += 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] != '"':
                j += 1
            tokens.extend(_split_word(text[i:j]))
            i = j
    return tokens


def _dangling(token: tuple[str, str, bool]) -> bool:
    """Tell whether a token is an operator that would dangle at either end of the query."""
    kind, text, prefix = token
    return kind == "op" or (kind == "word" and not prefix and text.upper() in _OPERATORS)


def parse_query(text: str) -> Query:
    """Parse user text into a Query, applying the sanitizer's rules."""
    tokens = _tokens(_clean(text or ""))
    while tokens and _dangling(tokens[0]):
        tokens.pop(0)
    while tokens and _dangling(tokens[-1]):
        tokens.pop()
    groups: list[list[Term]] = []
    pending: str | None = None
    kept = 0
    for kind, value, prefix in tokens:
        if kept >= MAX_QUERY_TERMS:
            break
        if kind == "op":
            pending = value  # of several operators in a row, the last one counts
            continue
        if kind == "phrase" and not value.strip():
            pending = None
            continue
        term = Term(value, phrase=kind == "phrase", prefix=prefix, negated=pending == "NOT")
        if not groups or pending == "OR":
            groups.append([])
        if not groups[-1] and term.negated:
            term = Term(term.text, phrase=term.phrase, prefix=term.prefix)
        groups[-1].append(term)
        kept += 1
        pending = None
    return Query(tuple(tuple(g) for g in groups if g))


def sanitize_fts5_query(text: str) -> str:
    """Turn any user text into a valid FTS5 query, or '' when nothing searchable is left."""
    return parse_query(text).fts()


# --- results --------------------------------------------------------------------------------


class SearchResult(list[dict[str, Any]]):
    """The hits of a search (dicts with HIT_KEYS), plus how they were found.

    ``ordering``: "rank" (BM25 over all matches), "rank_recent" (BM25 over the newest
    RANK_CANDIDATES matches; the match set was larger), "newest" or "oldest" (by message id;
    also used when ranking would be too slow, or the route cannot rank).
    ``route``: "word", "cjk", "trigram" or "scan". ``partial``: some rows that could match were
    not examined (a bounded scan stopped at SCAN_CAP rows).
    """

    def __init__(
        self,
        hits: Iterable[dict[str, Any]] = (),
        *,
        ordering: str = "rank",
        route: str = "word",
        partial: bool = False,
    ) -> None:
        """Wrap the hits with how they were found."""
        super().__init__(hits)
        self.ordering = ordering
        self.route = route
        self.partial = partial


@dataclass(frozen=True)
class MatchCount:
    """How many messages a query matches with its filters, as count_matches found.

    ``count`` is None when counting took longer than its budget (or was stopped).
    ``complete`` is False when the count is only a lower bound: the cap was reached, or rows a
    bounded scan would have to examine were left out (``partial`` in the search result).
    """

    count: int | None
    complete: bool
    route: str


@dataclass
class _Found:
    """Ids found by one route, best first, and how to make their snippets."""

    ids: list[int]
    ordering: str
    route: str
    partial: bool = False
    snippet_table: str | None = None  # FTS table whose snippet() serves these ids
    snippet_match: str = ""
    scanned: set[int] = field(default_factory=set)  # ids found by a scan (python snippets)


@dataclass(frozen=True)
class _Filters:
    """SQL conditions on messages (alias m) and sessions (alias s) shared by every route."""

    sql: str
    params: tuple[Any, ...]
    needs_session: bool
    visible: str  # the visibility condition alone, on alias p (context rows)
    roles: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()


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
    max_id: int


def _as_list(value: Iterable[str] | str | None) -> list[str]:
    """Return filter values as a list of strings sqlite3 can bind (lone surrogates removed)."""
    if value is None:
        return []
    values = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)]
    return [scrub_surrogates(v) for v in values]


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
    """Build the filter conditions every route applies to candidate rows."""
    cols = set(store.columns("messages"))
    visible = []
    if not include_inactive and {"active", "compacted"} <= cols:
        visible.append("({a}.active = 1 OR {a}.compacted = 1)")
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
        conds.append(f"s.source IN ({','.join('?' * len(sources))})")
        params += sources
    if excluded:
        conds.append(f"(s.source IS NULL OR s.source NOT IN ({','.join('?' * len(excluded))}))")
        params += excluded
    if roles:
        conds.append(f"m.role IN ({','.join('?' * len(roles))})")
        params += roles
    if after is not None:
        conds.append("m.timestamp >= ?")
        params.append(float(after))
    if before is not None:
        conds.append("m.timestamp < ?")
        params.append(float(before))
    flags = _session_flags(set(store.columns("sessions")), archived, pinned)
    conds += flags
    return _Filters(
        sql=" AND ".join(conds) or "1",
        params=tuple(params),
        needs_session=bool(sources or excluded or flags),
        visible=" AND ".join(v.format(a="p") for v in visible) or "1",
        roles=tuple(roles),
        sources=tuple(sources),
    )


def _session_flags(cols: set[str], archived: bool | None, pinned: bool | None) -> list[str]:
    """Return conditions on the hit's session: archived or not, pinned or not (None: either)."""
    conds = []
    for column, wanted in (("archived", archived), ("pinned", pinned)):
        if wanted is None:
            continue
        if column in cols:
            conds.append(f"COALESCE(s.{column}, 0) {'<>' if wanted else '='} 0")
        elif wanted:
            conds.append("0")  # a layout without the column has no such sessions
    return conds


def _indexes(conn: sqlite3.Connection) -> _Indexes:
    """Report which indexes can serve this store and the id windows they lack."""
    idx = fts.indexes(conn)
    cjk_state = cjk.status(conn)
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
        max_id=idx.max_id,
    )


# --- LIKE predicates ------------------------------------------------------------------------


def _like_pattern(text: str) -> str:
    """Return a LIKE pattern (ESCAPE '\\') matching text anywhere."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _term_like(term: Term) -> tuple[str, tuple[Any, ...]]:
    """SQL that is true when a message contains the term's text (content, tool name or calls)."""
    pat = _like_pattern(term.text)
    sql = (
        "((m.content LIKE ? ESCAPE '\\') OR (m.tool_name LIKE ? ESCAPE '\\') "
        "OR (m.tool_calls LIKE ? ESCAPE '\\')) IS 1"
    )
    return (f"NOT {sql}" if term.negated else sql), (pat, pat, pat)


def _group_like(terms: Sequence[Term]) -> tuple[str, tuple[Any, ...]] | None:
    """Compile one AND-group to a LIKE predicate (None for a group of negations only)."""
    if not any(not t.negated for t in terms):
        return None  # a group of only negations matches nearly everything: dropped
    parts: list[str] = []
    params: list[Any] = []
    for term in terms:
        sql, p = _term_like(term)
        parts.append(sql)
        params.extend(p)
    return "(" + " AND ".join(parts) + ")", tuple(params)


def _query_like(query: Query) -> tuple[str, tuple[Any, ...]]:
    """Compile the whole query to a LIKE predicate (OR of AND-groups); '0' if nothing is left."""
    groups = [g for g in (_group_like(grp) for grp in query.groups) if g is not None]
    if not groups:
        return "0", ()
    return "(" + " OR ".join(sql for sql, _ in groups) + ")", tuple(
        p for _, params in groups for p in params
    )


# --- candidate queries ----------------------------------------------------------------------


def _from(table: str | None, filters: _Filters) -> str:
    """Return the FROM clause joining an FTS table (or none) to messages and sessions."""
    session = "LEFT JOIN sessions s ON s.id = m.session_id " if filters.needs_session else ""
    if table is None:
        return f"FROM messages m {session}"
    return f"FROM {table} JOIN messages m ON m.id = {table}.rowid {session}"


def _probe(conn: sqlite3.Connection, table: str, match: str, cap: int) -> int:
    """Count the rows matching an FTS expression, stopping at cap (cost grows with the count)."""
    row = conn.execute(
        f"SELECT count(*) FROM (SELECT rowid FROM {table} WHERE {table} MATCH ? LIMIT ?)",
        (match, cap),
    ).fetchone()
    return int(row[0])


def _rank_affordable(
    conn: sqlite3.Connection, table: str, phrases: Sequence[str]
) -> list[int] | None:
    """Return each phrase's match count if BM25 stays cheap (its IDF step reads every match of
    every phrase), else None."""
    budget = RANK_DOCLIST_BUDGET
    counts = []
    for phrase in phrases:
        n = _probe(conn, table, phrase, budget + 1)
        budget -= n
        if budget < 0:
            return None
        counts.append(n)
    return counts


def _index_ids(
    conn: sqlite3.Connection,
    table: str,
    match: tuple[str, tuple[Any, ...]],
    extra: tuple[str, tuple[Any, ...]],
    filters: _Filters,
    sort: str,
    need: int,
    *,
    phrases: Sequence[str] | None,
) -> tuple[list[int], str]:
    """Return up to need matching ids from an FTS table, best first, and the ordering used.

    ``phrases`` are the MATCH expressions of the query's phrases (None: the table cannot rank).
    """
    match_sql, match_params = match
    where = f"WHERE {match_sql} AND {extra[0]} AND {filters.sql}"
    params = (*match_params, *extra[1], *filters.params)
    base = f"SELECT m.id {_from(table, filters)} {where}"
    if sort == "oldest":
        rows = conn.execute(f"{base} ORDER BY {table}.rowid ASC LIMIT ?", (*params, need))
        return [r[0] for r in rows], "oldest"
    counts = None if sort == "newest" or phrases is None else _rank_affordable(conn, table, phrases)
    if counts is None:
        # BM25 over a huge doclist costs ~1 s at 1 M rows; the newest matches cost ~1 ms.
        rows = conn.execute(f"{base} ORDER BY {table}.rowid DESC LIMIT ?", (*params, need))
        return [r[0] for r in rows], "newest"
    if phrases is not None and len(counts) == 1 and tuple(match_params) == (phrases[0],):
        count = counts[0]  # the query is that one phrase: its probe already counted it
    else:
        count = conn.execute(
            f"SELECT count(*) FROM (SELECT rowid FROM {table} WHERE {match_sql} LIMIT ?)",
            (*match_params, RANK_CANDIDATES + 1),
        ).fetchone()[0]
    if count <= RANK_CANDIDATES:
        rows = conn.execute(f"{base} ORDER BY {table}.rank LIMIT ?", (*params, need))
        return [r[0] for r in rows], "rank"
    # Many matches: rank the newest RANK_CANDIDATES of them (scoring costs ~4 us a row).
    low = conn.execute(
        f"SELECT rowid FROM {table} WHERE {match_sql} ORDER BY rowid DESC LIMIT 1 OFFSET ?",
        (*match_params, RANK_CANDIDATES - 1),
    ).fetchone()[0]
    rows = conn.execute(
        f"{base} AND {table}.rowid >= ? ORDER BY {table}.rank LIMIT ?", (*params, low, need)
    )
    ids = [r[0] for r in rows]
    if len(ids) < need:
        # Filters rejected most recent candidates: continue with older matches, newest first.
        rows = conn.execute(
            f"{base} AND {table}.rowid < ? ORDER BY {table}.rowid DESC LIMIT ?",
            (*params, low, need - len(ids)),
        )
        ids += [r[0] for r in rows]
    return ids, "rank_recent"


def _window_floor(conn: sqlite3.Connection, low: int, high: int, newest: bool) -> tuple[int, int]:
    """Narrow the id window (low, high] to at most SCAN_CAP rows at its newest/oldest end."""
    if newest:
        row = conn.execute(
            "SELECT id FROM messages WHERE id > ? AND id <= ? ORDER BY id DESC LIMIT 1 OFFSET ?",
            (low, high, SCAN_CAP),
        ).fetchone()
        return (int(row[0]), high) if row else (low, high)
    row = conn.execute(
        "SELECT id FROM messages WHERE id > ? AND id <= ? ORDER BY id ASC LIMIT 1 OFFSET ?",
        (low, high, SCAN_CAP - 1),
    ).fetchone()
    return (low, int(row[0])) if row else (low, high)


def _scan_ids(
    conn: sqlite3.Connection,
    window: tuple[int, int],
    predicate: tuple[str, tuple[Any, ...]],
    filters: _Filters,
    sort: str,
    need: int,
    *,
    extra_ids: str = "",
) -> tuple[list[int], bool]:
    """Scan at most SCAN_CAP rows of the id window (low, high] with a LIKE predicate.

    Returns the ids (newest first, or oldest first for sort="oldest") and whether rows of the
    window were left unexamined. ``extra_ids`` is an SQL id set scanned in addition.
    """
    newest = sort != "oldest"
    low, high = _window_floor(conn, *window, newest)
    partial = (low, high) != window
    in_window = f"(m.id > {int(low)} AND m.id <= {int(high)})"
    if extra_ids:
        in_window = f"({in_window} OR m.id IN ({extra_ids}))"
    order = "DESC" if newest else "ASC"
    rows = conn.execute(
        f"SELECT m.id {_from(None, filters)} WHERE {in_window} AND {predicate[0]} "
        f"AND {filters.sql} ORDER BY m.id {order} LIMIT ?",
        (*predicate[1], *filters.params, need),
    )
    return [r[0] for r in rows], partial


def _merge(index_ids: list[int], gap_ids: list[int], ordering: str) -> list[int]:
    """Combine index hits with hits from the not-yet-indexed window, each once."""
    if not gap_ids:
        return index_ids
    if ordering in ("newest", "oldest"):
        return sorted({*index_ids, *gap_ids}, reverse=ordering == "newest")
    return index_ids + [i for i in gap_ids if i not in set(index_ids)]


# --- routes ---------------------------------------------------------------------------------


def _word_route(
    conn: sqlite3.Connection, query: Query, idx: _Indexes, filters: _Filters, sort: str, need: int
) -> _Found:
    """Find rows through the word index (plus the rebuild window)."""
    match = query.fts()
    # FTS5 expands a prefix by merging every matching term's doclist, once per statement (the*
    # costs ~250 ms at 1 M rows): prefix queries get one statement, newest first, and their
    # snippets are cut in Python.
    prefix = any(t.prefix for t in query.terms())
    ids, ordering = _index_ids(
        conn,
        fts.WORD_TABLE,
        (f"{fts.WORD_TABLE} MATCH ?", (match,)),
        ("1", ()),
        filters,
        sort,
        need,
        phrases=None if prefix else [t.fts() for t in query.terms() if t.searchable],
    )
    found = _Found(ids, ordering, "word")
    if not prefix:
        found.snippet_table, found.snippet_match = fts.WORD_TABLE, match
    if idx.gap is not None:
        gap, found.partial = _scan_ids(conn, idx.gap, _query_like(query), filters, sort, need)
        found.ids = _merge(ids, gap, ordering)
        found.scanned = set(gap)
    return found


def _trigram_chunks(term: Term) -> list[str]:
    """Return the literal pieces of a positive term the trigram index can look up.

    Only wildcard-free pieces of 3+ characters are sent: LIKE cannot take an ESCAPE through
    FTS5, and SQLite 3.40's trigram LIKE crashes the process when a pattern without any
    3-character literal run ('%ab_c%') is combined with another LIKE constraint.
    """
    if term.negated:
        return []
    return [c for c in re.split("[%_]", term.text) if len(c) >= TRIGRAM_MIN_CHARS]


def _trigram_ready(query: Query) -> bool:
    """Tell whether every OR-group has a positive term the trigram index can look up."""
    return all(any(_trigram_chunks(t) for t in group) for group in query.groups)


def _trigram_group(
    group: Sequence[Term],
) -> tuple[tuple[str, tuple[Any, ...]], tuple[str, tuple[Any, ...]]]:
    """Return an AND-group's trigram lookup (LIKE on the index) and its exact checks."""
    like: list[str] = []
    params: list[Any] = []
    extra: list[str] = []
    extra_params: list[Any] = []
    for term in group:
        chunks = _trigram_chunks(term)
        for chunk in chunks:
            like.append(f"{fts.TRIGRAM_TABLE}.content LIKE ?")
            params.append(f"%{chunk}%")
        if chunks and chunks == [term.text]:
            continue  # the index answers this term exactly
        # Short, negated or wildcard-bearing terms are checked exactly on the candidates.
        sql, p = _term_like(term)
        extra.append(sql)
        extra_params.extend(p)
    return (" AND ".join(like), tuple(params)), (" AND ".join(extra) or "1", tuple(extra_params))


def _trigram_route(
    conn: sqlite3.Connection, query: Query, idx: _Indexes, filters: _Filters, sort: str, need: int
) -> _Found:
    """Find rows through the trigram index, newest first (plus the rebuild window)."""
    ids: set[int] = set()
    for group in query.groups:
        match, extra = _trigram_group(group)
        got, _ = _index_ids(
            conn,
            fts.TRIGRAM_TABLE,
            match,
            extra,
            filters,
            "oldest" if sort == "oldest" else "newest",
            need,
            phrases=None,
        )
        ids.update(got)
    ordering = "oldest" if sort == "oldest" else "newest"
    found = _Found(sorted(ids, reverse=ordering == "newest")[:need], ordering, "trigram")
    found.scanned = set(found.ids)
    if idx.gap is not None:
        gap, found.partial = _scan_ids(conn, idx.gap, _query_like(query), filters, sort, need)
        found.ids = _merge(found.ids, gap, ordering)
        found.scanned |= set(gap)
    cover = idx.trigram.covers("m") if idx.trigram is not None else None
    if cover is not None and _asks_for_uncovered(filters):
        # Tool output and cron/subagent transcripts are outside the agent's substring index;
        # a search that asks for them explicitly scans them (as the agent does).
        like_sql, like_params = _query_like(query)
        rest, cut = _scan_ids(
            conn,
            (0, idx.max_id),
            (f"NOT ({cover}) AND {like_sql}", like_params),
            filters,
            sort,
            need,
        )
        found.ids = _merge(found.ids, rest, ordering)
        found.scanned |= set(rest)
        found.partial = found.partial or cut
    return found


def _asks_for_uncovered(filters: _Filters) -> bool:
    """Tell whether the filters name rows the substring index leaves out (tool, cron, subagent)."""
    return "tool" in filters.roles or any(
        s in fts.TRIGRAM_EXCLUDED_SOURCES for s in filters.sources
    )


def _cjk_parts(query: Query) -> tuple[list[str], list[tuple[str, tuple[Any, ...]]]] | None:
    """Split a single-group query into CJK MATCH pieces and LIKE checks for everything else."""
    if len(query.groups) != 1:
        return None  # OR across scripts cannot be split between two indexes
    match: list[str] = []
    checks: list[tuple[str, tuple[Any, ...]]] = []
    for term in query.groups[0]:
        runs = cjk.cjk_runs(term.text)
        if term.negated or not runs:
            # Negations and words without CJK are checked on the candidate rows.
            if runs or term.searchable:
                checks.append(_term_like(term))
            continue
        match.extend(cjk.cjk_match_expr(run) for run in runs)
        if term.phrase:
            checks.append(_term_like(term))  # the runs narrow the rows; the phrase is exact
            continue
        rest = [p for p in cjk.non_cjk_parts(term.text) if any(c.isalnum() for c in p)]
        checks.extend(_term_like(Term(p)) for p in rest)
    if not match:
        return None
    return match, checks


def _cjk_sql(
    parts: tuple[list[str], list[tuple[str, tuple[Any, ...]]]],
) -> tuple[tuple[str, tuple[Any, ...]], tuple[str, tuple[Any, ...]]]:
    """Return the CJK index lookup and the exact checks for the rest of the query."""
    match, checks = parts
    extra = (
        " AND ".join(sql for sql, _ in checks) or "1",
        tuple(p for _, params in checks for p in params),
    )
    return (f"{cjk.TABLE} MATCH ?", (" ".join(match),)), extra


def _cjk_route(
    conn: sqlite3.Connection,
    query: Query,
    idx: _Indexes,
    filters: _Filters,
    sort: str,
    need: int,
    parts: tuple[list[str], list[tuple[str, tuple[Any, ...]]]],
) -> _Found:
    """Find rows through the CJK bigram index (plus rows not caught up yet)."""
    match, extra = _cjk_sql(parts)
    ids, ordering = _index_ids(
        conn,
        cjk.TABLE,
        match,
        extra,
        filters,
        sort,
        need,
        phrases=parts[0],
    )
    found = _Found(ids, ordering, "cjk")
    found.scanned = set(ids)
    if idx.max_id > idx.cjk_high_water or idx.cjk_pending:
        # Rows the catch-up has not reached yet (foreign writers) and rows queued after an edit.
        gap, found.partial = _scan_ids(
            conn,
            (idx.cjk_high_water, idx.max_id),
            _query_like(query),
            filters,
            sort,
            need,
            extra_ids=f"SELECT id FROM {cjk.PENDING_TABLE}",
        )
        found.ids = _merge(ids, gap, ordering)
        found.scanned |= set(gap)
    return found


def _scan_route(
    conn: sqlite3.Connection, query: Query, idx: _Indexes, filters: _Filters, sort: str, need: int
) -> _Found:
    """Find rows by a LIKE scan of the newest SCAN_CAP messages."""
    ids, partial = _scan_ids(conn, (0, idx.max_id), _query_like(query), filters, sort, need)
    ordering = "oldest" if sort == "oldest" else "newest"
    return _Found(ids, ordering, "scan", partial=partial, scanned=set(ids))


def _fts_failed(exc: sqlite3.Error) -> bool:
    """Tell whether an FTS query error should fall back to scanning (not a lock error)."""
    if is_lock_error(exc):
        return False
    return isinstance(exc, sqlite3.OperationalError) or is_corruption_error(exc)


@contextlib.contextmanager
def _deadline(
    conn: sqlite3.Connection, seconds: float, should_stop: Callable[[], bool] | None = None
) -> Iterator[None]:
    """Interrupt the connection's statements once seconds have passed (SQLite progress handler),
    or as soon as should_stop() says so."""
    stop = time.monotonic() + seconds
    if should_stop is None:
        conn.set_progress_handler(lambda: int(time.monotonic() > stop), PROGRESS_STEPS)
    else:
        conn.set_progress_handler(
            lambda: int(time.monotonic() > stop or should_stop()), PROGRESS_STEPS
        )
    try:
        yield
    finally:
        conn.set_progress_handler(None, 0)


def _find(
    conn: sqlite3.Connection, query: Query, idx: _Indexes, filters: _Filters, sort: str, need: int
) -> _Found:
    """Pick the route for the query and run it (falling back when an index cannot serve it)."""
    if idx.stale or not idx.word:
        return _scan_route(conn, query, idx, filters, sort, need)
    interrupted = False
    try:
        # A filter that rejects nearly every match of a huge match set would otherwise walk the
        # whole doclist: past the budget the search degrades to the bounded scan (partial).
        with _deadline(conn, INDEX_BUDGET_S):
            found = _find_indexed(conn, query, idx, filters, sort, need)
        if found is not None:
            return found
    except sqlite3.DatabaseError as exc:
        if not _fts_failed(exc):
            raise
        # Over budget, or a foreign or damaged index: fail open to the bounded scan.
        interrupted = "interrupt" in str(exc).lower()
    found = _scan_route(conn, query, idx, filters, sort, need)
    found.partial = found.partial or interrupted
    return found


def _find_indexed(
    conn: sqlite3.Connection, query: Query, idx: _Indexes, filters: _Filters, sort: str, need: int
) -> _Found | None:
    """Run the index route that serves the query; None when only a scan can."""
    if query.has_cjk:
        parts = _cjk_parts(query) if idx.cjk else None
        if parts is not None:
            return _cjk_route(conn, query, idx, filters, sort, need, parts)
        runs = [r for t in query.terms() for r in cjk.cjk_runs(t.text)]
        long_runs = all(len(r) >= TRIGRAM_MIN_CHARS for r in runs)
        if idx.trigram and long_runs and _trigram_ready(query):
            return _trigram_route(conn, query, idx, filters, sort, need)
        return None
    if query.fts():
        found = _word_route(conn, query, idx, filters, sort, need)
        if found.ids:
            return found
    if idx.trigram and _trigram_ready(query):
        return _trigram_route(conn, query, idx, filters, sort, need)
    return None


# --- hits -----------------------------------------------------------------------------------


def _plain_text(content: object) -> str:
    """Return the readable text of a content value (structured parts flattened)."""
    if content is None:
        return ""
    text = content if isinstance(content, str) else str(content)
    if not text.startswith(_STRUCTURED_PREFIX) and not text.startswith("[{"):
        return text
    try:
        value = json.loads(text.removeprefix(_STRUCTURED_PREFIX))
    except ValueError:
        return text
    if isinstance(value, list):
        parts = [p.get("text") for p in value if isinstance(p, dict)]
        texts = [p for p in parts if isinstance(p, str)]
        return " ".join(texts) if texts else "[multimodal content]"
    return text


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
    return _needles(_tame_prefixes(parse_query(query if isinstance(query, str) else "")))


def _text_snippet(text: str, pattern: re.Pattern[str] | None) -> str:
    """Cut a window of text around the first match, marking matches >>>like this<<<."""
    first = pattern.search(text) if pattern is not None else None
    if pattern is None or first is None:
        return text[:SNIPPET_CHARS] + ("..." if len(text) > SNIPPET_CHARS else "")
    start = max(0, first.start() - SNIPPET_CHARS // 3)
    end = min(len(text), start + SNIPPET_CHARS + (first.end() - first.start()))
    window = pattern.sub(lambda m: f">>>{m.group()}<<<", text[start:end])
    return ("..." if start > 0 else "") + window + ("..." if end < len(text) else "")


def _fts_snippets(
    conn: sqlite3.Connection, table: str, match: str, ids: list[int]
) -> dict[int, str]:
    """Return FTS5 snippets for the given rows, in one statement."""
    if not ids:
        return {}
    # The rowid range is served by FTS5 itself; "+rowid IN" is then checked per row, which
    # costs far less than "rowid IN", where FTS5 restarts the whole query for every id.
    rows = conn.execute(
        f"SELECT rowid, snippet({table}, -1, '>>>', '<<<', '...', {SNIPPET_TOKENS}) "
        f"FROM {table} WHERE {table} MATCH ? AND rowid BETWEEN ? AND ? "
        f"AND +rowid IN ({','.join('?' * len(ids))})",
        (match, min(ids), max(ids), *ids),
    )
    return {r[0]: r[1] for r in rows}


def _contexts(
    conn: sqlite3.Connection, neighbours: dict[int, tuple[int | None, int | None]]
) -> dict[int, list[dict[str, Any]]]:
    """Return each hit's context: the visible message before and after it ({id, role, content})."""
    wanted = sorted({i for pair in neighbours.values() for i in pair if i is not None})
    rows: dict[int, dict[str, Any]] = {}
    if wanted:
        for row_id, role, content in conn.execute(
            f"SELECT id, role, substr(content, 1, {CONTEXT_CHARS * 4}) FROM messages "
            f"WHERE id IN ({','.join('?' * len(wanted))})",
            wanted,
        ):
            rows[row_id] = {
                "id": row_id,
                "role": role,
                "content": _plain_text(content)[:CONTEXT_CHARS],
            }
    return {
        hit: [rows[i] for i in pair if i is not None and i in rows]
        for hit, pair in neighbours.items()
    }


def _hits(
    store: Store,
    found: _Found,
    query: Query,
    filters: _Filters,
    ids: list[int],
    *,
    with_context: bool = True,
) -> list[dict[str, Any]]:
    """Load the hit rows, their sessions, snippets and context (a few statements in all)."""
    if not ids:
        return []
    conn = store.conn
    from hermes_state import schema

    cols = schema.projection(
        store.columns("messages"),
        ("id", "session_id", "role", "timestamp", "tool_name", "content", "tool_calls"),
        "m",
    )
    neighbour = (
        "(SELECT p.id FROM messages p WHERE p.session_id = m.session_id AND p.id {op} m.id "
        f"AND {filters.visible} ORDER BY p.id {{order}} LIMIT 1)"
    )
    before = neighbour.format(op="<", order="DESC") if with_context else "NULL"
    after = neighbour.format(op=">", order="ASC") if with_context else "NULL"
    rows = {
        r["id"]: r
        for r in conn.execute(
            f"SELECT {cols}, s.source, s.model, s.started_at, {before} AS before_id, "
            f"{after} AS after_id FROM messages m LEFT JOIN sessions s ON s.id = m.session_id "
            f"WHERE m.id IN ({','.join('?' * len(ids))})",
            ids,
        )
    }
    snippets: dict[int, str] = {}
    if found.snippet_table:
        indexed = [i for i in ids if i not in found.scanned and i in rows]
        snippets = _fts_snippets(conn, found.snippet_table, found.snippet_match, indexed)
    contexts = _contexts(conn, {i: (r["before_id"], r["after_id"]) for i, r in rows.items()})
    pattern = _needles(query)
    hits = []
    for row_id in ids:
        row = rows.get(row_id)
        if row is None:
            continue
        snippet = snippets.get(row_id)
        if snippet is None:
            text = _plain_text(row["content"]) or row["tool_calls"] or row["tool_name"] or ""
            snippet = _text_snippet(str(text), pattern)
        hits.append(
            {
                "id": row["id"],
                "session_id": row["session_id"],
                "role": row["role"],
                "snippet": snippet,
                "timestamp": row["timestamp"],
                "tool_name": row["tool_name"],
                "source": row["source"],
                "model": row["model"],
                "session_started": row["started_at"],
                "context": contexts.get(row_id, []),
            }
        )
    return hits


def _tame_prefixes(query: Query) -> Query:
    """Search a prefix shorter than MIN_PREFIX_CHARS as a word (th* matches most rows)."""
    return Query(
        tuple(
            tuple(
                Term(t.text, phrase=t.phrase, negated=t.negated)
                if t.prefix and len(t.text) < MIN_PREFIX_CHARS
                else t
                for t in group
            )
            for group in query.groups
        )
    )


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
) -> SearchResult:
    """Search message text; return hits (dicts with HIT_KEYS) and the ordering used.

    after/before (epoch seconds) keep messages whose timestamp is in [after, before);
    ``archived`` and ``pinned`` keep messages of sessions that are (True) or are not (False)
    archived / pinned. ``context=False`` leaves each hit's context empty (saves two lookups a
    hit).
    """
    if sort not in SORTS:
        sort = "rank"
    parsed = _tame_prefixes(parse_query(query if isinstance(query, str) else ""))
    limit, offset = max(0, int(limit)), max(0, int(offset))
    if not parsed.groups or limit == 0:
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
    with store.lock:
        conn = store.conn
        found = _find(conn, parsed, _indexes(conn), filters, sort, need)
        hits = _hits(store, found, parsed, filters, found.ids[offset:need], with_context=context)
    return SearchResult(hits, ordering=found.ordering, route=found.route, partial=found.partial)


# --- counting -------------------------------------------------------------------------------


def _count_index(
    conn: sqlite3.Connection,
    selects: Sequence[tuple[str | None, tuple[str, tuple[Any, ...]], tuple[str, tuple[Any, ...]]]],
    filters: _Filters,
    cap: int,
) -> int:
    """Count the distinct rows of one or more (table, match, checks) selects, up to cap.

    Counting happens inside SQLite (no row reaches Python): the GIL is released meanwhile.
    """
    parts, params = [], []
    for table, (match_sql, match_params), (extra_sql, extra_params) in selects:
        where = f"{match_sql} AND {extra_sql} AND {filters.sql}"
        parts.append(f"SELECT m.id {_from(table, filters)} WHERE {where}")
        params += [*match_params, *extra_params, *filters.params]
    union = " UNION ".join(parts)
    return int(
        conn.execute(f"SELECT count(*) FROM ({union} LIMIT ?)", (*params, cap)).fetchone()[0]
    )


def _count_window(
    conn: sqlite3.Connection,
    window: tuple[int, int],
    predicate: tuple[str, tuple[Any, ...]],
    filters: _Filters,
    cap: int,
    *,
    extra_ids: str = "",
) -> tuple[int, bool]:
    """Count matches in the id window (low, high] as _scan_ids finds them; (count, cut short)."""
    low, high = _window_floor(conn, *window, True)
    in_window = f"(m.id > {int(low)} AND m.id <= {int(high)})"
    if extra_ids:
        in_window = f"({in_window} OR m.id IN ({extra_ids}))"
    n = _count_index(conn, [(None, (in_window, ()), predicate)], filters, cap)
    return n, (low, high) != window


def _count_found(
    conn: sqlite3.Connection, query: Query, idx: _Indexes, filters: _Filters, cap: int
) -> tuple[int, bool, str]:
    """Count what _find would find (same routes, same windows): (count, cut short, route)."""
    if idx.stale or not idx.word:
        n, cut = _count_window(conn, (0, idx.max_id), _query_like(query), filters, cap)
        return n, cut, "scan"
    if query.has_cjk:
        parts = _cjk_parts(query) if idx.cjk else None
        if parts is not None:
            match, extra = _cjk_sql(parts)
            n = _count_index(conn, [(cjk.TABLE, match, extra)], filters, cap)
            cut = False
            if idx.max_id > idx.cjk_high_water or idx.cjk_pending:
                gap, cut = _count_window(
                    conn,
                    (idx.cjk_high_water, idx.max_id),
                    _query_like(query),
                    filters,
                    cap,
                    extra_ids=f"SELECT id FROM {cjk.PENDING_TABLE}",
                )
                n += gap
            return n, cut, "cjk"
        runs = [r for t in query.terms() for r in cjk.cjk_runs(t.text)]
        if not (idx.trigram and all(len(r) >= TRIGRAM_MIN_CHARS for r in runs)):
            n, cut = _count_window(conn, (0, idx.max_id), _query_like(query), filters, cap)
            return n, cut, "scan"
    elif query.fts():
        match = (f"{fts.WORD_TABLE} MATCH ?", (query.fts(),))
        n = _count_index(conn, [(fts.WORD_TABLE, match, ("1", ()))], filters, cap)
        cut = False
        if idx.gap is not None:
            gap, cut = _count_window(conn, idx.gap, _query_like(query), filters, cap)
            n += gap
        if n:
            return n, cut, "word"
    if idx.trigram and _trigram_ready(query):
        selects = [(fts.TRIGRAM_TABLE, *_trigram_group(g)) for g in query.groups]
        n = _count_index(conn, selects, filters, cap)
        cut = False
        if idx.gap is not None:
            gap, cut = _count_window(conn, idx.gap, _query_like(query), filters, cap)
            n += gap
        return n, cut, "trigram"
    n, cut = _count_window(conn, (0, idx.max_id), _query_like(query), filters, cap)
    return n, cut, "scan"


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
    """Count the messages search_messages would page through for the same query and filters.

    Takes the same routes as the search. Counting a term that matches half of a large store
    costs far more than finding its first hits, so it runs under budget_s (and stops as soon as
    should_stop() returns True); past that the count is None.
    """
    parsed = _tame_prefixes(parse_query(query if isinstance(query, str) else ""))
    if not parsed.groups:
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
    with store.lock:
        conn = store.conn
        idx = _indexes(conn)
        try:
            with _deadline(conn, budget_s, should_stop):
                n, cut, route = _count_found(conn, parsed, idx, filters, cap)
        except sqlite3.DatabaseError as exc:
            if not _fts_failed(exc):
                raise
            return MatchCount(None, False, "none")
    return MatchCount(min(n, cap), not cut and n < cap, route)
