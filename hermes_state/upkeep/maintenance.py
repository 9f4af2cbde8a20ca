"""Deleting, clearing and pruning sessions (ledger-aware), and giving the space back (optimize)."""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hermes_state.records.ledger import (
    OpenWork,
    busy_message,
    delete_terminal_in,
    open_work_in,
)
from hermes_state.records.messages import clear_messages_in
from hermes_state.records.session_list import activity_sql
from hermes_state.records.sessions import require_session_in
from hermes_state.shapes.lineage import COMPRESSION_END_REASON, ancestors_in, successor_in
from hermes_state.shapes.model_config import DELEGATE_MARKER, marker_sql
from hermes_state.store import diagnosis, fts
from hermes_state.store.connection import Store, store_schema_refusal
from hermes_state.store.diagnosis import Diagnosis
from hermes_state.store.errors import (
    DiskFullError,
    LedgerBusyError,
    StoreBusyError,
    StoreCorruptError,
    is_lock_error,
)
from hermes_state.store.patience import retry_locked
from hermes_state.store.sql import STORE_FILE_SUFFIXES, chunks, marks, quote
from hermes_state.store.store_file import write_protected
from hermes_state.upkeep import prune_filters

DAY_S = 86400.0
# Beside other processes, VACUUM runs only on a store this small: rewriting it holds their
# writes for well under a second.
VACUUM_BESIDE_OTHERS_MAX_BYTES = 32 << 20
# After a delete, the file is rewritten when the deleted messages were this share, or it is this
# small (see reclaim_after_delete); the short index merge otherwise is bounded (a few ms a step).
REWRITE_AFTER_DELETE_SHARE = 0.25
REWRITE_ALWAYS_MAX_BYTES = 32 << 20
MAX_MERGE_STEPS_AFTER_DELETE = 64
MESSAGES_PER_MERGE_STEP = 2_500


def _refuse_if_busy(conn: sqlite3.Connection, session_id: str) -> None:
    rows = open_work_in(conn, [session_id])
    if rows:
        raise LedgerBusyError(busy_message(session_id, rows), [r.to_dict() for r in rows])


def _group_open(rows: Iterable[OpenWork]) -> dict[str, list[OpenWork]]:
    out: dict[str, list[OpenWork]] = {}
    for r in rows:
        out.setdefault(r.session_id, []).append(r)
    return out


# --- the delete core (inside the caller's transaction) -------------------------------------


@dataclass(frozen=True)
class _Deleted:
    sessions: int
    messages: int
    bytes: int
    children_repointed: int
    ledger_rows: int


def _payload_bytes_sql(conn: sqlite3.Connection) -> str:
    """Sum of the stored bytes of every message column (what the rows themselves occupy)."""
    cols = [r[1] for r in conn.execute("PRAGMA table_info(messages)")]
    return " + ".join(f'COALESCE(LENGTH(CAST("{c}" AS BLOB)), 0)' for c in cols)


def _measure(conn: sqlite3.Connection, ids: Sequence[str]) -> tuple[int, int]:
    """Return (messages, payload bytes) of these sessions."""
    msgs = 0
    size = 0
    expr = _payload_bytes_sql(conn)
    for batch in chunks(ids):
        row = conn.execute(
            f"SELECT COUNT(*), COALESCE(SUM({expr}), 0) FROM messages"
            f" WHERE session_id IN ({marks(len(batch))})",
            batch,
        ).fetchone()
        msgs += int(row[0])
        size += int(row[1])
    return msgs, size


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


def _repoint_children(conn: sqlite3.Connection, doomed: Sequence[str]) -> int:
    """Point children of doomed sessions at the nearest surviving ancestor; return how many.

    A child whose ancestors all go (or whose nearest surviving one no longer exists: another
    tool deleted it by hand) becomes a root.
    """
    gone = set(doomed)
    parent_of: dict[str, str | None] = {}
    for batch in chunks(doomed):
        for sid, parent in conn.execute(
            f"SELECT id, parent_session_id FROM sessions WHERE id IN ({marks(len(batch))})", batch
        ):
            parent_of[sid] = parent

    def survivor(sid: str) -> str | None:
        seen = set()
        target = parent_of.get(sid)
        while target is not None and target in gone and target not in seen:
            seen.add(target)
            target = parent_of.get(target)
        if target is None or target in gone:
            return None
        exists = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (target,)).fetchone()
        return target if exists else None

    moved = 0
    for batch in chunks(doomed):
        children = conn.execute(
            "SELECT id, parent_session_id FROM sessions"
            f" WHERE parent_session_id IN ({marks(len(batch))})",
            batch,
        ).fetchall()
        for child, parent in children:
            if child in gone:
                continue
            conn.execute(
                "UPDATE sessions SET parent_session_id = ? WHERE id = ?", (survivor(parent), child)
            )
            moved += 1
    return moved


