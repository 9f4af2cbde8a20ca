"""The gateway's bookkeeping of sessions: routing peers, the routing index, recovery lookups.

A messaging gateway (Telegram, Discord, Slack …) maps each chat to a session through a
``session_key``. The key and the peer it names (source, user, chat, chat type, thread) live on the
session row; the gateway's full routing entries live in ``gateway_routing``. These functions keep
both, find the session a chat should continue after a restart, and fill the row columns of stores
that predate them from the gateway's old ``sessions/sessions.json`` index (:mod:`sessions_json`).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterable, Mapping
from typing import Any

from hermes_state.records.listing import last_active_sql
from hermes_state.records.sessions import get_session
from hermes_state.shapes.lineage import RESET_END_REASONS as lineage_reset_reasons, ancestors_in
from hermes_state.shapes.text import bindable, scrub_surrogates
from hermes_state.store.connection import Store
from hermes_state.store.home import get_profiles_root, named_profile_of
from hermes_state.store.sql import chunks, marks

log = logging.getLogger("hermes_state")

# Ends that were accidents (old cleanup bugs, reapers), not the user's doing: a chat that was
# ended this way still continues its session.
RECOVERABLE_END_REASONS = (
    "agent_close",
    "ws_orphan_reap",
    "superseded_by_resume",
    "startup_orphan_reap",
)
# Deliberate conversation boundaries (/new, /resume switches, idle and daily resets): recovery
# never reaches behind one to an older session of the same peer.
RESET_END_REASONS = lineage_reset_reasons


def _literals(words: Iterable[str]) -> str:
    """Return fixed words as an SQL list of string literals (they never come from callers)."""
    return ", ".join(f"'{w}'" for w in words)


def _activity(alias: str, cols: Iterable[str]) -> str:
    """SQL for when a session was last active by its own row (older layouts: its start)."""
    if "last_activity_at" in cols:
        return f"COALESCE({alias}.last_activity_at, {alias}.started_at)"
    return f"{alias}.started_at"


def own_profile(store: Store) -> str | None:
    """Return the profile that owns the store ('default' for the root's), None outside the tree."""
    home = store.path.parent
    named = named_profile_of(home)
    if named is not None:
        return named
    try:
        return "default" if home.resolve() == get_profiles_root().resolve() else None
    except OSError:
        return None


def _text(value: Any) -> Any:
    """Return a value ready to store as text (lone surrogates scrubbed)."""
    return scrub_surrogates(value) if isinstance(value, str) else value


# --- the peer on the session row ------------------------------------------------------------


def record_gateway_session_peer(
    store: Store,
    session_id: str,
    *,
    source: str,
    user_id: str | None = None,
    session_key: str | None = None,
    chat_id: str | None = None,
    chat_type: str | None = None,
    thread_id: str | None = None,
    display_name: str | None = None,
    origin_json: str | None = None,
    include_compression_ancestors: bool = False,
    transport_profile: str | None = None,
) -> None:
    """Record which gateway peer a session routes to (nothing without an id and a session key).

    The peer (session_key, source, user_id, chat_id, chat_type, thread_id) is replaced as a
    whole; display_name, origin_json and transport_profile given as None keep what is stored.
    ``include_compression_ancestors`` moves the session's compression ancestors to the peer too.
    A session row that does not exist yet is created with the peer.
    """
    if not session_id or not session_key:
        return
    cols = store.columns("sessions")
    identity = {
        "session_key": session_key,
        "source": source,
        "user_id": user_id,
        "chat_id": chat_id,
        "chat_type": chat_type,
        "thread_id": thread_id,
    }
    kept = {"display_name": display_name, "origin_json": origin_json}
    if "transport_profile" in cols:
        kept["transport_profile"] = transport_profile
    sets = [f"{c} = ?" for c in identity] + [f"{c} = COALESCE(?, {c})" for c in kept]
    params = [_text(v) for v in (*identity.values(), *kept.values())]
    sid = bindable(session_id)

    def fn(conn: sqlite3.Connection) -> None:
        if include_compression_ancestors:
            # One conversation stays on one peer: an explicit resume moved its tip elsewhere.
            ids = [sid, *ancestors_in(conn, sid)]
            for chunk in chunks(ids):
                conn.execute(
                    f"UPDATE sessions SET {', '.join(sets)} WHERE id IN ({marks(len(chunk))})",
                    [*params, *chunk],
                )
            return
        cur = conn.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", [*params, sid])
        if cur.rowcount:
            return
        # The row is not there yet (its creation was deferred, or a crash came between routing
        # and creation): create it with the peer, so it is never left unroutable.
        row: dict[str, Any] = {"id": scrub_surrogates(session_id), **identity, **kept}
        row |= {"created_source": source, "profile_name": named_profile_of(store.path.parent)}
        row["started_at"] = time.time()
        row = {k: _text(v) for k, v in row.items() if k in cols}
        conn.execute(
            f"INSERT INTO sessions ({', '.join(row)}) VALUES ({marks(len(row))})",
            list(row.values()),
        )

    store.write(fn)


def set_expiry_finalized(store: Store, session_id: str, finalized: bool = True) -> None:
    """Set or clear a session's expiry-finalized flag (the gateway's, kept on the row)."""
    if not session_id:
        return
    store.write(
        lambda conn: conn.execute(
            "UPDATE sessions SET expiry_finalized = ? WHERE id = ?",
            (1 if finalized else 0, bindable(session_id)),
        )
    )


# --- the routing index ------------------------------------------------------------------------


def save_gateway_routing_entry(
    store: Store, session_key: str, entry_json: str, *, scope: str = ""
) -> None:
    """Insert or replace one routing entry (nothing for an empty key or entry)."""
    if not session_key or not entry_json:
        return
    params = (_text(scope), _text(session_key), _text(entry_json), time.time())
    store.write(
        lambda conn: conn.execute(
            "INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT(scope, session_key) DO UPDATE SET "
            "entry_json = excluded.entry_json, updated_at = excluded.updated_at",
            params,
        )
    )


def replace_gateway_routing_entries(
    store: Store, entries: Mapping[str, str], *, scope: str = ""
) -> None:
    """Make a scope's routing index exactly these entries, in one transaction (others untouched)."""
    now = time.time()
    rows = [(_text(scope), _text(k), _text(v), now) for k, v in entries.items() if k and v]

    def fn(conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM gateway_routing WHERE scope = ?", (_text(scope),))
        conn.executemany(
            "INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at) "
            "VALUES (?, ?, ?, ?)",
            rows,
        )

    store.write(fn)


def load_gateway_routing_entries(store: Store, *, scope: str = "") -> dict[str, str]:
    """Return a scope's routing index as {session_key: entry_json}."""
    rows = store.conn.execute(
        "SELECT session_key, entry_json FROM gateway_routing WHERE scope = ?", (bindable(scope),)
    )
    return {r[0]: r[1] for r in rows}


def delete_gateway_routing_entries(
    store: Store, session_keys: Iterable[str], *, scope: str = ""
) -> None:
    """Remove the routing entries of these keys from a scope."""
    keys = [(bindable(scope), bindable(k)) for k in session_keys]
    if not keys:
        return
    store.write(
        lambda conn: conn.executemany(
            "DELETE FROM gateway_routing WHERE scope = ? AND session_key = ?", keys
        )
    )


# --- lookups ----------------------------------------------------------------------------------


def list_gateway_sessions(
    store: Store, *, platform: str | None = None, active_only: bool = True
) -> list[dict[str, Any]]:
    """Return the newest session of each session key, most recently active first.

    Each row is the session's columns plus ``last_active``; ``platform`` keeps one source (any
    case), ``active_only`` the sessions not ended.
    """
    where = [
        "s.session_key IS NOT NULL",
        "s.started_at = (SELECT MAX(k.started_at) FROM sessions k "
        "WHERE k.session_key = s.session_key)",
    ]
    params: list[Any] = []
    if platform:
        where.append("LOWER(s.source) = LOWER(?)")
        params.append(bindable(platform))
    if active_only:
        where.append("s.ended_at IS NULL")
    found = store.conn.execute(
        f"SELECT s.id, {last_active_sql('s.id')} AS last_active FROM sessions s "
        f"WHERE {' AND '.join(where)} ORDER BY last_active DESC, s.id",
        params,
    ).fetchall()
    rows = []
    for sid, last_active in found:
        row = get_session(store, sid)
        if row is not None:
            row["last_active"] = last_active
            rows.append(row)
    return rows


def find_session_by_origin(
    store: Store,
    *,
    platform: str,
    chat_id: str,
    thread_id: str | None = None,
    user_id: str | None = None,
) -> str | None:
    """Return the newest live gateway session of a chat (and thread), or None.

    With ``user_id`` that user's session wins; when other users' sessions share the chat and
    none is that user's — or no user is given and the chat has several users — None, so one
    participant is never routed into another's session.
    """
    if not platform or chat_id is None or chat_id == "":
        return None
    sql = (
        "SELECT id, user_id FROM sessions WHERE LOWER(source) = LOWER(?) "
        "AND session_key IS NOT NULL AND chat_id = ? AND ended_at IS NULL"
    )
    params = [bindable(platform), bindable(str(chat_id))]
    if thread_id is not None:
        sql += " AND COALESCE(thread_id, '') = ?"
        params.append(bindable(str(thread_id)))
    rows = store.conn.execute(sql + " ORDER BY started_at DESC, rowid DESC", params).fetchall()
    if not rows:
        return None
    if user_id:
        for row in rows:
            if str(row[1] or "") == str(user_id):
                return str(row[0])
        if len(rows) > 1:
            return None
    elif len({u for u in (str(r[1] or "").strip() for r in rows) if u}) > 1:
        return None
    return str(rows[0][0])


def find_latest_gateway_session_for_peer(
    store: Store,
    *,
    source: str,
    user_id: str | None = None,
    session_key: str | None = None,
    chat_id: str | None = None,
    chat_type: str | None = None,
    thread_id: str | None = None,
) -> dict[str, Any] | None:
    """Return the session a gateway peer should continue after a restart, or None.

    A candidate is not ended, ended by an accident (RECOVERABLE_END_REASONS), or handed off to
    this peer. First by exact ``session_key`` (sessions with messages first, then the most
    recently active); failing that, when chat_id and chat_type are given, by the whole peer
    (source, user, chat, chat type, thread; sessions of this store's profile only, with
    messages). A candidate is passed over when a deliberate boundary (RESET_END_REASONS) of the
    same peer came after its last activity: recovery never reaches behind a /new.
    """
    if not session_key:
        return None
    cols = store.columns("sessions")
    recoverable = f"s.ended_at IS NULL OR s.end_reason IN ({_literals(RECOVERABLE_END_REASONS)})"
    if "handoff_state" in cols:
        # Ownership moved here: the source side's teardown may have stamped any reason.
        recoverable += " OR s.handoff_state = 'completed'"
    has_messages = (
        "(COALESCE(s.message_count, 0) > 0 OR EXISTS "
        "(SELECT 1 FROM messages m WHERE m.session_id = s.id))"
    )
    fenced = (
        "NOT EXISTS (SELECT 1 FROM sessions b WHERE {same} AND b.ended_at IS NOT NULL "
        f"AND b.end_reason IN ({_literals(RESET_END_REASONS)}) "
        f"AND b.ended_at > {_activity('s', cols)})"
    )
    conn = store.conn
    with store.snapshot():
        row = conn.execute(
            f"SELECT s.id FROM sessions s WHERE s.session_key = ? AND s.source = ? "
            f"AND ({recoverable}) "
            f"AND {fenced.format(same='b.session_key = s.session_key AND b.source = s.source')} "
            f"ORDER BY {has_messages} DESC, {_activity('s', cols)} DESC, s.rowid DESC LIMIT 1",
            (bindable(session_key), bindable(source)),
        ).fetchone()
        if row is None and chat_id is not None and chat_type is not None:
            peer = ("user_id", "chat_id", "chat_type", "thread_id")
            same = " AND ".join(f"COALESCE({{a}}.{c}, '') = COALESCE(?, '')" for c in peer)
            peer_params = [bindable(v) for v in (user_id, chat_id, chat_type, thread_id)]
            owner = own_profile(store) if "profile_name" in cols else None
            # A Telegram DM's peer is the same for every bot: another profile's rows in a shared
            # store must not be adopted (rows without a profile are this store's own).
            mine = "COALESCE({a}.profile_name, ?) = ?" if owner is not None else "1"
            mine_params = [owner, owner] if owner is not None else []
            boundary = (
                " AND ".join(f"COALESCE(b.{c}, '') = COALESCE(s.{c}, '')" for c in peer)
                + f" AND b.source = s.source AND {mine.format(a='b')}"
            )
            row = conn.execute(
                f"SELECT s.id FROM sessions s WHERE s.source = ? AND {same.format(a='s')} "
                f"AND {mine.format(a='s')} AND ({recoverable}) AND {has_messages} "
                f"AND {fenced.format(same=boundary)} "
                f"ORDER BY {_activity('s', cols)} DESC, s.rowid DESC LIMIT 1",
                [bindable(source), *peer_params, *mine_params, *mine_params],
            ).fetchone()
    return None if row is None else get_session(store, row[0])
