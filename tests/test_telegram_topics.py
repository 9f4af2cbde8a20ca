"""Telegram DM topic mode: the opt-in tables, topic mode per chat, and topic-session bindings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_state.agent import telegram_topics as tt
from hermes_state.agent.db import SessionDB
from hermes_state.store import meta
from hermes_state.store.connection import Store
from hermes_state.store.errors import SessionNotFoundError

CHAT = "208214988"
SCHEMA_1_BINDINGS = """CREATE TABLE telegram_dm_topic_bindings (
    chat_id TEXT NOT NULL, thread_id TEXT NOT NULL, user_id TEXT NOT NULL,
    session_key TEXT NOT NULL, session_id TEXT NOT NULL REFERENCES sessions(id),
    managed_mode TEXT NOT NULL DEFAULT 'auto', linked_at REAL NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (chat_id, thread_id))"""
# Hermes Agent 0.22's topic schema 3: the same tables with a leading profile_name key.
SCHEMA_3 = (
    """CREATE TABLE telegram_dm_topic_mode (
    profile_name TEXT NOT NULL DEFAULT 'default', chat_id TEXT NOT NULL, user_id TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1, activated_at REAL NOT NULL, updated_at REAL NOT NULL,
    has_topics_enabled INTEGER, allows_users_to_create_topics INTEGER,
    capability_checked_at REAL, intro_message_id TEXT, pinned_message_id TEXT,
    PRIMARY KEY (profile_name, chat_id))""",
    """CREATE TABLE telegram_dm_topic_bindings (
    profile_name TEXT NOT NULL DEFAULT 'default', chat_id TEXT NOT NULL,
    thread_id TEXT NOT NULL, user_id TEXT NOT NULL, session_key TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    managed_mode TEXT NOT NULL DEFAULT 'auto', linked_at REAL NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (profile_name, chat_id, thread_id))""",
    "CREATE UNIQUE INDEX idx_telegram_dm_topic_bindings_session "
    "ON telegram_dm_topic_bindings(session_id)",
    "CREATE INDEX idx_telegram_dm_topic_bindings_user "
    "ON telegram_dm_topic_bindings(profile_name, user_id, chat_id)",
    "INSERT INTO state_meta (key, value) VALUES ('telegram_dm_topic_schema_version', '3')",
)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SessionDB]:
    """A writable SessionDB on a fresh store, with one Telegram session of the chat's user."""
    with SessionDB(tmp_path / "state.db") as handle:
        handle.create_session("s1", "telegram", user_id=CHAT)
        yield handle


@pytest.fixture
def store(db: SessionDB) -> Store:
    """The store under the SessionDB."""
    return db.store


def tables(store: Store) -> set[str]:
    """The names of the store's topic tables."""
    rows = store.conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'telegram%'"
    )
    return {r[0] for r in rows}


def bind(store: Store, thread: str = "17585", session: str = "s1", **extra: Any) -> None:
    """Bind a topic of CHAT to a session."""
    tt.bind_telegram_topic(
        store,
        chat_id=CHAT,
        thread_id=thread,
        user_id=CHAT,
        session_key=f"telegram:dm:{CHAT}:thread:{thread}",
        session_id=session,
        **extra,
    )


def run_sql(store: Store, *statements: str) -> None:
    """Run statements in one write transaction."""

    def fn(conn: Any) -> None:
        for sql in statements:
            conn.execute(sql)

    store.write(fn)
    store.forget_columns()


# --- the opt-in migration ------------------------------------------------------------------------


def test_opening_a_store_creates_no_topic_tables(store: Store) -> None:
    assert tables(store) == set()


def test_migration_creates_the_tables_in_the_agent_0_19_shape(store: Store) -> None:
    tt.apply_telegram_topic_migration(store)
    info = {
        t: [(r[1], r[2], r[3], r[5]) for r in store.conn.execute(f"PRAGMA table_info({t})")]
        for t in (tt.MODE_TABLE, tt.BINDINGS_TABLE)
    }
    assert info[tt.MODE_TABLE] == [
        ("chat_id", "TEXT", 0, 1),
        ("user_id", "TEXT", 1, 0),
        ("enabled", "INTEGER", 1, 0),
        ("activated_at", "REAL", 1, 0),
        ("updated_at", "REAL", 1, 0),
        ("has_topics_enabled", "INTEGER", 0, 0),
        ("allows_users_to_create_topics", "INTEGER", 0, 0),
        ("capability_checked_at", "REAL", 0, 0),
        ("intro_message_id", "TEXT", 0, 0),
        ("pinned_message_id", "TEXT", 0, 0),
    ]
    assert info[tt.BINDINGS_TABLE] == [
        ("chat_id", "TEXT", 1, 1),
        ("thread_id", "TEXT", 1, 2),
        ("user_id", "TEXT", 1, 0),
        ("session_key", "TEXT", 1, 0),
        ("session_id", "TEXT", 1, 0),
        ("managed_mode", "TEXT", 1, 0),
        ("linked_at", "REAL", 1, 0),
        ("updated_at", "REAL", 1, 0),
    ]


