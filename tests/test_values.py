"""Odd stored values (text timestamps, bytes, NULL ids) never break the read commands."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest
from clitools import load_sample, run
from hypothesis import given, settings, strategies as st

from hermes_state.shapes import values


def _odd_store() -> tuple[Path, str]:
    """Load the sample store and give it the values a foreign writer or damage leaves."""
    db = load_sample()
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")
        sid = conn.execute("SELECT id FROM sessions ORDER BY started_at DESC LIMIT 1").fetchone()[0]
        conn.executescript(
            f"""
            UPDATE messages SET timestamp = 'last tuesday'
             WHERE id = (SELECT min(id) FROM messages WHERE session_id = '{sid}');
            UPDATE sessions SET started_at = 'soon', ended_at = 'x', last_activity_at = X'00'
             WHERE id = (SELECT id FROM sessions ORDER BY started_at LIMIT 1 OFFSET 2);
            INSERT INTO sessions (id, source, started_at) VALUES (NULL, 'foreign', 1.7e9);
            INSERT INTO sessions (id, source, started_at, title, message_count, input_tokens)
                 VALUES (X'4142', X'01', 'never', X'00ff', 'many', 'lots');
            INSERT INTO messages (session_id, role, content, timestamp, tool_calls)
                 VALUES ('{sid}', X'00', X'ff00', 'nope', 'not json');
            INSERT INTO messages (session_id, role, content, timestamp, token_count)
                 VALUES ('{sid}', 'user', 5, 'x', 'y');
            """
        )
    finally:
        conn.close()
    return db, sid


@pytest.mark.parametrize(
    "args",
    [
        ("sessions", "list"),
        ("sessions", "list", "--json"),
        ("sessions", "list", "--sort", "active"),
        ("sessions", "show", "{sid}"),
        ("sessions", "show", "{sid}", "--all", "--json"),
        ("sessions", "search", "docker"),
        ("sessions", "stats"),
        ("sessions", "stats", "--json"),
        ("sessions", "export", "-o", "-"),
        ("sessions", "export", "-o", "-", "--format", "md"),
        ("sessions", "export", "-o", "-", "--format", "json"),
    ],
    ids=lambda a: " ".join(a[1:]),
)
def test_read_commands_tolerate_odd_values_in_any_store(args: tuple[str, ...]) -> None:
    _db, sid = _odd_store()
    result = run(*(a.format(sid=sid) for a in args))
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert "Traceback" not in result.stderr


def test_list_leaves_out_sessions_without_an_id_and_counts_accordingly() -> None:
    _odd_store()
    result = run("sessions", "list", "--limit", "100", "--json")
    listed = json.loads(result.stdout)
    ids = [s["id"] for s in listed["sessions"]]
    assert None not in ids and len(ids) == listed["total"] == 13


def test_a_text_timestamp_reads_as_none_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    values._warned.clear()
    with caplog.at_level(logging.WARNING, logger="hermes_state.shapes.values"):
        assert values.clean_value("timestamp", "last tuesday") is None
        assert values.clean_value("timestamp", "last friday") is None
        assert values.clean_value("timestamp", "1700000000.5") == 1700000000.5
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "the store holds a value that is not a time in column timestamp; it is shown as empty"
    ]


def test_clean_row_decodes_bytes_and_keeps_good_values() -> None:
    row = {"id": b"ab", "title": b"\xff", "message_count": "3", "started_at": 1.5, "x": "y"}
    assert values.clean_row(row) == {
        "id": "ab",
        "title": "\ufffd",
        "message_count": 3,
        "started_at": 1.5,
        "x": "y",
    }


_COLUMNS = sorted(values.TYPED_COLUMNS | values.BLOB_COLUMNS | {"id", "title", "source"})
_STORED = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),  # SQLite stores NaN as NULL; infinities do come back
    st.text(max_size=8),
    st.binary(max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(_COLUMNS), _STORED))
def test_clean_row_is_clean_value_on_every_column(row: dict) -> None:
    # clean_row skips what needs no cleaning; it must still agree with clean_value everywhere.
    want = {column: values.clean_value(column, value) for column, value in row.items()}
    assert values.clean_row(dict(row)) == want


def test_message_rows_read_bytes_as_text_and_leave_clean_rows_alone() -> None:
    from hermes_state.records.messages import get_messages
    from hermes_state.store.connection import open_store

    db, sid = _odd_store()
    with open_store(db, read_only=True) as store:
        rows = get_messages(store, sid, include_inactive=True)
    odd = [r for r in rows if r["timestamp"] is None]
    assert {type(r["role"]) for r in rows} == {str}
    assert any(r["role"] == "\x00" and r["content"] == "\ufffd\x00" for r in odd)
    clean = [r for r in rows if r not in odd]
    assert clean and all(isinstance(r["timestamp"], float | int) for r in clean)
