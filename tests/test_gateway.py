"""The gateway's bookkeeping: peers on session rows, the routing index, recovery lookups, and the
schema-18 backfill from sessions.json."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_state.agent import gateway
from hermes_state.agent.db import SessionDB
from hermes_state.shapes import sessions_json
from hermes_state.shapes.text import scrub_surrogates
from hermes_state.store.connection import Store

KEY = "agent:main:telegram:dm:chat-1"
PEER: dict[str, Any] = {
    "source": "telegram",
    "user_id": "user-1",
    "session_key": KEY,
    "chat_id": "chat-1",
    "chat_type": "dm",
}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SessionDB]:
    """A writable SessionDB on a fresh store outside any profile tree."""
    with SessionDB(tmp_path / "state.db") as handle:
        yield handle


@pytest.fixture
def store(db: SessionDB) -> Store:
    """The store under the SessionDB."""
    return db.store


def gateway_session(
    db: SessionDB, sid: str, *, started_at: float, messages: int = 1, **peer: Any
) -> None:
    """Create a session of the PEER (overridable) with some messages, started at a given time."""
    values = {**PEER, **peer}
    source = values.pop("source")
    db.create_session(sid, source, started_at=started_at, **values)
    for n in range(messages):
        db.append_message(sid, "user", f"message {n}", timestamp=started_at + n + 1)


def find_peer(store: Store, **overrides: Any) -> str | None:
    """Run the peer recovery lookup for PEER (overridable); return the session id found."""
    found = gateway.find_latest_gateway_session_for_peer(store, **{**PEER, **overrides})
    return None if found is None else found["id"]


def column(store: Store, sid: str, name: str) -> Any:
    """Read one column of one session."""
    return store.conn.execute(f"SELECT {name} FROM sessions WHERE id = ?", (sid,)).fetchone()[0]


# --- record_gateway_session_peer ----------------------------------------------------------------


def test_record_peer_sets_the_peer_on_the_session_row(db: SessionDB, store: Store) -> None:
    db.create_session("s1", "telegram")
    gateway.record_gateway_session_peer(store, "s1", thread_id="t1", **PEER)
    row = db.get_session("s1")
    assert row is not None
    got = {k: row[k] for k in ("session_key", "user_id", "chat_id", "chat_type", "thread_id")}
    assert got == {
        "session_key": KEY,
        "user_id": "user-1",
        "chat_id": "chat-1",
        "chat_type": "dm",
        "thread_id": "t1",
    }


def test_record_peer_with_none_metadata_keeps_display_name_origin_and_transport(
    db: SessionDB, store: Store
) -> None:
    db.create_session("s1", "telegram")
    origin = json.dumps({"chat_name": "Alice"})
    gateway.record_gateway_session_peer(
        store, "s1", display_name="Alice", origin_json=origin, transport_profile="bot-a", **PEER
    )
    gateway.record_gateway_session_peer(store, "s1", **PEER)
    assert column(store, "s1", "display_name") == "Alice"
    assert column(store, "s1", "origin_json") == origin
    assert column(store, "s1", "transport_profile") == "bot-a"


def test_record_peer_replaces_the_whole_peer_so_a_thread_can_be_left(
    db: SessionDB, store: Store
) -> None:
    db.create_session("s1", "telegram")
    gateway.record_gateway_session_peer(store, "s1", thread_id="t1", **PEER)
    gateway.record_gateway_session_peer(store, "s1", **PEER)
    assert column(store, "s1", "thread_id") is None


def test_record_peer_without_a_session_key_changes_nothing(db: SessionDB, store: Store) -> None:
    db.create_session("s1", "telegram")
    gateway.record_gateway_session_peer(store, "s1", **{**PEER, "session_key": None})
    assert column(store, "s1", "session_key") is None


def test_record_peer_creates_a_session_row_that_is_missing(db: SessionDB, store: Store) -> None:
    gateway.record_gateway_session_peer(store, "late", display_name="Alice", **PEER)
    row = db.get_session("late")
    assert row is not None
    assert (row["source"], row["created_source"], row["session_key"], row["display_name"]) == (
        "telegram",
        "telegram",
        KEY,
        "Alice",
    )
    assert row["started_at"] > 0


def test_record_peer_with_ancestors_moves_the_compression_chain(
    db: SessionDB, store: Store
) -> None:
    db.create_session("root", "telegram", session_key="old-key")
    db.end_session("root", "compression")
    db.create_session("tip", "telegram", session_key="old-key", parent_session_id="root")
    gateway.record_gateway_session_peer(store, "tip", include_compression_ancestors=True, **PEER)
    assert column(store, "root", "session_key") == KEY
    assert column(store, "tip", "session_key") == KEY


def test_record_peer_with_ancestors_stops_at_a_branch(db: SessionDB, store: Store) -> None:
    db.create_session("root", "telegram", session_key="old-key")
    db.end_session("root", "compression")
    db.create_session(
        "branch", "telegram", parent_session_id="root", model_config={"_branched_from": "root"}
    )
    gateway.record_gateway_session_peer(store, "branch", include_compression_ancestors=True, **PEER)
    assert column(store, "root", "session_key") == "old-key"
    assert column(store, "branch", "session_key") == KEY


def test_record_peer_stores_display_names_with_lone_surrogates_scrubbed(
    db: SessionDB, store: Store
) -> None:
    db.create_session("s1", "telegram")
    gateway.record_gateway_session_peer(store, "s1", display_name="Al\ud800ice", **PEER)
    assert column(store, "s1", "display_name") == scrub_surrogates("Al\ud800ice")


# --- set_expiry_finalized -------------------------------------------------------------------------


def test_set_expiry_finalized_sets_and_clears_the_flag(db: SessionDB, store: Store) -> None:
    db.create_session("s1", "telegram", session_key=KEY)
    gateway.set_expiry_finalized(store, "s1")
    assert column(store, "s1", "expiry_finalized") == 1
    gateway.set_expiry_finalized(store, "s1", False)
    assert column(store, "s1", "expiry_finalized") == 0


# --- the routing index ----------------------------------------------------------------------------


def test_save_routing_entry_replaces_the_entry_of_its_scope_and_key(store: Store) -> None:
    gateway.save_gateway_routing_entry(store, "k1", '{"v": 1}', scope="/a")
    gateway.save_gateway_routing_entry(store, "k1", '{"v": 2}', scope="/a")
    gateway.save_gateway_routing_entry(store, "k1", '{"v": 3}', scope="/b")
    assert gateway.load_gateway_routing_entries(store, scope="/a") == {"k1": '{"v": 2}'}
    assert gateway.load_gateway_routing_entries(store, scope="/b") == {"k1": '{"v": 3}'}


def test_save_routing_entry_ignores_an_empty_key_or_entry(store: Store) -> None:
    gateway.save_gateway_routing_entry(store, "", "{}")
    gateway.save_gateway_routing_entry(store, "k1", "")
    assert gateway.load_gateway_routing_entries(store) == {}


def test_replace_routing_entries_replaces_one_scope_only(store: Store) -> None:
    gateway.save_gateway_routing_entry(store, "gone", "{}", scope="/a")
    gateway.save_gateway_routing_entry(store, "other", "{}", scope="/b")
    gateway.replace_gateway_routing_entries(store, {"k1": "{1}", "k2": "{2}", "": "{}"}, scope="/a")
    assert gateway.load_gateway_routing_entries(store, scope="/a") == {"k1": "{1}", "k2": "{2}"}
    assert gateway.load_gateway_routing_entries(store, scope="/b") == {"other": "{}"}


def test_delete_routing_entries_removes_only_the_named_keys_of_the_scope(store: Store) -> None:
    gateway.replace_gateway_routing_entries(store, {"k1": "{}", "k2": "{}"}, scope="/a")
    gateway.save_gateway_routing_entry(store, "k1", "{}", scope="/b")
    gateway.delete_gateway_routing_entries(store, ["k1", "missing"], scope="/a")
    assert gateway.load_gateway_routing_entries(store, scope="/a") == {"k2": "{}"}
    assert gateway.load_gateway_routing_entries(store, scope="/b") == {"k1": "{}"}


# --- list_gateway_sessions ------------------------------------------------------------------------


def test_list_gateway_sessions_returns_the_newest_session_of_each_key(db: SessionDB) -> None:
    gateway_session(db, "old", started_at=100.0)
    gateway_session(db, "new", started_at=200.0)
    assert [r["id"] for r in gateway.list_gateway_sessions(db.store)] == ["new"]


def test_list_gateway_sessions_leaves_out_sessions_without_a_key(db: SessionDB) -> None:
    db.create_session("cli", "cli")
    gateway_session(db, "gw", started_at=100.0)
    assert [r["id"] for r in gateway.list_gateway_sessions(db.store)] == ["gw"]


def test_list_gateway_sessions_filters_the_platform_in_any_case(db: SessionDB) -> None:
    gateway_session(db, "tg", started_at=100.0)
    gateway_session(db, "dc", started_at=100.0, source="discord", session_key="dc-key")
    assert [r["id"] for r in gateway.list_gateway_sessions(db.store, platform="TELEGRAM")] == ["tg"]


def test_list_gateway_sessions_leaves_out_ended_sessions_when_active_only(db: SessionDB) -> None:
    gateway_session(db, "gw", started_at=100.0)
    db.end_session("gw", "session_reset")
    assert gateway.list_gateway_sessions(db.store) == []
    assert [r["id"] for r in gateway.list_gateway_sessions(db.store, active_only=False)] == ["gw"]


def test_list_gateway_sessions_orders_by_last_activity_and_reports_it(db: SessionDB) -> None:
    gateway_session(db, "early-start", started_at=100.0, session_key="k1", messages=0)
    db.append_message("early-start", "user", "late reply", timestamp=900.0)
    gateway_session(db, "late-start", started_at=500.0, session_key="k2", messages=0)
    rows = gateway.list_gateway_sessions(db.store)
    assert [(r["id"], r["last_active"]) for r in rows] == [
        ("early-start", 900.0),
        ("late-start", 500.0),
    ]


# --- find_session_by_origin --------------------------------------------------------------------


@pytest.fixture
def group(db: SessionDB) -> SessionDB:
    """Two users' live sessions in one Telegram group chat c9."""
    for n, user in enumerate(("u1", "u2")):
        db.create_session(
            f"gw-{user}",
            "telegram",
            user_id=user,
            session_key=f"agent:main:telegram:group:c9:{user}",
            chat_id="c9",
            chat_type="group",
            started_at=100.0 + n,
        )
    return db