def delegated_runs_in(conn: sqlite3.Connection, parent_ids: Iterable[str]) -> list[str]:
    """Return the runs the agent delegated from these sessions, theirs too (never the parents).

    A delegated run carries ``_delegate_from`` naming the session that spawned it (or only a
    parent link, with the marker set): it is part of that session's conversation and goes with
    it. Untagged children are conversations of their own and are re-pointed instead.
    """
    marker = marker_sql("", DELEGATE_MARKER)
    seeds = {sid for sid in parent_ids if sid}
    found = set(seeds)
    frontier = list(seeds)
    while frontier:
        nxt: list[str] = []
        for batch in chunks(frontier, 400):
            qs = marks(len(batch))
            # instr first: it skips the JSON parse for the many rows without any marker.
            rows = conn.execute(
                f"SELECT id FROM sessions WHERE instr(model_config, '{DELEGATE_MARKER}') > 0"
                f" AND ({marker} IN ({qs}) OR (parent_session_id IN ({qs})"
                f" AND {marker} IS NOT NULL))",
                [*batch, *batch],
            ).fetchall()
            nxt += [r[0] for r in rows if r[0] not in found]
        found.update(nxt)
        frontier = nxt
    return sorted(found - seeds)


def delete_sessions_in(conn: sqlite3.Connection, ids: Sequence[str]) -> _Deleted:
    """Delete sessions (and the runs they delegated) with their messages and terminal ledger
    rows; re-point their other children."""
    if not ids:
        return _Deleted(0, 0, 0, 0, 0)
    ids = [*ids, *delegated_runs_in(conn, ids)]
    msgs, size = _measure(conn, ids)
    moved = _repoint_children(conn, ids)
    ledger_rows = delete_terminal_in(conn, ids)
    deleted = 0
    # Older layouts lack some per-session tables (schema 11/13: both; see releases).
    have = {
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name IN ('session_model_usage', 'compression_locks')"
        )
    }
    for batch in chunks(ids):
        qs = marks(len(batch))
        conn.execute(f"DELETE FROM messages WHERE session_id IN ({qs})", batch)
        for table in sorted(have):
            conn.execute(f"DELETE FROM {table} WHERE session_id IN ({qs})", batch)
        deleted += conn.execute(f"DELETE FROM sessions WHERE id IN ({qs})", batch).rowcount
    return _Deleted(deleted, msgs, size, moved, ledger_rows)


# --- single-session edits -------------------------------------------------------------------


def clear_messages(store: Store, session_id: str) -> int:
    """Delete a session's messages (and terminal ledger rows) but keep its row; return count.

    Refused with LedgerBusyError while the session has open runtime work.
    """

    def fn(conn: sqlite3.Connection) -> int:
        require_session_in(conn, session_id)
        _refuse_if_busy(conn, session_id)
        delete_terminal_in(conn, [session_id])
        return clear_messages_in(conn, session_id)

    return store.write(fn)


def delete_session(store: Store, session_id: str, *, with_ids: Sequence[str] = ()) -> int:
    """Delete a session, its messages and terminal ledger rows; return messages deleted.

    Children are re-pointed to the deleted session's parent; runs it delegated are deleted with
    it, and so are the sessions of ``with_ids`` (the rest of its conversation, say), all in one
    transaction. Refused with LedgerBusyError while any of them (or such a run) has open runtime
    work.
    """

    def fn(conn: sqlite3.Connection) -> int:
        require_session_in(conn, session_id)
        ids = list(dict.fromkeys([session_id, *with_ids]))
        for sid in [*ids, *delegated_runs_in(conn, ids)]:
            _refuse_if_busy(conn, sid)
        return delete_sessions_in(conn, ids).messages

    return store.write(fn)


def deletion_of(conn: sqlite3.Connection, ids: Sequence[str]) -> list[str]:
    """Return every session deleting these would remove (they and the runs they delegated)."""
    return [*dict.fromkeys(ids), *delegated_runs_in(conn, ids)]


def in_use(conn: sqlite3.Connection, session_ids: Iterable[str]) -> list[str]:
    """Return the sessions among these the agent is using now (live compression lock or lease)."""
    now = time.time()
    return [sid for sid in session_ids if _in_use(conn, sid, now)]


