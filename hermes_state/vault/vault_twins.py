"""Sessions in the live store and in a vault store at once: what each such twin is.

A session id can be in both places for two reasons. An interrupted ``vault move`` or ``vault
return`` left a copy behind: every message of the vault copy is in the live store too (a
*stale* copy; the next move or return drops it). Or the agent resumed a vaulted chat: its
``create_session``/``append_message`` with the vaulted id made a new live session, and the vault
copy holds history the live store lacks (a *resumed* session: one conversation in two stores,
read as one, joined by ``vault return``, never dropped).

Messages are matched by what they are, not by their row id (an id may differ legitimately: a
return renumbers a message whose id the live store had given away).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from hermes_state.store.sql import chunks, marks, quote

# What makes a message the same message, whichever store and row id it has.
MESSAGE_KEY = ("role", "timestamp", "content", "tool_calls", "tool_name", "tool_call_id")


def _key_columns(conn: sqlite3.Connection, a: str, b: str) -> list[str]:
    """Return the message key columns both schemas have."""
    have = [
        {r[1] for r in conn.execute(f"PRAGMA {schema}.table_info(messages)")} for schema in (a, b)
    ]
    return [c for c in MESSAGE_KEY if c in have[0] and c in have[1]]


def twin_ids(live: sqlite3.Connection, vault: sqlite3.Connection) -> set[str]:
    """Return the sessions of a vault store (read on vault) that the live store has too."""
    # One statement on each store, however many sessions the vault store holds.
    ids = vault.execute("SELECT json_group_array(id) FROM sessions").fetchone()[0]
    return {
        r[0]
        for r in live.execute(
            "SELECT value FROM json_each(?) WHERE value IN (SELECT id FROM sessions)", (ids,)
        )
    }


def _keys(conn: sqlite3.Connection, cols: Sequence[str], ids: Sequence[str]) -> dict[str, Any]:
    """Return each session's messages as a multiset of key tuples (session -> {key: count})."""
    out: dict[str, dict[tuple[Any, ...], int]] = {}
    select = ", ".join(quote(c) for c in cols)
    for batch in chunks(ids):
        for row in conn.execute(
            f"SELECT session_id, {select} FROM messages WHERE session_id IN ({marks(len(batch))})",
            batch,
        ):
            bag = out.setdefault(row[0], {})
            key = tuple(row[1:])
            bag[key] = bag.get(key, 0) + 1
    return out


def unmatched(
    live: sqlite3.Connection, vault: sqlite3.Connection, ids: Iterable[str]
) -> dict[str, int]:
    """Return, per twin session, how many of its vault messages the live store lacks (> 0 only).

    Read on two connections (each its own snapshot): for readers, which never attach.
    """
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    cols = [
        c
        for c in MESSAGE_KEY
        if c in {r[1] for r in vault.execute("PRAGMA table_info(messages)")}
        and c in {r[1] for r in live.execute("PRAGMA table_info(messages)")}
    ]
    theirs = _keys(vault, cols, wanted)
    mine = _keys(live, cols, wanted)
    out: dict[str, int] = {}
    for sid, bag in theirs.items():
        have = mine.get(sid, {})
        lacking = sum(max(0, n - have.get(k, 0)) for k, n in bag.items())
        if lacking:
            out[sid] = lacking
    return out


def unmatched_in(
    conn: sqlite3.Connection, src: str, dst: str, ids: Sequence[str]
) -> dict[str, int]:
    """Return, per session, how many of its messages in schema src schema dst lacks (> 0 only).

    One connection with both schemas (attached): inside a writer's transaction, so what it
    says still holds when the same transaction deletes.
    """
    cols = _key_columns(conn, src, dst)
    same = " AND ".join(f"d.{quote(c)} IS s.{quote(c)}" for c in cols)
    out: dict[str, int] = {}
    for batch in chunks(ids):
        for sid, n in conn.execute(
            f"SELECT s.session_id, count(*) FROM {src}.messages s"
            f" WHERE s.session_id IN ({marks(len(batch))}) AND NOT EXISTS (SELECT 1 FROM"
            f" {dst}.messages d WHERE d.session_id = s.session_id AND {same})"
            " GROUP BY s.session_id",
            batch,
        ):
            out[str(sid)] = int(n)
    return out


def unmatched_ids(conn: sqlite3.Connection, src: str, dst: str, session_id: str) -> list[int]:
    """Return the ids (in src) of this session's messages that schema dst lacks, in id order."""
    cols = _key_columns(conn, src, dst)
    same = " AND ".join(f"d.{quote(c)} IS s.{quote(c)}" for c in cols)
    return [
        int(r[0])
        for r in conn.execute(
            f"SELECT s.id FROM {src}.messages s WHERE s.session_id = ? AND NOT EXISTS"
            f" (SELECT 1 FROM {dst}.messages d WHERE d.session_id = s.session_id AND {same})"
            " ORDER BY s.id",
            (session_id,),
        )
    ]
