"""Session listings and counts in the agent's calling conventions (list_sessions_rich,
search_sessions, search_sessions_by_id, list_cron_job_runs, session_count …), sharing one filter
so that every count matches the rows its listing pages through.

What a picker lists is a conversation: a root session, a /branch or a /new reset of one. Runs
the agent delegated to a sub-agent and compression continuations are parts of a conversation and
are not listed on their own. A conversation that compression continued is shown as its live tip
(the tip's id, counts and preview, the root's start time, ``_lineage_root_id`` naming the root),
so the row a user picks is the one that is still going.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_state.records.session_list import make_preview
from hermes_state.shapes.content import decode_content
from hermes_state.shapes.lineage import (
    CONTINUATION_SQL,
    ancestors_in,
    chain_in,
    delegate_sql,
    listable_sql,
)
from hermes_state.shapes.text import bindable
from hermes_state.store.connection import Store
from hermes_state.store.sql import escape_like, marks

# Listed without a system prompt or git bookkeeping (``compact_rows``): what pickers never show.
COMPACT_EXCLUDED = frozenset({"system_prompt", "system_prompt_hash", "git_metadata_generation"})
# Fields of a projected row that come from the chain's live tip (the rest are the root's).
TIP_FIELDS = (
    "id",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "title",
    "last_active",
    "preview",
    "model",
    "system_prompt",
    "cwd",
    "git_branch",
    "git_repo_root",
)
PREVIEW_ELLIPSIS = "..."  # the agent's previews end this way (SPEC §20)


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


def cwd_clause(prefix: str, alias: str = "s") -> tuple[str, list[str]]:
    """SQL and parameters keeping sessions whose directory is prefix or below it."""
    base = prefix.rstrip("/\\") or prefix
    esc = escape_like(base)
    return (
        f"({alias}.cwd = ? OR {alias}.cwd LIKE ? ESCAPE '\\' OR {alias}.cwd LIKE ? ESCAPE '\\')",
        [base, esc + "/%", esc + "\\\\%"],
    )


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
    if exclude_children:
        if include_subagents:
            where.add(f"({listable_sql()} OR {delegate_sql()})")
        else:
            where.add(listable_sql())
            where.add(f"NOT ({delegate_sql()})")
    wanted = [source] if isinstance(source, str) else list(source or [])
    wanted += list(sources or [])
    if wanted:
        where.add(f"s.source IN ({marks(len(wanted))})", *map(bindable, wanted))
    if session_key and "session_key" in cols:
        where.add("s.session_key = ?", bindable(session_key))
    if exclude_sources:
        excluded = [bindable(s) for s in exclude_sources]
        where.add(f"s.source NOT IN ({marks(len(excluded))})", *excluded)
    if cwd_prefix and "cwd" in cols:
        clause, params = cwd_clause(bindable(cwd_prefix))
        where.add(clause, *params)
    if min_message_count > 0:
        where.add("COALESCE(s.message_count, 0) >= ?", int(min_message_count))
    if "archived" in cols:
        if archived_only:
            where.add("s.archived = 1")
        elif not include_archived:
            where.add("COALESCE(s.archived, 0) = 0")
    elif archived_only:
        where.add("0")  # a layout without the column has no archived sessions
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


def last_active_sql(id_expr: str) -> str:
    """SQL of a session's last activity: its latest message, its activity stamp, or its start."""
    return (
        f"(SELECT MAX(COALESCE(x.last_activity_at, x.started_at), COALESCE((SELECT MAX(m.timestamp)"
        f" FROM messages m WHERE m.session_id = x.id), x.started_at)) FROM sessions x"
        f" WHERE x.id = {id_expr})"
    )


