"""Pages of sessions: the listing columns, filters and orders, counts, previews, the candidates
shell completion offers, and message counts per session."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, NamedTuple

from hermes_state.shapes import values
from hermes_state.shapes.content import content_text
from hermes_state.shapes.text import bindable
from hermes_state.store.connection import Store
from hermes_state.store.schema import projection
from hermes_state.store.sql import chunks, escape_like, marks

PREVIEW_CHARS = 60
_ID_CHUNK = 500  # ids bound per IN (...) statement, well under SQLite's variable limit


def get_sessions_by_id(store: Store, session_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Return the listing columns (LIST_COLUMNS) of the given sessions, keyed by id."""
    ids = list(dict.fromkeys(bindable(i) for i in session_ids if isinstance(i, str)))
    out: dict[str, dict[str, Any]] = {}
    cols = projection(store.columns("sessions"), LIST_COLUMNS, "s")
    for start in range(0, len(ids), _ID_CHUNK):
        chunk = ids[start : start + _ID_CHUNK]
        rows = store.conn.execute(
            f"SELECT {cols} FROM sessions s WHERE s.id IN ({', '.join('?' for _ in chunk)})",
            chunk,
        )
        out.update((r["id"], dict(r)) for r in rows)
    return out


LIST_COLUMNS = (
    "id",
    "source",
    "user_id",
    "model",
    "title",
    "parent_session_id",
    "started_at",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "input_tokens",
    "output_tokens",
    "estimated_cost_usd",
    "actual_cost_usd",
    "archived",
    "pinned",
    "last_activity_at",
    "profile_name",
)


def _source_filters(
    sources: list[str] | None,
    exclude_sources: list[str] | None,
    alias: str = "s",
    started_after: float | None = None,
    started_before: float | None = None,
) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if sources:
        where.append(f"{alias}.source IN ({', '.join('?' for _ in sources)})")
        params += [bindable(s) for s in sources]
    if exclude_sources:
        where.append(f"{alias}.source NOT IN ({', '.join('?' for _ in exclude_sources)})")
        params += [bindable(s) for s in exclude_sources]
    if started_after is not None:
        where.append(f"{alias}.started_at >= ?")
        params.append(float(started_after))
    if started_before is not None:
        where.append(f"{alias}.started_at < ?")
        params.append(float(started_before))
    return where, params


def activity_sql(live: Collection[str], alias: str = "s") -> str:
    """SQL for a session's last activity, as listings show it: the latest of its start, its
    last_activity_at and its newest message (the agent's counter can lag foreign writers)."""
    a = alias
    parts = [
        f"{a}.started_at",
        f"COALESCE((SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = {a}.id),"
        f" {a}.started_at)",
    ]
    if "last_activity_at" in live:
        parts.append(f"COALESCE({a}.last_activity_at, {a}.started_at)")
    return f"MAX({', '.join(parts)})"


def activity_filters(
    live: Collection[str], alias: str, after: float | None, before: float | None
) -> tuple[list[str], list[Any]]:
    """Return conditions keeping sessions (under alias) last active in [after, before)."""
    where: list[str] = []
    params: list[Any] = []
    activity = activity_sql(live, alias)
    if after is not None:
        where.append(f"{activity} >= ?")
        params.append(float(after))
    if before is not None:
        where.append(f"{activity} < ?")
        params.append(float(before))
    return where, params


def _listing_filters(
    live: tuple[str, ...],
    *,
    sources: list[str] | None,
    exclude_sources: list[str] | None,
    include_archived: bool,
    archived_only: bool,
    pinned_only: bool,
    active_since: float | None,
    started_after: float | None = None,
    started_before: float | None = None,
    active_before: float | None = None,
    title_contains: str | None = None,
    models: list[str] | None = None,
) -> tuple[list[str], list[Any]]:
    """Return the WHERE conditions (alias s) a listing and its count share."""
    where, params = _source_filters(
        sources, exclude_sources, started_after=started_after, started_before=started_before
    )
    if title_contains:
        # LIKE folds ASCII case: `--title docker` finds "Fix Docker build".
        where.append("s.title LIKE ? ESCAPE '\\'")
        params.append(f"%{escape_like(bindable(title_contains))}%")
    if models:
        where.append(f"s.model IN ({', '.join('?' for _ in models)})")
        params += [bindable(m) for m in models]
    if archived_only:
        # A layout without the column has no archived sessions.
        where.append("s.archived <> 0" if "archived" in live else "0")
    elif not include_archived and "archived" in live:
        where.append("s.archived = 0")
    if pinned_only:
        where.append("s.pinned <> 0" if "pinned" in live else "0")
    more, values = activity_filters(live, "s", active_since, active_before)
    return where + more, params + values


