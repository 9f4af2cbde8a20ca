"""Old stores opened by the agent's own SessionDB: the version-gated data steps of the upgrade,
and the CLI's refusal to edit a store it would first have to upgrade."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from hermes_state.agent.db import SessionDB
from hermes_state.shapes import model_config
from hermes_state.store import layout, schema
from hermes_state.store.connection import open_store
from hermes_state.store.errors import UnknownSchemaError

T0 = 1_700_000_000.0
TOOL_RESULT = {"role": "tool", "content": "ls output", "tool_call_id": "c1", "tool_name": "ls"}


def set_back(db: SessionDB, version: int) -> None:
    """Record an older schema version in the store, then close it."""
    db._conn.execute("UPDATE schema_version SET version = ?", (version,))
    db.close()


def raw(path: Path) -> sqlite3.Connection:
    """A plain connection to a store no SessionDB of this test has open."""
    return sqlite3.connect(path, isolation_level=None)


def stored_version(path: Path) -> int:
    """The schema version a closed store records."""
    conn = raw(path)
    try:
        return int(conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0])
    finally:
        conn.close()


def markers(db: SessionDB, session_id: str) -> dict[str, object]:
    """The session's model_config as a dict."""
    return model_config.parse(db.get_session(session_id)["model_config"])


def usage(db: SessionDB, session_id: str) -> list[tuple[object, ...]]:
    """The per-model usage rows of a session: model, provider, tokens in/out, calls."""
    rows = db._conn.execute(
        "SELECT model, billing_provider, input_tokens, output_tokens, api_call_count "
        "FROM session_model_usage WHERE session_id = ?",
        (session_id,),
    ).fetchall()
    return [tuple(r) for r in rows]


# --- the upgrade itself --------------------------------------------------------------------------


@pytest.mark.parametrize("version", [15, 17, 19, 21])
def test_old_store_is_upgraded_to_the_current_schema_when_the_agent_opens_it(
    db_path: Path, version: int
) -> None:
    with SessionDB(db_path) as db:
        db.create_session("s", "cli")
        db.append_messages("s", [{"role": "user", "content": "hello"}])
        set_back(db, version)
    with SessionDB(db_path) as db:
        assert layout.inspect(db._conn).kind == "current"
        assert [m["content"] for m in db.get_messages("s")] == ["hello"]
    assert stored_version(db_path) == schema.SCHEMA_VERSION


# --- schema 16: delegated runs tagged ------------------------------------------------------------


def test_upgrade_from_15_tags_an_untagged_child_as_a_delegated_run(db_path: Path) -> None:
    with SessionDB(db_path) as db:
        db.create_session("parent", "cli", started_at=T0)
        db.create_session("run", "cli", parent_session_id="parent", started_at=T0 + 1)
        set_back(db, 15)
    with SessionDB(db_path) as db:
        assert markers(db, "run").get("_delegate_from") == "parent"
        assert "_delegate_from" not in markers(db, "parent")


def test_upgrade_from_15_leaves_branches_and_continuations_untagged(db_path: Path) -> None:
    with SessionDB(db_path) as db:
        db.create_session("parent", "cli", started_at=T0)
        db.create_session(
            "branch",
            "cli",
            parent_session_id="parent",
            model_config={"_branched_from": "parent"},
            started_at=T0 + 1,
        )
        db.rotate_session("parent", "tip", started_at=T0 + 2)
        set_back(db, 15)
    with SessionDB(db_path) as db:
        assert "_delegate_from" not in markers(db, "branch")
        assert "_delegate_from" not in markers(db, "tip")


def test_upgrade_from_15_tags_a_tool_only_root_as_an_orphaned_run(db_path: Path) -> None:
    with SessionDB(db_path) as db:
        db.create_session("orphan", "cli", started_at=T0)
        db.append_messages("orphan", [TOOL_RESULT])
        set_back(db, 15)
    with SessionDB(db_path) as db:
        assert markers(db, "orphan").get("_delegate_from") == "__orphaned__"
        assert db.list_sessions_rich() == []