def with_previews(store: Store, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add each row's preview: its first visible user message, flattened, 60 characters."""
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
        text = content if isinstance(content, str) else ""
        row["preview"] = make_preview(text, ellipsis=PREVIEW_ELLIPSIS)
    return rows


def _select_list(store: Store, compact: bool) -> tuple[str, str]:
    """Return the select list over ``sessions s`` and the join a full row needs."""
    if compact:
        cols = [c for c in store.columns("sessions") if c not in COMPACT_EXCLUDED]
        return ", ".join(f's."{c}"' for c in cols), ""
    if store.has_table("system_prompts") and "system_prompt_hash" in store.columns("sessions"):
        # A prompt stored by hash (Hermes Agent 0.21+) reads as the session's own prompt.
        return (
            "s.*, COALESCE(sp.prompt, s.system_prompt) AS _prompt",
            " LEFT JOIN system_prompts sp ON sp.hash = s.system_prompt_hash",
        )
    return "s.*", ""


def rich_rows(
    store: Store, ids: Sequence[str], compact_rows: bool = False
) -> dict[str, dict[str, Any]]:
    """Return listing rows (every column, preview, last_active) of the given sessions, by id."""
    select, join = _select_list(store, compact_rows)
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        rows = store.conn.execute(
            f"SELECT {select}, {last_active_sql('s.id')} AS last_active FROM sessions s{join}"
            f" WHERE s.id IN ({marks(len(chunk))})",
            chunk,
        ).fetchall()
        for r in rows:
            row = dict(r)
            if "_prompt" in row:
                row["system_prompt"] = row.pop("_prompt")
            out[row["id"]] = row
    with_previews(store, list(out.values()))
    return out


def rich_row(store: Store, session_id: str, compact_rows: bool = False) -> dict[str, Any] | None:
    """Return one session as a listing shows it (None when there is no such session)."""
    return rich_rows(store, [session_id], compact_rows).get(session_id)


def _project_tips(
    store: Store, rows: list[dict[str, Any]], compact_rows: bool
) -> list[dict[str, Any]]:
    """Show each conversation that compression continued as its live tip (module docstring)."""
    chains: dict[str, list[str]] = {}
    for row in rows:
        if row.get("end_reason") == "compression":
            walked = chain_in(store.conn, row["id"])
            if walked[-1] != row["id"]:
                chains[row["id"]] = walked
    tips = rich_rows(store, [c[-1] for c in chains.values()], compact_rows) if chains else {}
    out = []
    for row in rows:
        chain = chains.get(row["id"])
        tip = tips.get(chain[-1]) if chain else None
        if chain is None or tip is None:
            out.append(row)
            continue
        merged = dict(row)
        for key in TIP_FIELDS:
            if key in tip:
                merged[key] = tip[key]
        if merged.get("title") is None:
            merged["title"] = row.get("title")
        merged["last_active"] = max(
            (r for r in (row.get("last_active"), tip.get("last_active")) if r is not None),
            default=None,
        )
        merged["_lineage_root_id"] = row["id"]
        merged["_lineage_ids"] = chain
        merged["continuation_kind"] = "compression"
        out.append(merged)
    return out


def _chain_members_matching(store: Store, id_needle: str, text_needle: str) -> set[str]:
    """Return the roots of the conversations one of whose sessions matches the needles."""
    clauses, params = [], []
    if id_needle:
        clauses.append("lower(id) LIKE ? ESCAPE '\\'")
        params.append(f"%{escape_like(id_needle)}%")
    if text_needle:
        clauses.append(
            "(lower(COALESCE(title, '')) LIKE ? ESCAPE '\\' OR lower(id) LIKE ? ESCAPE '\\')"
        )
        params += [f"%{escape_like(text_needle)}%"] * 2
    rows = store.conn.execute(
        f"SELECT id FROM sessions WHERE {' AND '.join(clauses)}", params
    ).fetchall()
    roots = set()
    for (sid,) in rows:
        up = ancestors_in(store.conn, sid)
        roots.add(up[-1] if up else sid)
        roots.add(sid)
    return roots


def _activity_order_sql(where: _Where) -> tuple[str, list[Any]]:
    """Return a CTE and join giving each compressed conversation's latest activity (chain-wide)."""
    cte = (
        "WITH RECURSIVE chain(root, cur, depth) AS ("
        f" SELECT s.id, s.id, 0 FROM sessions s{where.sql()}"
        f"{' AND' if where.clauses else ' WHERE'} s.end_reason = 'compression'"
        " UNION SELECT chain.root, c.id, chain.depth + 1 FROM chain"
        f" JOIN sessions p ON p.id = chain.cur JOIN sessions c ON {CONTINUATION_SQL}"
        " WHERE chain.depth < 1000),"
        f" reach(root, act) AS (SELECT root, MAX({last_active_sql('cur')}) FROM chain"
        " GROUP BY root) "
    )
    return cte, list(where.params)


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
    """List conversations with ``preview`` and ``last_active``, as the agent's pickers show them.

    Roots, branches and resets are listed; with ``include_children`` every session is, and with
    ``include_subagents`` delegated runs too. ``project_compression_tips`` shows a compressed
    conversation as its live tip (module docstring); ``order_by_last_active`` orders by the
    latest activity anywhere in the conversation, else by when it started. ``id_query`` keeps
    conversations one of whose sessions has an id containing the text, ``search_query`` one
    whose id or title contains it. ``include_pinned`` adds pinned sessions the page left out
    (archived or not). ``compact_rows`` leaves out the system prompt and git bookkeeping.
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
        include_subagents=include_subagents,
        include_hidden=include_hidden or archived_only,
    )
    id_needle = (id_query or "").strip().lower()
    text_needle = (search_query or "").strip().lower()
    if id_needle or text_needle:
        roots = sorted(_chain_members_matching(store, id_needle, text_needle))
        if not roots:
            return []
        where.add(f"s.id IN ({marks(len(roots))})", *roots)
    if order_by_last_active:
        cte, params = _activity_order_sql(where)
        sql = (
            f"{cte}SELECT s.id FROM sessions s LEFT JOIN reach ON reach.root = s.id{where.sql()}"
            f" ORDER BY MAX(COALESCE(reach.act, 0), {last_active_sql('s.id')}) DESC,"
            " s.started_at DESC, s.id DESC LIMIT ? OFFSET ?"
        )
        params += where.params
    else:
        sql = (
            f"SELECT s.id FROM sessions s{where.sql()}"
            " ORDER BY s.started_at DESC, s.id DESC LIMIT ? OFFSET ?"
        )
        params = list(where.params)
    page = store.conn.execute(sql, [*params, max(0, int(limit)), max(0, int(offset))]).fetchall()
    ids = [r[0] for r in page]
    if include_pinned and "pinned" in store.columns("sessions"):
        pinned = _filters(
            store,
            source=source,
            sources=sources,
            exclude_sources=exclude_sources,
            session_key=session_key,
            cwd_prefix=cwd_prefix,
            min_message_count=min_message_count,
            include_archived=True,
            exclude_children=not include_children,
            include_subagents=include_subagents,
            include_hidden=include_hidden,
        )
        pinned.add("s.pinned = 1")
        extra = store.conn.execute(
            f"SELECT s.id FROM sessions s{pinned.sql()} ORDER BY s.started_at DESC", pinned.params
        ).fetchall()
        ids += [r[0] for r in extra if r[0] not in ids]
    found = rich_rows(store, ids, compact_rows)
    rows = [found[i] for i in ids if i in found]
    return _project_tips(store, rows, compact_rows) if project_compression_tips else rows


def search_sessions_by_id(
    store: Store,
    query: str,
    limit: int = 20,
    include_archived: bool = True,
    source: str | None = None,
    sources: list[str] | None = None,
    exclude_sources: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Find conversations by session id: exact ids first, then prefixes, then substrings.

    Case does not matter. A conversation is found by the id of any of its sessions, so the id
    of an old compression root finds its live tip (which names the root in ``_lineage_root_id``).
    """
    needle = (query or "").strip().lower()
    if not needle:
        return []
    rows = list_sessions_rich(
        store,
        source=source,
        sources=sources,
        exclude_sources=exclude_sources,
        limit=1_000_000,
        include_archived=include_archived,
        id_query=needle,
    )

    def rank(row: dict[str, Any]) -> int:
        ids = [
            str(row.get("id") or "").lower(),
            *(str(i).lower() for i in row.get("_lineage_ids") or []),
        ]
        if needle in ids:
            return 0
        return 1 if any(i.startswith(needle) for i in ids) else 2

    rows.sort(key=rank)  # stable: newest first within each rank
    return rows[: max(0, int(limit))]


def list_cron_job_runs(
    store: Store, job_id: str, limit: int = 20, offset: int = 0
) -> list[dict[str, Any]]:
    """Return one cron job's run sessions (ids ``cron_<job_id>_…``), newest first, enriched."""
    prefix = f"cron_{job_id}_"
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    page = store.conn.execute(
        "SELECT id FROM sessions WHERE source = 'cron' AND id >= ? AND id < ?"
        " ORDER BY started_at DESC, id DESC LIMIT ? OFFSET ?",
        (bindable(prefix), bindable(upper), max(0, int(limit)), max(0, int(offset))),
    ).fetchall()
    ids = [r[0] for r in page]
    found = rich_rows(store, ids)
    return [found[i] for i in ids if i in found]


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
    where = _filters(store, source=source, include_archived=True)
    cols = set(store.columns("sessions"))
    if workspace_key and {"cwd", "git_repo_root"} <= cols:
        key = bindable(workspace_key).rstrip("/\\") or workspace_key
        clause, params = cwd_clause(key)
        where.add(
            f"(s.git_repo_root = ? OR (COALESCE(s.git_repo_root, '') = '' AND {clause}))",
            key,
            *params,
        )
    rows = store.conn.execute(
        f"SELECT s.*, {last_active_sql('s.id')} AS last_active FROM sessions s{where.sql()} "
        "ORDER BY last_active DESC, s.id DESC LIMIT ? OFFSET ?",
        [*where.params, max(0, int(limit)), max(0, int(offset))],
    )
    return [dict(r) for r in rows]