def test_find_by_origin_prefers_the_senders_own_session(group: SessionDB) -> None:
    found = gateway.find_session_by_origin(
        group.store, platform="telegram", chat_id="c9", user_id="u1"
    )
    assert found == "gw-u1"


def test_find_by_origin_refuses_an_unknown_sender_among_several_users(group: SessionDB) -> None:
    found = gateway.find_session_by_origin(
        group.store, platform="telegram", chat_id="c9", user_id="u3"
    )
    assert found is None


def test_find_by_origin_without_a_sender_refuses_a_chat_of_several_users(group: SessionDB) -> None:
    assert gateway.find_session_by_origin(group.store, platform="telegram", chat_id="c9") is None


def test_find_by_origin_returns_the_only_live_session_whoever_asks(group: SessionDB) -> None:
    group.end_session("gw-u2", "session_reset")
    found = gateway.find_session_by_origin(
        group.store, platform="telegram", chat_id="c9", user_id="u2"
    )
    assert found == "gw-u1"


def test_find_by_origin_matches_the_thread_when_given(db: SessionDB) -> None:
    db.create_session("th", "discord", session_key="k", chat_id="ch7", thread_id="t7")
    store = db.store
    assert gateway.find_session_by_origin(store, platform="discord", chat_id="ch7", thread_id="t7")
    assert (
        gateway.find_session_by_origin(store, platform="discord", chat_id="ch7", thread_id="t8")
        is None
    )


