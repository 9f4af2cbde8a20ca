"""Sessions whose title matches a search query: the title half of `sessions search`.

A message search reads message text; a session's title is not in any message. A title matches
a query when one of its OR-groups matches: every wanted term is in the title (its words, folded
as the word index folds them, or its text as a substring, so `Travel plans` finds "Travel plans
Osaka" and `ocker` finds "Fix Docker build") and no excluded term is (whole words, as a message
exclusion; CJK anywhere). Titles are matched in Python, after a LIKE in SQL has passed over
the ASCII titles that cannot match (a profile holds tens of thousands of titles).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hermes_state.records.session_list import activity_sql, listing_conditions
from hermes_state.search.query import (
    Query,
    Term,
    fold,
    has_words,
    like_pattern,
    parse_query,
    term_words,
)
from hermes_state.store import cjk
from hermes_state.store.sql import chunks, marks

if TYPE_CHECKING:
    from hermes_state.store.connection import Store


def _has_term(title: str, folded: str, term: Term) -> bool:
    """Tell whether a title holds a wanted term (its words, or its text as a substring)."""
    if has_words(term.text, 1 if term.prefix else 0, title):
        return True
    needle = fold(term.text).strip()
    return bool(needle) and needle in folded


def _lacks_term(title: str, folded: str, term: Term) -> bool:
    """Tell whether a title is free of an excluded term (whole words; CJK anywhere)."""
    if cjk.cjk_runs(term.text):
        return fold(term.text) not in folded
    return not has_words(term.text, 1 if term.prefix else 0, title)


def title_matches(title: str | None, query: Query) -> bool:
    """Tell whether a session title matches a parsed query."""
    if not title:
        return False
    folded = fold(title)
    if not all(_lacks_term(title, folded, t) for t in query.exclusions()):
        return False
    return any(all(_has_term(title, folded, t) for t in g) for g in query.wanted().groups)


def _ascii_title_filter(query: Query) -> tuple[str, list[str]] | None:
    """Return SQL (on sessions s) false only for ASCII titles no OR-group can match, or None.

    A wanted term matches a title only if the title's folded text holds the term's first word
    (whole words or a substring alike). Folding ASCII text is lowering it, and LIKE ignores
    ASCII case, so for an ASCII title LIKE decides that; other titles all go to Python.
    """
    groups: list[str] = []
    params: list[str] = []
    for group in query.wanted().groups:
        likes: list[str] = []
        for term in group:
            words = term_words(term.text)
            if words:
                likes.append("s.title LIKE ? ESCAPE '\\'")
                params.append(like_pattern(words[0]))
        if not likes:
            return None  # a group of wordless terms: only Python can tell
        groups.append(" AND ".join(likes))
    ascii_title = "length(CAST(s.title AS BLOB)) = length(s.title)"
    return f"(NOT {ascii_title} OR ({') OR ('.join(groups)}))", params


def search_titles(
    store: Store,
    text: str,
    *,
    sources: list[str] | None = None,
    exclude_sources: list[str] | None = None,
    include_archived: bool = False,
    active_since: float | None = None,
    active_before: float | None = None,
) -> list[dict[str, Any]]:
    """Return the sessions whose title matches the query text, most recently active first.

    Each row: id, title, source, model, started_at, last_active (epoch seconds). The filters
    are those of a session listing (last activity in [since, before)).
    """
    query = parse_query(text)
    if not query.wanted().groups:
        return []
    live = store.columns("sessions")
    where, params = listing_conditions(
        live,
        sources=sources,
        exclude_sources=exclude_sources,
        include_archived=include_archived,
        active_since=active_since,
        active_before=active_before,
    )
    where += ["s.id IS NOT NULL", "s.title IS NOT NULL", "s.title <> ''"]
    ascii_filter = _ascii_title_filter(query)
    if ascii_filter is not None:
        where.append(ascii_filter[0])
        params = [*params, *ascii_filter[1]]
    model = "s.model" if "model" in live else "NULL"
    sql = (
        f"SELECT s.id, s.title, s.source, {model} AS model, s.started_at "
        f"FROM sessions s WHERE {' AND '.join(where)}"
    )
    found = [
        dict(row)
        for row in store.conn.execute(sql, params)
        if isinstance(row["title"], str) and title_matches(row["title"], query)
    ]
    # Last activity (a lookup in messages per session) only for the sessions that matched.
    active: dict[Any, Any] = {}
    for batch in chunks([r["id"] for r in found]):
        active.update(
            store.conn.execute(
                f"SELECT s.id, {activity_sql(live, 's')} FROM sessions s "
                f"WHERE s.id IN ({marks(len(batch))})",
                batch,
            ).fetchall()
        )
    for r in found:
        r["last_active"] = active.get(r["id"])
    found.sort(key=lambda r: (r["last_active"] or 0, r["id"]), reverse=True)
    return found
