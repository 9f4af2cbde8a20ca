"""Compression generations: in-place compaction and rotation to a child session (the chains
they leave are read in :mod:`hermes_state.shapes.lineage`).

Row states: live = active=1, compacted=0; compression archive = active=0, compacted=1; rewound =
active=0, compacted=0. A protected message kept through a compaction appears in both generations
with the same uid, content and timestamp; that is correct, and nothing here dedupes by content.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from hermes_state.records.messages import insert_messages
from hermes_state.records.sessions import CREATE_COLUMNS, sanitize_title
from hermes_state.shapes.lineage import (
    COMPRESSION_END_REASON as COMPRESSION_END_REASON,
    ancestors_in as ancestors_in,
    compression_ancestors as compression_ancestors,
    compression_chain as compression_chain,
    compression_successor as compression_successor,
    compression_tip as compression_tip,
    successor_in as successor_in,
    tip_in as tip_in,
)
from hermes_state.store.connection import Store
from hermes_state.store.errors import (
    CompressionError as CompressionError,
    SessionNotFoundError,
    TitleInUseError,
)
from hermes_state.store.patience import TRANSCRIPT_WRITE_PATIENCE_S

# Ends a session may have and still be rotated: the process went away, not the conversation.
AUTOMATIC_END_REASONS = frozenset({"tui_shutdown", "ws_disconnect", "idle_timeout", "lru_evict"})
# Columns a rotation child inherits from the session it continues (routing, workspace, profile).
ROTATION_COPIED_COLUMNS = (
    "source",
    *sorted(CREATE_COLUMNS - {"parent_session_id"}),
    "pinned",
    "archived",
)
ROTATION_COLUMNS = (CREATE_COLUMNS - {"parent_session_id"}) | {"source", "title"}
# Reference keys: a kept message naming an existing row by either is copied from that row.
_REF_KEYS = ("message_uid", "id")
# Copies set these themselves; every other column of the stored row is copied verbatim.
_NOT_COPIED = frozenset({"id", "session_id", "active", "compacted"})


@dataclass(frozen=True)
class CompactionResult:
    """What an in-place compaction did to one session."""

    session_id: str
    archived: int  # live rows turned into the compression archive
    inserted: int  # new live rows (the retained context)
    carried: int  # inserted rows copied from an existing message (same uid, content, timestamp)
    message_ids: tuple[int, ...]  # ids of the new live rows, in order

    def to_dict(self) -> dict[str, Any]:
        """Return the result as plain JSON-ready data."""
        return {
            "session_id": self.session_id,
            "archived": self.archived,
            "inserted": self.inserted,
            "carried": self.carried,
            "message_ids": list(self.message_ids),
        }


@dataclass(frozen=True)
class RotationResult:
    """What a rotation created: the child session and its handoff rows."""

    old_session_id: str
    new_session_id: str
    inserted: int
    carried: int
    message_ids: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        """Return the result as plain JSON-ready data."""
        return {
            "old_session_id": self.old_session_id,
            "new_session_id": self.new_session_id,
            "inserted": self.inserted,
            "carried": self.carried,
            "message_ids": list(self.message_ids),
        }


# --- copying kept messages ------------------------------------------------------------------


def _is_reference(msg: Mapping[str, Any]) -> bool:
    return any(msg.get(k) is not None for k in _REF_KEYS)


def _resolve_references(
    conn: sqlite3.Connection, session_id: str, kept: Sequence[Mapping[str, Any]]
) -> list[int | None]:
    """Map each kept message to the stored row id it names (None for a new message)."""
    if not any(_is_reference(m) for m in kept):
        return [None] * len(kept)
    # One pass over the live generation (uid and id only, never bodies).
    by_uid: dict[str, int] = {}
    for row_id, uid in conn.execute(
        "SELECT id, message_uid FROM messages WHERE session_id = ? AND active = 1 ORDER BY id",
        (session_id,),
    ):
        if uid:
            by_uid.setdefault(uid, row_id)
    out: list[int | None] = []
    for msg in kept:
        if not _is_reference(msg):
            out.append(None)
            continue
        uid = msg.get("message_uid")
        row_id = by_uid.get(uid) if uid else None
        if row_id is None and uid:
            # An older generation of this session may hold it (a message restored from history).
            row = conn.execute(
                "SELECT MAX(id) FROM messages WHERE session_id = ? AND message_uid = ?",
                (session_id, uid),
            ).fetchone()
            row_id = row[0] if row else None
        if row_id is None and uid is None:
            given = msg.get("id")
            row = conn.execute(
                "SELECT id FROM messages WHERE id = ? AND session_id = ?", (given, session_id)
            ).fetchone()
            row_id = row[0] if row else None
        if row_id is None:
            named = f"uid {uid}" if uid else f"id {msg.get('id')}"
            raise CompressionError(f"Kept message {named} is not a message of session {session_id}")
        out.append(row_id)
    return out


def _copy_columns(conn: sqlite3.Connection) -> list[str]:
    return [r[1] for r in conn.execute("PRAGMA table_info(messages)") if r[1] not in _NOT_COPIED]


def _copy_row(conn: sqlite3.Connection, cols: list[str], source_id: int, session_id: str) -> int:
    """Insert a live copy of a stored row into session_id; return the new row id."""
    col_sql = ", ".join(f'"{c}"' for c in cols)
    cur = conn.execute(
        f"INSERT INTO messages (session_id, active, compacted, {col_sql}) "
        f"SELECT ?, 1, 0, {col_sql} FROM messages WHERE id = ?",
        (session_id, source_id),
    )
    if cur.lastrowid is None:  # pragma: no cover - an INSERT … SELECT of an existing row
        raise SessionNotFoundError(f"No message with id {source_id}")
    return int(cur.lastrowid)


def _insert_kept(
    conn: sqlite3.Connection,
    target_session: str,
    kept: Sequence[Mapping[str, Any]],
    refs: Sequence[int | None],
) -> tuple[list[int], int]:
    """Insert the kept context into target_session in order; return (new ids, rows carried)."""
    cols = _copy_columns(conn) if any(r is not None for r in refs) else []
    ids: list[int] = []
    carried = 0
    for msg, ref in zip(kept, refs, strict=True):
        if ref is None:
            # A new message is always live; empty reference keys are not fields to store.
            drop = {"active", "compacted", *(k for k in _REF_KEYS if msg.get(k) is None)}
            new = {k: v for k, v in msg.items() if k not in drop}
            ids.extend(insert_messages(conn, target_session, [new]))
        else:
            ids.append(_copy_row(conn, cols, ref, target_session))
            carried += 1
    if carried:
        from hermes_state.store import cjk

        cjk.after_append(conn)  # raw copies bypass insert_messages, which calls it itself
    return ids, carried


def _tool_call_count(text: Any) -> int:
    """Count the tool calls a stored tool_calls value holds (as the append path counts them)."""
    if text is None or text == "":
        return 0
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return 0
    if isinstance(value, list):
        return len(value)
    return 1 if value else 0


def _set_counters(conn: sqlite3.Connection, session_id: str, ids: Sequence[int]) -> None:
    """Set message_count/tool_call_count to the live rows just inserted (the whole live set)."""
    tool_calls = 0
    if ids:
        for (text,) in conn.execute(
            "SELECT tool_calls FROM messages WHERE session_id = ? AND id >= ? AND active = 1",
            (session_id, min(ids)),
        ):
            tool_calls += _tool_call_count(text)
    conn.execute(
        "UPDATE sessions SET message_count = ?, tool_call_count = ? WHERE id = ?",
        (len(ids), tool_calls, session_id),
    )


def _require(conn: sqlite3.Connection, session_id: str) -> sqlite3.Row:
    row = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        raise SessionNotFoundError(f"No session with id {session_id}")
    return cast(sqlite3.Row, row)


# --- compaction and rotation ----------------------------------------------------------------


def compact_session(
    store: Store, session_id: str, kept_messages: Iterable[Mapping[str, Any]]
) -> CompactionResult:
    """Archive a session's live rows and insert the retained context as the new live generation.

    A kept message naming an existing message (by ``message_uid``, else row ``id``) is copied from
    the stored row verbatim (uid, content, timestamp and every other column); any other kept
    message (e.g. a summary) is inserted as a new message with a fresh uid.
    """
    kept = [dict(m) for m in kept_messages]

    def fn(conn: sqlite3.Connection) -> CompactionResult:
        _require(conn, session_id)
        # Rows up to here are the generation being archived; the new live rows come after it.
        max_id = conn.execute(
            "SELECT COALESCE(MAX(id), 0) FROM messages WHERE session_id = ?", (session_id,)
        ).fetchone()[0]
        refs = _resolve_references(conn, session_id, kept)
        ids, carried = _insert_kept(conn, session_id, kept, refs)
        archived = conn.execute(
            "UPDATE messages SET active = 0, compacted = 1"
            " WHERE session_id = ? AND active = 1 AND id <= ?",
            (session_id, max_id),
        ).rowcount
        _set_counters(conn, session_id, ids)
        return CompactionResult(session_id, archived, len(ids), carried, tuple(ids))

    return store.write(fn, patience=TRANSCRIPT_WRITE_PATIENCE_S)


def rotate_session(
    store: Store,
    old_id: str,
    new_id: str,
    *,
    kept_messages: Iterable[Mapping[str, Any]] = (),
    started_at: float | None = None,
    **session_columns: Any,
) -> RotationResult:
    """Continue a session in a new child: copy routing, insert the handoff, end the old one.

    The child gets parent_session_id=old_id and the old session's routing/workspace/profile
    columns (overridable through session_columns); kept messages are copied as in compaction.
    The old session ends with end_reason='compression'. One transaction.
    """
    unknown = set(session_columns) - ROTATION_COLUMNS
    if unknown:
        raise TypeError(f"rotate_session() got unexpected columns: {', '.join(sorted(unknown))}")
    if not new_id or not isinstance(new_id, str) or new_id == old_id:
        raise ValueError("new_id must be a non-empty string different from old_id")
    if "title" in session_columns:
        session_columns["title"] = sanitize_title(session_columns["title"])
    kept = [dict(m) for m in kept_messages]
    now = time.time() if started_at is None else float(started_at)

    def fn(conn: sqlite3.Connection) -> RotationResult:
        old = _require(conn, old_id)
        if old["ended_at"] is not None and old["end_reason"] not in AUTOMATIC_END_REASONS:
            raise CompressionError(
                f"Session {old_id} already ended ({old['end_reason']}); it cannot be rotated"
            )
        refs = _resolve_references(conn, old_id, kept)  # before anything is written
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (new_id,)).fetchone():
            raise CompressionError(f"Session {new_id} already exists")
        title = session_columns.get("title")
        if title is not None:
            holder = conn.execute("SELECT id FROM sessions WHERE title = ?", (title,)).fetchone()
            if holder is not None:
                raise TitleInUseError(title, holder[0])
        live = set(old.keys())
        values: dict[str, Any] = {c: old[c] for c in ROTATION_COPIED_COLUMNS if c in live}
        values.update({k: v for k, v in session_columns.items() if v is not None})
        values.update({"id": new_id, "parent_session_id": old_id, "started_at": now})
        cols = list(values)
        conn.execute(
            f"INSERT INTO sessions ({', '.join(f'{chr(34)}{c}{chr(34)}' for c in cols)}) "
            f"VALUES ({', '.join('?' for _ in cols)})",
            [values[c] for c in cols],
        )
        ids, carried = _insert_kept(conn, new_id, kept, refs)
        _set_counters(conn, new_id, ids)
        conn.execute(
            "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ?",
            (time.time(), COMPRESSION_END_REASON, old_id),
        )
        return RotationResult(old_id, new_id, len(ids), carried, tuple(ids))

    return store.write(fn, patience=TRANSCRIPT_WRITE_PATIENCE_S)


def archive_and_compact(
    store: Store, session_id: str, compacted_messages: Iterable[Mapping[str, Any]]
) -> int:
    """Compact a session in place (see compact_session); return how many live rows it has now."""
    return compact_session(store, session_id, compacted_messages).inserted


ORPHAN_AFTER_S = 7 * 86400.0


def finalize_orphaned_compression_sessions(store: Store, *, now: float | None = None) -> int:
    """End continuations a compression started but never used; return how many were ended.

    A continuation is orphaned when, a week after it started, it still has no end and no API
    call although it holds messages (the kept context) and its parent ended by compression.
    Nothing is deleted: it is ended with ``end_reason = 'orphaned_compression'``.
    """
    when = time.time() if now is None else float(now)

    def fn(conn: sqlite3.Connection) -> int:
        cur = conn.execute(
            "UPDATE sessions SET ended_at = ?, end_reason = 'orphaned_compression' "
            "WHERE COALESCE(api_call_count, 0) = 0 AND end_reason IS NULL AND ended_at IS NULL "
            "AND started_at < ? AND parent_session_id IS NOT NULL "
            "AND EXISTS (SELECT 1 FROM sessions p WHERE p.id = sessions.parent_session_id "
            f"AND p.end_reason = '{COMPRESSION_END_REASON}' AND p.ended_at IS NOT NULL) "
            "AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.id)",
            (when, when - ORPHAN_AFTER_S),
        )
        return cur.rowcount

    return store.write(fn)
