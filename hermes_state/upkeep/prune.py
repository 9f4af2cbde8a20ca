"""Pruning: the sessions old enough to go, whole lineages kept together, deleted in one go."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hermes_state.records.ledger import OpenWork, busy_message, open_work_in
from hermes_state.records.session_list import activity_sql
from hermes_state.shapes.lineage import COMPRESSION_END_REASON, ancestors_in, successor_in
from hermes_state.store.connection import Store
from hermes_state.store.sql import chunks, marks
from hermes_state.upkeep import prune_filters
from hermes_state.upkeep.deletion import (
    _busy_through_runs,
    _deletable,
    _Deleted,
    _group_open,
    _measure,
    _payload_bytes_sql,
    _unpinned,
    delete_sessions_in,
)

DAY_S = 86400.0


def list_prune_candidates(
    store: Store,
    older_than_days: float | None = None,
    source: str | None = None,
    *,
    whole_lineages: bool = False,
    **filters: Any,
) -> list[dict[str, Any]]:
    """Return the sessions a prune with these filters would consider, least recently active first.

    Each row has id, source, title, model, started_at, last_active, ended_at, message_count
    and archived. It is the selection before the prune's ledger rule (open work) keeps some of
    them; ``whole_lineages`` applies the lineage rule too (a compression ancestor stays while a
    later part of its conversation does).
    """
    scope, cutoff = _agent_scope(older_than_days, source, filters)
    candidates = eligible_sessions_in(store.conn, cutoff, scope, None)
    ids = [sid for sid, _ in candidates]
    if whole_lineages:
        kept = set(_keep_lineage(store.conn, candidates, set(ids)))
        ids = [sid for sid in ids if sid not in kept]
    out: list[dict[str, Any]] = []
    for batch in chunks(ids):
        rows = store.conn.execute(
            "SELECT s.id, s.source, s.title, s.model, s.started_at, "
            f"{prune_filters.LAST_ACTIVE_SQL} AS last_active, s.ended_at, s.message_count, "
            f"s.archived FROM sessions s WHERE s.id IN ({marks(len(batch))})",
            batch,
        ).fetchall()
        out += [dict(r) for r in rows]
    out.sort(key=lambda r: (r["last_active"] or 0, r["started_at"] or 0))
    return out


def _agent_scope(
    older_than_days: float | None, source: str | None, filters: Mapping[str, Any]
) -> tuple[PruneScope, float | None]:
    """Translate the agent's prune arguments into a scope and an age cutoff."""
    options = dict(filters)
    prune_filters.check(options)
    if older_than_days is not None and older_than_days < 0:
        raise ValueError("older_than_days must not be negative")
    include_pinned = bool(options.pop("include_pinned", False))
    if source:
        options["source"] = source
    explicit = any(options.get(k) is not None for k in ("started_before", "last_active_before"))
    cutoff = (
        None
        if older_than_days is None or explicit
        else time.time() - float(older_than_days) * DAY_S
    )
    clauses, params = prune_filters.filter_sql(options)
    return PruneScope(
        filters=(tuple(clauses), tuple(params)), include_pinned=include_pinned
    ), cutoff


def archive_sessions(
    store: Store,
    older_than_days: float | None = None,
    source: str | None = None,
    **filters: Any,
) -> int:
    """Archive the unarchived conversations a prune with these filters would match; return how
    many matched.

    A conversation is matched by its live end (a compression ancestor never qualifies on its own
    age, which would hide a conversation still in use) and archived whole, its ancestors with it.
    """
    filters.setdefault("archived", False)
    scope, cutoff = _agent_scope(older_than_days, source, filters)
    scope = dataclasses.replace(
        scope,
        filters=(
            (*scope.filters[0], "COALESCE(s.end_reason, '') <> 'compression'"),
            scope.filters[1],
        ),
    )
    matched = [sid for sid, _ in eligible_sessions_in(store.conn, cutoff, scope, None)]
    if not matched:
        return 0

    def fn(conn: sqlite3.Connection) -> None:
        ids = set(matched)
        for sid in matched:
            ids.update(ancestors_in(conn, sid))
        for batch in chunks(sorted(ids)):
            conn.execute(
                f"UPDATE sessions SET archived = 1 WHERE id IN ({marks(len(batch))})", batch
            )

    store.write(fn)
    return len(matched)