# --- the agent's bulk deletes ------------------------------------------------------------------

# An empty session: ended (a live one may be waiting for its first message), not filed away by
# the user (archived) nor kept (pinned), and without a single message row.
_EMPTY_SQL = (
    "s.ended_at IS NOT NULL AND COALESCE(s.message_count, 0) = 0 AND COALESCE(s.archived, 0) = 0"
    " AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id)"
)


def _unique_ids(session_ids: Iterable[object]) -> list[str]:
    """Return the non-empty string ids, each once, in order (stray None or "" are dropped)."""
    return list(dict.fromkeys(s for s in session_ids if isinstance(s, str) and s))


def _deletable(conn: sqlite3.Connection, ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split existing sessions into those that can go and those kept for open ledger work."""
    existing = []
    for batch in chunks(ids):
        existing += [
            r[0]
            for r in conn.execute(
                f"SELECT id FROM sessions WHERE id IN ({marks(len(batch))})", batch
            )
        ]
    busy = set(_group_open(open_work_in(conn, existing)))
    busy |= set(_busy_through_runs(conn, [s for s in existing if s not in busy]))
    return [s for s in existing if s not in busy], [s for s in existing if s in busy]


def delete_sessions(
    store: Store, session_ids: Iterable[object], *, skipped: list[str] | None = None
) -> list[str]:
    """Delete the listed sessions that exist (live, archived or not) in one transaction.

    Returns the ids deleted. Unknown ids, stray non-strings and repeats are ignored; a session
    with open ledger work is kept and its id appended to ``skipped``. Children are re-pointed,
    delegated runs go with their session, as for one delete.
    """
    ids = _unique_ids(session_ids)
    if not ids:
        return []

    def fn(conn: sqlite3.Connection) -> tuple[list[str], list[str]]:
        going, busy = _deletable(conn, ids)
        delete_sessions_in(conn, going)
        return going, busy

    going, busy = store.write(fn)
    if skipped is not None:
        skipped.extend(busy)
    return going


def count_empty_sessions(store: Store) -> int:
    """Count the ended, unarchived sessions without any message."""
    where = _EMPTY_SQL + _unpinned(store)
    row = store.conn.execute(f"SELECT COUNT(*) FROM sessions s WHERE {where}").fetchone()
    return int(row[0])


def _unpinned(store: Store) -> str:
    return " AND COALESCE(s.pinned, 0) = 0" if "pinned" in store.columns("sessions") else ""


def delete_empty_sessions(store: Store) -> list[str]:
    """Delete every ended, unarchived, unpinned session without messages; return their ids."""
    where = _EMPTY_SQL + _unpinned(store)

    def fn(conn: sqlite3.Connection) -> list[str]:
        ids = [r[0] for r in conn.execute(f"SELECT s.id FROM sessions s WHERE {where}")]
        going, _busy = _deletable(conn, ids)
        delete_sessions_in(conn, going)
        return going

    return store.write(fn)


def _in_use(conn: sqlite3.Connection, session_id: str, now: float) -> bool:
    """Tell whether the agent holds a live compression lock or turn lease on the session."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if (
        "compression_locks" in tables
        and conn.execute(
            "SELECT 1 FROM compression_locks WHERE session_id = ? AND expires_at > ?",
            (session_id, now),
        ).fetchone()
    ):
        return True
    return "session_turn_leases" in tables and bool(
        conn.execute(
            "SELECT 1 FROM session_turn_leases WHERE conversation_id = ? AND expires_at > ?",
            (session_id, now),
        ).fetchone()
    )


def delete_session_if_empty(store: Store, session_id: str) -> bool:
    """Delete a session only if it never gained anything to resume; tell whether it went.

    Empty means: no message, no title and no child session. A session under a live
    compression lock or turn lease, or with open ledger work, is kept. Check and delete share
    one transaction, so a message written meanwhile is never lost.
    """
    now = time.time()

    def fn(conn: sqlite3.Connection) -> bool:
        row = conn.execute(
            "SELECT title FROM sessions s WHERE s.id = ? AND s.title IS NULL"
            " AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id)"
            " AND NOT EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = s.id)",
            (session_id,),
        ).fetchone()
        if row is None or _in_use(conn, session_id, now) or open_work_in(conn, [session_id]):
            return False
        return delete_sessions_in(conn, [session_id]).sessions > 0

    return store.write(fn)


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


# --- prune ----------------------------------------------------------------------------------


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