def test_migration_makes_bindings_go_with_their_session(store: Store) -> None:
    tt.apply_telegram_topic_migration(store)
    fks = store.conn.execute(f"PRAGMA foreign_key_list({tt.BINDINGS_TABLE})").fetchall()
    assert [(fk[2], fk[3], fk[4], fk[6]) for fk in fks] == [
        ("sessions", "session_id", "id", "CASCADE")
    ]


def test_migration_creates_the_session_and_user_indexes(store: Store) -> None:
    tt.apply_telegram_topic_migration(store)
    rows = store.conn.execute(f"PRAGMA index_list({tt.BINDINGS_TABLE})").fetchall()
    named = {r[1]: r[2] for r in rows if r[1].startswith("idx_")}
    assert named == {
        "idx_telegram_dm_topic_bindings_session": 1,
        "idx_telegram_dm_topic_bindings_user": 0,
    }
    cols = [
        r[2] for r in store.conn.execute("PRAGMA index_info(idx_telegram_dm_topic_bindings_user)")
    ]
    assert cols == ["user_id", "chat_id"]


def test_migration_records_topic_schema_2(store: Store) -> None:
    tt.apply_telegram_topic_migration(store)
    assert meta.get(store.conn, tt.SCHEMA_KEY) == "2"


def test_migration_run_twice_keeps_the_bindings(store: Store) -> None:
    bind(store)
    tt.apply_telegram_topic_migration(store)
    assert tt.get_telegram_topic_binding(store, chat_id=CHAT, thread_id="17585") is not None


def test_migration_rebuilds_schema_1_bindings_keeping_live_ones(
    db: SessionDB, store: Store
) -> None:
    row = "INSERT INTO telegram_dm_topic_bindings VALUES (?, ?, 'u', 'k', ?, 'auto', 1, 1)"
    # Schema 1 had no cascade: a deleted session's binding could stay behind.
    store.conn.execute("PRAGMA foreign_keys = OFF")
    store.conn.execute(SCHEMA_1_BINDINGS)
    store.conn.execute(row, (CHAT, "1", "s1"))
    store.conn.execute(row, (CHAT, "2", "gone"))
    store.conn.execute("PRAGMA foreign_keys = ON")
    store.forget_columns()
    tt.apply_telegram_topic_migration(store)
    kept = tt.list_telegram_topic_bindings_for_chat(store, chat_id=CHAT)
    assert [b["session_id"] for b in kept] == ["s1"]
    fks = store.conn.execute(f"PRAGMA foreign_key_list({tt.BINDINGS_TABLE})").fetchall()
    assert fks[0][6] == "CASCADE"


def test_migration_keeps_agent_0_22_scoped_tables_and_their_schema_3(store: Store) -> None:
    run_sql(store, *SCHEMA_3)
    tt.apply_telegram_topic_migration(store)
    cols = [r[1] for r in store.conn.execute(f"PRAGMA table_info({tt.BINDINGS_TABLE})")]
    assert cols[0] == "profile_name"
    assert meta.get(store.conn, tt.SCHEMA_KEY) == "3"


# --- reads before the opt-in ----------------------------------------------------------------------


def test_reads_without_the_tables_are_empty_and_create_nothing(store: Store) -> None:
    assert tt.get_telegram_topic_binding(store, chat_id=CHAT, thread_id="1") is None
    assert tt.list_telegram_topic_bindings_for_chat(store, chat_id=CHAT) == []
    assert tt.get_telegram_topic_binding_by_session(store, session_id="s1") is None
    assert not tt.is_telegram_session_linked_to_topic(store, session_id="s1")
    assert not tt.is_telegram_topic_mode_enabled(store, chat_id=CHAT, user_id=CHAT)
    assert tt.delete_telegram_topic_binding(store, chat_id=CHAT, thread_id="1") == 0
    tt.disable_telegram_topic_mode(store, chat_id=CHAT)
    assert tables(store) == set()


