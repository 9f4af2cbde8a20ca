"""Compression generations: in-place compaction, rotation, successor chains."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_state.agent.compression import (
    CompressionError,
    compact_session,
    compression_ancestors,
    compression_successor,
    compression_tip,
    rotate_session,
)
from hermes_state.agent.db import SessionDB
from hermes_state.records.conversation import get_messages_as_conversation
from hermes_state.records.messages import append_messages, get_messages
from hermes_state.records.sessions import create_session, end_session, get_session
from hermes_state.store import fts
from hermes_state.store.connection import Store
from hermes_state.store.errors import SessionNotFoundError

T0 = 1_700_000_000.0


def _seed(store: Store, session_id: str = "s1", n: int = 6, **columns: Any) -> list[dict]:
    """Create a session with n alternating user/assistant rows (one tool call); return the rows."""
    create_session(store, session_id, "telegram", **columns)
    batch = []
    for i in range(n):
        msg: dict[str, Any] = {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"message {i} about zebra{i}",
            "timestamp": T0 + i,
        }
        if i == 3:
            msg["tool_calls"] = [{"id": "call_1", "function": {"name": "t", "arguments": "{}"}}]
        batch.append(msg)
    append_messages(store, session_id, batch)
    return get_messages(store, session_id)


def _states(store: Store, session_id: str) -> list[tuple[int, int]]:
    rows = store.conn.execute(
        "SELECT active, compacted FROM messages WHERE session_id = ? ORDER BY id", (session_id,)
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def _fts_hits(store: Store, word: str) -> int:
    row = store.conn.execute(
        "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH ?", (word,)
    ).fetchone()
    return int(row[0])


@pytest.fixture
def store(db: SessionDB) -> Store:
    """The open store of this test's SessionDB."""
    return db.store


def test_compaction_archives_live_rows_and_inserts_kept_context(store: Store) -> None:
    rows = _seed(store)
    kept = [{"role": "user", "content": "summary of 0-3"}, rows[4], rows[5]]

    result = compact_session(store, "s1", kept)

    assert (result.archived, result.inserted, result.carried) == (6, 3, 2)
    assert _states(store, "s1") == [(0, 1)] * 6 + [(1, 0)] * 3


def test_kept_message_keeps_uid_content_timestamp_and_every_column(store: Store) -> None:
    rows = _seed(store)
    result = compact_session(store, "s1", [{"message_uid": rows[3]["message_uid"]}])

    new = get_messages(store, "s1")
    assert [m["id"] for m in new] == list(result.message_ids)
    original, copy = rows[3], new[0]
    skip = {"id", "active", "compacted"}
    assert {k: v for k, v in copy.items() if k not in skip} == {
        k: v for k, v in original.items() if k not in skip
    }


def test_kept_message_may_be_named_by_row_id(store: Store) -> None:
    rows = _seed(store)
    compact_session(store, "s1", [{"id": rows[2]["id"]}])

    (copy,) = get_messages(store, "s1")
    assert (copy["message_uid"], copy["content"], copy["timestamp"]) == (
        rows[2]["message_uid"],
        rows[2]["content"],
        rows[2]["timestamp"],
    )


def test_conversation_messages_can_be_kept_as_they_are(store: Store) -> None:
    _seed(store)
    conversation = get_messages_as_conversation(store, "s1")
    summary = {"role": "user", "content": "summary", "message_uid": None}

    result = compact_session(store, "s1", [summary, *conversation[-2:]])

    assert (result.inserted, result.carried) == (3, 2)
    live = get_messages_as_conversation(store, "s1")
    assert live[1:] == conversation[-2:]


def test_summary_row_gets_a_fresh_uid(store: Store) -> None:
    rows = _seed(store)
    compact_session(store, "s1", [{"role": "assistant", "content": "summary"}])

    (summary,) = get_messages(store, "s1")
    assert summary["message_uid"] not in {r["message_uid"] for r in rows}
    assert len(summary["message_uid"]) == 32


def test_compaction_sets_counters_to_the_new_live_generation(store: Store) -> None:
    rows = _seed(store)
    compact_session(store, "s1", [{"role": "user", "content": "summary"}, rows[3]])

    session = get_session(store, "s1")
    assert (session["message_count"], session["tool_call_count"]) == (2, 1)


def test_protected_message_survives_repeated_compactions_in_every_generation(
    store: Store,
) -> None:
    rows = _seed(store)
    protected = rows[0]["message_uid"]
    compact_session(store, "s1", [rows[0], {"role": "user", "content": "summary one"}])
    live = get_messages(store, "s1")
    compact_session(store, "s1", [live[0], {"role": "user", "content": "summary two"}])

    copies = store.conn.execute(
        "SELECT active, compacted, content, timestamp FROM messages"
        " WHERE message_uid = ? ORDER BY id",
        (protected,),
    ).fetchall()
    assert [(r[0], r[1]) for r in copies] == [(0, 1), (0, 1), (1, 0)]
    assert {(r[2], r[3]) for r in copies} == {(rows[0]["content"], rows[0]["timestamp"])}


def test_compaction_keeps_fts_consistent_and_finds_both_generations(store: Store) -> None:
    rows = _seed(store)
    compact_session(store, "s1", [rows[4]])

    assert fts.integrity_check(store.conn) == []
    assert _fts_hits(store, "zebra4") == 2  # the archive and the live copy
    assert _fts_hits(store, "zebra1") == 1  # archived only, still searchable


def test_get_messages_shows_only_the_new_generation_by_default(store: Store) -> None:
    rows = _seed(store)
    compact_session(store, "s1", [rows[5]])

    assert [m["content"] for m in get_messages(store, "s1")] == [rows[5]["content"]]
    assert len(get_messages(store, "s1", include_inactive=True)) == 7