def test_find_by_origin_needs_a_platform_and_a_chat(group: SessionDB) -> None:
    assert gateway.find_session_by_origin(group.store, platform="telegram", chat_id="") is None
    assert gateway.find_session_by_origin(group.store, platform="", chat_id="c9") is None


# --- find_latest_gateway_session_for_peer ---------------------------------------------------------


def test_peer_recovery_finds_the_live_session_of_the_key(db: SessionDB) -> None:
    gateway_session(db, "gw", started_at=100.0)
    assert find_peer(db.store) == "gw"


def test_peer_recovery_returns_the_whole_session_row(db: SessionDB) -> None:
    gateway_session(db, "gw", started_at=100.0)
    found = gateway.find_latest_gateway_session_for_peer(db.store, **PEER)
    assert found == db.get_session("gw")


@pytest.mark.parametrize("reason", gateway.RECOVERABLE_END_REASONS)
def test_peer_recovery_continues_a_session_ended_by_accident(db: SessionDB, reason: str) -> None:
    gateway_session(db, "gw", started_at=100.0)
    db.end_session("gw", reason)
    assert find_peer(db.store) == "gw"


@pytest.mark.parametrize("reason", ["session_reset", "new_session", "compression", "cli_close"])
def test_peer_recovery_does_not_reopen_a_deliberate_end(db: SessionDB, reason: str) -> None:
    gateway_session(db, "gw", started_at=100.0)
    db.end_session("gw", reason)
    assert find_peer(db.store) is None