GHOST_AGE_S = 86400.0


def prune_empty_ghost_sessions(store: Store, *, now: float | None = None) -> list[str]:
    """Delete the TUI's ghost sessions: ended over a day ago, untitled, without a message.

    Returns the ids deleted (pinned sessions and those with open ledger work stay). The
    agent's own store measures the day from the start; the end is the later, safer bound:
    a ghost the TUI closed an hour ago may still be the one it offers to resume.
    """
    cutoff = (time.time() if now is None else float(now)) - GHOST_AGE_S
    where = (
        "s.source = 'tui' AND s.title IS NULL AND s.ended_at IS NOT NULL AND s.ended_at < ?"
        " AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id)" + _unpinned(store)
    )

    def fn(conn: sqlite3.Connection) -> list[str]:
        ids = [r[0] for r in conn.execute(f"SELECT s.id FROM sessions s WHERE {where}", (cutoff,))]
        going, _busy = _deletable(conn, ids)
        delete_sessions_in(conn, going)
        return going

    return store.write(fn)


@dataclass(frozen=True)
class PruneResult:
    """What a prune deleted (or, for a dry run, would delete)."""

    older_than_days: float | None  # None: no age bound (the filters alone chose)
    cutoff: float | None
    source: str | None
    dry_run: bool
    sessions: int
    messages: int
    session_ids: tuple[str, ...]
    bytes_reclaimable: int  # stored bytes of the deleted rows (indexes free more on top)
    busy: tuple[dict[str, Any], ...] = ()  # sessions kept because of open ledger work
    kept_for_lineage: tuple[str, ...] = ()  # compression ancestors of a session that stays
    children_repointed: int = 0
    ledger_rows_removed: int = 0
    sources: tuple[str, ...] = ()  # every source kept (source included), empty = all
    exclude_sources: tuple[str, ...] = ()
    started_after: float | None = None
    active_after: float | None = None  # kept only sessions last active at or after it
    # A dry run's first sessions: id, title, last_active, messages, bytes (stored payload).
    details: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Return the result as plain JSON-ready data."""
        out = asdict(self)
        out["session_ids"] = list(self.session_ids)
        out["busy"] = [dict(b) for b in self.busy]
        out["kept_for_lineage"] = list(self.kept_for_lineage)
        out["details"] = [dict(d) for d in self.details]
        out["sources"] = list(self.sources)
        out["exclude_sources"] = list(self.exclude_sources)
        return out


PREVIEW_DETAILS = 50  # sessions a prune preview describes one by one


def _describe(conn: sqlite3.Connection, ids: Sequence[str]) -> list[dict[str, Any]]:
    """Return id, title, last_active, messages and payload bytes of these sessions, in order."""
    expr = _payload_bytes_sql(conn)
    found: dict[str, dict[str, Any]] = {}
    for batch in chunks(ids):
        for sid, title, active, msgs, size in conn.execute(
            f"SELECT s.id, s.title, {last_activity_sql(conn)},"
            f" (SELECT COUNT(*) FROM messages WHERE session_id = s.id),"
            f" (SELECT COALESCE(SUM({expr}), 0) FROM messages WHERE session_id = s.id)"
            f" FROM sessions s WHERE s.id IN ({marks(len(batch))})",
            batch,
        ):
            found[sid] = {
                "id": sid,
                "title": title,
                "last_active": active,
                "messages": int(msgs),
                "bytes": int(size),
            }
    return [found[sid] for sid in ids if sid in found]


def last_activity_sql(conn: sqlite3.Connection) -> str:
    """SQL for a session's last activity: max(last_activity_at, newest message, started_at)."""
    return activity_sql({r[1] for r in conn.execute("PRAGMA table_info(sessions)")})


