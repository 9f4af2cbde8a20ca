"""Handing a session over to another platform (the agent's ``/handoff``): a small state machine
in the session row that the CLI starts and the gateway drives.

``handoff_state`` is None (nothing in flight), ``pending`` (asked for), ``running`` (a gateway
took it), ``completed`` or ``failed`` (``handoff_error`` says why).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from hermes_state.shapes.text import bindable
from hermes_state.store.connection import Store

MAX_ERROR_CHARS = 500


def request_handoff(store: Store, session_id: str, platform: str) -> bool:
    """Ask for a handoff to platform; False if one is in flight already (or no such session)."""

    def fn(conn: sqlite3.Connection) -> bool:
        cur = conn.execute(
            "UPDATE sessions SET handoff_state = 'pending', handoff_platform = ?, "
            "handoff_error = NULL WHERE id = ? "
            "AND (handoff_state IS NULL OR handoff_state IN ('completed', 'failed'))",
            (bindable(platform), bindable(session_id)),
        )
        return cur.rowcount > 0

    return store.write(fn)


def handoff_state(store: Store, session_id: str) -> dict[str, Any] | None:
    """Return a session's handoff as {state, platform, error} (None: no such session)."""
    row = store.conn.execute(
        "SELECT handoff_state, handoff_platform, handoff_error FROM sessions WHERE id = ?",
        (bindable(session_id),),
    ).fetchone()
    if row is None:
        return None
    return {"state": row[0], "platform": row[1], "error": row[2]}


def pending_handoffs(store: Store) -> list[dict[str, Any]]:
    """Return the sessions waiting for a gateway to take their handoff, oldest first."""
    rows = store.conn.execute(
        "SELECT * FROM sessions WHERE handoff_state = 'pending' ORDER BY started_at"
    ).fetchall()
    return [dict(r) for r in rows]


def claim_handoff(store: Store, session_id: str) -> bool:
    """Take a pending handoff (pending -> running); tell whether this caller got it."""

    def fn(conn: sqlite3.Connection) -> bool:
        cur = conn.execute(
            "UPDATE sessions SET handoff_state = 'running' "
            "WHERE id = ? AND handoff_state = 'pending'",
            (bindable(session_id),),
        )
        return cur.rowcount > 0

    return store.write(fn)


def complete_handoff(store: Store, session_id: str) -> None:
    """Mark a session's handoff done."""
    store.write(
        lambda conn: conn.execute(
            "UPDATE sessions SET handoff_state = 'completed', handoff_error = NULL WHERE id = ?",
            (bindable(session_id),),
        )
    )


def fail_handoff(
    store: Store, session_id: str, error: str, *, only_states: tuple[str, ...] | None = None
) -> bool:
    """Mark a session's handoff failed with the reason (only from ``only_states`` when given)."""
    where = "id = ?"
    params: list[Any] = [str(bindable(error))[:MAX_ERROR_CHARS], bindable(session_id)]
    if only_states:
        where += f" AND handoff_state IN ({', '.join('?' for _ in only_states)})"
        params += list(only_states)

    def fn(conn: sqlite3.Connection) -> bool:
        cur = conn.execute(
            f"UPDATE sessions SET handoff_state = 'failed', handoff_error = ? WHERE {where}",
            params,
        )
        return cur.rowcount > 0

    return store.write(fn)