def test_peer_recovery_continues_a_session_handed_off_to_the_peer(db: SessionDB) -> None:
    gateway_session(db, "gw", started_at=100.0)
    db.end_session("gw", "cli_close")
    db.store.write(
        lambda c: c.execute("UPDATE sessions SET handoff_state = 'completed' WHERE id = 'gw'")
    )
    assert find_peer(db.store) == "gw"


def test_peer_recovery_prefers_a_session_with_messages_over_a_newer_empty_one(
    db: SessionDB,
) -> None:
    gateway_session(db, "talked", started_at=100.0)
    gateway_session(db, "empty", started_at=200.0, messages=0)
    assert find_peer(db.store) == "talked"


def test_peer_recovery_does_not_reach_behind_a_reset(db: SessionDB) -> None:
    gateway_session(db, "before", started_at=100.0)
    gateway_session(db, "reset", started_at=150.0)
    db.end_session("reset", "session_reset", ended_at=300.0)
    assert find_peer(db.store) is None


def test_peer_recovery_needs_a_session_key(db: SessionDB) -> None:
    gateway_session(db, "gw", started_at=100.0)
    assert find_peer(db.store, session_key=None) is None


def test_peer_recovery_falls_back_to_the_whole_peer_when_the_key_differs(db: SessionDB) -> None:
    gateway_session(db, "gw", started_at=100.0, session_key="older-key-format")
    assert find_peer(db.store) == "gw"


def test_peer_fallback_needs_the_chat_and_its_type(db: SessionDB) -> None:
    gateway_session(db, "gw", started_at=100.0, session_key="older-key-format")
    assert find_peer(db.store, chat_type=None) is None


def test_peer_fallback_never_crosses_threads(db: SessionDB) -> None:
    gateway_session(db, "gw", started_at=100.0, session_key="older-key-format", thread_id="t1")
    assert find_peer(db.store, thread_id="t2") is None


def test_peer_fallback_skips_sessions_without_messages(db: SessionDB) -> None:
    gateway_session(db, "gw", started_at=100.0, session_key="older-key-format", messages=0)
    assert find_peer(db.store) is None


def test_peer_fallback_leaves_another_profiles_sessions_alone(hermes_home: Path) -> None:
    (hermes_home / "profiles" / "work").mkdir(parents=True)
    with SessionDB(hermes_home / "profiles" / "work" / "state.db") as db:
        gateway_session(db, "theirs", started_at=100.0, session_key="k", profile_name="other")
        gateway_session(db, "ours", started_at=50.0, session_key="k2")
        assert find_peer(db.store) == "ours"


# --- backfill_from_sessions_json -----------------------------------------------------------------


def write_sessions_json(home: Path, data: Any) -> None:
    """Write the gateway's old index under home."""
    (home / "sessions").mkdir(parents=True, exist_ok=True)
    text = data if isinstance(data, str) else json.dumps(data)
    (home / "sessions" / "sessions.json").write_text(text, encoding="utf-8")


def backfill(store: Store, home: Path) -> int:
    """Run the backfill in one write transaction, as the schema-18 step does."""
    return store.write(lambda conn: sessions_json.backfill_from_sessions_json(conn, home))