def listing_conditions(
    live: tuple[str, ...],
    *,
    sources: list[str] | None = None,
    exclude_sources: list[str] | None = None,
    include_archived: bool = False,
    active_since: float | None = None,
    active_before: float | None = None,
) -> tuple[list[str], list[Any]]:
    """Return the WHERE conditions (alias s) of a listing with these filters."""
    return _listing_filters(
        live,
        sources=sources,
        exclude_sources=exclude_sources,
        include_archived=include_archived,
        archived_only=False,
        pinned_only=False,
        active_since=active_since,
        active_before=active_before,
    )


def make_preview(text: str | None, ellipsis: str = "…") -> str:
    """Flatten a message into a one-line preview of at most 60 characters plus an ellipsis."""
    if not text:
        return ""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[:PREVIEW_CHARS] + ellipsis


def list_sessions(
    store: Store,
    *,
    sources: list[str] | None = None,
    exclude_sources: list[str] | None = None,
    limit: int = 20,
    offset: int = 0,
    include_archived: bool = False,
    order: str = "started",
    started_after: float | None = None,
    started_before: float | None = None,
    archived_only: bool = False,
    pinned_only: bool = False,
    active_since: float | None = None,
    active_before: float | None = None,
    title_contains: str | None = None,
    models: list[str] | None = None,
    reverse: bool = False,
) -> list[dict[str, Any]]:
    """Return one page of sessions, newest first (oldest first with ``reverse``).

    Each row has its preview and last_active. started_after/started_before (epoch seconds) keep
    sessions started in [after, before); active_since/active_before those whose last recorded
    activity is in [since, before); ``archived_only`` lists archived sessions only and
    ``pinned_only`` pinned ones only; ``title_contains`` keeps titles holding that text (ASCII
    case folded) and ``models`` sessions of those models.
    """
    if order not in ("started", "active"):
        raise ValueError(f"order must be 'started' or 'active', not {order!r}")
    live = store.columns("sessions")
    where, params = _listing_filters(
        live,
        sources=sources,
        exclude_sources=exclude_sources,
        include_archived=include_archived,
        archived_only=archived_only,
        pinned_only=pinned_only,
        active_since=active_since,
        active_before=active_before,
        started_after=started_after,
        started_before=started_before,
        title_contains=title_contains,
        models=models,
    )
    where.append("s.id IS NOT NULL")  # a row without an id cannot be shown or opened
    way = "ASC" if reverse else "DESC"
    if order == "active" and "last_activity_at" in live:
        order_sql = f"COALESCE({{a}}.last_activity_at, {{a}}.started_at) {way}, {{a}}.id {way}"
    else:
        order_sql = f"{{a}}.started_at {way}, {{a}}.id {way}"
    hidden = (
        " AND (display_kind IS NULL OR display_kind <> 'hidden')"
        if "display_kind" in store.columns("messages")
        else ""
    )
    # One statement: the page is chosen first (materialized), so the two lookups per row (an
    # index seek each, never a scan of messages) run for the listed rows only.
    sql = (
        f"WITH page AS MATERIALIZED (SELECT {projection(live, LIST_COLUMNS, 's')} FROM sessions s"
        + (f" WHERE {' AND '.join(where)}" if where else "")
        + f" ORDER BY {order_sql.format(a='s')} LIMIT ? OFFSET ?) "
        "SELECT page.*, (SELECT content FROM messages WHERE session_id = page.id"
        f" AND role = 'user' AND content IS NOT NULL{hidden} ORDER BY id LIMIT 1)"
        " AS _first_user_text, (SELECT MAX(timestamp) FROM messages"
        " WHERE session_id = page.id) AS _latest"
        f" FROM page ORDER BY {order_sql.format(a='page')}"
    )
    rows = []
    for found in store.conn.execute(sql, [*params, int(limit), int(offset)]):
        r = dict(found)
        first, latest = r.pop("_first_user_text"), r.pop("_latest")
        values.clean_row(r)
        r["preview"] = make_preview(content_text(first, sep=" ") if first is not None else None)
        latest = values.clean_value("timestamp", latest)
        candidates = [t for t in (latest, r.get("last_activity_at")) if t is not None]
        r["last_active"] = max(candidates) if candidates else r["started_at"]
        rows.append(r)
    return rows


