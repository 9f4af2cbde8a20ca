"""Compression chains, read side: which session continues which, and the live tip of a chain.

A session ended with ``end_reason = 'compression'`` is continued by a child (its
``parent_session_id`` points back); following those links gives a conversation's lineage.
Writing the chains (compaction, rotation) is :mod:`hermes_state.compression`.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hermes_state.connection import Store

COMPRESSION_END_REASON = "compression"
MAX_CHAIN_STEPS = 1000


def successor_in(conn: sqlite3.Connection, session_id: str) -> str | None:
    """Return the child continuing a session ended by compression (live first, then newest)."""
    row = conn.execute(
        "SELECT c.id FROM sessions p JOIN sessions c ON c.parent_session_id = p.id"
        " WHERE p.id = ? AND p.end_reason = ? AND c.id <> p.id"
        # Delegate/tool children hang off a session too; they only continue a tool session.
        " AND (c.source <> 'tool' OR p.source = 'tool')"
        " ORDER BY (c.ended_at IS NULL) DESC, c.started_at DESC, c.rowid DESC LIMIT 1",
        (session_id, COMPRESSION_END_REASON),
    ).fetchone()
    return row[0] if row else None


def ancestors_in(conn: sqlite3.Connection, session_id: str) -> list[str]:
    """Return the compression ancestors of a session, nearest first."""
    out: list[str] = []
    seen = {session_id}
    current = session_id
    for _ in range(MAX_CHAIN_STEPS):
        row = conn.execute(
            "SELECT p.id, p.end_reason FROM sessions c"
            " JOIN sessions p ON p.id = c.parent_session_id WHERE c.id = ?",
            (current,),
        ).fetchone()
        if row is None or row[1] != COMPRESSION_END_REASON or row[0] in seen:
            break
        out.append(row[0])
        seen.add(row[0])
        current = row[0]
    return out


def tip_in(conn: sqlite3.Connection, session_id: str) -> str:
    """Return the newest continuation reached by following compression successors."""
    seen = {session_id}
    current = session_id
    for _ in range(MAX_CHAIN_STEPS):
        nxt = successor_in(conn, current)
        if nxt is None or nxt in seen:
            break
        seen.add(nxt)
        current = nxt
    return current


def compression_successor(store: Store, session_id: str) -> str | None:
    """Return the child continuing a session ended by compression (live first, then newest)."""
    return successor_in(store.conn, session_id)


def compression_ancestors(store: Store, session_id: str) -> list[str]:
    """Return the sessions this one continues through compression, nearest first."""
    return ancestors_in(store.conn, session_id)


def compression_tip(store: Store, session_id: str) -> str:
    """Return the current end of a session's compression chain (the session itself if none)."""
    return tip_in(store.conn, session_id)


def compression_chain(store: Store, session_id: str) -> list[str]:
    """Return the session and every compression continuation after it, up to the live tip."""
    chain = [session_id]
    seen = {session_id}
    while True:
        nxt = successor_in(store.conn, chain[-1])
        if nxt is None or nxt in seen:
            return chain
        chain.append(nxt)
        seen.add(nxt)
