"""Session listings and counts in the agent's calling conventions (list_sessions_rich,
search_sessions, session_count, session_count_by_source), sharing one filter so that every
count matches the rows its listing pages through."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_state.connection import Store
from hermes_state.content import decode_content
from hermes_state.sessions import get_session, make_preview
from hermes_state.sql import marks
from hermes_state.text import bindable

# A child that continues a conversation (compression) or is a delegated run is not listed on its
# own unless children are asked for; a branch is a conversation of its own and stays.
_DELEGATE = (
    "json_extract(CASE WHEN json_valid({a}.model_config) THEN {a}.model_config "
    "ELSE json_object() END, '$._delegate_from')"
)
_CONTINUATION = (
    "EXISTS (SELECT 1 FROM sessions p WHERE p.id = {a}.parent_session_id "
    "AND p.end_reason = 'compression')"
)


@dataclass
class _Where:
    """WHERE clauses over ``sessions s`` and their parameters."""

    clauses: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)

    def add(self, clause: str, *params: Any) -> None:
        self.clauses.append(clause)
        self.params.extend(params)

    def sql(self) -> str:
        return f" WHERE {' AND '.join(self.clauses)}" if self.clauses else ""


def _filters(
    store: Store,
    *,
    source: str | Sequence[str] | None = None,
    sources: Sequence[str] | None = None,
    exclude_sources: Sequence[str] | None = None,
    session_key: str | None = None,
    cwd_prefix: str | None = None,
    min_message_count: int = 0,
    include_archived: bool = False,
    archived_only: bool = False,
    exclude_children: bool = False,
    include_subagents: bool = False,
    include_hidden: bool = True,
) -> _Where:
    """Build the filter every listing and count of this module shares."""
    cols = set(store.columns("sessions"))
    where = _Where()
    wanted = [source] if isinstance(source, str) else list(source or [])
    wanted += list(sources or [])
    if wanted:
        where.add(f"s.source IN ({marks(len(wanted))})", *map(bindable, wanted))
    if exclude_sources:
        excluded = [bindable(s) for s in exclude_sources]
        where.add(f"s.source NOT IN ({marks(len(excluded))})", *excluded)
    if session_key and "session_key" in cols:
        where.add("s.session_key = ?", bindable(session_key))
    if cwd_prefix and "cwd" in cols:
        prefix = cwd_prefix.rstrip("/") or cwd_prefix
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.add("(s.cwd = ? OR s.cwd LIKE ? ESCAPE '\\')", prefix, escaped + "/%")
    if min_message_count > 0:
        where.add("COALESCE(s.message_count, 0) >= ?", int(min_message_count))
    if "archived" in cols:
        if archived_only:
            where.add("s.archived = 1")
        elif not include_archived:
            where.add("COALESCE(s.archived, 0) = 0")
    if exclude_children:
        where.add(f"NOT ({_CONTINUATION.format(a='s')})")
        if not include_subagents:
            where.add(f"{_DELEGATE.format(a='s')} IS NULL")
    if not include_subagents:
        where.add("s.source IS NOT 'subagent'")
    if not include_hidden and "hidden" in cols:
        where.add("COALESCE(s.hidden, 0) = 0")
    return where


def session_count(
    store: Store,
    source: str | None = None,
    sources: list[str] | None = None,
    cwd_prefix: str | None = None,
    min_message_count: int = 0,
    include_archived: bool = False,
    archived_only: bool = False,
    exclude_children: bool = False,
    exclude_sources: list[str] | None = None,
    include_subagents: bool = False,
) -> int:
    """Count the sessions a listing with the same filters pages through."""
    where = _filters(
        store,
        source=source,
        sources=sources,
        exclude_sources=exclude_sources,
        cwd_prefix=cwd_prefix,
        min_message_count=min_message_count,
        include_archived=include_archived,
        archived_only=archived_only,
        exclude_children=exclude_children,
        include_subagents=include_subagents,
    )
    row = store.conn.execute(f"SELECT count(*) FROM sessions s{where.sql()}", where.params)
    return int(row.fetchone()[0])


def session_count_by_source(
    store: Store,
    *,
    include_archived: bool = False,
    archived_only: bool = False,
    exclude_children: bool = False,
) -> dict[str, int]:
    """Return {source: sessions}, largest first (a session without a source counts as "cli")."""
    where = _filters(
        store,
        include_archived=include_archived,
        archived_only=archived_only,
        exclude_children=exclude_children,
        include_subagents=True,
    )
    rows = store.conn.execute(
        "SELECT COALESCE(NULLIF(s.source, ''), 'cli') AS src, count(*) AS n FROM sessions s"
        f"{where.sql()} GROUP BY src ORDER BY n DESC, src",
        where.params,
    )
    return {str(r[0]): int(r[1]) for r in rows}


def _last_active_sql(alias: str = "s") -> str:
    return (
        f"MAX(COALESCE({alias}.last_activity_at, {alias}.started_at), "
        f"COALESCE((SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = {alias}.id), "
        f"{alias}.started_at))"
    )


def _with_previews(store: Store, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add each row's preview (its first visible user message, flattened; none for structured)."""
    hidden = "display_kind" in store.columns("messages")
    sql = (
        "SELECT content FROM messages WHERE session_id = ? AND role = 'user' "
        "AND content IS NOT NULL"
        + (" AND (display_kind IS NULL OR display_kind <> 'hidden')" if hidden else "")
        + " ORDER BY id LIMIT 1"
    )
    for row in rows:
        found = store.conn.execute(sql, (row["id"],)).fetchone()
        content = decode_content(found[0]) if found else None
        row["preview"] = make_preview(content if isinstance(content, str) or not content else "")
    return rows


