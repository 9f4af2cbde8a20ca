"""Schema v31: tables, indexes, ledger FKs, reconcile, migrations, newer and upstream stores."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from support import upstream30
from support.upstream30 import build_upstream30, dump_table, table_names

from hermes_state.agent.db import SessionDB
from hermes_state.store import migrations, schema, triggers
from hermes_state.store.connection import open_store
from hermes_state.store.errors import SchemaTooNewError

# SPEC §4, without the FTS tables (owned by the search work) and the lazy delivery_obligations.
SPEC_TABLES = {
    "sessions",
    "messages",
    "session_model_usage",
    "state_meta",
    "gateway_routing",
    "compression_locks",
    "async_delegations",
    "runtime_epoch",
    "session_admissions",
    "worker_executions",
    "worker_receipts",
    "schema_version",
}
SPEC_SESSION_COLUMNS = [
    "id",
    "source",
    "user_id",
    "model",
    "model_config",
    "system_prompt",
    "parent_session_id",
    "started_at",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "billing_provider",
    "billing_base_url",
    "billing_mode",
    "estimated_cost_usd",
    "actual_cost_usd",
    "cost_status",
    "cost_source",
    "pricing_version",
    "title",
    "api_call_count",
    "session_key",
    "chat_id",
    "chat_type",
    "thread_id",
    "display_name",
    "origin_json",
    "expiry_finalized",
    "cwd",
    "git_branch",
    "git_repo_root",
    "handoff_state",
    "handoff_platform",
    "handoff_error",
    "compression_failure_cooldown_until",
    "compression_failure_error",
    "profile_name",
    "transport_profile",
    "rewind_count",
    "archived",
    "auto_archived",
    "pinned",
    "last_activity_at",
    "title_source",
]
SPEC_MESSAGE_COLUMNS = [
    "id",
    "session_id",
    "role",
    "content",
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "timestamp",
    "token_count",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
    "effect_disposition",
    "platform_message_id",
    "observed",
    "active",
    "compacted",
    "api_content",
    "display_kind",
    "display_metadata",
    "message_uid",
    "absorbed_message_uids",
    "tool_call_uids",
    "tool_call_uid",
]
SPEC_INDEXES = {
    "idx_sessions_source": ("sessions", ["source"]),
    "idx_sessions_parent": ("sessions", ["parent_session_id"]),
    "idx_sessions_started": ("sessions", ["started_at"]),
    "idx_sessions_title_unique": ("sessions", ["title"]),
    "idx_messages_session": ("messages", ["session_id", "timestamp"]),
    "idx_messages_session_id": ("messages", ["session_id", "id"]),
}
HEX32 = re.compile(r"[0-9a-f]{32}")


def raw(path: Path, *, read_only: bool = True) -> sqlite3.Connection:
    """A plain SQLite connection to a store no Store of this process has open."""
    if read_only:
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    return sqlite3.connect(path, isolation_level=None)


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """Live column names of table."""
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]


def set_version(path: Path, version: int) -> None:
    """Overwrite the recorded schema version of a closed store."""
    conn = raw(path, read_only=False)
    conn.execute("UPDATE schema_version SET version = ?", (version,))
    conn.close()


# --- a fresh store -------------------------------------------------------------------------------


def test_fresh_store_has_every_spec_table_and_upstreams_schema_31_tables(db_path: Path) -> None:
    with open_store(db_path) as store:
        tables = table_names(store.conn)
    assert tables >= SPEC_TABLES
    assert tables >= set(schema.UPSTREAM_TABLE_DDL)
    assert "delivery_obligations" not in tables  # created on first use


def test_fresh_store_sessions_columns_are_upstreams_schema_31_columns(db_path: Path) -> None:
    with open_store(db_path) as store:
        live = columns(store.conn, "sessions")
    assert live == list(schema.column_names("sessions"))
    assert set(SPEC_SESSION_COLUMNS) <= set(live)
    assert {"created_source", "system_prompt_hash", "hidden", "tool_names"} <= set(live)


def test_fresh_store_messages_columns_are_upstreams_schema_31_columns(db_path: Path) -> None:
    with open_store(db_path) as store:
        live = columns(store.conn, "messages")
    assert live == list(schema.column_names("messages"))
    assert set(SPEC_MESSAGE_COLUMNS) <= set(live)
    assert {"display_identity", "display_order", "_compressed_summary"} <= set(live)


def test_fresh_store_has_upstreams_message_uid_trigger_and_index(db_path: Path) -> None:
    with open_store(db_path) as store:
        names = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master")}
        store.write(
            lambda c: c.execute(
                "INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 0)"
            )
        )
        # A writer that knows nothing of uids (an older agent) still gets one.
        store.write(
            lambda c: c.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('s', 'user', 'x', 0)"
            )
        )
        uid = store.conn.execute("SELECT message_uid FROM messages").fetchone()[0]
    assert {triggers.UID_TRIGGER, "idx_messages_session_uid"} <= names
    assert HEX32.fullmatch(uid)


def test_fresh_store_records_our_additions_under_our_own_key(db_path: Path) -> None:
    with open_store(db_path) as store:
        value = store.conn.execute(
            "SELECT value FROM state_meta WHERE key = ?", (schema.ADDITIONS_KEY,)
        ).fetchone()[0]
        ours = [
            r[0]
            for r in store.conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'hermes%'")
        ]
    assert int(value) == schema.ADDITIONS_VERSION
    assert ours and not any(n.startswith("messages_fts") for n in ours)


def test_fresh_store_records_schema_version_31_in_a_single_row(db_path: Path) -> None:
    open_store(db_path).close()
    open_store(db_path).close()  # reopening must not add a second row
    conn = raw(db_path)
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(31,)]
    conn.close()


@pytest.mark.parametrize("name", sorted(SPEC_INDEXES))
def test_fresh_store_has_the_spec_index(db_path: Path, name: str) -> None:
    table, cols = SPEC_INDEXES[name]
    with open_store(db_path) as store:
        owner = store.conn.execute(
            "SELECT tbl_name FROM sqlite_master WHERE type = 'index' AND name = ?", (name,)
        ).fetchone()
        assert owner is not None and owner[0] == table
        info = store.conn.execute(f'PRAGMA index_info("{name}")').fetchall()
        assert [r[2] for r in info] == cols


def test_title_index_is_unique_and_only_over_non_null_titles(db_path: Path) -> None:
    with open_store(db_path) as store:
        flags = {r[1]: (r[2], r[4]) for r in store.conn.execute("PRAGMA index_list(sessions)")}
        assert flags["idx_sessions_title_unique"] == (1, 1)  # unique, partial
        insert = "INSERT INTO sessions (id, source, started_at, title) VALUES (?, 'cli', 0, ?)"
        store.write(lambda c: c.executemany(insert, [("a", None), ("b", None), ("c", "T")]))
        with pytest.raises(sqlite3.IntegrityError):
            store.write(lambda c: c.execute(insert, ("d", "T")))


def test_ensure_delivery_obligations_creates_the_lazy_table_once(db_path: Path) -> None:
    with open_store(db_path) as store:
        assert not store.has_table("delivery_obligations")
        store.write(schema.ensure_delivery_obligations)
        store.write(schema.ensure_delivery_obligations)
        assert columns(store.conn, "delivery_obligations") == list(
            schema.column_names("delivery_obligations")
        )
        names = {r[1] for r in store.conn.execute("PRAGMA index_list(delivery_obligations)")}
        assert "hermes_idx_delivery_claim" in names


@pytest.mark.parametrize(
    ("table", "parent"),
    [
        ("session_admissions", "sessions"),
        ("worker_executions", "sessions"),
        ("worker_receipts", "worker_executions"),
    ],
)
def test_ledger_foreign_keys_are_on_delete_restrict(db_path: Path, table: str, parent: str) -> None:
    with open_store(db_path) as store:
        fks = store.conn.execute(f"PRAGMA foreign_key_list({table})").fetchall()
    assert [(r["table"], r["on_delete"]) for r in fks] == [(parent, "RESTRICT")]


def test_raw_delete_of_a_session_with_an_admission_fails(db_path: Path) -> None:
    with SessionDB(db_path) as db:
        db.create_session("s1", "cli")
        db.store.write(
            lambda c: c.execute(
                "INSERT INTO session_admissions (admission_id, session_id, request_id,"
                " payload_json, payload_digest, created_at, updated_at)"
                " VALUES ('a1', 's1', 'r1', '{}', 'd', 0, 0)"
            )
        )
        with pytest.raises(sqlite3.IntegrityError):
            db.store.write(lambda c: c.execute("DELETE FROM sessions WHERE id = 's1'"))
        assert db.get_session("s1") is not None


# --- reconcile_columns ---------------------------------------------------------------------------


@pytest.fixture
def old_store(db_path: Path) -> Path:
    """A closed store whose sessions table lost the 'pinned' column (as an older layout)."""
    with SessionDB(db_path) as db:
        db.create_session("s1", "cli")
    conn = raw(db_path, read_only=False)
    conn.execute("ALTER TABLE sessions DROP COLUMN pinned")
    conn.close()
    return db_path


def test_reconcile_columns_adds_a_missing_column_with_its_default(old_store: Path) -> None:
    conn = raw(old_store, read_only=False)
    try:
        assert schema.reconcile_columns(conn) == ["sessions.pinned"]
        info = {r[1]: r for r in conn.execute("PRAGMA table_info(sessions)")}
        assert (info["pinned"][3], info["pinned"][4]) == (1, "0")  # NOT NULL DEFAULT 0
        assert conn.execute("SELECT pinned FROM sessions").fetchall() == [(0,)]
    finally:
        conn.close()


def test_reconcile_columns_second_run_adds_nothing(old_store: Path) -> None:
    conn = raw(old_store, read_only=False)
    try:
        schema.reconcile_columns(conn)
        assert schema.reconcile_columns(conn) == []
    finally:
        conn.close()


def test_reconcile_columns_ignores_a_column_a_racing_sibling_added_first(old_store: Path) -> None:
    ours, sibling = raw(old_store, read_only=False), raw(old_store, read_only=False)
    raced: list[str] = []

    def race(sql: str) -> None:
        # Runs as our ALTER starts executing: the sibling adds the same column and commits first.
        if sql.startswith("ALTER TABLE") and not raced:
            raced.append(sql)
            sibling.execute('ALTER TABLE sessions ADD COLUMN "pinned" INTEGER NOT NULL DEFAULT 0')

    ours.set_trace_callback(race)
    try:
        added = schema.reconcile_columns(ours)
    finally:
        ours.set_trace_callback(None)
    assert raced and '"pinned"' in raced[0]
    assert added == []
    assert columns(ours, "sessions").count("pinned") == 1
    ours.close()
    sibling.close()


# --- migration steps ---------------------------------------------------------------------------


def test_migration_steps_are_named_for_what_they_do() -> None:
    names = [step.__name__ for step in migrations.STEPS]
    assert len(set(names)) == len(names)
    assert names[-1] == "record_version"  # the version is raised only after every step


@pytest.mark.parametrize("step", migrations.STEPS, ids=lambda s: s.__name__)
def test_each_migration_step_is_idempotent(tmp_path: Path, step: migrations.Step) -> None:
    path = tmp_path / "up30.db"
    build_upstream30(path)
    conn = raw(path, read_only=False)
    try:
        for earlier in migrations.STEPS[: migrations.STEPS.index(step)]:
            earlier(conn)
        step(conn)
        tables = sorted(
            t for t in table_names(conn) if not t.startswith(("messages_fts", "hermes_cjk"))
        )
        once = {t: dump_table(conn, t) for t in tables}
        schema_once = conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
        assert step(conn) is None  # nothing left to do
        assert {t: dump_table(conn, t) for t in tables} == once
        assert conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall() == schema_once
    finally:
        conn.close()


def test_ledger_step_fills_session_id_from_a_target_session_id_layout(tmp_path: Path) -> None:
    path = tmp_path / "legacy-ledger.db"
    conn = raw(path, read_only=False)
    conn.execute(
        "CREATE TABLE session_admissions (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " admission_id TEXT, target_session_id TEXT, request_id TEXT)"
    )
    conn.execute("INSERT INTO session_admissions VALUES (1, 'a1', 's1', 'r1')")
    schema.reconcile_columns(conn)
    migrations.fill_ledger_session_ids(conn)
    migrations.fill_ledger_session_ids(conn)
    assert conn.execute("SELECT session_id FROM session_admissions").fetchall() == [("s1",)]
    conn.close()


# --- a store newer than this code ----------------------------------------------------------------


@pytest.fixture
def newer_store(db_path: Path) -> Path:
    """A closed store with one session whose recorded schema version is 99."""
    with SessionDB(db_path) as db:
        db.create_session("s1", "cli", model="m")
        db.append_message("s1", "user", "from the future")
    set_version(db_path, 99)
    return db_path


def test_newer_store_opens_writable_request_as_too_new_and_reads_work(newer_store: Path) -> None:
    with SessionDB(newer_store) as db:
        assert db.store.too_new and db.read_only
        assert db.get_session("s1")["model"] == "m"
        assert [m["content"] for m in db.get_messages("s1")] == ["from the future"]
        assert [s["id"] for s in db.list_sessions()] == ["s1"]


@pytest.mark.parametrize(
    "write",
    [
        lambda db: db.create_session("s2", "cli"),
        lambda db: db.append_message("s1", "user", "x"),
        lambda db: db.set_session_title("s1", "T"),
        lambda db: db.end_session("s1", "done"),
        lambda db: db.delete_session("s1"),
        lambda db: db.store.write(lambda conn: None),
    ],
    ids=["create", "append", "title", "end", "delete", "raw-write"],
)
def test_newer_store_refuses_every_write(
    newer_store: Path, sha256: Callable[[Path], str], write: Callable[[SessionDB], object]
) -> None:
    digest = sha256(newer_store)
    with SessionDB(newer_store) as db:
        with pytest.raises(SchemaTooNewError) as caught:
            write(db)
        assert caught.value.hint
    assert sha256(newer_store) == digest


def test_newer_store_keeps_its_version(newer_store: Path) -> None:
    SessionDB(newer_store).close()
    conn = raw(newer_store)
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(99,)]
    conn.close()


def test_newer_delete_mode_store_is_byte_identical_after_a_writable_open(
    newer_store: Path, sha256: Callable[[Path], str]
) -> None:
    conn = raw(newer_store, read_only=False)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    digest = sha256(newer_store)
    SessionDB(newer_store).close()
    assert sha256(newer_store) == digest


# --- the upstream schema-30 layout ---------------------------------------------------------------


@pytest.fixture
def up30(hermes_home: Path) -> upstream30.Upstream30:
    """An upstream schema-30 store at the test's state.db (newest v30 columns)."""
    return build_upstream30(hermes_home / "state.db")