ORIGIN = {"platform": "telegram", "chat_id": 123, "thread_id": "t1", "chat_name": "Alice"}
ENTRY = {
    "session_id": "legacy",
    "display_name": "Alice",
    "chat_type": "dm",
    "expiry_finalized": True,
    "origin": ORIGIN,
}


def test_backfill_fills_the_gateway_columns_of_a_session(
    db: SessionDB, store: Store, tmp_path: Path
) -> None:
    db.create_session("legacy", "telegram")
    write_sessions_json(tmp_path, {"_README": "x", KEY: ENTRY})
    assert backfill(store, tmp_path) == 1
    row = db.get_session("legacy")
    assert row is not None
    assert (row["session_key"], row["chat_id"], row["chat_type"], row["thread_id"]) == (
        KEY,
        "123",
        "dm",
        "t1",
    )
    assert (row["display_name"], row["expiry_finalized"]) == ("Alice", 1)
    assert json.loads(row["origin_json"])["chat_name"] == "Alice"


def test_backfill_never_overwrites_what_is_stored(
    db: SessionDB, store: Store, tmp_path: Path
) -> None:
    db.create_session("legacy", "telegram", session_key="kept", display_name="Kept")
    write_sessions_json(tmp_path, {KEY: ENTRY})
    backfill(store, tmp_path)
    assert (column(store, "legacy", "session_key"), column(store, "legacy", "display_name")) == (
        "kept",
        "Kept",
    )


def test_backfill_prefers_the_entrys_own_session_key_to_its_index_key(
    db: SessionDB, store: Store, tmp_path: Path
) -> None:
    db.create_session("legacy", "telegram")
    write_sessions_json(tmp_path, {"index-key": {**ENTRY, "session_key": "entry-key"}})
    backfill(store, tmp_path)
    assert column(store, "legacy", "session_key") == "entry-key"


def test_backfill_counts_memory_flushed_as_expiry_finalized(
    db: SessionDB, store: Store, tmp_path: Path
) -> None:
    db.create_session("legacy", "telegram")
    write_sessions_json(tmp_path, {KEY: {"session_id": "legacy", "memory_flushed": True}})
    backfill(store, tmp_path)
    assert column(store, "legacy", "expiry_finalized") == 1


def test_backfill_counts_only_sessions_it_changed(
    db: SessionDB, store: Store, tmp_path: Path
) -> None:
    db.create_session("legacy", "telegram")
    write_sessions_json(
        tmp_path,
        {KEY: ENTRY, "k2": {**ENTRY, "session_id": "not-stored"}, "k3": {"no": "id"}, "k4": 7},
    )
    assert backfill(store, tmp_path) == 1
    assert backfill(store, tmp_path) == 0


def test_backfill_without_sessions_json_changes_nothing(store: Store, tmp_path: Path) -> None:
    assert backfill(store, tmp_path / "nowhere") == 0


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "\xff\xfe"])
def test_backfill_of_a_garbled_sessions_json_changes_nothing(
    db: SessionDB, store: Store, tmp_path: Path, text: str
) -> None:
    db.create_session("legacy", "telegram")
    write_sessions_json(tmp_path, text)
    assert backfill(store, tmp_path) == 0
    assert column(store, "legacy", "session_key") is None


def test_backfill_that_fails_midway_undoes_its_own_changes_only(
    db: SessionDB, store: Store, tmp_path: Path
) -> None:
    db.create_session("first", "telegram")
    db.create_session("second", "telegram")
    write_sessions_json(
        tmp_path,
        {"k1": {**ENTRY, "session_id": "first"}, "k2": {**ENTRY, "session_id": "second"}},
    )
    # A trigger that refuses the second update stands in for any statement failing midway.
    store.write(
        lambda c: c.execute(
            "CREATE TRIGGER refuse AFTER UPDATE ON sessions WHEN new.id = 'second' "
            "BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    )

    def step(conn: Any) -> int:
        conn.execute("UPDATE sessions SET title = 'kept' WHERE id = 'first'")
        return sessions_json.backfill_from_sessions_json(conn, tmp_path)

    assert store.write(step) == 0
    assert column(store, "first", "session_key") is None
    assert column(store, "first", "title") == "kept"
