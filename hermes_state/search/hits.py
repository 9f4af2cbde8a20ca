"""Loading the hits of a search: their rows, sessions, snippets and context, in few statements."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hermes_state.search.query import (
    Query,
    parse_query,
    tame_prefixes,
)
from hermes_state.search.routes import _Filters
from hermes_state.search.walk import _Found
from hermes_state.shapes.content import content_text
from hermes_state.store import cjk, schema
from hermes_state.store.sql import marks

if TYPE_CHECKING:
    from hermes_state.store.connection import Store

HITS_PER_STATEMENT = 500  # hits loaded per statement (SQLite caps bound parameters)
SNIPPET_TOKENS = 40
SNIPPET_CHARS = 120
CONTEXT_CHARS = 200


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
