"""Ownership markers and the exception-path lookup across compression chains."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from hermes_state.agent.compression import compact_session, rotate_session
from hermes_state.agent.db import SessionDB
from hermes_state.records.conversation import get_messages_as_conversation
from hermes_state.records.messages import append_message, get_messages
from hermes_state.records.ownership import (
    OwnershipLookupError,
    find_owned_input,
    fresh_marker,
    platform_marker,
    with_marker,
)
from hermes_state.records.sessions import create_session
from hermes_state.store.connection import Store
from hermes_state.store.schema import ADDITION_INDEX_DDL

KEY = ("telegram", "coder", "dm", "42", None, "9001")


@pytest.fixture
def store(db: SessionDB) -> Store:
    """The open store of this test's SessionDB."""
    return db.store


def _input(store: Store, session_id: str, marker: dict, **fields: Any) -> int:
    return append_message(
        store, session_id, "user", "hello", display_metadata=with_marker(None, marker), **fields
    )


def _chain(store: Store) -> None:
    """Sessions A -> B -> C, rotated by compression, with no handoff rows."""
    create_session(store, "A", "telegram")
    rotate_session(store, "A", "B")
    rotate_session(store, "B", "C")


def _set(store: Store, row_id: int, **cols: Any) -> None:
    sets = ", ".join(f"{c} = ?" for c in cols)
    store.write(
        lambda c: c.execute(f"UPDATE messages SET {sets} WHERE id = ?", [*cols.values(), row_id])
    )


# --- markers ----------------------------------------------------------------------------------


def test_platform_marker_is_deterministic() -> None:
    assert platform_marker(*KEY) == platform_marker(*KEY)


def test_platform_marker_differs_when_any_key_field_differs() -> None:
    ids = {platform_marker(*KEY)["id"]}
    for i in range(len(KEY)):
        key = list(KEY)
        key[i] = "other"
        ids.add(platform_marker(*key)["id"])
    assert len(ids) == len(KEY) + 1


def test_platform_marker_treats_numeric_and_text_ids_alike() -> None:
    assert platform_marker("telegram", "p", "dm", 42, None, 9001) == platform_marker(
        "telegram", "p", "dm", "42", None, "9001"
    )


def test_fresh_markers_differ_for_identical_turns(store: Store) -> None:
    create_session(store, "A", "cli")
    first, second = fresh_marker(), fresh_marker()
    one = _input(store, "A", first, timestamp=1.0)
    two = _input(store, "A", second, timestamp=1.0)

    assert first["id"] != second["id"]
    assert find_owned_input(store, "A", first).message_id == one
    assert find_owned_input(store, "A", second).message_id == two


def test_platform_message_id_stays_the_original_id(store: Store) -> None:
    create_session(store, "A", "telegram")
    _input(store, "A", platform_marker(*KEY), platform_message_id="9001")

    (row,) = get_messages(store, "A")
    assert row["platform_message_id"] == "9001"


# --- lookup order across A -> B -> C -----------------------------------------------------------


def test_lookup_prefers_the_forward_target(store: Store) -> None:
    _chain(store)
    marker = platform_marker(*KEY)
    _input(store, "A", marker)
    in_c = _input(store, "C", marker)

    found = find_owned_input(store, "A", marker)
    assert (found.session_id, found.message_id) == ("C", in_c)


def test_lookup_takes_the_successor_before_ancestors(store: Store) -> None:
    _chain(store)
    marker = platform_marker(*KEY)
    _input(store, "A", marker)
    in_b = _input(store, "B", marker)

    assert find_owned_input(store, "A", marker).message_id == in_b
    assert find_owned_input(store, "C", marker).message_id == in_b


def test_lookup_falls_back_to_compression_ancestors(store: Store) -> None:
    _chain(store)
    marker = platform_marker(*KEY)
    in_a = _input(store, "A", marker)

    found = find_owned_input(store, "C", marker)
    assert (found.session_id, found.message_id) == ("A", in_a)


def test_lookup_finds_the_handoff_copy_in_the_rotated_child(store: Store) -> None:
    create_session(store, "A", "telegram")
    marker = platform_marker(*KEY)
    _input(store, "A", marker)
    rotate_session(store, "A", "B", kept_messages=get_messages(store, "A"))

    assert find_owned_input(store, "A", marker).session_id == "B"


def test_lookup_counts_compression_archives(store: Store) -> None:
    create_session(store, "A", "telegram")
    marker = platform_marker(*KEY)
    row = _input(store, "A", marker)
    compact_session(store, "A", [{"role": "user", "content": "summary"}])

    found = find_owned_input(store, "A", marker)
    assert (found.message_id, found.archived) == (row, True)