@dataclass(frozen=True)
class PruneScope:
    """Which sessions a prune may consider: by source, start time and the agent's filters."""

    sources: tuple[str, ...] = ()
    exclude_sources: tuple[str, ...] = ()
    started_after: float | None = None
    active_after: float | None = None
    # Conditions over ``sessions s`` from prune_filters (clauses, parameters).
    filters: tuple[tuple[str, ...], tuple[Any, ...]] = ((), ())
    include_pinned: bool = False


def eligible_sessions_in(
    conn: sqlite3.Connection, cutoff: float | None, scope: PruneScope, within: Sequence[str] | None
) -> list[tuple[str, str | None]]:
    """Return (id, end_reason) of ended, unpinned sessions idle since before cutoff (None: any)."""
    cols = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
    where = ["s.ended_at IS NOT NULL"]
    params: list[Any] = []
    if cutoff is not None:
        where.append(f"{last_activity_sql(conn)} < ?")
        params.append(cutoff)
    if "pinned" in cols and not scope.include_pinned:
        where.append("COALESCE(s.pinned, 0) = 0")
    if scope.sources:
        where.append(f"s.source IN ({marks(len(scope.sources))})")
        params += scope.sources
    if scope.exclude_sources:
        where.append(f"s.source NOT IN ({marks(len(scope.exclude_sources))})")
        params += scope.exclude_sources
    if scope.started_after is not None:
        where.append("s.started_at >= ?")
        params.append(float(scope.started_after))
    if scope.active_after is not None:
        where.append(f"{last_activity_sql(conn)} >= ?")
        params.append(float(scope.active_after))
    where += scope.filters[0]
    params += scope.filters[1]
    sql = f"SELECT s.id, s.end_reason FROM sessions s WHERE {' AND '.join(where)}"
    if within is None:
        return [(r[0], r[1]) for r in conn.execute(sql + " ORDER BY s.started_at, s.id", params)]
    out = []
    for batch in chunks(within):
        out += [
            (r[0], r[1])
            for r in conn.execute(sql + f" AND s.id IN ({marks(len(batch))})", [*params, *batch])
        ]
    return out


def _keep_lineage(
    conn: sqlite3.Connection, candidates: list[tuple[str, str | None]], doomed: set[str]
) -> list[str]:
    """Drop from doomed every compression ancestor whose continuation stays; return them."""
    successors = {
        sid: successor_in(conn, sid)
        for sid, reason in candidates
        if reason == COMPRESSION_END_REASON
    }
    kept: list[str] = []
    changed = True
    while changed:
        changed = False
        for sid, succ in successors.items():
            if sid in doomed and succ is not None and succ not in doomed:
                doomed.discard(sid)
                kept.append(sid)
                changed = True
    return kept


@dataclass
class _Plan:
    ids: list[str]
    busy: dict[str, list[OpenWork]] = field(default_factory=dict)
    kept_for_lineage: list[str] = field(default_factory=list)


def _plan(
    conn: sqlite3.Connection,
    cutoff: float | None,
    scope: PruneScope,
    within: Sequence[str] | None = None,
    allowed: set[str] | None = None,
) -> _Plan:
    """Choose what a prune deletes: eligible, not busy, not needed by a continuing lineage."""
    candidates = eligible_sessions_in(conn, cutoff, scope, within)
    order = [sid for sid, _ in candidates]
    doomed = set(order)
    busy = _group_open(open_work_in(conn, order))
    busy.update(_busy_through_runs(conn, [s for s in order if s not in busy]))
    doomed -= set(busy)
    # A continuation chosen for another chunk of the same prune still counts as going.
    going = doomed | ((allowed or set()) - set(busy))
    kept = _keep_lineage(conn, candidates, going)
    doomed -= set(kept)
    return _Plan([s for s in order if s in doomed], busy, kept)