def test_upgrade_from_15_leaves_user_conversations_untagged(db_path: Path) -> None:
    with SessionDB(db_path) as db:
        db.create_session("titled", "cli", started_at=T0)
        db.set_session_title("titled", "Kept")
        db.append_messages("titled", [TOOL_RESULT])
        db.create_session("chat", "cli", started_at=T0 + 1)
        db.append_messages("chat", [{"role": "user", "content": "hi"}])
        db.create_session("has-kid", "cli", started_at=T0 + 2)
        db.append_messages("has-kid", [TOOL_RESULT])
        db.create_session(
            "kid",
            "cli",
            parent_session_id="has-kid",
            model_config={"_branched_from": "has-kid"},
            started_at=T0 + 3,
        )
        set_back(db, 15)
    with SessionDB(db_path) as db:
        for sid in ("titled", "chat", "has-kid"):
            assert "_delegate_from" not in markers(db, sid), sid


def test_upgrade_from_17_does_not_tag_delegated_runs_again(db_path: Path) -> None:
    with SessionDB(db_path) as db:
        db.create_session("parent", "cli", started_at=T0)
        db.create_session("child", "cli", parent_session_id="parent", started_at=T0 + 1)
        db.create_session("orphan", "cli", started_at=T0 + 2)
        db.append_messages("orphan", [TOOL_RESULT])
        set_back(db, 17)
    with SessionDB(db_path) as db:
        assert "_delegate_from" not in markers(db, "child")
        assert "_delegate_from" not in markers(db, "orphan")


# --- schema 18: gateway columns from sessions.json -----------------------------------------------


def write_sessions_json(home: Path, data: object) -> None:
    """Write the gateway's old session index into a home."""
    (home / "sessions").mkdir(exist_ok=True)
    (home / "sessions" / "sessions.json").write_text(json.dumps(data), encoding="utf-8")


GATEWAY_INDEX = {
    "_README": "notes, not an entry",
    "agent:main:telegram:dm:42": {
        "session_id": "g1",
        "chat_type": "dm",
        "display_name": "Alice",
        "origin": {"platform": "telegram", "chat_id": 42, "thread_id": "7"},
        "memory_flushed": True,
    },
}


def test_upgrade_from_17_fills_gateway_columns_from_sessions_json(
    db_path: Path, hermes_home: Path
) -> None:
    with SessionDB(db_path) as db:
        db.create_session("g1", "telegram", started_at=T0)
        set_back(db, 17)
    write_sessions_json(hermes_home, GATEWAY_INDEX)
    with SessionDB(db_path) as db:
        row = db.get_session("g1")
        assert (row["session_key"], row["chat_id"], row["thread_id"]) == (
            "agent:main:telegram:dm:42",
            "42",
            "7",
        )
        assert (row["chat_type"], row["display_name"]) == ("dm", "Alice")
        assert json.loads(row["origin_json"])["platform"] == "telegram"
        assert row["expiry_finalized"] == 1


def test_gateway_backfill_never_overwrites_a_stored_value(db_path: Path, hermes_home: Path) -> None:
    with SessionDB(db_path) as db:
        db.create_session("g1", "telegram", display_name="Bob", chat_id="99", started_at=T0)
        set_back(db, 17)
    write_sessions_json(hermes_home, GATEWAY_INDEX)
    with SessionDB(db_path) as db:
        row = db.get_session("g1")
        assert (row["display_name"], row["chat_id"], row["thread_id"]) == ("Bob", "99", "7")


def test_gateway_backfill_does_not_run_on_a_store_at_schema_18_or_later(
    db_path: Path, hermes_home: Path
) -> None:
    with SessionDB(db_path) as db:
        db.create_session("g1", "telegram", started_at=T0)
        set_back(db, 19)
    write_sessions_json(hermes_home, GATEWAY_INDEX)
    with SessionDB(db_path) as db:
        assert db.get_session("g1")["chat_id"] is None


def test_garbled_sessions_json_does_not_stop_the_upgrade(db_path: Path, hermes_home: Path) -> None:
    with SessionDB(db_path) as db:
        db.create_session("g1", "telegram", started_at=T0)
        set_back(db, 17)
    (hermes_home / "sessions").mkdir()
    (hermes_home / "sessions" / "sessions.json").write_text("{not json", encoding="utf-8")
    with SessionDB(db_path) as db:
        assert db.get_session("g1")["chat_id"] is None
    assert stored_version(db_path) == schema.SCHEMA_VERSION


# --- schema 20: per-model usage seeded from the totals -------------------------------------------