# --- topic mode per chat --------------------------------------------------------------------------


def test_enable_turns_topic_mode_on_for_the_chat_and_user(store: Store) -> None:
    tt.enable_telegram_topic_mode(store, chat_id=CHAT, user_id=CHAT, has_topics_enabled=True)
    assert tt.is_telegram_topic_mode_enabled(store, chat_id=CHAT, user_id=CHAT)
    row = store.conn.execute("SELECT has_topics_enabled FROM telegram_dm_topic_mode").fetchone()
    assert row[0] == 1


def test_topic_mode_is_off_for_another_user_of_the_chat(store: Store) -> None:
    tt.enable_telegram_topic_mode(store, chat_id=CHAT, user_id=CHAT)
    assert not tt.is_telegram_topic_mode_enabled(store, chat_id=CHAT, user_id="someone-else")


def test_disable_turns_topic_mode_off_and_clears_the_chats_bindings(store: Store) -> None:
    tt.enable_telegram_topic_mode(store, chat_id=CHAT, user_id=CHAT)
    bind(store)
    tt.disable_telegram_topic_mode(store, chat_id=CHAT)
    assert not tt.is_telegram_topic_mode_enabled(store, chat_id=CHAT, user_id=CHAT)
    assert tt.list_telegram_topic_bindings_for_chat(store, chat_id=CHAT) == []


def test_disable_can_keep_the_bindings(store: Store) -> None:
    tt.enable_telegram_topic_mode(store, chat_id=CHAT, user_id=CHAT)
    bind(store)
    tt.disable_telegram_topic_mode(store, chat_id=CHAT, clear_bindings=False)
    assert len(tt.list_telegram_topic_bindings_for_chat(store, chat_id=CHAT)) == 1


# --- bindings -------------------------------------------------------------------------------------


def test_bind_creates_the_tables_and_the_binding_reads_back(store: Store) -> None:
    bind(store)
    binding = tt.get_telegram_topic_binding(store, chat_id=CHAT, thread_id="17585")
    assert binding is not None
    assert {k: binding[k] for k in ("chat_id", "thread_id", "user_id", "session_id")} == {
        "chat_id": CHAT,
        "thread_id": "17585",
        "user_id": CHAT,
        "session_id": "s1",
    }
    assert binding["managed_mode"] == "auto"
    assert meta.get(store.conn, tt.SCHEMA_KEY) == "2"


def test_binding_the_same_topic_again_updates_it(store: Store) -> None:
    bind(store)
    bind(store, managed_mode="manual")
    binding = tt.get_telegram_topic_binding(store, chat_id=CHAT, thread_id="17585")
    assert binding is not None and binding["managed_mode"] == "manual"


def test_binding_a_session_to_a_second_topic_raises_already_linked(store: Store) -> None:
    bind(store, thread="17585")
    with pytest.raises(ValueError, match="already linked"):
        bind(store, thread="99999")
    assert tt.get_telegram_topic_binding(store, chat_id=CHAT, thread_id="99999") is None