def search_sessions(
    store: Store,
    source: str | Sequence[str] | None = None,
    limit: int = 20,
    offset: int = 0,
    workspace_key: str | None = None,
) -> list[dict[str, Any]]:
    """Return sessions most recently active first, each with ``last_active``.

    ``workspace_key`` keeps the sessions of one workspace: its git repository root, or (for
    sessions without one) a working directory at or under it.
    """
    where = _filters(store, source=source, include_archived=True, include_subagents=True)
    cols = set(store.columns("sessions"))
    if workspace_key and {"cwd", "git_repo_root"} <= cols:
        key = workspace_key.rstrip("/") or workspace_key
        escaped = key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.add(
            "(s.git_repo_root = ? OR (COALESCE(s.git_repo_root, '') = '' "
            "AND (s.cwd = ? OR s.cwd LIKE ? ESCAPE '\\')))",
            key,
            key,
            escaped + "/%",
        )
    rows = store.conn.execute(
        f"SELECT s.*, {_last_active_sql()} AS last_active FROM sessions s{where.sql()} "
        "ORDER BY last_active DESC, s.id DESC LIMIT ? OFFSET ?",
        [*where.params, max(0, int(limit)), max(0, int(offset))],
    )
    return [dict(r) for r in rows]


def _tip(conn: sqlite3.Connection, session_id: str) -> str:
    from hermes_state.lineage import tip_in

    return tip_in(conn, session_id)


def list_sessions_rich(
    store: Store,
    source: str | None = None,
    sources: list[str] | None = None,
    exclude_sources: list[str] | None = None,
    cwd_prefix: str | None = None,
    limit: int = 20,
    offset: int = 0,
    include_children: bool = False,
    min_message_count: int = 0,
    project_compression_tips: bool = True,
    order_by_last_active: bool = False,
    include_archived: bool = False,
    archived_only: bool = False,
    id_query: str | None = None,
    search_query: str | None = None,
    compact_rows: bool = False,
    include_pinned: bool = False,
    session_key: str | None = None,
    include_hidden: bool = False,
    include_subagents: bool = False,
) -> list[dict[str, Any]]:
    """List sessions with ``preview`` and ``last_active``, as the agent's pickers show them.

    Roots and branches are listed; compression continuations and delegated runs only with
    ``include_children`` (delegated runs also with ``include_subagents``). With
    ``project_compression_tips`` a row whose conversation continued in a compression child
    reports the chain's live tip (``_compression_tip``) and its activity. ``id_query`` keeps ids
    containing the text, ``search_query`` titles or previews containing it. ``include_pinned``
    adds pinned sessions the page left out, archived or not. ``compact_rows`` leaves out the
    bulky columns (system prompt, model config, origin).
    """
    where = _filters(
        store,
        source=source,
        sources=sources,
        exclude_sources=exclude_sources,
        session_key=session_key,
        cwd_prefix=cwd_prefix,
        min_message_count=min_message_count,
        include_archived=include_archived,
        archived_only=archived_only,
        exclude_children=not include_children,
        include_subagents=include_subagents or include_children,
        include_hidden=include_hidden or archived_only,
    )
    if id_query:
        where.add("instr(lower(s.id), ?) > 0", id_query.strip().lower())
    if search_query:
        needle = search_query.strip().lower()
        where.add(
            "(instr(lower(COALESCE(s.title, '')), ?) > 0 OR EXISTS (SELECT 1 FROM messages m "
            "WHERE m.session_id = s.id AND m.role = 'user' AND instr(lower(m.content), ?) > 0))",
            needle,
            needle,
        )
    order = (
        f"{_last_active_sql()} DESC, s.id DESC"
        if order_by_last_active
        else "s.started_at DESC, s.id DESC"
    )
    page = store.conn.execute(
        f"SELECT s.id FROM sessions s{where.sql()} ORDER BY {order} LIMIT ? OFFSET ?",
        [*where.params, max(0, int(limit)), max(0, int(offset))],
    ).fetchall()
    ids = [r[0] for r in page]
    if include_pinned and "pinned" in store.columns("sessions"):
        extra = store.conn.execute(
            "SELECT id FROM sessions WHERE pinned = 1 ORDER BY started_at DESC"
        ).fetchall()
        ids += [r[0] for r in extra if r[0] not in ids]
    bulky = {"system_prompt", "model_config", "origin_json"}
    rows = []
    for sid in ids:
        row = get_session(store, sid)
        if row is None:
            continue
        if compact_rows:
            row = {k: v for k, v in row.items() if k not in bulky}
        last = store.conn.execute(
            f"SELECT {_last_active_sql()} FROM sessions s WHERE s.id = ?", (sid,)
        ).fetchone()[0]
        row["last_active"] = last
        if project_compression_tips:
            tip = _tip(store.conn, sid)
            if tip != sid:
                row["_compression_tip"] = tip
                tip_last = store.conn.execute(
                    f"SELECT {_last_active_sql()} FROM sessions s WHERE s.id = ?", (tip,)
                ).fetchone()
                if tip_last is not None and tip_last[0] is not None:
                    row["last_active"] = max(last or 0, tip_last[0])
        rows.append(row)
    return _with_previews(store, rows)
