"""The transcript reader: the columns `sessions show` prints, read and decoded as get_messages."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_state.agent.db import SessionDB
from hermes_state.records import messages, transcript


def shown_columns(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript's columns of full message rows."""
    return [{k: r.get(k) for k in transcript.TRANSCRIPT_COLUMNS} for r in rows]


@pytest.fixture
def varied(db: SessionDB) -> SessionDB:
    """A session whose rows hold structured content, tool calls, reasoning and archived rows."""
    db.create_session("s1", "cli")
    calls = [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]
    db.append_messages(
        "s1",
        [
            {"role": "user", "content": "plain text"},
            {"role": "user", "content": [{"type": "text", "text": "structured"}]},
            {"role": "assistant", "content": "", "tool_calls": calls, "reasoning": "think"},
            {"role": "tool", "content": "out", "tool_call_id": "c1", "tool_name": "ls"},
            {"role": "assistant", "content": "old", "active": 0, "compacted": 1},
            {"role": "assistant", "content": "gone", "active": 0},
        ],
    )
    # A writer that stored plain text where JSON belongs: shown as no call, as get_messages does.
    db.store.conn.execute(
        "UPDATE messages SET tool_calls = 'not json' WHERE session_id = 's1' AND content = 'out'"
    )
    return db


def test_transcript_rows_equal_get_messages_in_the_shown_columns(varied: SessionDB) -> None:
    full = messages.get_messages(varied.store, "s1", include_inactive=True)
    rows = list(transcript.iter_transcript(varied.store, "s1"))
    assert rows == shown_columns(full)
    assert rows[1]["content"] == [{"type": "text", "text": "structured"}]
    assert rows[2]["tool_calls"][0]["function"]["name"] == "ls"
    assert rows[3]["tool_calls"] == []


def test_transcript_pages_through_a_session_in_chunks(
    varied: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transcript, "CHUNK", 4)
    got = [m["content"] for m in transcript.iter_transcript(varied.store, "s1")]
    assert len(got) == 6 and got[0] == "plain text" and got[-1] == "gone"