def test_compaction_with_a_foreign_uid_changes_nothing(store: Store) -> None:
    _seed(store)
    before = store.conn.total_changes

    with pytest.raises(CompressionError):
        compact_session(store, "s1", [{"role": "user", "content": "x"}, {"message_uid": "f" * 32}])

    assert store.conn.total_changes == before
    assert _states(store, "s1") == [(1, 0)] * 6


def test_compaction_of_a_missing_session_raises(store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        compact_session(store, "nope", [])


# --- rotation ---------------------------------------------------------------------------------


def test_rotation_creates_child_with_routing_handoff_and_ends_parent(store: Store) -> None:
    rows = _seed(store, session_key="tg:42", chat_id="42", thread_id="7", cwd="/w")
    result = rotate_session(
        store, "s1", "s2", kept_messages=[{"role": "user", "content": "summary"}, rows[5]]
    )

    child, parent = get_session(store, "s2"), get_session(store, "s1")
    assert child["parent_session_id"] == "s1"
    assert (child["source"], child["session_key"], child["chat_id"], child["thread_id"]) == (
        "telegram",
        "tg:42",
        "42",
        "7",
    )
    assert (parent["end_reason"], parent["ended_at"] is not None) == ("compression", True)
    handoff = get_messages(store, "s2")
    assert [m["id"] for m in handoff] == list(result.message_ids)
    assert (handoff[1]["message_uid"], handoff[1]["content"], handoff[1]["timestamp"]) == (
        rows[5]["message_uid"],
        rows[5]["content"],
        rows[5]["timestamp"],
    )
    assert child["message_count"] == 2


def test_rotation_leaves_the_parent_rows_untouched(store: Store) -> None:
    rows = _seed(store)
    rotate_session(store, "s1", "s2", kept_messages=[rows[5]])

    assert get_messages(store, "s1") == rows


def test_rotation_that_fails_writes_nothing(store: Store) -> None:
    _seed(store)
    # The second kept message has no role: it fails after the child and a handoff row exist.
    kept = [{"role": "user", "content": "x"}, {"content": "no role"}]

    with pytest.raises(ValueError, match="role"):
        rotate_session(store, "s1", "s2", kept_messages=kept)

    assert get_session(store, "s2") is None
    assert store.conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 6
    assert get_session(store, "s1")["ended_at"] is None


def test_rotation_refuses_an_existing_child_id(store: Store) -> None:
    _seed(store)
    create_session(store, "s2", "cli")

    with pytest.raises(CompressionError, match="already exists"):
        rotate_session(store, "s1", "s2")


def test_rotation_refuses_a_session_ended_by_the_user(store: Store) -> None:
    _seed(store)
    end_session(store, "s1", "user_exit")

    with pytest.raises(CompressionError, match="already ended"):
        rotate_session(store, "s1", "s2")


def test_rotation_columns_override_the_copied_ones(store: Store) -> None:
    _seed(store, model="m-old")
    rotate_session(store, "s1", "s2", model="m-new", title="Fix build #2")

    child = get_session(store, "s2")
    assert (child["model"], child["title"]) == ("m-new", "Fix build #2")


# --- successor chains ------------------------------------------------------------------------


def _chain(store: Store) -> None:
    """A -> B -> C, each rotation ended by compression."""
    _seed(store, "A")
    rotate_session(store, "A", "B", started_at=T0 + 100)
    rotate_session(store, "B", "C", started_at=T0 + 200)


def test_successor_follows_each_rotation(store: Store) -> None:
    _chain(store)

    assert [compression_successor(store, s) for s in "ABC"] == ["B", "C", None]


def test_tip_is_the_end_of_the_chain_from_anywhere_in_it(store: Store) -> None:
    _chain(store)

    assert [compression_tip(store, s) for s in "ABC"] == ["C", "C", "C"]


def test_ancestors_are_nearest_first(store: Store) -> None:
    _chain(store)

    assert compression_ancestors(store, "C") == ["B", "A"]
    assert compression_ancestors(store, "A") == []


def test_successor_prefers_the_live_child_then_the_newest(store: Store) -> None:
    _seed(store, "A")
    create_session(store, "old-live", "telegram", parent_session_id="A", started_at=T0 + 10)
    create_session(store, "new-ended", "telegram", parent_session_id="A", started_at=T0 + 20)
    end_session(store, "new-ended", "user_exit")
    end_session(store, "A", "compression")

    assert compression_successor(store, "A") == "old-live"
    end_session(store, "old-live", "user_exit")
    assert compression_successor(store, "A") == "new-ended"


def test_session_not_ended_by_compression_has_no_successor(store: Store) -> None:
    _seed(store, "A")
    create_session(store, "branch", "telegram", parent_session_id="A")
    end_session(store, "A", "user_exit")

    assert compression_successor(store, "A") is None
    assert compression_ancestors(store, "branch") == []


def test_ancestors_stop_at_a_parent_not_ended_by_compression(store: Store) -> None:
    _seed(store, "root")
    create_session(store, "A", "telegram", parent_session_id="root")
    rotate_session(store, "A", "B")

    assert compression_ancestors(store, "B") == ["A"]


def test_chain_walks_survive_a_parent_cycle(store: Store) -> None:
    _chain(store)
    store.write(lambda c: c.execute("UPDATE sessions SET parent_session_id = 'C' WHERE id = 'A'"))
    store.write(
        lambda c: c.execute("UPDATE sessions SET end_reason = 'compression' WHERE id = 'C'")
    )

    assert compression_tip(store, "A") == "C"
    assert compression_ancestors(store, "C") == ["B", "A"]
