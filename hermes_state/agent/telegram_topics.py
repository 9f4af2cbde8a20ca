"""Telegram DM topic mode: which private chats use topics, and which topic holds which session.

The two tables are the agent's, created only when a user opts in (``/topic``), never on open, so
an upgraded store keeps working with a gateway that predates the feature. They are created in
Hermes Agent 0.19's shape (topic schema 2: one namespace, ``chat_id`` keys), the one every
release can use: 0.19 knows only it, and 0.22 upgrades it to its own when it first uses topics.
That upgraded shape (topic schema 3, a leading ``profile_name`` key) is read and written as it
is, scoped by profile. Schema-2 tables hold the 'default' profile only: they read as empty for
any other, and writing another profile is refused, since reshaping the tables would break
Hermes Agent 0.19's topic mode (SPEC §19.1).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from hermes_state.records.listing import last_active_sql, with_previews
from hermes_state.records.sessions import get_session
from hermes_state.shapes.text import bindable, scrub_surrogates
from hermes_state.store import meta
from hermes_state.store.connection import Store
from hermes_state.store.errors import HermesStateError, SessionNotFoundError
from hermes_state.store.schema import live_columns

MODE_TABLE = "telegram_dm_topic_mode"
BINDINGS_TABLE = "telegram_dm_topic_bindings"
SCHEMA_KEY = "telegram_dm_topic_schema_version"  # state_meta
SCHEMA_VERSION = "2"
SCOPED_SCHEMA_VERSION = "3"  # the profile-scoped shape of Hermes Agent 0.22
DEFAULT_PROFILE = "default"
SOURCE = "telegram"

MODE_DDL = f"""CREATE TABLE IF NOT EXISTS {MODE_TABLE} (
    chat_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1,
    activated_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    has_topics_enabled INTEGER,
    allows_users_to_create_topics INTEGER,
    capability_checked_at REAL,
    intro_message_id TEXT,
    pinned_message_id TEXT
)"""

BINDINGS_COLUMNS = (
    "chat_id, thread_id, user_id, session_key, session_id, managed_mode, linked_at, updated_at"
)


def _bindings_ddl(name: str) -> str:
    """Return the schema-2 DDL of the bindings table under a name (the real one, or a rebuild's)."""
    return f"""CREATE TABLE IF NOT EXISTS {name} (
    chat_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    managed_mode TEXT NOT NULL DEFAULT 'auto',
    linked_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (chat_id, thread_id)
)"""


BINDINGS_INDEX_DDL = (
    f"CREATE UNIQUE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_session "
    f"ON {BINDINGS_TABLE}(session_id)",
    f"CREATE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_user "
    f"ON {BINDINGS_TABLE}(user_id, chat_id)",
)


class TopicAlreadyLinkedError(HermesStateError, ValueError):
    """A session that is bound to one Telegram topic cannot be bound to another."""

    hint = "Unlink the session from its topic first (delete that topic's binding)."


class TopicProfileUnsupportedError(HermesStateError, ValueError):
    """Topic state of a profile other than 'default' asked of tables that have one namespace."""

    hint = (
        "These topic tables are in Hermes Agent 0.19's shape, which has no profiles; use the "
        "'default' profile, or let Hermes Agent 0.22 upgrade them."
    )


def _profile(profile_name: str | None) -> str:
    """Return the profile a call means (empty or missing: 'default')."""
    name = str(profile_name or "").strip()
    return name or DEFAULT_PROFILE


def _scope(cols: list[str], profile: str) -> tuple[str, list[Any]] | None:
    """Return the condition (with its parameters) keeping one profile's rows of a table.

    None when the table holds no rows of that profile: it does not exist, or it has one
    namespace and the profile is not 'default'.
    """
    if not cols:
        return None
    if "profile_name" in cols:
        return "profile_name = ? AND ", [profile]
    if profile == DEFAULT_PROFILE:
        return "", []
    return None


def _write_scope(cols: list[str], profile: str) -> tuple[str, list[Any]]:
    """Return a write's profile condition, refusing a profile the tables cannot hold."""
    scope = _scope(cols, profile)
    if scope is None:
        raise TopicProfileUnsupportedError(
            f"the Telegram topic tables of this store hold only the 'default' profile, "
            f"not {profile!r}"
        )
    return scope


def _text(value: Any) -> str:
    """Return a caller's id as text to store."""
    return str(scrub_surrogates(str(value)))


def _flag(value: bool | None) -> int | None:
    """Return an optional yes/no as the 0/1 (or NULL) the tables store."""
    return None if value is None else int(bool(value))


def _key(value: Any) -> str:
    """Return a caller's id as text to look up."""
    return str(bindable(str(value)))


# --- the opt-in migration -----------------------------------------------------------------------


def _cascades(conn: sqlite3.Connection) -> bool:
    """Tell whether the bindings' session_id foreign key deletes bindings with their session."""
    fks = conn.execute(f"PRAGMA foreign_key_list({BINDINGS_TABLE})").fetchall()
    return all(fk[2] != "sessions" or (fk[6] or "").upper() == "CASCADE" for fk in fks)


def _rebuild_bindings(conn: sqlite3.Connection) -> None:
    """Rebuild topic schema 1's bindings table (no ON DELETE CASCADE) in schema 2's shape."""
    staging = f"{BINDINGS_TABLE}_new"
    conn.execute(f"DROP TABLE IF EXISTS {staging}")
    conn.execute(_bindings_ddl(staging))
    # Schema 1 kept bindings of deleted sessions; the new foreign key would refuse them.
    conn.execute(
        f"INSERT INTO {staging} ({BINDINGS_COLUMNS}) SELECT {BINDINGS_COLUMNS} "
        f"FROM {BINDINGS_TABLE} b WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.id = b.session_id)"
    )
    conn.execute(f"DROP TABLE {BINDINGS_TABLE}")
    conn.execute(f"ALTER TABLE {staging} RENAME TO {BINDINGS_TABLE}")


def _migrate(conn: sqlite3.Connection) -> None:
    """Create or complete the topic tables (the caller's write transaction)."""
    conn.execute(MODE_DDL)
    scoped = "profile_name" in live_columns(conn, BINDINGS_TABLE)
    if not scoped:
        if live_columns(conn, BINDINGS_TABLE) and not _cascades(conn):
            _rebuild_bindings(conn)
        conn.execute(_bindings_ddl(BINDINGS_TABLE))
        for ddl in BINDINGS_INDEX_DDL:
            conn.execute(ddl)
    scoped = scoped or "profile_name" in live_columns(conn, MODE_TABLE)
    # Tables Hermes Agent 0.22 has scoped stay its topic schema 3: the number is never lowered.
    want = SCOPED_SCHEMA_VERSION if scoped else SCHEMA_VERSION
    if meta.get(conn, SCHEMA_KEY) != want:
        meta.put(conn, SCHEMA_KEY, want)


def apply_telegram_topic_migration(store: Store) -> None:
    """Create the topic-mode tables (an explicit opt-in, never run on open); idempotent."""
    store.write(_migrate)
    store.forget_columns()


# --- topic mode per chat ------------------------------------------------------------------------


def enable_telegram_topic_mode(
    store: Store,
    *,
    chat_id: str,
    user_id: str,
    profile_name: str = DEFAULT_PROFILE,
    has_topics_enabled: bool | None = None,
    allows_users_to_create_topics: bool | None = None,
) -> None:
    """Turn topic mode on for one private chat (creating the topic tables if needed)."""
    apply_telegram_topic_migration(store)
    profile = _profile(profile_name)
    flags = [_flag(has_topics_enabled), _flag(allows_users_to_create_topics)]

    def fn(conn: sqlite3.Connection) -> None:
        cols = live_columns(conn, MODE_TABLE)
        _write_scope(cols, profile)
        scoped = "profile_name" in cols
        now = time.time()
        keys = ["profile_name", "chat_id"] if scoped else ["chat_id"]
        values = [profile] if scoped else []
        conn.execute(
            f"INSERT INTO {MODE_TABLE} ({', '.join(keys)}, user_id, enabled, activated_at, "
            "updated_at, has_topics_enabled, allows_users_to_create_topics, capability_checked_at) "
            f"VALUES ({', '.join('?' for _ in keys)}, ?, 1, ?, ?, ?, ?, ?) "
            f"ON CONFLICT({', '.join(keys)}) DO UPDATE SET user_id = excluded.user_id, "
            "enabled = 1, updated_at = excluded.updated_at, "
            "has_topics_enabled = excluded.has_topics_enabled, "
            "allows_users_to_create_topics = excluded.allows_users_to_create_topics, "
            "capability_checked_at = excluded.capability_checked_at",
            [*values, _text(chat_id), _text(user_id), now, now, *flags, now],
        )

    store.write(fn)


def disable_telegram_topic_mode(
    store: Store,
    *,
    chat_id: str,
    profile_name: str = DEFAULT_PROFILE,
    clear_bindings: bool = True,
) -> None:
    """Turn topic mode off for one chat (and drop its bindings); nothing without the tables."""
    profile = _profile(profile_name)

    def fn(conn: sqlite3.Connection) -> None:
        mode = _scope(live_columns(conn, MODE_TABLE), profile)
        if mode is not None:
            conn.execute(
                f"UPDATE {MODE_TABLE} SET enabled = 0, updated_at = ? WHERE {mode[0]}chat_id = ?",
                [time.time(), *mode[1], _key(chat_id)],
            )
        bound = _scope(live_columns(conn, BINDINGS_TABLE), profile)
        if clear_bindings and bound is not None:
            conn.execute(
                f"DELETE FROM {BINDINGS_TABLE} WHERE {bound[0]}chat_id = ?",
                [*bound[1], _key(chat_id)],
            )

    store.write(fn)


def is_telegram_topic_mode_enabled(
    store: Store, *, chat_id: str, user_id: str, profile_name: str = DEFAULT_PROFILE
) -> bool:
    """Tell whether topic mode is on for this chat and user (False without the tables)."""
    scope = _scope(live_columns(store.conn, MODE_TABLE), _profile(profile_name))
    if scope is None:
        return False
    row = store.conn.execute(
        f"SELECT enabled FROM {MODE_TABLE} WHERE {scope[0]}chat_id = ? AND user_id = ?",
        [*scope[1], _key(chat_id), _key(user_id)],
    ).fetchone()
    return bool(row[0]) if row is not None else False


# --- bindings -------------------------------------------------------------------------------------


def _binding_rows(
    store: Store, where: str, params: list[Any], order: str = ""
) -> list[dict[str, Any]]:
    """Return binding rows matching a condition ([] without the table)."""
    if not live_columns(store.conn, BINDINGS_TABLE):
        return []
    rows = store.conn.execute(f"SELECT * FROM {BINDINGS_TABLE} WHERE {where}{order}", params)
    return [dict(r) for r in rows]


def get_telegram_topic_binding(
    store: Store, *, chat_id: str, thread_id: str, profile_name: str = DEFAULT_PROFILE
) -> dict[str, Any] | None:
    """Return the binding of one topic of a chat, or None."""
    scope = _scope(live_columns(store.conn, BINDINGS_TABLE), _profile(profile_name))
    if scope is None:
        return None
    rows = _binding_rows(
        store,
        f"{scope[0]}chat_id = ? AND thread_id = ?",
        [*scope[1], _key(chat_id), _key(thread_id)],
    )
    return rows[0] if rows else None


def list_telegram_topic_bindings_for_chat(
    store: Store, *, chat_id: str, profile_name: str = DEFAULT_PROFILE
) -> list[dict[str, Any]]:
    """Return every binding of one chat, most recently updated first."""
    scope = _scope(live_columns(store.conn, BINDINGS_TABLE), _profile(profile_name))
    if scope is None:
        return []
    return _binding_rows(
        store, f"{scope[0]}chat_id = ?", [*scope[1], _key(chat_id)], " ORDER BY updated_at DESC"
    )


def get_telegram_topic_binding_by_session(
    store: Store, *, session_id: str
) -> dict[str, Any] | None:
    """Return the binding that holds a session, or None."""
    rows = _binding_rows(store, "session_id = ?", [_key(session_id)])
    return rows[0] if rows else None


def is_telegram_session_linked_to_topic(store: Store, *, session_id: str) -> bool:
    """Tell whether a session is bound to any topic (False without the tables)."""
    return get_telegram_topic_binding_by_session(store, session_id=session_id) is not None


def delete_telegram_topic_binding(
    store: Store, *, chat_id: str, thread_id: str, profile_name: str = DEFAULT_PROFILE
) -> int:
    """Remove one topic's binding; return how many rows went (0 when absent, never raises for that).

    When it was the chat's last binding, topic mode is turned off for the chat in the same
    transaction: a chat whose topics were all deleted in Telegram stops being steered to them.
    """
    profile = _profile(profile_name)
    chat, thread = _key(chat_id), _key(thread_id)

    def fn(conn: sqlite3.Connection) -> int:
        bound = _scope(live_columns(conn, BINDINGS_TABLE), profile)
        if bound is None:
            return 0
        cur = conn.execute(
            f"DELETE FROM {BINDINGS_TABLE} WHERE {bound[0]}chat_id = ? AND thread_id = ?",
            [*bound[1], chat, thread],
        )
        if not cur.rowcount:
            return 0
        left = conn.execute(
            f"SELECT 1 FROM {BINDINGS_TABLE} WHERE {bound[0]}chat_id = ? LIMIT 1",
            [*bound[1], chat],
        ).fetchone()
        mode = _scope(live_columns(conn, MODE_TABLE), profile)
        if left is None and mode is not None:
            conn.execute(
                f"UPDATE {MODE_TABLE} SET enabled = 0, updated_at = ? WHERE {mode[0]}chat_id = ?",
                [time.time(), *mode[1], chat],
            )
        return int(cur.rowcount)

    return store.write(fn)


def bind_telegram_topic(
    store: Store,
    *,
    chat_id: str,
    thread_id: str,
    user_id: str,
    session_key: str,
    session_id: str,
    managed_mode: str = "auto",
    profile_name: str = DEFAULT_PROFILE,
) -> None:
    """Bind one topic of a chat to a session (creating the topic tables if needed).

    Binding the same topic again updates it; a session bound to another topic raises
    TopicAlreadyLinkedError (a ValueError): a session lives in one topic.
    """
    apply_telegram_topic_migration(store)
    profile = _profile(profile_name)
    chat, thread, sid = _text(chat_id), _text(thread_id), _text(session_id)

    def fn(conn: sqlite3.Connection) -> None:
        cols = live_columns(conn, BINDINGS_TABLE)
        scope = _write_scope(cols, profile)
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone() is None:
            raise SessionNotFoundError(f"No session with id {session_id}")
        scoped = "profile_name" in cols
        linked = conn.execute(
            f"SELECT {'profile_name, ' if scoped else ''}chat_id, thread_id "
            f"FROM {BINDINGS_TABLE} WHERE session_id = ?",
            (sid,),
        ).fetchone()
        here = (*scope[1], chat, thread)
        if linked is not None and tuple(str(v) for v in linked) != here:
            raise TopicAlreadyLinkedError(
                f"session {session_id} is already linked to another Telegram topic "
                f"(chat {linked['chat_id']}, thread {linked['thread_id']})"
            )
        keys = ["profile_name", "chat_id", "thread_id"] if scoped else ["chat_id", "thread_id"]
        now = time.time()
        conn.execute(
            f"INSERT INTO {BINDINGS_TABLE} ({', '.join(keys)}, user_id, session_key, session_id, "
            f"managed_mode, linked_at, updated_at) VALUES ({', '.join('?' for _ in keys)}, "
            f"?, ?, ?, ?, ?, ?) ON CONFLICT({', '.join(keys)}) DO UPDATE SET "
            "user_id = excluded.user_id, session_key = excluded.session_key, "
            "session_id = excluded.session_id, managed_mode = excluded.managed_mode, "
            "updated_at = excluded.updated_at",
            [*here, _text(user_id), _text(session_key), sid, _text(managed_mode), now, now],
        )

    store.write(fn)


def list_unlinked_telegram_sessions_for_user(
    store: Store,
    *,
    chat_id: str,
    user_id: str,
    profile_name: str = DEFAULT_PROFILE,
    limit: int = 10,
) -> list[dict[str, Any]]:
    """Return a user's Telegram sessions bound to no topic, most recently active first.

    Each row is the session's columns plus ``last_active`` and ``preview``. With profile-scoped
    topic tables only the profile's sessions are listed (a session without a profile is the
    'default' one's); one-namespace tables, or none, list them all. ``chat_id`` is accepted for
    the agent's signature: a private chat's sessions are found by their user.
    """
    del chat_id  # a private chat is its user: the user id finds its sessions
    cols = store.columns("sessions")
    bound = live_columns(store.conn, BINDINGS_TABLE)
    where = ["s.source = ?", "s.user_id = ?"]
    params: list[Any] = [SOURCE, _key(user_id)]
    if bound:
        where.append(f"NOT EXISTS (SELECT 1 FROM {BINDINGS_TABLE} b WHERE b.session_id = s.id)")
    if "profile_name" in bound and "profile_name" in cols:
        where.append("COALESCE(NULLIF(TRIM(s.profile_name), ''), ?) = ?")
        params += [DEFAULT_PROFILE, _profile(profile_name)]
    found = store.conn.execute(
        f"SELECT s.id, {last_active_sql('s.id')} AS last_active FROM sessions s "
        f"WHERE {' AND '.join(where)} ORDER BY last_active DESC, s.started_at DESC, s.id LIMIT ?",
        [*params, max(0, int(limit))],
    ).fetchall()
    rows = []
    for sid, last_active in found:
        row = get_session(store, sid)
        if row is not None:
            row["last_active"] = last_active
            rows.append(row)
    return with_previews(store, rows)