@pytest.fixture
def up30_old(hermes_home: Path) -> upstream30.Upstream30:
    """An older upstream schema-30 store without the message uid columns and auto_archived."""
    return build_upstream30(hermes_home / "state.db", newest=False)


def snapshot(fixture: upstream30.Upstream30) -> dict[str, list]:
    """Every row of every fixture table, reading only the columns the fixture created."""
    conn = raw(fixture.path)
    try:
        out = {}
        for table in fixture.tables:
            cols = {"sessions": fixture.session_columns, "messages": fixture.message_columns}
            out[table] = dump_table(conn, table, cols.get(table, tuple(columns(conn, table))))
        return out
    finally:
        conn.close()


def assert_rows_kept(before: dict[str, list], after: dict[str, list]) -> None:
    """Every table holds the same rows as before; state_meta may also gain new keys."""
    assert set(before.pop("state_meta")) <= set(after.pop("state_meta"))
    assert after == before


def test_read_only_open_of_upstream30_lists_and_reads_its_sessions(
    up30: upstream30.Upstream30,
) -> None:
    with SessionDB(up30.path, read_only=True) as db:
        listed = db.list_sessions()
        assert [s["id"] for s in listed] == [upstream30.CHILD_ID, upstream30.ROOT_ID]
        assert listed[1]["preview"] == "Docker build fails with exit code 137 please help"
        msgs = db.get_messages(upstream30.ROOT_ID)
        assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"]
        assert msgs[1]["tool_calls"][0]["id"] == "call_1"
        assert msgs[3]["content"] == up30.structured_content
        assert len(db.get_messages(upstream30.ROOT_ID, include_inactive=True)) == 6