def prune_sessions(
    store: Store,
    older_than_days: float | None = 90,
    *,
    source: str | None = None,
    dry_run: bool = False,
    now: float | None = None,
    sources: Sequence[str] | None = None,
    exclude_sources: Sequence[str] | None = None,
    started_after: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    filters: Mapping[str, Any] | None = None,
    active_after: float | None = None,
) -> PruneResult:
    """Delete ended, unpinned sessions idle for longer than older_than_days (or preview it).

    Sessions with open ledger work are reported in ``busy`` and kept; so is a compression
    ancestor whose continuation stays. Children of deleted sessions are re-pointed; runs the
    agent delegated from a deleted session go with it. Deletion runs one transaction per chunk
    of sessions so a live gateway is never blocked for long. source/sources keep only those
    sources, exclude_sources leaves some out, started_after (epoch seconds) keeps sessions
    started at or after it, active_after those last active at or after it; ``filters`` are the
    agent's prune keywords (see prune_filters; ``include_pinned`` lets pinned sessions go too).
    ``older_than_days=None`` sets no age bound; so does an explicit ``started_before`` /
    ``last_active_before`` filter. progress(done, total) is called after each deleted chunk with
    the sessions examined so far and the number planned. A dry run describes its first
    PREVIEW_DETAILS sessions (title, last active, messages, bytes) in ``details``.
    """
    options = dict(filters or {})
    prune_filters.check(options)
    if older_than_days is not None and older_than_days < 0:
        raise ValueError("older_than_days must not be negative")
    explicit = (
        options.get("started_before") is not None or options.get("last_active_before") is not None
    )
    cutoff = (
        None
        if older_than_days is None or explicit
        else (time.time() if now is None else float(now)) - float(older_than_days) * DAY_S
    )
    include_pinned = bool(options.pop("include_pinned", False))
    clauses, params = prune_filters.filter_sql(options)
    scope = PruneScope(
        sources=tuple(dict.fromkeys([*([source] if source else []), *(sources or ())])),
        exclude_sources=tuple(dict.fromkeys(exclude_sources or ())),
        started_after=started_after,
        active_after=active_after,
        filters=(tuple(clauses), tuple(params)),
        include_pinned=include_pinned,
    )
    plan = _plan(store.conn, cutoff, scope)

    def result(
        ids: Sequence[str], msgs: int, size: int, busy: dict[str, list[OpenWork]], **kw: Any
    ) -> PruneResult:
        return PruneResult(
            older_than_days=None if older_than_days is None else float(older_than_days),
            cutoff=cutoff,
            source=source,
            dry_run=dry_run,
            sessions=len(ids),
            messages=msgs,
            session_ids=tuple(ids),
            bytes_reclaimable=size,
            busy=tuple(
                {
                    "session_id": sid,
                    "message": busy_message(sid, rows),
                    "open_rows": [r.to_dict() for r in rows],
                }
                for sid, rows in busy.items()
            ),
            kept_for_lineage=tuple(plan.kept_for_lineage),
            sources=scope.sources,
            exclude_sources=scope.exclude_sources,
            started_after=started_after,
            active_after=active_after,
            **kw,
        )

    if dry_run:
        msgs, size = _measure(store.conn, plan.ids)
        details = _describe(store.conn, plan.ids[:PREVIEW_DETAILS])
        return result(plan.ids, msgs, size, plan.busy, details=tuple(details))

    everything = set(plan.ids)
    deleted: list[str] = []
    busy = dict(plan.busy)
    msgs = size = moved = ledger_rows = examined = 0
    if progress is not None:
        progress(0, len(plan.ids))
    for batch in chunks(plan.ids):

        def fn(conn: sqlite3.Connection, batch: list[str] = batch) -> tuple[_Plan, _Deleted]:
            # Re-check inside the transaction: a session may have been reopened or admitted work.
            now_plan = _plan(conn, cutoff, scope, within=batch, allowed=everything)
            return now_plan, delete_sessions_in(conn, now_plan.ids)

        chunk_plan, done = store.write(fn)
        deleted += chunk_plan.ids
        busy.update(chunk_plan.busy)
        msgs += done.messages
        size += done.bytes
        moved += done.children_repointed
        ledger_rows += done.ledger_rows
        examined += len(batch)
        if progress is not None:
            progress(examined, len(plan.ids))
    return result(
        deleted, msgs, size, busy, children_repointed=moved, ledger_rows_removed=ledger_rows
    )
