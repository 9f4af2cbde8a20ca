"""Taking turns back (the agent's /rewind): later rows are hidden, never deleted, and can be
brought back; the picker lists the user's recent prompts."""

from __future__ import annotations

import sqlite3
from typing import Any

from hermes_state.shapes.content import content_text, decode_content
from hermes_state.shapes.text import bindable
from hermes_state.store.connection import Store
from hermes_state.store.errors import HermesStateError

PREVIEW_CHARS = 80


class RewindTargetError(HermesStateError, ValueError):
    """A rewind target that is not a user message of the session."""

    hint = "Pick one of the session's own user messages (see list_recent_user_messages)."


class TranscriptChangedError(HermesStateError, RuntimeError):
    """The live transcript is no longer the one the caller showed (a turn landed meanwhile)."""

    hint = "Read the session again and retry."


def rewind_to_message(
    store: Store,
    session_id: str,
    target_message_id: int,
    *,
    expected_active_ids: list[int] | None = None,
) -> dict[str, Any]:
    """Take back a user message and everything after it; return what was done.

    The rows stay on disk (``active = 0``, readable with include_inactive) and the session's
    ``rewind_count`` goes up by one even when nothing was left to hide. Returns
    ``{rewound_count, target_message, new_head_id}``: the rows newly hidden, the target row (its
    content decoded, for the caller to offer again) and the last row still live. With
    ``expected_active_ids`` (the live row ids the caller showed) a transcript that changed
    meanwhile is refused (TranscriptChangedError) and nothing is written.
    """
    sid = bindable(session_id)

    def fn(conn: sqlite3.Connection) -> dict[str, Any]:
        if expected_active_ids is not None:
            live = [
                int(r[0])
                for r in conn.execute(
                    "SELECT id FROM messages WHERE session_id = ? AND active = 1 ORDER BY id",
                    (sid,),
                )
            ]
            if live != [int(i) for i in expected_active_ids]:
                raise TranscriptChangedError(
                    f"the live transcript of {sid} changed before the rewind; nothing was done"
                )
        row = conn.execute(
            "SELECT * FROM messages WHERE id = ? AND session_id = ?",
            (int(target_message_id), sid),
        ).fetchone()
        if row is None:
            raise RewindTargetError(f"message {target_message_id} not found in session {sid}")
        target = dict(row)
        if target.get("role") != "user":
            raise RewindTargetError(
                f"rewind target must be a 'user' message (got role={target.get('role')!r}, "
                f"id={target_message_id})"
            )
        target["content"] = decode_content(target.get("content"))
        cur = conn.execute(
            "UPDATE messages SET active = 0 WHERE session_id = ? AND id >= ? AND active = 1",
            (sid, int(target_message_id)),
        )
        conn.execute(
            "UPDATE sessions SET rewind_count = COALESCE(rewind_count, 0) + 1 WHERE id = ?",
            (sid,),
        )
        _recount(conn, sid)
        head = conn.execute(
            "SELECT MAX(id) FROM messages WHERE session_id = ? AND active = 1", (sid,)
        ).fetchone()[0]
        return {"rewound_count": cur.rowcount, "target_message": target, "new_head_id": head}

    return store.write(fn)


def restore_rewound(store: Store, session_id: str, since_message_id: int) -> int:
    """Bring back taken-back rows from since_message_id on; return how many came back.

    Rows a compression archived (``compacted = 1``) are a generation of their own and stay.
    """
    sid = bindable(session_id)

    def fn(conn: sqlite3.Connection) -> int:
        cur = conn.execute(
            "UPDATE messages SET active = 1 WHERE session_id = ? AND id >= ? AND active = 0 "
            "AND COALESCE(compacted, 0) = 0",
            (sid, int(since_message_id)),
        )
        _recount(conn, sid)
        return cur.rowcount

    return store.write(fn)


def _recount(conn: sqlite3.Connection, session_id: str) -> None:
    from hermes_state.records.messages import recount_in

    recount_in(conn, session_id)


def list_recent_user_messages(
    store: Store, session_id: str, limit: int = 20, include_inactive: bool = False
) -> list[dict[str, Any]]:
    """Return a session's latest user prompts, newest first: {id, timestamp, preview}."""
    active = "" if include_inactive else " AND active = 1"
    rows = store.conn.execute(
        f"SELECT id, timestamp, content FROM messages WHERE session_id = ? AND role = 'user'"
        f"{active} ORDER BY id DESC LIMIT ?",
        (bindable(session_id), max(0, int(limit))),
    ).fetchall()
    out = []
    for row in rows:
        decoded = decode_content(row["content"])
        text = content_text(decoded, sep=" ") if decoded is not None else ""
        if not text and isinstance(decoded, list):
            text = "[multimodal content]"
        text = " ".join(str(text).split())
        if len(text) > PREVIEW_CHARS:
            text = text[: PREVIEW_CHARS - 3] + "..."
        out.append({"id": row["id"], "timestamp": row["timestamp"], "preview": text})
    return out