def test_read_only_get_session_of_upstream30_resolves_the_prompt_by_hash(
    up30: upstream30.Upstream30,
) -> None:
    with SessionDB(up30.path, read_only=True) as db:
        assert db.get_session(upstream30.ROOT_ID)["system_prompt"] == upstream30.PROMPT
        assert db.get_session(upstream30.TELEGRAM_ID)["system_prompt"] == "Legacy inline prompt"


def test_read_only_open_of_upstream30_keeps_its_bytes_and_version(
    up30: upstream30.Upstream30, sha256: Callable[[Path], str]
) -> None:
    digest = sha256(up30.path)
    with SessionDB(up30.path, read_only=True) as db:
        db.list_sessions()
        db.get_messages(upstream30.ROOT_ID)
        db.get_session(upstream30.ROOT_ID)
    assert sha256(up30.path) == digest
    conn = raw(up30.path)
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(30,)]
    conn.close()


def test_read_only_open_of_older_upstream30_reads_missing_columns_as_null(
    up30_old: upstream30.Upstream30,
) -> None:
    with SessionDB(up30_old.path, read_only=True) as db:
        msgs = db.get_messages(upstream30.ROOT_ID)
        assert [m["message_uid"] for m in msgs] == [None] * 4
        assert db.list_sessions(include_archived=True)[0]["id"] == upstream30.TELEGRAM_ID


