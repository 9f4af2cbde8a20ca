"""The agent's message API on SessionDB: conversation replay and repair, writing the
conversation's own dicts back, resume, windows, lookups, rewind, export and import."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hermes_state.agent.db import SessionDB
from hermes_state.agent.rewind import RewindTargetError, TranscriptChangedError
from hermes_state.store.errors import HermesStateError

T0 = 1_700_000_000.0
CALL = {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{}"}}


def contents(messages: list[dict[str, Any]]) -> list[Any]:
    """The content of each message, in order."""
    return [m["content"] for m in messages]


def chat(db: SessionDB, sid: str, *texts: str, at: float = T0) -> list[int]:
    """Append alternating user/assistant messages with the given texts; return their ids."""
    return db.append_messages(
        sid,
        [
            {"role": "user" if i % 2 == 0 else "assistant", "content": t, "timestamp": at + i}
            for i, t in enumerate(texts)
        ],
    )


def only(db: SessionDB, sid: str, **fields: Any) -> dict[str, Any]:
    """Append one message to a fresh session and return it as the conversation replays it."""
    db.create_session(sid, "cli")
    db.append_messages(sid, [fields])
    [msg] = db.get_messages_as_conversation(sid)
    return msg


# --- conversation replay -------------------------------------------------------------------------


def test_replay_marks_an_observed_message(db: SessionDB) -> None:
    db.create_session("s", "telegram")
    db.append_message("s", "user", "seen in the group", observed=True)
    db.append_message("s", "user", "said to the bot")
    first, second = db.get_messages_as_conversation("s")
    assert first["observed"] is True
    assert "observed" not in second


def test_replay_carries_the_platform_message_id_as_message_id(db: SessionDB) -> None:
    msg = only(db, "s", role="user", content="hi", platform_message_id="tg-991")
    assert msg["message_id"] == "tg-991"


def test_replay_leaves_out_an_empty_reasoning(db: SessionDB) -> None:
    msg = only(db, "s", role="assistant", content="answer", reasoning="")
    assert "reasoning" not in msg


def test_replay_keeps_an_empty_reasoning_content(db: SessionDB) -> None:
    msg = only(db, "s", role="assistant", content="answer", reasoning_content="")
    assert msg["reasoning_content"] == ""


def test_replay_keeps_a_non_empty_reasoning(db: SessionDB) -> None:
    msg = only(db, "s", role="assistant", content="answer", reasoning="thought it over")
    assert msg["reasoning"] == "thought it over"


def test_replay_cuts_memory_context_blocks_from_user_text(db: SessionDB) -> None:
    text = "Hello <memory-context>user likes tea</memory-context> there"
    msg = only(db, "s", role="user", content=text)
    assert "memory-context" not in msg["content"] and "likes tea" not in msg["content"]
    assert msg["content"].startswith("Hello") and msg["content"].endswith("there")


def test_replay_cuts_memory_context_blocks_from_assistant_text(db: SessionDB) -> None:
    text = "<memory-context>\nrecalled\n</memory-context>Sure, tea it is."
    msg = only(db, "s", role="assistant", content=text)
    assert msg["content"] == "Sure, tea it is."


def test_replay_keeps_memory_context_in_tool_output(db: SessionDB) -> None:
    text = "<memory-context>raw file</memory-context>"
    msg = only(db, "s", role="tool", content=text, tool_call_id="c1", tool_name="read")
    assert msg["content"] == text


def test_replay_keeps_api_content_byte_for_byte(db: SessionDB) -> None:
    api = "Hi <memory-context>user likes tea</memory-context>  "
    msg = only(db, "s", role="user", content="Hi", api_content=api)
    assert msg["api_content"] == api


def test_replay_leaves_the_stored_text_with_its_memory_block(db: SessionDB) -> None:
    text = "Hello <memory-context>user likes tea</memory-context> there"
    only(db, "s", role="user", content=text)
    assert db.get_messages("s")[0]["content"] == text


def test_replayed_tool_row_carries_both_name_and_tool_name(db: SessionDB) -> None:
    msg = only(db, "s", role="tool", content="3 hits", tool_call_id="call_1", tool_name="search")
    assert (msg["name"], msg["tool_name"], msg["tool_call_id"]) == ("search", "search", "call_1")


def test_replayed_messages_are_marked_as_already_persisted(db: SessionDB) -> None:
    msg = only(db, "s", role="user", content="hi")
    assert msg["_db_persisted"] is True


# --- repair_alternation --------------------------------------------------------------------------


def _broken(db: SessionDB) -> None:
    """A transcript a provider would reject: an unanswered call, an orphan result, a retry."""
    db.create_session("s", "cli")
    db.append_messages(
        "s",
        [
            {"role": "user", "content": "find it"},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "content": "stray", "tool_call_id": "call_gone", "tool_name": "x"},
            {"role": "user", "content": "try again"},
            {"role": "user", "content": "try again"},
            {"role": "assistant", "content": "found it"},
        ],
    )


def test_repair_alternation_drops_a_tool_call_turn_that_got_no_result(db: SessionDB) -> None:
    _broken(db)
    repaired = db.get_messages_as_conversation("s", repair_alternation=True)
    assert not any(m.get("tool_calls") for m in repaired)


def test_repair_alternation_drops_a_tool_result_without_its_call(db: SessionDB) -> None:
    _broken(db)
    repaired = db.get_messages_as_conversation("s", repair_alternation=True)
    assert not any(m["role"] == "tool" for m in repaired)


def test_repair_alternation_shows_a_repeated_user_prompt_once(db: SessionDB) -> None:
    _broken(db)
    repaired = db.get_messages_as_conversation("s", repair_alternation=True)
    assert contents(repaired) == ["find it", "try again", "found it"]


def test_repair_alternation_leaves_no_unanswered_call_on_a_message_with_text(
    db: SessionDB,
) -> None:
    db.create_session("s", "cli")
    db.append_messages(
        "s",
        [
            {"role": "user", "content": "find it"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [CALL]},
            {"role": "user", "content": "hello?"},
        ],
    )
    repaired = db.get_messages_as_conversation("s", repair_alternation=True)
    assert not any(m.get("tool_calls") for m in repaired)


def test_repair_alternation_keeps_a_tool_call_with_its_result(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_messages(
        "s",
        [
            {"role": "user", "content": "find it"},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "content": "hit", "tool_call_id": "call_1", "tool_name": "search"},
            {"role": "assistant", "content": "found it"},
        ],
    )
    repaired = db.get_messages_as_conversation("s", repair_alternation=True)
    assert [m["role"] for m in repaired] == ["user", "assistant", "tool", "assistant"]


def test_repair_alternation_keeps_the_answered_call_of_two_and_the_text(db: SessionDB) -> None:
    other = {**CALL, "id": "call_2"}
    db.create_session("s", "cli")
    db.append_messages(
        "s",
        [
            {"role": "user", "content": "find it"},
            {"role": "assistant", "content": "Two looks.", "tool_calls": [CALL, other]},
            {"role": "tool", "content": "hit", "tool_call_id": "call_2", "tool_name": "search"},
        ],
    )
    repaired = db.get_messages_as_conversation("s", repair_alternation=True)
    assert repaired[1]["content"] == "Two looks."
    assert [c["id"] for c in repaired[1]["tool_calls"]] == ["call_2"]
    assert [m["role"] for m in repaired] == ["user", "assistant", "tool"]


def test_repair_alternation_leaves_the_stored_rows_unchanged(db: SessionDB) -> None:
    _broken(db)
    before = db.get_messages("s")
    db.get_messages_as_conversation("s", repair_alternation=True)
    assert db.get_messages("s") == before
    assert len(db.get_messages_as_conversation("s")) == 6


# --- writing the conversation's own dicts --------------------------------------------------------


def test_append_messages_stores_name_as_tool_name(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_messages("s", [{"role": "tool", "content": "ok", "tool_call_id": "c", "name": "ls"}])
    assert db.get_messages("s")[0]["tool_name"] == "ls"


def test_append_messages_stores_message_id_as_platform_message_id(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_messages("s", [{"role": "user", "content": "hi", "message_id": "tg-5"}])
    assert db.get_messages("s")[0]["platform_message_id"] == "tg-5"
    assert db.has_platform_message_id("s", "tg-5")


def test_append_messages_ignores_the_conversations_private_keys(db: SessionDB) -> None:
    db.create_session("s", "cli")
    extras = {"_db_persisted": True, "_row_id": 77, "something_else": [1, 2]}
    db.append_messages("s", [{"role": "user", "content": "hi", **extras}])
    [row] = db.get_messages("s")
    assert row["content"] == "hi" and row["id"] != 77


def test_replace_messages_accepts_a_replayed_conversation(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_messages(
        "s",
        [
            {"role": "user", "content": "find", "platform_message_id": "tg-1"},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "content": "hit", "tool_call_id": "call_1", "tool_name": "search"},
            {"role": "assistant", "content": "done"},
        ],
    )
    conversation = db.get_messages_as_conversation("s")
    db.replace_messages("s", conversation)
    rows = db.get_messages("s")
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[0]["platform_message_id"] == "tg-1"
    assert rows[2]["tool_name"] == "search"
    assert db.get_messages_as_conversation("s") == conversation


def test_replace_messages_keeps_each_messages_uid(db: SessionDB) -> None:
    db.create_session("s", "cli")
    chat(db, "s", "q", "a")
    conversation = db.get_messages_as_conversation("s")
    db.replace_messages("s", conversation[:1])
    assert [r["message_uid"] for r in db.get_messages("s")] == [conversation[0]["message_uid"]]


# --- resume -------------------------------------------------------------------------------------


def _continued(db: SessionDB) -> None:
    """A conversation compression continued: a holds q1/a1, its continuation b q2/a2."""
    db.create_session("a", "cli", started_at=T0)
    chat(db, "a", "q1", "a1")
    db.rotate_session("a", "b", started_at=T0 + 100)
    chat(db, "b", "q2", "a2", at=T0 + 100)


def test_resume_sends_the_model_the_sessions_own_messages(db: SessionDB) -> None:
    _continued(db)
    model, _display = db.get_resume_conversations("b")
    assert contents(model) == ["q2", "a2"]


def test_resume_shows_the_user_the_whole_conversation(db: SessionDB) -> None:
    _continued(db)
    _model, display = db.get_resume_conversations("b")
    assert contents(display) == ["q1", "a1", "q2", "a2"]


def test_resume_model_conversation_is_repaired(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_messages(
        "s",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
        ],
    )
    model, display = db.get_resume_conversations("s")
    assert contents(model) == ["go"]
    assert len(display) == 2


def test_resume_display_shows_a_prompt_replayed_by_the_continuation_once(
    db: SessionDB,
) -> None:
    db.create_session("a", "cli", started_at=T0)
    chat(db, "a", "q1", "a1", "q2")
    db.rotate_session(
        "a", "b", kept_messages=[{"role": "user", "content": "q2"}], started_at=T0 + 100
    )
    db.append_messages("b", [{"role": "assistant", "content": "a2", "timestamp": T0 + 101}])
    _model, display = db.get_resume_conversations("b")
    assert contents(display) == ["q1", "a1", "q2", "a2"]


def test_ancestor_display_prefix_is_the_ancestors_messages_only(db: SessionDB) -> None:
    _continued(db)
    assert contents(db.get_ancestor_display_prefix("b")) == ["q1", "a1"]


def test_ancestor_display_prefix_of_a_root_is_empty(db: SessionDB) -> None:
    _continued(db)
    assert db.get_ancestor_display_prefix("a") == []


def test_resolve_resume_session_id_follows_compression_to_the_live_tip(db: SessionDB) -> None:
    _continued(db)
    assert db.resolve_resume_session_id("a") == "b"
    assert db.resolve_resume_session_id("b") == "b"


def test_resolve_resume_session_id_skips_an_empty_last_continuation(db: SessionDB) -> None:
    _continued(db)
    db.rotate_session("b", "c", started_at=T0 + 200)
    assert db.resolve_resume_session_id("a") == "b"


def test_resolve_resume_session_id_without_messages_is_the_id_itself(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.resolve_resume_session_id("s") == "s"


# --- windows -------------------------------------------------------------------------------------


def _ten(db: SessionDB) -> list[int]:
    """Session s with ten alternating messages m0..m9; return their ids."""
    db.create_session("s", "cli")
    return chat(db, "s", *(f"m{i}" for i in range(10)))


def test_messages_around_returns_the_window_and_counts_on_each_side(db: SessionDB) -> None:
    ids = _ten(db)
    got = db.get_messages_around("s", ids[5], window=2)
    assert [r["id"] for r in got["window"]] == ids[3:8]
    assert (got["messages_before"], got["messages_after"]) == (2, 2)


def test_messages_around_near_the_start_counts_fewer_before(db: SessionDB) -> None:
    ids = _ten(db)
    got = db.get_messages_around("s", ids[1], window=3)
    assert [r["id"] for r in got["window"]] == ids[0:5]
    assert (got["messages_before"], got["messages_after"]) == (1, 3)


def test_messages_around_an_anchor_of_another_session_is_empty(db: SessionDB) -> None:
    _ten(db)
    db.create_session("other", "cli")
    [foreign] = chat(db, "other", "elsewhere")
    got = db.get_messages_around("s", foreign, window=2)
    assert got == {"window": [], "messages_before": 0, "messages_after": 0}


def test_messages_around_includes_rows_outside_the_live_generation(db: SessionDB) -> None:
    ids = _ten(db)
    db.rewind_to_message("s", ids[6])
    got = db.get_messages_around("s", ids[5], window=2)
    assert [r["id"] for r in got["window"]] == ids[3:8]


def test_anchored_view_adds_the_opening_and_closing_messages(db: SessionDB) -> None:
    ids = _ten(db)
    got = db.get_anchored_view("s", ids[5], window=1, bookend=2)
    assert [r["id"] for r in got["window"]] == ids[4:7]
    assert [r["id"] for r in got["bookend_start"]] == ids[0:2]
    assert [r["id"] for r in got["bookend_end"]] == ids[8:10]


def test_anchored_view_keeps_only_the_given_roles_but_always_the_anchor(db: SessionDB) -> None:
    db.create_session("s", "cli")
    ids = db.append_messages(
        "s",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "content": "out", "tool_call_id": "call_1", "tool_name": "search"},
            {"role": "assistant", "content": "done"},
        ],
    )
    around_tool = db.get_anchored_view("s", ids[2], window=2, bookend=0)
    assert [r["id"] for r in around_tool["window"]] == ids
    around_answer = db.get_anchored_view("s", ids[3], window=3, bookend=0)
    assert [r["role"] for r in around_answer["window"]] == ["user", "assistant", "assistant"]


# --- lookups -------------------------------------------------------------------------------------


def test_has_archived_messages_is_false_for_a_live_only_session(db: SessionDB) -> None:
    db.create_session("s", "cli")
    chat(db, "s", "q", "a")
    assert db.has_archived_messages("s") is False


def test_has_archived_messages_is_true_after_a_compaction(db: SessionDB) -> None:
    db.create_session("s", "cli")
    chat(db, "s", "q", "a")
    db.compact_session("s", [{"role": "user", "content": "summary"}])
    assert db.has_archived_messages("s") is True


def test_has_archived_messages_is_true_after_a_rewind(db: SessionDB) -> None:
    db.create_session("s", "cli")
    ids = chat(db, "s", "q", "a", "q2")
    db.rewind_to_message("s", ids[2])
    assert db.has_archived_messages("s") is True


def test_has_platform_message_id_is_scoped_to_the_session(db: SessionDB) -> None:
    db.create_session("s", "telegram")
    db.create_session("other", "telegram")
    db.append_message("s", "user", "hi", platform_message_id="tg-1")
    assert db.has_platform_message_id("s", "tg-1") is True
    assert db.has_platform_message_id("s", "tg-2") is False
    assert db.has_platform_message_id("other", "tg-1") is False


def test_set_latest_user_api_content_writes_the_newest_user_row(db: SessionDB) -> None:
    db.create_session("s", "cli")
    ids = chat(db, "s", "hello", "hi there", "hello")
    assert db.set_latest_user_api_content("s", "hello", "hello + recalled memory") == 1
    rows = {r["id"]: r for r in db.get_messages("s")}
    assert rows[ids[2]]["api_content"] == "hello + recalled memory"
    assert rows[ids[0]]["api_content"] is None


def test_set_latest_user_api_content_refuses_when_the_content_differs(db: SessionDB) -> None:
    db.create_session("s", "cli")
    chat(db, "s", "hello")
    assert db.set_latest_user_api_content("s", "something else", "api text") == 0
    assert db.get_messages("s")[0]["api_content"] is None


# --- rewind --------------------------------------------------------------------------------------


def _four(db: SessionDB) -> list[int]:
    """Session s with u1, a1, u2, a2; return their ids."""
    db.create_session("s", "cli")
    return chat(db, "s", "u1", "a1", "u2", "a2")


def test_rewind_hides_the_target_and_everything_after_it(db: SessionDB) -> None:
    ids = _four(db)
    result = db.rewind_to_message("s", ids[2])
    assert result["rewound_count"] == 2
    assert result["new_head_id"] == ids[1]
    assert result["target_message"]["content"] == "u2"
    assert contents(db.get_messages("s")) == ["u1", "a1"]


def test_rewound_rows_stay_on_disk(db: SessionDB) -> None:
    ids = _four(db)
    db.rewind_to_message("s", ids[2])
    every = db.get_messages("s", include_inactive=True)
    assert contents(every) == ["u1", "a1", "u2", "a2"]
    assert [r["active"] for r in every] == [1, 1, 0, 0]


def test_rewind_counts_up_even_when_nothing_is_left_to_hide(db: SessionDB) -> None:
    ids = _four(db)
    db.rewind_to_message("s", ids[2])
    again = db.rewind_to_message("s", ids[2])
    assert again["rewound_count"] == 0
    assert db.get_session("s")["rewind_count"] == 2


def test_rewind_to_a_non_user_message_is_refused_with_a_typed_error(db: SessionDB) -> None:
    ids = _four(db)
    with pytest.raises(RewindTargetError) as caught:
        db.rewind_to_message("s", ids[1])
    assert isinstance(caught.value, HermesStateError) and isinstance(caught.value, ValueError)
    assert caught.value.hint
    assert len(db.get_messages("s")) == 4
    assert db.get_session("s")["rewind_count"] == 0


def test_rewind_to_a_message_of_another_session_is_refused(db: SessionDB) -> None:
    _four(db)
    db.create_session("other", "cli")
    [foreign] = chat(db, "other", "elsewhere")
    with pytest.raises(RewindTargetError):
        db.rewind_to_message("s", foreign)


def test_rewind_refuses_a_transcript_that_changed_since_it_was_shown(db: SessionDB) -> None:
    ids = _four(db)
    with pytest.raises(TranscriptChangedError):
        db.rewind_to_message("s", ids[2], expected_active_ids=ids[:3])
    assert len(db.get_messages("s")) == 4


def test_restore_rewound_brings_the_rows_back(db: SessionDB) -> None:
    ids = _four(db)
    db.rewind_to_message("s", ids[2])
    assert db.restore_rewound("s", ids[2]) == 2
    assert contents(db.get_messages("s")) == ["u1", "a1", "u2", "a2"]
    assert db.get_session("s")["message_count"] == 4


def test_list_recent_user_messages_is_newest_first_with_previews(db: SessionDB) -> None:
    db.create_session("s", "cli")
    long = "word " * 40
    ids = chat(db, "s", "first", "reply", long)
    got = db.list_recent_user_messages("s")
    assert [r["id"] for r in got] == [ids[2], ids[0]]
    assert len(got[0]["preview"]) == 80 and got[0]["preview"].endswith("...")
    assert got[1]["preview"] == "first"


def test_list_recent_user_messages_names_the_parts_of_an_image_prompt(db: SessionDB) -> None:
    db.create_session("s", "cli")
    image = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    db.append_messages(
        "s", [{"role": "user", "content": [{"type": "text", "text": "what"}, *image]}]
    )
    [row] = db.list_recent_user_messages("s")
    assert row["preview"] == "what [image_url]"


def test_rewind_to_the_first_message_leaves_no_live_head(db: SessionDB) -> None:
    ids = _four(db)
    result = db.rewind_to_message("s", ids[0])
    assert (result["rewound_count"], result["new_head_id"]) == (4, None)
    assert db.get_session("s")["message_count"] == 0


def test_list_recent_user_messages_leaves_out_rewound_prompts_unless_asked(
    db: SessionDB,
) -> None:
    ids = _four(db)
    db.rewind_to_message("s", ids[2])
    assert [r["id"] for r in db.list_recent_user_messages("s")] == [ids[0]]
    every = db.list_recent_user_messages("s", include_inactive=True)
    assert [r["id"] for r in every] == [ids[2], ids[0]]


# --- export --------------------------------------------------------------------------------------


def test_export_session_has_the_live_messages_only_by_default(db: SessionDB) -> None:
    ids = _four(db)
    db.rewind_to_message("s", ids[2])
    record = db.export_session("s")
    assert record is not None
    assert contents(record["messages"]) == ["u1", "a1"]


def test_export_session_with_include_inactive_has_every_generation(db: SessionDB) -> None:
    ids = _four(db)
    db.rewind_to_message("s", ids[2])
    record = db.export_session("s", include_inactive=True)
    assert record is not None
    assert contents(record["messages"]) == ["u1", "a1", "u2", "a2"]


def test_export_session_with_include_compacted_adds_the_compression_archive(
    db: SessionDB,
) -> None:
    db.create_session("s", "cli")
    chat(db, "s", "q", "a")
    db.compact_session("s", [{"role": "user", "content": "summary"}])
    live = db.export_session("s")
    archived = db.export_session("s", include_compacted=True)
    assert live is not None and archived is not None
    assert contents(live["messages"]) == ["summary"]
    assert sorted(contents(archived["messages"])) == ["a", "q", "summary"]


def test_export_session_of_an_unknown_id_is_none(db: SessionDB) -> None:
    assert db.export_session("nope") is None


def test_export_session_lineage_joins_every_part_of_the_conversation(db: SessionDB) -> None:
    _continued(db)
    record = db.export_session_lineage("a")
    assert record is not None
    assert record["id"] == "b"
    assert record["lineage_session_ids"] == ["a", "b"]
    assert [s["id"] for s in record["segments"]] == ["a", "b"]
    assert contents(record["messages"]) == ["q1", "a1", "q2", "a2"]
    assert record["message_count"] == 4


def test_export_session_lineage_of_an_unknown_id_is_none(db: SessionDB) -> None:
    assert db.export_session_lineage("nope") is None


# --- import --------------------------------------------------------------------------------------


def entry(sid: str, *texts: str, **columns: Any) -> dict[str, Any]:
    """One session as an export lists it."""
    return {
        "id": sid,
        "source": "cli",
        "started_at": T0,
        "messages": [{"role": "user", "content": t, "timestamp": T0} for t in texts],
        **columns,
    }


def test_import_sessions_writes_every_session_of_a_good_list(db: SessionDB) -> None:
    summary = db.import_sessions([entry("a", "hello"), entry("b", "hi", "there")])
    assert summary["ok"] is True
    assert (summary["imported"], summary["imported_ids"], summary["messages"]) == (
        2,
        ["a", "b"],
        3,
    )
    assert contents(db.get_messages("b")) == ["hi", "there"]


def test_import_sessions_with_one_bad_entry_writes_nothing(db: SessionDB) -> None:
    summary = db.import_sessions([entry("good", "hi"), {"id": "bad", "messages": "not a list"}])
    assert summary["ok"] is False and summary["imported"] == 0
    [error] = summary["errors"]
    assert (error["index"], error["session_id"]) == (1, "bad")
    assert error["error"]
    assert db.get_session("good") is None


def test_import_sessions_refused_while_writing_rolls_back_the_whole_list(
    db: SessionDB,
) -> None:
    db.create_session("holder", "cli")
    db.set_session_title("holder", "Taken title")
    summary = db.import_sessions([entry("first", "hi"), entry("second", title="Taken title")])
    assert summary["ok"] is False
    [error] = summary["errors"]
    assert (error["index"], error["session_id"]) == (1, "second")
    assert db.get_session("first") is None and db.get_session("second") is None


def test_import_sessions_reports_every_bad_entry_with_its_index(db: SessionDB) -> None:
    summary = db.import_sessions(
        [{"id": ""}, entry("ok", "fine"), {"id": "x", "messages": [{"role": ""}]}]
    )
    assert [e["index"] for e in summary["errors"]] == [0, 2]


def test_import_sessions_skips_a_session_that_exists(db: SessionDB) -> None:
    db.create_session("a", "cli")
    chat(db, "a", "original")
    summary = db.import_sessions([entry("a", "imported"), entry("b", "new")])
    assert (summary["skipped"], summary["skipped_ids"]) == (1, ["a"])
    assert summary["imported_ids"] == ["b"]
    assert contents(db.get_messages("a")) == ["original"]


def test_import_sessions_detaches_a_child_whose_parent_is_missing(db: SessionDB) -> None:
    summary = db.import_sessions([entry("kid", "hi", parent_session_id="gone")])
    assert summary["detached"] == 1
    assert db.get_session("kid")["parent_session_id"] is None


def test_import_sessions_links_a_child_to_a_parent_later_in_the_list(db: SessionDB) -> None:
    summary = db.import_sessions([entry("kid", "hi", parent_session_id="mum"), entry("mum")])
    assert summary["detached"] == 0
    assert db.get_session("kid")["parent_session_id"] == "mum"


def test_import_sessions_breaks_a_parent_cycle(db: SessionDB) -> None:
    summary = db.import_sessions(
        [entry("a", parent_session_id="b"), entry("b", parent_session_id="a")]
    )
    assert summary["ok"] is True and summary["detached"] == 1
    parents = {s: db.get_session(s)["parent_session_id"] for s in ("a", "b")}
    linked = [(kid, mum) for kid, mum in parents.items() if mum is not None]
    assert linked in ([("a", "b")], [("b", "a")])


def test_import_sessions_does_not_carry_over_runtime_state(db: SessionDB) -> None:
    live = entry(
        "s",
        "hi",
        session_key="agent:main:telegram:dm:1",
        handoff_state="pending",
        handoff_platform="telegram",
        rewind_count=3,
        compression_failure_cooldown_until=T0 + 10**9,
    )
    assert db.import_sessions([live])["ok"] is True
    row = db.get_session("s")
    assert (row["session_key"], row["handoff_state"], row["handoff_platform"]) == (
        None,
        None,
        None,
    )
    assert row["rewind_count"] == 0
    assert row["compression_failure_cooldown_until"] is None


def test_exported_session_imports_into_another_store(db: SessionDB, tmp_path: Path) -> None:
    db.create_session("s", "cli", model="m1")
    chat(db, "s", "q", "a")
    record = db.export_session("s")
    assert record is not None
    with SessionDB(tmp_path / "other.db") as other:
        summary = other.import_sessions([record])
        assert summary["imported_ids"] == ["s"]
        assert other.get_session("s")["model"] == "m1"
        assert contents(other.get_messages("s")) == ["q", "a"]