def test_lookup_ignores_rewound_rows(store: Store) -> None:
    create_session(store, "A", "telegram")
    marker = platform_marker(*KEY)
    _set(store, _input(store, "A", marker), active=0, compacted=0)

    assert find_owned_input(store, "A", marker) is None


def test_lookup_ignores_observed_rows(store: Store) -> None:
    create_session(store, "A", "telegram")
    marker = platform_marker(*KEY)
    _input(store, "A", marker, observed=1)

    assert find_owned_input(store, "A", marker) is None


def test_lookup_ignores_other_writers_rows(store: Store) -> None:
    create_session(store, "A", "telegram")
    _input(store, "A", platform_marker(*KEY, writer="unrelated-process"))

    assert find_owned_input(store, "A", platform_marker(*KEY, writer="gateway")) is None
    assert find_owned_input(store, "A", platform_marker(*KEY), writer="unrelated-process")


def test_lookup_skips_a_rewound_forward_copy_for_an_older_live_one(store: Store) -> None:
    _chain(store)
    marker = platform_marker(*KEY)
    in_b = _input(store, "B", marker)
    _set(store, _input(store, "C", marker), active=0, compacted=0)

    assert find_owned_input(store, "A", marker).message_id == in_b


def test_lookup_raises_on_unreadable_metadata_in_the_chain(store: Store) -> None:
    _chain(store)
    marker = platform_marker(*KEY)
    _input(store, "C", marker)
    broken = _input(store, "A", fresh_marker())
    _set(store, broken, display_metadata='{"owner": {"id": "p:')

    with pytest.raises(OwnershipLookupError, match="unreadable"):
        find_owned_input(store, "C", marker)


def test_lookup_raises_when_the_store_cannot_be_read(db_path) -> None:
    handle = SessionDB(db_path)
    create_session(handle.store, "A", "telegram")
    handle.close()

    with pytest.raises(OwnershipLookupError):
        find_owned_input(handle.store, "A", platform_marker(*KEY))


def test_lookup_reads_only_markers_never_bodies(store: Store) -> None:
    _chain(store)
    marker = platform_marker(*KEY)
    _input(store, "B", marker)
    read: set[tuple[str, str]] = set()

    def authorizer(action: int, arg1: Any, arg2: Any, *_: Any) -> int:
        if action == sqlite3.SQLITE_READ and arg1 == "messages":
            read.add((arg1, arg2))
        return sqlite3.SQLITE_OK

    store.conn.set_authorizer(authorizer)
    try:
        assert find_owned_input(store, "A", marker) is not None
    finally:
        store.conn.set_authorizer(None)
    columns = {col for _, col in read}
    assert "display_metadata" in columns  # the authorizer saw the lookup's reads
    assert columns <= {"id", "session_id", "display_metadata", "active", "compacted", "observed"}


def test_lookup_uses_the_owner_index(store: Store) -> None:
    for ddl in ADDITION_INDEX_DDL.values():
        store.write(lambda c, ddl=ddl: c.execute(ddl))
    _chain(store)
    marker = platform_marker(*KEY)
    plans: list[str] = []
    store.conn.set_trace_callback(plans.append)
    try:
        find_owned_input(store, "A", marker)
    finally:
        store.conn.set_trace_callback(None)
    lookups = [q for q in plans if "FROM messages" in q]
    used = [" ".join(r[3] for r in store.conn.execute("EXPLAIN QUERY PLAN " + q)) for q in lookups]
    assert any("hermes_idx_messages_owner" in p for p in used)
    assert any("hermes_idx_messages_bad_metadata" in p for p in used)


def test_non_json_display_metadata_stays_writable_with_owner_index(store: Store) -> None:
    for ddl in ADDITION_INDEX_DDL.values():
        store.write(lambda c, ddl=ddl: c.execute(ddl))
    create_session(store, "A", "cli")

    row = append_message(store, "A", "user", "x", display_metadata="not json")
    assert row > 0


def test_marker_without_an_id_is_refused(store: Store) -> None:
    with pytest.raises(ValueError):
        find_owned_input(store, "A", {"kind": "platform"})


# --- the provider payload ---------------------------------------------------------------------


def test_conversation_never_carries_the_owner_marker(store: Store) -> None:
    create_session(store, "A", "telegram")
    marker = platform_marker(*KEY)
    append_message(store, "A", "user", "hi", display_metadata=with_marker({"quote": "q1"}, marker))
    _input(store, "A", fresh_marker())

    conversation = get_messages_as_conversation(store, "A")
    assert conversation[0]["display_metadata"] == {"quote": "q1"}
    assert "display_metadata" not in conversation[1]
    assert '"owner"' not in json.dumps(conversation)
    assert marker["id"] not in json.dumps(conversation)