def test_writable_open_migrates_upstream30_to_31(up30: upstream30.Upstream30) -> None:
    SessionDB(up30.path).close()
    conn = raw(up30.path)
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(31,)]
    conn.close()


def test_writable_open_of_upstream30_keeps_every_row_and_value(
    up30: upstream30.Upstream30,
) -> None:
    before = snapshot(up30)
    SessionDB(up30.path).close()
    after = snapshot(up30)
    uid = up30.message_columns.index("message_uid")
    version_rows = (before.pop("schema_version"), after.pop("schema_version"))
    assert version_rows == ([(30,)], [(31,)])
    # message_uid is filled where it was NULL; every other value of every row is unchanged.
    for old, new in zip(before.pop("messages"), after.pop("messages"), strict=True):
        assert old[:uid] + old[uid + 1 :] == new[:uid] + new[uid + 1 :]
        assert new[uid] == (old[uid] or new[uid])
    assert_rows_kept(before, after)


def test_writable_open_of_upstream30_keeps_its_extra_tables(up30: upstream30.Upstream30) -> None:
    SessionDB(up30.path).close()
    conn = raw(up30.path)
    try:
        assert set(upstream30.EXTRA_TABLES) <= table_names(conn)
        assert table_names(conn) >= SPEC_TABLES
        assert dump_table(conn, "system_prompts") == [(upstream30.PROMPT_HASH, upstream30.PROMPT)]
    finally:
        conn.close()