def test_binding_an_unknown_session_raises_session_not_found(store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        bind(store, session="nope")


def test_a_bound_session_is_found_by_its_id(store: Store) -> None:
    bind(store)
    binding = tt.get_telegram_topic_binding_by_session(store, session_id="s1")
    assert binding is not None and binding["thread_id"] == "17585"
    assert tt.is_telegram_session_linked_to_topic(store, session_id="s1")


def test_a_chats_bindings_list_most_recently_updated_first(db: SessionDB, store: Store) -> None:
    db.create_session("s2", "telegram", user_id=CHAT)
    bind(store, thread="1", session="s1")
    bind(store, thread="2", session="s2")
    run_sql(store, "UPDATE telegram_dm_topic_bindings SET updated_at = 5 WHERE thread_id = '2'")
    got = tt.list_telegram_topic_bindings_for_chat(store, chat_id=CHAT)
    assert [b["thread_id"] for b in got] == ["1", "2"]


def test_deleting_a_session_drops_its_binding(db: SessionDB, store: Store) -> None:
    bind(store)
    db.delete_session("s1")
    assert tt.list_telegram_topic_bindings_for_chat(store, chat_id=CHAT) == []


def test_delete_binding_returns_how_many_rows_went(db: SessionDB, store: Store) -> None:
    bind(store)
    assert tt.delete_telegram_topic_binding(store, chat_id=CHAT, thread_id="17585") == 1
    assert tt.delete_telegram_topic_binding(store, chat_id=CHAT, thread_id="17585") == 0


def test_deleting_a_chats_last_binding_turns_its_topic_mode_off(
    db: SessionDB, store: Store
) -> None:
    db.create_session("s2", "telegram", user_id=CHAT)
    tt.enable_telegram_topic_mode(store, chat_id=CHAT, user_id=CHAT)
    bind(store, thread="1", session="s1")
    bind(store, thread="2", session="s2")
    tt.delete_telegram_topic_binding(store, chat_id=CHAT, thread_id="1")
    assert tt.is_telegram_topic_mode_enabled(store, chat_id=CHAT, user_id=CHAT)
    tt.delete_telegram_topic_binding(store, chat_id=CHAT, thread_id="2")
    assert not tt.is_telegram_topic_mode_enabled(store, chat_id=CHAT, user_id=CHAT)


# --- unlinked sessions ----------------------------------------------------------------------------


def test_unlinked_sessions_leave_out_bound_ones_and_other_users(
    db: SessionDB, store: Store
) -> None:
    db.set_session_title("s1", "Old research")
    db.append_message("s1", "user", "first prompt")
    db.create_session("linked", "telegram", user_id=CHAT)
    bind(store, session="linked")
    db.create_session("other", "telegram", user_id="someone-else")
    db.create_session("cli", "cli", user_id=CHAT)
    rows = tt.list_unlinked_telegram_sessions_for_user(store, chat_id=CHAT, user_id=CHAT)
    assert [(r["id"], r["title"], r["preview"]) for r in rows] == [
        ("s1", "Old research", "first prompt")
    ]


def test_unlinked_sessions_list_most_recently_active_first_up_to_the_limit(
    db: SessionDB, store: Store
) -> None:
    for n in range(3):
        db.create_session(f"t{n}", "telegram", user_id="u", started_at=100.0 + n)
    db.append_message("t0", "user", "late", timestamp=900.0)
    rows = tt.list_unlinked_telegram_sessions_for_user(store, chat_id="u", user_id="u", limit=2)
    assert [(r["id"], r["last_active"]) for r in rows] == [("t0", 900.0), ("t2", 102.0)]


# --- profiles -------------------------------------------------------------------------------------


def test_scoped_tables_keep_each_profiles_bindings_apart(db: SessionDB, store: Store) -> None:
    run_sql(store, *SCHEMA_3)
    db.create_session("s2", "telegram", user_id=CHAT)
    bind(store, thread="1", session="s1", profile_name="work")
    bind(store, thread="1", session="s2")
    work = tt.get_telegram_topic_binding(store, chat_id=CHAT, thread_id="1", profile_name="work")
    default = tt.get_telegram_topic_binding(store, chat_id=CHAT, thread_id="1")
    assert (work and work["session_id"], default and default["session_id"]) == ("s1", "s2")


def test_scoped_tables_keep_each_profiles_topic_mode_apart(store: Store) -> None:
    run_sql(store, *SCHEMA_3)
    tt.enable_telegram_topic_mode(store, chat_id=CHAT, user_id=CHAT, profile_name="work")
    assert tt.is_telegram_topic_mode_enabled(store, chat_id=CHAT, user_id=CHAT, profile_name="work")
    assert not tt.is_telegram_topic_mode_enabled(store, chat_id=CHAT, user_id=CHAT)


def test_one_namespace_tables_read_as_empty_for_another_profile(store: Store) -> None:
    bind(store)
    found = tt.get_telegram_topic_binding(store, chat_id=CHAT, thread_id="17585", profile_name="w")
    assert found is None


def test_one_namespace_tables_refuse_another_profiles_binding(store: Store) -> None:
    tt.apply_telegram_topic_migration(store)
    with pytest.raises(tt.TopicProfileUnsupportedError):
        bind(store, profile_name="work")
    assert tt.list_telegram_topic_bindings_for_chat(store, chat_id=CHAT) == []


def test_an_empty_profile_name_means_the_default_profile(store: Store) -> None:
    bind(store, profile_name="")
    assert tt.get_telegram_topic_binding(store, chat_id=CHAT, thread_id="17585") is not None
