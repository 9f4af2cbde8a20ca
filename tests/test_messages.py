"""Message rows: appends, JSON columns, surrogates, uids, reading, conversations, clear/delete."""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

import pytest

from hermes_state.agent.db import SessionDB
from hermes_state.store.errors import SessionNotFoundError

HEX32 = re.compile(r"[0-9a-f]{32}")


def call(call_id: str, name: str = "terminal") -> dict[str, Any]:
    """One OpenAI-style tool call."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def stored(db: SessionDB, msg_id: int, column: str) -> Any:
    """The raw stored value of one column of one message row."""
    return db.store.conn.execute(
        f'SELECT "{column}" FROM messages WHERE id = ?', (msg_id,)
    ).fetchone()[0]


def counters(db: SessionDB, session_id: str) -> tuple[int, int]:
    """(message_count, tool_call_count) of a session."""
    row = db.get_session(session_id)
    return row["message_count"], row["tool_call_count"]


@pytest.fixture
def s1(db: SessionDB) -> SessionDB:
    """A store with one empty session "s1"."""
    db.create_session("s1", "cli")
    return db


# --- appending -----------------------------------------------------------------------------------


def test_append_message_returns_the_new_row_id(s1: SessionDB) -> None:
    msg_id = s1.append_message("s1", "user", "hello")
    assert [(m["id"], m["content"]) for m in s1.get_messages("s1")] == [(msg_id, "hello")]


def test_append_messages_returns_ids_in_batch_order(s1: SessionDB) -> None:
    got = s1.append_messages("s1", [{"role": "user", "content": str(n)} for n in range(5)])
    assert got == sorted(got) and len(set(got)) == 5
    assert [m["content"] for m in s1.get_messages("s1")] == ["0", "1", "2", "3", "4"]


def test_batch_with_a_row_missing_its_role_writes_nothing(s1: SessionDB) -> None:
    with pytest.raises(ValueError):
        s1.append_messages("s1", [{"role": "user", "content": "ok"}, {"content": "no role"}])
    assert s1.get_messages("s1", include_inactive=True) == []
    assert counters(s1, "s1") == (0, 0)


def test_batch_that_fails_midway_rolls_back_the_rows_already_inserted(s1: SessionDB) -> None:
    batch = [{"role": "user", "content": "one"}, {"role": "user", "content": object()}]
    with pytest.raises(sqlite3.Error):  # the second row cannot be bound, after the first went in
        s1.append_messages("s1", batch)
    assert s1.get_messages("s1", include_inactive=True) == []
    assert counters(s1, "s1") == (0, 0)


def test_appends_update_message_and_tool_call_counts(s1: SessionDB) -> None:
    s1.append_messages(
        "s1",
        [
            {"role": "user", "content": "run both"},
            {"role": "assistant", "tool_calls": [call("c1"), call("c2")]},
            {"role": "tool", "content": "r1", "tool_call_id": "c1"},
            {"role": "tool", "content": "r2", "tool_call_id": "c2"},
        ],
    )
    s1.append_message("s1", "assistant", "done")
    assert counters(s1, "s1") == (5, 2)


def test_append_to_an_unknown_session_raises_session_not_found(db: SessionDB) -> None:
    with pytest.raises(SessionNotFoundError) as caught:
        db.append_messages("nope", [{"role": "user", "content": "x"}])
    assert caught.value.hint


# --- stored shapes -----------------------------------------------------------------------------


def test_tool_calls_are_stored_as_json_list_text(s1: SessionDB) -> None:
    calls = [call("c1"), call("c2", "read_file")]
    msg_id = s1.append_message("s1", "assistant", tool_calls=calls)
    text = stored(s1, msg_id, "tool_calls")
    assert isinstance(text, str) and json.loads(text) == calls


def test_tool_calls_given_as_json_text_are_stored_as_a_list(s1: SessionDB) -> None:
    msg_id = s1.append_message("s1", "assistant", tool_calls=json.dumps([call("c1")]))
    assert json.loads(stored(s1, msg_id, "tool_calls")) == [call("c1")]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("reasoning_details", [{"type": "reasoning.text", "text": "hmm"}]),
        ("codex_reasoning_items", [{"id": "rs_1", "summary": []}]),
        ("codex_message_items", [{"type": "message", "id": "msg_1"}]),
        ("display_metadata", {"reactions": ["+1"], "n": 2}),
    ],
)
def test_json_columns_are_stored_as_json_text_and_decoded_on_read(
    s1: SessionDB, field: str, value: Any
) -> None:
    msg_id = s1.append_message("s1", "assistant", "x", **{field: value})
    assert json.loads(stored(s1, msg_id, field)) == value
    assert s1.get_messages("s1")[0][field] == value


def test_structured_content_round_trips(s1: SessionDB) -> None:
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]
    msg_id = s1.append_message("s1", "user", parts)
    assert stored(s1, msg_id, "content").startswith("\x00json:")
    assert s1.get_messages("s1")[0]["content"] == parts


def test_lone_surrogates_become_replacement_characters_instead_of_failing_the_write(
    s1: SessionDB,
) -> None:
    msg_id = s1.append_message(
        "s1",
        "assistant",
        "a\ud800b",
        reasoning="think\udfffing",
        display_metadata={"k": "x\udc00y"},
    )
    assert stored(s1, msg_id, "content") == "a\ufffdb"
    row = s1.get_messages("s1")[0]
    assert (row["content"], row["reasoning"], row["display_metadata"]) == (
        "a\ufffdb",
        "think\ufffding",
        {"k": "x\ufffdy"},
    )


def test_a_surrogate_in_one_row_does_not_lose_the_rest_of_the_batch(s1: SessionDB) -> None:
    s1.append_messages(
        "s1", [{"role": "user", "content": "clean"}, {"role": "user", "content": "bad\ud83d"}]
    )
    assert [m["content"] for m in s1.get_messages("s1")] == ["clean", "bad\ufffd"]


# --- uids ------------------------------------------------------------------------------------


def test_message_uid_is_minted_as_32_hex_digits(s1: SessionDB) -> None:
    s1.append_messages("s1", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    uids = [m["message_uid"] for m in s1.get_messages("s1")]
    assert all(HEX32.fullmatch(u) for u in uids) and len(set(uids)) == 2


def test_message_uid_given_by_the_caller_is_copied_unchanged(s1: SessionDB) -> None:
    s1.append_message("s1", "user", "copy", message_uid="0123456789abcdef0123456789abcdef")
    assert s1.get_messages("s1")[0]["message_uid"] == "0123456789abcdef0123456789abcdef"


def test_tool_call_uids_are_minted_per_distinct_call_id(s1: SessionDB) -> None:
    calls = [call("c1"), call("c2"), call("c1")]
    s1.append_message("s1", "assistant", tool_calls=calls)
    row = s1.get_messages("s1")[0]
    uids = row["tool_call_uids"]
    assert set(uids) == {"c1", "c2"}
    assert all(HEX32.fullmatch(u) for u in uids.values()) and uids["c1"] != uids["c2"]
    assert row["tool_calls"] == calls  # the calls themselves are not rewritten


def test_tool_row_pairs_with_the_preceding_assistant_call(s1: SessionDB) -> None:
    s1.append_message("s1", "assistant", tool_calls=[call("c1"), call("c2")])
    tool_id = s1.append_message("s1", "tool", "result", tool_call_id="c2")
    assistant, tool = s1.get_messages("s1")
    assert stored(s1, tool_id, "tool_call_uid") == assistant["tool_call_uids"]["c2"]
    assert tool["tool_call_uid"] == assistant["tool_call_uids"]["c2"]


def test_tool_row_in_the_same_batch_pairs_with_its_assistant_call(s1: SessionDB) -> None:
    s1.append_messages(
        "s1",
        [
            {"role": "assistant", "tool_calls": [call("c1")]},
            {"role": "tool", "content": "r", "tool_call_id": "c1"},
        ],
    )
    assistant, tool = s1.get_messages("s1")
    assert tool["tool_call_uid"] == assistant["tool_call_uids"]["c1"]


def test_a_reused_call_id_in_one_batch_pairs_with_the_nearest_call(s1: SessionDB) -> None:
    s1.append_messages(
        "s1",
        [
            {"role": "assistant", "tool_calls": [call("c1")]},
            {"role": "tool", "content": "r1", "tool_call_id": "c1"},
            {"role": "assistant", "tool_calls": [call("c1")]},
            {"role": "tool", "content": "r2", "tool_call_id": "c1"},
        ],
    )
    first, tool1, second, tool2 = s1.get_messages("s1")
    assert tool1["tool_call_uid"] == first["tool_call_uids"]["c1"]
    assert tool2["tool_call_uid"] == second["tool_call_uids"]["c1"]


def test_a_reused_call_id_across_appends_pairs_with_the_nearest_call(s1: SessionDB) -> None:
    s1.append_message("s1", "assistant", tool_calls=[call("c1")])
    s1.append_message("s1", "tool", "r1", tool_call_id="c1")
    s1.append_message("s1", "assistant", tool_calls=[call("c1")])
    tool2 = s1.append_message("s1", "tool", "r2", tool_call_id="c1")
    second = s1.get_messages("s1")[2]
    assert stored(s1, tool2, "tool_call_uid") == second["tool_call_uids"]["c1"]


def test_tool_call_uid_is_derived_on_read_for_rows_an_old_writer_stored(s1: SessionDB) -> None:
    s1.append_message("s1", "assistant", tool_calls=[call("c1")])
    cur = s1.store.write(
        lambda c: c.execute(
            "INSERT INTO messages (session_id, role, content, tool_call_id, timestamp)"
            " VALUES ('s1', 'tool', 'old writer', 'c1', 1.0)"
        )
    )
    assistant, tool = s1.get_messages("s1")
    assert tool["tool_call_uid"] == assistant["tool_call_uids"]["c1"]
    assert stored(s1, cur.lastrowid, "tool_call_uid") is None  # derived, never written back


def test_absorbed_message_uids_round_trip_as_a_list(s1: SessionDB) -> None:
    absorbed = ["11" * 16, "22" * 16]
    msg_id = s1.append_message("s1", "user", "merged", absorbed_message_uids=absorbed)
    assert json.loads(stored(s1, msg_id, "absorbed_message_uids")) == absorbed
    assert s1.get_messages("s1")[0]["absorbed_message_uids"] == absorbed


# --- reading ---------------------------------------------------------------------------------


@pytest.fixture
def history(s1: SessionDB) -> SessionDB:
    """Session s1 with live rows a, c, e and inactive rows b (compacted) and d (rewound)."""
    s1.append_messages(
        "s1",
        [
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b", "active": 0, "compacted": 1},
            {"role": "assistant", "content": "c"},
            {"role": "user", "content": "d", "active": 0},
            {"role": "assistant", "content": "e"},
        ],
    )
    return s1


def contents(rows: list[dict[str, Any]]) -> list[Any]:
    """The content of each row, in order."""
    return [r["content"] for r in rows]


def test_get_messages_returns_only_active_rows_by_default(history: SessionDB) -> None:
    assert contents(history.get_messages("s1")) == ["a", "c", "e"]


def test_get_messages_include_inactive_returns_every_row_in_id_order(history: SessionDB) -> None:
    assert contents(history.get_messages("s1", include_inactive=True)) == ["a", "b", "c", "d", "e"]


def test_get_messages_pages_with_limit_and_after_id(history: SessionDB) -> None:
    first = history.get_messages("s1", include_inactive=True, limit=2)
    assert contents(first) == ["a", "b"]
    rest = history.get_messages("s1", include_inactive=True, after_id=first[-1]["id"], limit=2)
    assert contents(rest) == ["c", "d"]


# --- conversations -----------------------------------------------------------------------------


@pytest.fixture
def convo(s1: SessionDB) -> list[dict[str, Any]]:
    """A user turn, an assistant tool call with reasoning, its result and a reply."""
    s1.append_messages(
        "s1",
        [
            {"role": "user", "content": "list files", "reasoning": "not for users"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call("c1")],
                "finish_reason": "tool_calls",
                "reasoning": "I should run ls",
                "reasoning_details": [{"type": "reasoning.text", "text": "ls"}],
            },
            {"role": "tool", "content": "a.txt", "tool_call_id": "c1", "tool_name": "terminal"},
            {"role": "assistant", "content": "There is a.txt", "finish_reason": "stop"},
        ],
    )
    return s1.get_messages_as_conversation("s1")


def test_conversation_user_message_has_role_content_and_uid(convo: list[dict[str, Any]]) -> None:
    user = convo[0]
    assert (user["role"], user["content"]) == ("user", "list files")
    assert HEX32.fullmatch(user["message_uid"])
    assert not {"tool_calls", "tool_call_id", "name", "reasoning"} & set(user)


def test_conversation_assistant_call_keeps_tool_calls_and_reasoning(
    convo: list[dict[str, Any]],
) -> None:
    assistant = convo[1]
    assert assistant["tool_calls"] == [call("c1")]
    assert assistant["reasoning"] == "I should run ls"
    assert assistant["reasoning_details"] == [{"type": "reasoning.text", "text": "ls"}]
    assert assistant["finish_reason"] == "tool_calls"
    assert set(assistant["_tool_call_uids"]) == {"c1"}


def test_conversation_tool_result_has_call_id_name_and_paired_uid(
    convo: list[dict[str, Any]],
) -> None:
    tool = convo[2]
    assert (tool["role"], tool["content"], tool["tool_call_id"], tool["name"]) == (
        "tool",
        "a.txt",
        "c1",
        "terminal",
    )
    assert tool["_tool_call_uid"] == convo[1]["_tool_call_uids"]["c1"]


def test_reasoning_only_reply_keeps_empty_content_and_exact_api_content(s1: SessionDB) -> None:
    reply = "  The answer is 42.\n\twith trailing space "
    s1.append_message(
        "s1",
        "assistant",
        None,
        reasoning=reply,
        reasoning_content=reply,
        api_content=reply,
        finish_reason="stop",
    )
    msg = s1.get_messages_as_conversation("s1")[0]
    assert msg["content"] == ""
    assert msg["api_content"] == reply and msg["reasoning_content"] == reply


def test_conversation_display_metadata_drops_the_owner_key(s1: SessionDB) -> None:
    meta = {"owner": {"marker": "gw:telegram:42:9001"}, "reactions": ["+1"]}
    s1.append_message("s1", "user", "hi", display_metadata=meta)
    assert s1.get_messages_as_conversation("s1")[0]["display_metadata"] == {"reactions": ["+1"]}
    assert s1.get_messages("s1")[0]["display_metadata"] == meta  # the stored row keeps it


def test_conversation_omits_display_metadata_that_held_only_the_owner(s1: SessionDB) -> None:
    s1.append_message("s1", "user", "hi", display_metadata={"owner": {"marker": "m"}})
    assert "display_metadata" not in s1.get_messages_as_conversation("s1")[0]


def test_conversation_leaves_out_inactive_rows(history: SessionDB) -> None:
    assert contents(history.get_messages_as_conversation("s1")) == ["a", "c", "e"]


# --- clear and delete --------------------------------------------------------------------------


def test_clear_messages_keeps_the_session_row(history: SessionDB) -> None:
    assert history.clear_messages("s1") is None  # the agent's signature
    assert history.get_messages("s1", include_inactive=True) == []
    assert history.get_session("s1") is not None
    assert counters(history, "s1") == (0, 0)


def test_delete_session_removes_the_row_and_its_messages(history: SessionDB) -> None:
    history.create_session("other", "cli")
    history.append_message("other", "user", "stays")
    assert history.delete_session("s1") is True
    assert history.get_session("s1") is None
    rows = history.store.conn.execute("SELECT session_id FROM messages").fetchall()
    assert [r[0] for r in rows] == ["other"]


def test_delete_session_repoints_children_to_its_parent(db: SessionDB) -> None:
    db.create_session("root", "cli")
    db.create_session("mid", "cli", parent_session_id="root")
    db.create_session("leaf", "cli", parent_session_id="mid")
    db.delete_session("mid")
    assert db.get_session("leaf")["parent_session_id"] == "root"


# --- the window around a message (preview of `sessions browse`) --------------------------------


@pytest.fixture
def ten(s1: SessionDB) -> list[int]:
    """Ten messages m0..m9 in s1 (and one in another session, interleaved); their ids."""
    s1.create_session("s2", "cli")
    out = []
    for i in range(10):
        out.append(s1.append_message("s1", "user", f"m{i}"))
        s1.append_message("s2", "user", f"other {i}")
    return out


def test_message_window_returns_neighbours_of_the_same_session_in_order(
    s1: SessionDB, ten: list[int]
) -> None:
    rows = s1.message_window("s1", ten[5], before=2, after=3)
    assert contents(rows) == ["m3", "m4", "m5", "m6", "m7", "m8"]


def test_message_window_is_cut_at_the_ends_of_the_session(s1: SessionDB, ten: list[int]) -> None:
    assert contents(s1.message_window("s1", ten[0], before=3, after=1)) == ["m0", "m1"]
    assert contents(s1.message_window("s1", ten[9], before=1, after=3)) == ["m8", "m9"]


def test_message_window_without_a_message_starts_the_session(s1: SessionDB, ten: list[int]) -> None:
    assert contents(s1.message_window("s1", None, before=1, after=1)) == ["m0", "m1", "m2"]


def test_message_window_skips_rewound_rows_but_keeps_the_compression_archive(
    s1: SessionDB, ten: list[int]
) -> None:
    conn = s1.store.conn
    conn.execute("UPDATE messages SET active = 0, compacted = 0 WHERE id = ?", (ten[4],))
    conn.execute("UPDATE messages SET active = 0, compacted = 1 WHERE id = ?", (ten[6],))
    rows = s1.message_window("s1", ten[5], before=1, after=1)
    assert contents(rows) == ["m3", "m5", "m6"]


def test_message_window_always_includes_the_message_it_is_around(
    s1: SessionDB, ten: list[int]
) -> None:
    s1.store.conn.execute("UPDATE messages SET active = 0, compacted = 0 WHERE id = ?", (ten[5],))
    assert contents(s1.message_window("s1", ten[5], before=1, after=1)) == ["m4", "m5", "m6"]