def test_writable_open_of_upstream30_fills_message_uids_that_were_missing(
    up30: upstream30.Upstream30,
) -> None:
    SessionDB(up30.path).close()
    conn = raw(up30.path)
    uids = [r[0] for r in conn.execute("SELECT message_uid FROM messages ORDER BY id")]
    conn.close()
    assert uids[0] == up30.uid_of_first_message
    assert all(HEX32.fullmatch(u) for u in uids)
    assert len(set(uids)) == len(uids)


def test_writable_open_of_older_upstream30_adds_the_missing_columns(
    up30_old: upstream30.Upstream30,
) -> None:
    before = snapshot(up30_old)
    SessionDB(up30_old.path).close()
    conn = raw(up30_old.path)
    try:
        for table in ("sessions", "messages"):
            live = columns(conn, table)
            assert set(schema.column_names(table)) <= set(live)
            assert set(upstream30.NEWEST_ONLY[table]) <= set(live)
        uids = [r[0] for r in conn.execute("SELECT message_uid FROM messages")]
        assert len(uids) == len(before["messages"]) and all(HEX32.fullmatch(u) for u in uids)
    finally:
        conn.close()
    after = snapshot(up30_old)
    assert (before.pop("schema_version"), after.pop("schema_version")) == ([(30,)], [(31,)])
    assert_rows_kept(before, after)


def test_migrated_upstream30_store_takes_new_sessions_and_messages(
    up30: upstream30.Upstream30,
) -> None:
    with SessionDB(up30.path) as db:
        db.create_session("new1", "cli", parent_session_id=upstream30.CHILD_ID)
        db.append_message("new1", "user", "after the upgrade")
        assert db.get_session("new1")["cwd"] == "/home/alice/proj"  # inherited from the parent
        assert [m["content"] for m in db.get_messages("new1")] == ["after the upgrade"]
        extra = db.store.conn.execute(
            "SELECT git_metadata_generation, hidden FROM sessions WHERE id = 'new1'"
        ).fetchone()
        assert tuple(extra) == (0, 0)  # upstream NOT NULL columns take their defaults


def test_migrated_upstream30_keeps_structured_content_readable(
    up30: upstream30.Upstream30,
) -> None:
    with SessionDB(up30.path) as db:
        msgs = db.get_messages(upstream30.ROOT_ID)
    assert msgs[3]["content"] == up30.structured_content
    assert json.loads(json.dumps(msgs[3]["content"])) == up30.structured_content