def _busy_through_runs(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, list[OpenWork]]:
    """Return the sessions among ids one of whose delegated runs has open ledger work."""
    runs = delegated_runs_in(conn, ids)
    if not runs or not open_work_in(conn, runs):
        return {}
    out: dict[str, list[OpenWork]] = {}
    for sid in ids:  # rare: find which of them the busy runs belong to
        rows = open_work_in(conn, delegated_runs_in(conn, [sid]))
        if rows:
            out[sid] = rows
    return out


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


# --- optimize -------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptimizeResult:
    """File sizes before and after a space reclaim, and what was done."""

    db_bytes_before: int
    wal_bytes_before: int
    db_bytes_after: int
    wal_bytes_after: int
    fts_optimized: bool
    fts_rebuilt: bool
    vacuumed: bool
    forced: bool
    other_processes: tuple[str, ...] = ()  # who else had the store open (when checked)
    vacuum_skipped: str = ""  # why VACUUM did not run (others had the store open), if it did not
    # After a delete: why the file was not rewritten (the freed pages stay for new rows).
    rewrite_deferred: str = ""
    free_bytes: int = 0  # free pages left inside the database file afterwards
    reindexed: bool = False  # every index was rebuilt from its table (REINDEX)
    path: str = ""
    duration_s: float = 0.0

    @property
    def bytes_before(self) -> int:
        """Database plus WAL size before."""
        return self.db_bytes_before + self.wal_bytes_before

    @property
    def bytes_after(self) -> int:
        """Database plus WAL size after."""
        return self.db_bytes_after + self.wal_bytes_after

    @property
    def reclaimed(self) -> int:
        """Bytes given back to the filesystem (negative if the files grew)."""
        return self.bytes_before - self.bytes_after

    def to_dict(self) -> dict[str, Any]:
        """Return the result as plain JSON-ready data."""
        out = asdict(self)
        out["other_processes"] = list(self.other_processes)
        out.update(
            bytes_before=self.bytes_before, bytes_after=self.bytes_after, reclaimed=self.reclaimed
        )
        out["duration_s"] = round(self.duration_s, 3)
        return out


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _sizes(db_path: Path) -> tuple[int, int]:
    return _size(db_path), _size(Path(str(db_path) + "-wal"))


def other_processes(db_path: Path) -> list[str]:
    """Name every other process holding a lock on, or having open, the store files."""
    from hermes_state.store.lockowners import OFD_OWNER, lock_holders

    report = lock_holders(db_path)
    me = os.getpid()
    names: dict[int, str] = {}
    ofd = False
    for h in report.holders:
        if h.pid is None:
            ofd = True
        elif h.pid != me:
            names.setdefault(h.pid, f"PID {h.pid} ({h.command})")
    for o in report.open_files:
        if o.pid != me:
            names.setdefault(o.pid, f"PID {o.pid} ({o.command})")
    out = [names[p] for p in sorted(names)]
    if ofd:
        out.append(OFD_OWNER)
    return out


def _vacuum(store: Store) -> None:
    """Run VACUUM outside any transaction, retrying while another writer holds the lock."""
    retry_locked(
        store.path,
        lambda: store.conn.execute("VACUUM"),
        store.waiting,
        not_done="; VACUUM was not run",
    )


VACUUM_SPACE_MARGIN_BYTES = 1 << 20


def _sqlite_temp_dir() -> Path:
    """Return the directory SQLite's unix VFS puts VACUUM's temporary copy in."""
    for candidate in (os.environ.get("SQLITE_TMPDIR"), os.environ.get("TMPDIR")):
        if candidate and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return Path(candidate)
    for candidate in ("/var/tmp", "/usr/tmp", "/tmp"):
        if os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return Path(candidate)
    return Path(".")


def _require_vacuum_space(store: Store) -> None:
    """Refuse before anything is written when the disk cannot hold what VACUUM writes.

    VACUUM writes the live pages twice: a temporary copy (in SQLite's temp directory) and then
    over the file, keeping the old pages in the journal (or the WAL) beside the store. Running
    out midway fails the command after the index merge has already rewritten segments, so it is
    cheaper, and leaves the store untouched, to say so first.
    """
    conn = store.conn
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    free_pages = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    live = (pages - free_pages) * page_size
    beside = store.path.parent
    need = {beside: live + VACUUM_SPACE_MARGIN_BYTES}
    in_memory = int(conn.execute("PRAGMA temp_store").fetchone()[0]) == 2
    if not in_memory:
        temp = _sqlite_temp_dir()
        try:
            same = os.stat(temp).st_dev == os.stat(beside).st_dev
        except OSError:
            same = True
        if same:
            need[beside] += live
        else:
            need[temp] = live + VACUUM_SPACE_MARGIN_BYTES
    for where, bytes_needed in need.items():
        try:
            free = shutil.disk_usage(where).free
        except OSError:
            continue
        if free < bytes_needed:
            raise DiskFullError(
                f"Not enough space to VACUUM {store.path.name}: it writes about "
                f"{_size_text(bytes_needed)} in {where} and {_size_text(free)} is free there; "
                "nothing was changed"
            )