def _totals_without_usage_rows(db: SessionDB) -> None:
    """A session with usage totals but no per-model row (as before schema 20), and one unused."""
    db.create_session("s", "cli", model="m1", billing_provider="p1", started_at=T0)
    db.update_token_counts(
        "s", input_tokens=120, output_tokens=30, model="m1", billing_provider="p1", api_call_count=3
    )
    db._conn.execute("DELETE FROM session_model_usage")
    db.create_session("unused", "cli", started_at=T0)


def test_upgrade_from_19_seeds_per_model_usage_from_session_totals(db_path: Path) -> None:
    with SessionDB(db_path) as db:
        _totals_without_usage_rows(db)
        set_back(db, 19)
    with SessionDB(db_path) as db:
        assert usage(db, "s") == [("m1", "p1", 120, 30, 3)]
        assert usage(db, "unused") == []


def test_upgrade_from_19_keeps_existing_usage_rows_as_they_are(db_path: Path) -> None:
    with SessionDB(db_path) as db:
        db.create_session("s", "cli", model="m1", started_at=T0)
        db.update_token_counts("s", input_tokens=10, model="m1", api_call_count=1)
        db.update_token_counts("s", input_tokens=990, api_call_count=5, absolute=True)
        before = usage(db, "s")
        set_back(db, 19)
    with SessionDB(db_path) as db:
        assert usage(db, "s") == before


def test_upgrade_from_21_does_not_seed_usage_rows(db_path: Path) -> None:
    with SessionDB(db_path) as db:
        _totals_without_usage_rows(db)
        set_back(db, 21)
    with SessionDB(db_path) as db:
        assert usage(db, "s") == []


# --- messages an old writer stored without a state -----------------------------------------------


def allow_null_active(path: Path) -> None:
    """Give the closed store's messages table an old writer's nullable ``active`` column.

    Dropping a NOT NULL constraint does not change the file format, so the table definition is
    edited in place (the procedure SQLite documents for removing constraints).
    """
    conn = raw(path)
    try:
        version = conn.execute("PRAGMA schema_version").fetchone()[0]
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute(
            "UPDATE sqlite_master SET sql = replace(sql, 'active INTEGER NOT NULL DEFAULT 1', "
            "'active INTEGER DEFAULT 1') WHERE type = 'table' AND name = 'messages'"
        )
        conn.execute(f"PRAGMA schema_version = {int(version) + 1}")
        conn.execute("PRAGMA writable_schema = OFF")
    finally:
        conn.close()
    conn = raw(path)
    try:
        conn.execute("UPDATE messages SET active = NULL")
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


def test_upgrade_makes_messages_stored_without_a_state_live(db_path: Path) -> None:
    with SessionDB(db_path) as db:
        db.create_session("s", "cli")
        db.append_messages(
            "s", [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
        )
        set_back(db, 19)
    allow_null_active(db_path)
    with SessionDB(db_path) as db:
        assert [m["content"] for m in db.get_messages("s")] == ["q", "a"]
        nulls = db._conn.execute("SELECT COUNT(*) FROM messages WHERE active IS NULL")
        assert nulls.fetchone()[0] == 0


# --- the CLI refuses to edit an old store --------------------------------------------------------


def _old_store(db_path: Path) -> None:
    """A closed store with one session, recorded at schema 15."""
    with SessionDB(db_path) as db:
        db.create_session("s", "cli")
        set_back(db, 15)


def test_old_store_is_classified_as_old(db_path: Path) -> None:
    _old_store(db_path)
    with open_store(db_path, read_only=True) as store:
        assert layout.inspect(store.conn).kind == "old"


def test_old_store_refuses_a_cli_edit_naming_its_number(db_path: Path) -> None:
    # 15: a number no release writes (issue 33): the edit names it and the nearest family.
    _old_store(db_path)
    with open_store(db_path, role="edit") as store:
        with pytest.raises(UnknownSchemaError) as caught:
            store.write(lambda conn: conn.execute("UPDATE sessions SET title = 'x'"))
        assert "schema 15" in caught.value.message and "nearest: " in caught.value.message
        title = store.conn.execute("SELECT title FROM sessions WHERE id = 's'").fetchone()[0]
        assert title is None


def test_opening_an_old_store_for_a_cli_edit_does_not_upgrade_it(db_path: Path) -> None:
    _old_store(db_path)
    with open_store(db_path, role="edit") as store:
        assert layout.inspect(store.conn).kind == "old"
        assert [r[0] for r in store.conn.execute("SELECT id FROM sessions")] == ["s"]
    assert stored_version(db_path) == 15
