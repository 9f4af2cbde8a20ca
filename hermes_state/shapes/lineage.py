"""Compression chains, read side: which session continues which, and the live tip of a chain.

A session ended with ``end_reason = 'compression'`` is continued by a child (its
``parent_session_id`` points back); following those links gives a conversation's lineage. Not
every child of such a session continues it: a delegated run, a /branch or a /new reset carries a
marker in its ``model_config`` and is a conversation of its own, and a tool session's children
only continue a tool session. :data:`CONTINUATION_SQL` is that one definition of the edge; every
walk here (and the listings' projection) uses it. Writing the chains is
:mod:`hermes_state.agent.compression`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hermes_state.shapes.model_config import (
    BRANCH_MARKER,
    DELEGATE_MARKER,
    RESET_MARKER,
    marker_sql,
)

if TYPE_CHECKING:
    from hermes_state.store.connection import Store

COMPRESSION_END_REASON = "compression"
MAX_CHAIN_STEPS = 1000


def continuation_sql(parent: str = "p", child: str = "c") -> str:
    """SQL predicate: ``child`` continues ``parent`` (a compression edge), given both aliases."""
    return (
        f"{child}.parent_session_id = {parent}.id AND {parent}.end_reason = "
        f"'{COMPRESSION_END_REASON}' AND {child}.id <> {parent}.id"
        f" AND {marker_sql(child, BRANCH_MARKER)} IS NULL"
        f" AND {marker_sql(child, DELEGATE_MARKER)} IS NULL"
        f" AND {marker_sql(child, RESET_MARKER)} IS NULL"
        f" AND (COALESCE({child}.source, '') <> 'tool' OR {parent}.source = 'tool')"
    )


CONTINUATION_SQL = continuation_sql()

# Ends after which a child started later is a new conversation of the user's, not a part.
RESET_END_REASONS = (
    "session_reset",
    "session_switch",
    "idle",
    "daily",
    "suspended",
    "resume_pending_expired",
)


def _child_of_end_sql(a: str, reasons: Sequence[str]) -> str:
    """SQL: ``a`` is a child its parent's end made a conversation of its own."""
    listed = ", ".join(f"'{r}'" for r in reasons)
    return (
        f"EXISTS (SELECT 1 FROM sessions p WHERE p.id = {a}.parent_session_id "
        f"AND p.end_reason IN ({listed}) AND {a}.started_at >= p.ended_at)"
    )


def listable_sql(a: str = "s") -> str:
    """SQL predicate: the session is a conversation a picker lists (root, branch or reset)."""
    return (
        f"({a}.parent_session_id IS NULL"
        f" OR {marker_sql(a, BRANCH_MARKER)} IS NOT NULL"
        f" OR {marker_sql(a, RESET_MARKER)} IS NOT NULL"
        f" OR {_child_of_end_sql(a, ('branched',))}"
        f" OR {_child_of_end_sql(a, RESET_END_REASONS)})"
    )


def delegate_sql(a: str = "s") -> str:
    """SQL predicate: the session is a run the agent delegated (it carries the marker)."""
    return f"{marker_sql(a, DELEGATE_MARKER)} IS NOT NULL"


def successor_in(conn: sqlite3.Connection, session_id: str) -> str | None:
    """Return the child continuing a session ended by compression.

    Among several, one started after the parent ended is preferred (a child started while the
    parent was live is a run the parent spawned), then a live one, then the newest.
    """
    row = conn.execute(
        f"SELECT c.id FROM sessions p JOIN sessions c ON {CONTINUATION_SQL} WHERE p.id = ?"
        " ORDER BY (p.ended_at IS NULL OR c.started_at >= p.ended_at) DESC,"
        " (c.ended_at IS NULL) DESC, c.started_at DESC, c.rowid DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    return row[0] if row else None


def parent_in(conn: sqlite3.Connection, session_id: str) -> str | None:
    """Return the session a compression continuation continues (None for a chain's root)."""
    row = conn.execute(
        f"SELECT p.id FROM sessions c JOIN sessions p ON {CONTINUATION_SQL} WHERE c.id = ?",
        (session_id,),
    ).fetchone()
    return row[0] if row else None


def ancestors_in(conn: sqlite3.Connection, session_id: str) -> list[str]:
    """Return the compression ancestors of a session, nearest first (a cycle ends the walk)."""
    out: list[str] = []
    seen = {session_id}
    current = session_id
    for _ in range(MAX_CHAIN_STEPS):
        parent = parent_in(conn, current)
        if parent is None or parent in seen:
            break
        out.append(parent)
        seen.add(parent)
        current = parent
    return out


def chain_in(conn: sqlite3.Connection, session_id: str) -> list[str]:
    """Return the session and every continuation after it, up to the live tip."""
    chain = [session_id]
    seen = {session_id}
    for _ in range(MAX_CHAIN_STEPS):
        nxt = successor_in(conn, chain[-1])
        if nxt is None or nxt in seen:
            break
        chain.append(nxt)
        seen.add(nxt)
    return chain


def tip_in(conn: sqlite3.Connection, session_id: str) -> str:
    """Return the newest continuation reached by following compression successors."""
    return chain_in(conn, session_id)[-1]


def lineage_in(conn: sqlite3.Connection, session_id: str) -> list[str]:
    """Return a whole conversation, root first: the ancestors, the session, its continuations.

    Each session appears once even where the links form a cycle. An unknown id has no lineage.
    """
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        return []
    ancestors = ancestors_in(conn, session_id)
    root = ancestors[-1] if ancestors else session_id
    out = chain_in(conn, root)
    if session_id not in out:  # a cycle cut the walk short of the session itself
        out = [*reversed(ancestors), session_id]
        out += [s for s in chain_in(conn, session_id)[1:] if s not in out]
    return out


def compression_successor(store: Store, session_id: str) -> str | None:
    """Return the child continuing a session ended by compression."""
    return successor_in(store.conn, session_id)


def compression_ancestors(store: Store, session_id: str) -> list[str]:
    """Return the sessions this one continues through compression, nearest first."""
    return ancestors_in(store.conn, session_id)


def compression_tip(store: Store, session_id: str) -> str:
    """Return the current end of a session's compression chain (the session itself if none)."""
    return tip_in(store.conn, session_id)


def compression_chain(store: Store, session_id: str) -> list[str]:
    """Return the session and every compression continuation after it, up to the live tip."""
    return chain_in(store.conn, session_id)


def compression_lineage(store: Store, session_id: str) -> list[str]:
    """Return a session's whole conversation, root first (see :func:`lineage_in`)."""
    return lineage_in(store.conn, session_id)