def _refuse_if_shared(store: Store, force: bool, what: str) -> list[str]:
    """Raise StoreBusyError when other processes have the store open (unless forced)."""
    others = other_processes(store.path)
    if others and not force:
        raise StoreBusyError(
            f"{store.path.name} is open in other processes: {', '.join(others)}; "
            f"refusing to {what} under them"
        )
    return others


def _catch_up_cjk(store: Store) -> None:
    """Index every row the CJK index has not seen yet, in bounded transactions."""
    from hermes_state.store import cjk

    while store.write(lambda conn: cjk.status(conn).behind > 0):
        store.write(
            lambda conn: cjk.catch_up(
                conn, max_rows=fts.REBUILD_CHUNK, max_pending=fts.REBUILD_CHUNK
            )
        )


def optimize(
    store: Store,
    *,
    vacuum: bool = True,
    force: bool = False,
    rebuild_fts: bool = False,
    reindex: bool = False,
) -> OptimizeResult:
    """Give space back: merge every search index, then VACUUM (and truncate a WAL).

    Works within the store's layout: the agent's indexes are merged (or rebuilt, for
    ``rebuild_fts``) in the shape they have, never replaced. Beside other processes (a live
    gateway: readers and writers through SQLite) it does only what cannot hold up their writes
    for long: the index merge runs in short transactions, and VACUUM, which holds the write
    lock for the whole rewrite of the file, runs only on a store of at most
    ``VACUUM_BESIDE_OTHERS_MAX_BYTES``; otherwise it is skipped and ``vacuum_skipped`` says
    why. ``force`` does the full work anyway. ``reindex`` first rebuilds every index from its
    table (REINDEX) and the search indexes from the messages: what repairs indexes that
    disagree with their tables (`db check` says when). A rebuild refuses with StoreBusyError
    beside other processes unless forced.
    """
    from hermes_state.store import cjk

    started = time.monotonic()
    require_intact(store)
    db_before, wal_before = _sizes(store.path)
    others = other_processes(store.path)
    shared = bool(others) and not force
    rebuild_fts = rebuild_fts or reindex
    if rebuild_fts and shared:
        what = "rebuild its indexes" if reindex else "rebuild its search indexes"
        _refuse_if_shared(store, force, what)
    if reindex:
        _reindex(store)
    if vacuum and not (shared and db_before > VACUUM_BESIDE_OTHERS_MAX_BYTES):
        _require_vacuum_space(store)
    idx = fts.indexes(store.conn)
    if rebuild_fts:
        tables = tuple(i.table for i in (idx.word, idx.trigram) if i and i.flavor != "foreign")
        store.write(lambda conn: fts.rebuild_now(conn, tables))
        if cjk.is_installed(store.conn):
            store.write(cjk.reset)
    elif fts.rebuild_pending(store.conn) and idx.word is not None and idx.word.gated:
        fts.finish_rebuild(store)  # a migration left the indexes to a chunked rebuild
    if cjk.is_installed(store.conn):
        _catch_up_cjk(store)
    # Merging segments drops the tombstones that deleted rows leave in the indexes.
    if shared:
        start = True
        while store.write(functools.partial(fts.merge_step, start=start)):
            start = False
    else:
        store.write(fts.optimize)
    skipped = ""
    with store.lock:
        store.checkpoint_passive()
        if vacuum and shared and db_before > VACUUM_BESIDE_OTHERS_MAX_BYTES:
            skipped = _vacuum_skipped(store, others, db_before)
        elif vacuum:
            _vacuum(store)
            if store.journal_mode == "wal" and not others:
                # Explicit maintenance only: the normal write path never truncates the live
                # WAL, and a TRUNCATE checkpoint would stall other processes' writes meanwhile.
                store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    db_after, wal_after = _sizes(store.path)
    return OptimizeResult(
        db_bytes_before=db_before,
        wal_bytes_before=wal_before,
        db_bytes_after=db_after,
        wal_bytes_after=wal_after,
        fts_optimized=True,
        fts_rebuilt=rebuild_fts,
        vacuumed=vacuum and not skipped,
        forced=bool(force and others),
        other_processes=tuple(others),
        vacuum_skipped=skipped,
        reindexed=reindex,
        path=str(store.path),
        duration_s=time.monotonic() - started,
    )


