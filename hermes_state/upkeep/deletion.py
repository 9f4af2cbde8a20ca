"""Deleting sessions with their messages and terminal ledger rows (refused while work is open)."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hermes_state.records.ledger import OpenWork, busy_message, delete_terminal_in, open_work_in
from hermes_state.records.messages import clear_messages_in
from hermes_state.records.sessions import require_session_in
from hermes_state.shapes.model_config import DELEGATE_MARKER, marker_sql
from hermes_state.store.connection import Store
from hermes_state.store.errors import LedgerBusyError
from hermes_state.store.sql import chunks, marks
from hermes_state.upkeep.bulk_unindex import unindexed


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


def delete_sessions_in(
    conn: sqlite3.Connection, ids: Sequence[str], *, bulk_unindex: bool = False
) -> _Deleted:
    """Delete sessions (and the runs they delegated) with their messages and terminal ledger
    rows; re-point their other children. ``bulk_unindex``: take the messages out of the search
    indexes in one statement per index (see :mod:`bulk_unindex`), for deletes of thousands."""
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
    bulk = unindexed(conn, ids) if bulk_unindex else contextlib.nullcontext(False)
    with bulk:
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