def count_sessions(
    store: Store,
    *,
    sources: list[str] | None = None,
    exclude_sources: list[str] | None = None,
    include_archived: bool = False,
    started_after: float | None = None,
    started_before: float | None = None,
    archived_only: bool = False,
    pinned_only: bool = False,
    active_since: float | None = None,
    active_before: float | None = None,
    title_contains: str | None = None,
    models: list[str] | None = None,
) -> int:
    """Return how many sessions a listing with these filters would page through."""
    where, params = _listing_filters(
        store.columns("sessions"),
        sources=sources,
        exclude_sources=exclude_sources,
        include_archived=include_archived,
        archived_only=archived_only,
        pinned_only=pinned_only,
        active_since=active_since,
        active_before=active_before,
        started_after=started_after,
        started_before=started_before,
        title_contains=title_contains,
        models=models,
    )
    where.append("s.id IS NOT NULL")  # a row without an id cannot be shown or opened
    sql = "SELECT COUNT(*) FROM sessions s" + (f" WHERE {' AND '.join(where)}" if where else "")
    return int(store.conn.execute(sql, params).fetchone()[0])


def recent_session_ids(store: Store, prefix: str = "", limit: int = 50) -> list[tuple[str, Any]]:
    """Return (id, title) of the newest-started sessions whose id starts with prefix."""
    prefix = bindable(prefix or "")
    rows = store.conn.execute(
        "SELECT id, title FROM sessions WHERE id >= ? AND id < ?"
        " ORDER BY started_at DESC, id DESC LIMIT ?",
        (prefix, prefix + "\U0010ffff", int(limit)),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def titles_with_prefix(store: Store, prefix: str = "", limit: int = 50) -> list[str]:
    """Return session titles starting with prefix (case-sensitive), in title order."""
    prefix = bindable(prefix or "")
    rows = store.conn.execute(
        "SELECT title FROM sessions WHERE title >= ? AND title < ? ORDER BY title LIMIT ?",
        (prefix, prefix + "\U0010ffff", int(limit)),
    ).fetchall()
    return [r[0] for r in rows]


def distinct_models(store: Store) -> list[str]:
    """Return every model that has sessions, in name order."""
    rows = store.conn.execute(
        "SELECT DISTINCT model FROM sessions WHERE model IS NOT NULL ORDER BY model"
    ).fetchall()
    return [r[0] for r in rows]


def distinct_sources(store: Store) -> list[str]:
    """Return every source that has sessions, in name order."""
    rows = store.conn.execute(
        "SELECT DISTINCT source FROM sessions WHERE source IS NOT NULL ORDER BY source"
    ).fetchall()
    return [r[0] for r in rows]


class MessageCounts(NamedTuple):
    """A session's messages, counted from its rows.

    ``live``: the current conversation (active rows). ``shown``: what a transcript shows by
    default, live rows plus compacted history. ``stored``: every row of every generation
    (rewound turns included): what an export writes and a delete removes.
    """

    live: int
    shown: int
    stored: int


def live_sql(store: Store) -> tuple[str, str]:
    """SQL for a live row and for a shown row (any row, in layouts that keep no generations)."""
    cols = store.columns("messages")
    if "active" not in cols:
        return "1", "1"
    shown = "(active = 1 OR compacted = 1)" if "compacted" in cols else "(active = 1)"
    return "(active = 1)", shown


def message_counts(store: Store, session_ids: Iterable[str]) -> dict[str, MessageCounts]:
    """Return each session's MessageCounts (sessions without messages count 0, 0, 0)."""
    ids = list(dict.fromkeys(session_ids))
    counts = dict.fromkeys(ids, MessageCounts(0, 0, 0))
    live, shown = live_sql(store)
    for chunk in chunks(ids):
        rows = store.conn.execute(
            f"SELECT session_id, COALESCE(SUM({live}), 0), COALESCE(SUM({shown}), 0), COUNT(*) "
            f"FROM messages WHERE session_id IN ({marks(len(chunk))}) GROUP BY session_id",
            chunk,
        )
        for sid, n_live, n_shown, n_stored in rows:
            counts[sid] = MessageCounts(int(n_live), int(n_shown), int(n_stored))
    return counts