def _reindex(store: Store) -> None:
    """Rebuild every index from its table (never the schema: the same indexes, rebuilt)."""
    try:
        store.write(lambda conn: conn.execute("REINDEX"))
    except sqlite3.IntegrityError as exc:
        # A unique index over rows that are no longer unique: the table itself is at fault.
        raise StoreCorruptError(
            f"{store.path} cannot be reindexed in place ({exc}): a table holds rows its unique "
            "index forbids; nothing was changed"
        ) from exc


def reclaim_after_delete(
    store: Store, deleted_messages: int, *, compact: bool = False, force: bool = False
) -> OptimizeResult:
    """Tidy up after deleting sessions in time that grows with what was deleted, not the store.

    Rewriting the file (every index merged whole, then VACUUM) takes time in proportion to the
    whole store: at 1 M messages about 23 s + 28 s, against about 9 s to delete a tenth of it.
    So the file is rewritten (``optimize``) only when that is worth it: the deleted messages
    were at least ``REWRITE_AFTER_DELETE_SHARE`` of all, the file is small, or ``compact`` asks
    (a rewrite then costs a bounded multiple of the delete). Otherwise the indexes get a short
    merge in proportion to the delete and the freed pages stay in the file, where new rows
    reuse them; ``rewrite_deferred`` says so.
    """
    if store.verified_at is None:
        require_intact(store)  # else this handle checked the file before its own deletes
    db_before, wal_before = _sizes(store.path)
    small = db_before <= REWRITE_ALWAYS_MAX_BYTES
    left = int(store.conn.execute("SELECT count(*) FROM messages").fetchone()[0])
    share = deleted_messages / max(deleted_messages + left, 1)
    if compact or small or share >= REWRITE_AFTER_DELETE_SHARE:
        result = optimize(store, vacuum=True, force=force)
        return dataclasses.replace(result, free_bytes=_free_bytes(store))
    # The deletes' tombstones are merged in steps in proportion to them.
    steps = min(MAX_MERGE_STEPS_AFTER_DELETE, 1 + deleted_messages // MESSAGES_PER_MERGE_STEP)
    for _step in range(steps):
        if not store.write(functools.partial(fts.merge_step, start=False)):
            break
    with store.lock:
        store.checkpoint_passive()
    db_after, wal_after = _sizes(store.path)
    free_bytes = _free_bytes(store)
    return OptimizeResult(
        db_bytes_before=db_before,
        wal_bytes_before=wal_before,
        db_bytes_after=db_after,
        wal_bytes_after=wal_after,
        fts_optimized=False,
        fts_rebuilt=False,
        vacuumed=False,
        forced=False,
        free_bytes=free_bytes,
        rewrite_deferred=(
            f"{share:.0%} of the messages were deleted: the {_size_text(free_bytes)} of pages "
            "freed so far stay in the file and are reused for new rows (rewriting "
            f"{_size_text(db_after)} to give space back to the disk takes time in proportion to "
            "the whole store)"
        ),
    )


def _free_bytes(store: Store) -> int:
    """Return the bytes of free pages inside the database file."""
    conn = store.conn
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    return int(conn.execute("PRAGMA freelist_count").fetchone()[0]) * page_size


def _vacuum_skipped(store: Store, others: Sequence[str], size: int) -> str:
    """Say why VACUUM did not run beside other processes, and what the free space does."""
    free = _free_bytes(store)
    return (
        f"VACUUM skipped: {', '.join(others)} has the store open, and VACUUM would hold the "
        f"write lock for the whole rewrite of {_size_text(size)} (its writes would wait). The "
        f"{_size_text(free)} of free pages stay in the file and are reused for new rows."
    )


def _size_text(n: int) -> str:
    """Return a byte count for a message in the CLI's units: 512 B, 3.4 KiB, 1.2 MiB, 2.0 GiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def vacuum(store: Store) -> int:
    """Merge the search indexes and VACUUM, as the agent's own vacuum does; return how many
    indexes were merged. Run it while no other process writes (VACUUM takes an exclusive lock)."""
    require_intact(store)
    merged = store.write(fts.optimize)
    with store.lock:
        store.checkpoint_passive()
        _vacuum(store)
        if store.journal_mode == "wal":
            store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return len(merged)


def migrate_store(
    db_path: Path,
    *,
    force: bool = False,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> MigrateOutcome:
    """Bring the store at db_path to schema 31 with this package's additions (`db migrate`).

    Creates a missing store. Refuses stores of unknown or newer schemas and other applications'
    databases (nothing written), damaged stores, and (unless forced) stores another process has
    open: a migration changes the schema under the agent, so it runs while the agent is stopped.
    """
    from hermes_state.store import cjk, migrations
    from hermes_state.store.connection import open_store

    existed = db_path.is_file()
    store = open_store(db_path, role="edit", create=True)
    try:
        if store.too_new:
            store.write(lambda conn: None)  # raises the schema refusal
        found = store.layout
        if found is not None and found.kind == "old":
            # A number no release writes (27, or 12): what it holds is unknown, so no release
            # line's steps can be said to apply; it is read, never rewritten (issue 33).
            raise store_schema_refusal(store)
        kind_before = found.kind if found is not None else "not_hermes"
        require_intact(store)  # a damaged store is for `sessions recover`, not for DDL
        if kind_before != "current":
            _refuse_if_shared(store, force, "change its schema")
        store.refusal = None  # a legacy layout is exactly what this repairs
        result = store.write(migrations.migrate)
        store.forget_columns()
        if not existed:
            result.before = None
        if fts.rebuild_pending(store.conn):

            def step(done: fts.RebuildProgress) -> None:
                if on_progress is not None:
                    on_progress("search index", done.progress, done.high_water)

            fts.finish_rebuild(store, on_progress=step)
        if cjk.is_installed(store.conn):
            _catch_up_cjk(store)
        result.rebuild_pending = fts.rebuild_pending(store.conn)
        result.cjk_pending = cjk.status(store.conn).behind > 0
        return MigrateOutcome(path=db_path, existed=existed, result=result)
    finally:
        store.close()


@dataclass(frozen=True)
class MigrateOutcome:
    """What `db migrate` did to which file."""

    path: Path
    existed: bool
    result: Any  # migrations.MigrateResult

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {"path": str(self.path), "existed": self.existed, **self.result.to_dict()}


# --- health check ---------------------------------------------------------------------------


DAMAGED_HINT = (
    "`hermes db check` says what is damaged and what repairs it; `hermes sessions recover "
    "--to NEW.db` salvages what can be read into a new file."
)


def require_intact(store: Store, table: str | None = None) -> None:
    """Raise StoreCorruptError (touching nothing) unless PRAGMA quick_check finds the file sound.

    Rewrites (VACUUM, FTS optimise, migrations, deletes) of a damaged file would spread the
    damage; such a store is for `hermes sessions recover`, which reads it without writing.
    ``table`` limits the check to that table's b-tree and its indexes: what an edit of one of
    its rows reads and writes. A whole-file check is not repeated until this handle writes.
    """
    if table is None and store.verified_at == store.writes:
        return
    pragma = "PRAGMA quick_check(5)" if table is None else f"PRAGMA quick_check({quote(table)})"
    try:
        # A lock is not damage: it is waited out with the handle's patience, then reported
        # as the lock it is (StoreLockedError).
        rows = retry_locked(
            store.path,
            lambda: [str(r[0]) for r in store.conn.execute(pragma)],
            store.waiting,
            not_done="; nothing was written",
        )
    except sqlite3.DatabaseError as exc:
        if is_lock_error(exc):
            raise
        rows = [str(exc)]
    # SQLite heads its findings with a "*** in database main ***" line: not a finding.
    lines = [line for r in rows for line in r.splitlines()]
    rows = [line for line in lines if not line.startswith("*** in database")] or rows
    if rows != ["ok"]:
        store.mark_damaged()
        where = "" if table is None else f" (in table {table} or its indexes)"
        raise StoreCorruptError(
            f"{store.path} is damaged{where}: {'; '.join(rows[:5])}; nothing was written",
            hint=DAMAGED_HINT,
        )
    if table is None:
        store.verified_at = store.writes


@dataclass(frozen=True)
class StoreCheck:
    """What check_store found: one {name, ok, detail, warning} per check, and the diagnosis."""

    path: str
    checks: tuple[dict[str, Any], ...]
    diagnosis: Diagnosis | None = None

    @property
    def ok(self) -> bool:
        """Whether every check passed and nothing is damaged."""
        damaged = self.diagnosis is not None and bool(self.diagnosis.problems)
        return all(c["ok"] for c in self.checks) and not damaged

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        out: dict[str, Any] = {
            "path": self.path,
            "ok": self.ok,
            "checks": [dict(c) for c in self.checks],
        }
        if self.diagnosis is not None:
            out.update(self.diagnosis.to_dict())
        return out


def check_store(store: Store) -> StoreCheck:
    """Run the read-only health checks and diagnose any damage (see ``diagnosis``)."""
    # Integrity, foreign keys, layout, search indexes, schema, journal mode, the -wal and file
    # modes. Warnings (a risky journal mode, loose modes, a torn -wal) do not fail the check:
    # they describe how the agent runs the store, not damage.
    import stat

    from hermes_state.store import journal, layout

    conn = store.conn
    checks: list[dict[str, Any]] = []

    def add(name: str, ok: bool, detail: str, *, warning: bool = False) -> None:
        checks.append({"name": name, "ok": ok, "detail": detail, "warning": warning})

    def attempt(name: str, fn: Callable[[], None]) -> None:
        # A damaged store fails one check, never the whole report.
        try:
            fn()
        except sqlite3.DatabaseError as exc:
            if is_lock_error(exc):
                raise
            add(name, False, f"could not be checked: {exc}")

    lines, stopped = diagnosis.integrity_lines(conn)
    shown = lines[:3] + ([f"… {len(lines) - 3} more"] if len(lines) > 3 else [])
    shown += [f"stopped: {stopped}"] if stopped else []
    add("integrity", lines == ["ok"] and stopped is None, "; ".join(shown))

    def foreign_keys() -> None:
        fk = conn.execute("PRAGMA foreign_key_check").fetchall()
        add("foreign_keys", not fk, f"{len(fk)} violations" if fk else "ok")

    attempt("foreign_keys", foreign_keys)
    found: list[Any] = []

    def store_layout() -> None:
        found.append(layout.inspect(conn))
        add("layout", found[0].kind in ("current", "upstream"), found[0].describe())

    attempt("layout", store_layout)
    diag = diagnosis.diagnose(
        conn, store.path, lines=lines, stopped=stopped, journal_mode=store.journal_mode
    )
    fts_problems = [p.message for p in diag.problems if p.kind == "search_index"]
    unchecked = [s.detail for s in diag.search_indexes if s.state == "unchecked"]
    detail = "; ".join(fts_problems + unchecked[:1]) or "ok"
    add("search_indexes", not fts_problems and not unchecked, detail)
    if not found:
        add("schema", False, "could not be read")
    elif found[0].family is not None:
        add("schema", True, f"v{found[0].version}: {found[0].family.name}")
    else:
        add("schema", False, found[0].describe())
    fam = found[0].family if found else None
    attempt("journal", lambda: _journal_check(journal.report(conn), add, fam))
    wal = diag.wal
    if wal.exists or store.journal_mode == "wal":
        wal_ok = not any(p.kind == "wal" for p in diag.problems)
        add("wal", wal_ok, wal.detail, warning=wal.warning)
    loose = []
    for suffix in STORE_FILE_SUFFIXES:
        try:
            mode = stat.S_IMODE(os.stat(str(store.path) + suffix).st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            loose.append(f"{store.path.name}{suffix} is {mode:04o}")
    notes = []
    if loose:
        notes.append("; ".join(loose) + " (readable by others; `chmod 600` makes them private)")
    protected = write_protected(store.path)
    if protected is not None:
        notes.append(
            f"{protected[0].name} is read-only ({protected[1]:04o}): hermes and the agent "
            "refuse to write to it (`chmod u+w` allows writes)"
        )
    add("permissions", True, "; ".join(notes) or "0600", warning=bool(notes))
    attempt("replication", lambda: _replication_check(conn, store.path, add))
    return StoreCheck(str(store.path), tuple(checks), diag)


def _replication_check(conn: sqlite3.Connection, path: Path, add: Callable[..., None]) -> None:
    traces = diagnosis.litestream_traces(conn, path)
    if traces is not None:
        add("replication", True, traces)


def _journal_check(report: Any, add: Callable[..., None], family: Any = None) -> None:
    # What the release that writes this layout does with the mode, so the advice is its own.
    policy = f"; the release ({family.short}) {family.journal_words}" if family else ""
    add("journal", True, report.describe() + policy, warning=report.at_risk)


def check_unopenable(path: Path, error: str) -> StoreCheck:
    """Report a store SQLite cannot open or whose schema it cannot read, and what to do."""
    diag = diagnosis.diagnose_unopenable(path, error)
    checks = [{"name": "integrity", "ok": False, "detail": error, "warning": False}]
    if diag.wal.exists:
        wal = diag.wal
        checks.append({"name": "wal", "ok": True, "detail": wal.detail, "warning": wal.warning})
    return StoreCheck(str(path), tuple(checks), diag)
