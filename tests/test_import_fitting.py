"""Fitting imports into the target store: kept message ids, change feeds, prompts, usage rows.

Every test works on real SQLite stores (our schema, made by ``open_store``; older layouts made
from it by dropping a table) and checks what the import wrote, not only what it reported.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clitools import load_sample, run
from typer.testing import Result

from hermes_state.records import messages, sessions
from hermes_state.store.connection import Store, open_store
from hermes_state.store.home import default_db_path
from hermes_state.transfer import export, portability
from hermes_state.transfer.import_target import prompt_hash
from hermes_state.upkeep import deletion

DOCKER = "20261118_091502_a1c9e2"
NO_TEXT_NOTE = "sessions.system_prompt_hash (no prompt text in the file) (1)"


@pytest.fixture
def store(hermes_home: Path) -> Iterator[Store]:
    """A writable store in the test's home."""
    with open_store(hermes_home / "state.db") as s:
        yield s


@pytest.fixture
def other(tmp_path: Path) -> Iterator[Store]:
    """A second, empty writable store."""
    with open_store(tmp_path / "other" / "state.db") as s:
        yield s


def _record(
    sid: str, started_at: float = 1_700_000_000.5, n: int = 2, **extra: Any
) -> dict[str, Any]:
    """Return an export record of one session with n messages (no row ids)."""
    msgs = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{sid} #{i}",
            "timestamp": started_at + i + 1,
        }
        for i in range(n)
    ]
    return {"id": sid, "source": "cli", "started_at": started_at, "messages": msgs, **extra}


def _materialized(records: Iterator[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return export records with their lazy message iterators read into lists."""
    return [{**r, "messages": list(r["messages"])} for r in records]


def _dump(store: Store, path: Path, **filters: Any) -> Path:
    """Export the store's sessions (export_all filters) to a new JSONL file; return its path."""
    export.export_to_path(export.export_all(store, **filters), path)
    return path


def _rows(store: Store, sid: str | None = None) -> list[tuple[Any, ...]]:
    """Return (id, session_id, message_uid, content) of the messages, by id."""
    where, params = ("WHERE session_id = ?", [sid]) if sid is not None else ("", [])
    sql = f"SELECT id, session_id, message_uid, content FROM messages {where} ORDER BY id"
    return [tuple(r) for r in store.conn.execute(sql, params)]


def _leave_a_gap(store: Store, n: int = 5) -> None:
    """Use up n message ids in the store and free them again (later ids start after a gap)."""
    assert portability.import_sessions(store, [_record("gone", 1.0, n=n)]).ok
    deletion.delete_session(store, "gone")


def _session_column(store: Store, sid: str, column: str) -> Any:
    """Return one stored column of a session row (as stored, prompts not resolved)."""
    row = store.conn.execute(f"SELECT {column} FROM sessions WHERE id = ?", (sid,)).fetchone()
    assert row is not None, sid
    return row[0]


def _without_table(path: Path, table: str) -> Path:
    """Create a store of our schema at path, then drop one of its tables (an older layout)."""
    open_store(path).close()
    conn = sqlite3.connect(path)
    try:
        conn.execute(f"DROP TABLE {table}")
        conn.commit()
    finally:
        conn.close()
    return path


def _usage(store: Store, sid: str) -> list[dict[str, Any]]:
    """Return a session's session_model_usage rows (without session_id), by model and task."""
    rows = store.conn.execute(
        "SELECT * FROM session_model_usage WHERE session_id = ? ORDER BY model, task", (sid,)
    )
    return [{k: r[k] for k in r.keys() if k != "session_id"} for r in rows]  # noqa: SIM118


# --- message ids ----------------------------------------------------------------------------


def test_round_trip_into_an_empty_store_keeps_every_message_id(
    store: Store, other: Store, tmp_path: Path
) -> None:
    _leave_a_gap(store)  # fresh ids in the target would then differ from the exported ones
    load_sample(store.path)
    assert min(r[0] for r in _rows(store)) == 6
    dump = _dump(store, tmp_path / "all.jsonl")
    result = portability.import_sessions(other, dump)
    assert (result.imported, result.errors) == (12, [])
    assert _rows(other) == _rows(store)
    assert (result.kept_ids, result.renumbered) == (53, 0)
    assert not any("new ids" in w for w in result.warnings)


def test_replacing_a_session_with_its_own_export_keeps_every_id(
    store: Store, tmp_path: Path
) -> None:
    load_sample(store.path)
    before = _rows(store)
    dump = _dump(store, tmp_path / "all.jsonl")
    result = portability.import_sessions(store, dump, on_conflict="replace")
    assert (result.replaced, result.errors) == (12, [])
    assert (result.kept_ids, result.renumbered) == (53, 0)
    assert _rows(store) == before


def test_a_session_whose_ids_are_partly_taken_is_renumbered_as_a_whole(
    store: Store, other: Store, tmp_path: Path
) -> None:
    # Source: "mover" gets ids 1-4, then "stayer" 5-6 (it started earlier, so it is exported
    # first). The target already holds ids 1-2 (another session): mover's 3 and 4 are free.
    assert portability.import_sessions(store, [_record("mover", 2000.0, n=4)]).ok
    assert portability.import_sessions(store, [_record("stayer", 1000.0, n=2)]).ok
    assert portability.import_sessions(other, [_record("taken", 500.0, n=2)]).ok
    original = _rows(store, "mover")
    assert [r[0] for r in original] == [1, 2, 3, 4]
    result = portability.import_sessions(other, _dump(store, tmp_path / "all.jsonl"))
    assert (result.imported, result.errors) == (2, [])
    assert _rows(other, "stayer") == _rows(store, "stayer")  # its ids were free: kept
    moved = _rows(other, "mover")
    # New ids for all four (none kept its old one), ascending in the conversation's order.
    assert [r[3] for r in moved] == [r[3] for r in original]
    assert [r[2] for r in moved] == [r[2] for r in original]
    assert all(new[0] != old[0] for new, old in zip(moved, original, strict=True))
    assert [r[0] for r in moved] == sorted(r[0] for r in moved)
    assert [r[0] for r in _rows(other, "taken")] == [1, 2]  # the target's own are untouched
    assert (result.kept_ids, result.renumbered) == (2, 4)
    assert (
        "4 message(s) got new ids, above every id this profile's stores and the file use (a "
        "message keeps its id only when it is above every id the profile has used); 2 kept "
        "their ids"
    ) in result.warnings


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param([5, 3, 9], id="not-ascending"),
        pytest.param([4, 4, 6], id="repeated"),
        pytest.param([7, None, 9], id="one-missing"),
        pytest.param([0, 1, 2], id="zero"),
        pytest.param(["1", "2", "3"], id="text"),
        pytest.param([True, 2, 3], id="boolean"),
        pytest.param([-3, -2, -1], id="negative"),
    ],
)
def test_messages_without_usable_ids_import_with_fresh_ids_in_file_order(
    other: Store, ids: list[Any]
) -> None:
    assert portability.import_sessions(other, [_record("first", 500.0, n=1)]).ok  # id 1 taken
    record = _record("odd", n=3)
    for msg, row_id in zip(record["messages"], ids, strict=True):
        if row_id is not None:
            msg["id"] = row_id
    result = portability.import_sessions(other, [record])
    assert (result.imported, result.errors) == (1, [])
    assert (result.kept_ids, result.renumbered) == (0, 0)
    stored = _rows(other, "odd")
    # Fresh ids come after the store's (1) and every id the file names, in file order.
    high = max([1, *(i for i in ids if type(i) is int)])
    assert [r[0] for r in stored] == [high + 1, high + 2, high + 3]
    assert [r[3] for r in stored] == ["odd #0", "odd #1", "odd #2"]


# --- change feeds ---------------------------------------------------------------------------


def test_a_change_feed_appends_only_new_messages_once(
    store: Store, other: Store, tmp_path: Path
) -> None:
    _leave_a_gap(store, 3)
    assert portability.import_sessions(store, [_record("a", 1000.0), _record("b", 2000.0)]).ok
    first = portability.import_sessions(other, _dump(store, tmp_path / "all.jsonl"))
    assert (first.imported, first.kept_ids) == (2, 4)
    high = max(r[0] for r in _rows(store))
    assert high == 7
    messages.append_messages(
        store, "a", [{"role": "user", "content": "a later"}, {"role": "assistant", "content": "ok"}]
    )
    assert portability.import_sessions(store, [_record("c", 3000.0)]).ok

    feed = _materialized(export.export_all(store, after_id=high))
    assert [r["id"] for r in feed] == ["a", "c"]  # b has nothing above the id
    assert {r["messages_after_id"] for r in feed} == {high}
    assert [[m["id"] for m in r["messages"]] for r in feed] == [[8, 9], [10, 11]]
    assert [m["content"] for m in feed[0]["messages"]] == ["a later", "ok"]

    path = _dump(store, tmp_path / "feed.jsonl", after_id=high)
    result = portability.import_sessions(other, path)
    assert (result.appended, result.imported, result.skipped, result.errors) == (1, 1, 0, [])
    assert (result.messages, result.already_there) == (4, 0)
    assert (result.kept_ids, result.renumbered) == (4, 0)
    assert _rows(other) == _rows(store)
    for sid in ("a", "b", "c"):
        assert sessions.get_session(other, sid) == sessions.get_session(store, sid), sid

    again = portability.import_sessions(other, path)
    assert again.ok and again.warnings == []
    assert (again.messages, again.already_there, again.imported) == (0, 4, 0)
    assert _rows(other) == _rows(store)


@pytest.mark.parametrize("chunk", [1, 3, 2000])
def test_a_change_feed_read_in_small_windows_has_exactly_the_newer_messages(
    store: Store, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(export, "MESSAGE_CHUNK", chunk)
    records = [_record(f"s{i}", 1000.0 + i, n=4) for i in range(5)]
    assert portability.import_sessions(store, records).ok  # s0: 1-4, s1: 5-8, ...
    for i in (1, 3):
        messages.append_messages(
            store, f"s{i}", [{"role": "user", "content": f"s{i} new {k}"} for k in range(4)]
        )
    feed = _materialized(export.export_all(store, after_id=10))
    assert [r["id"] for r in feed] == ["s1", "s2", "s3", "s4"]  # s0 has nothing above 10
    got = {r["id"]: [m["id"] for m in r["messages"]] for r in feed}
    want = {
        sid: [row[0] for row in _rows(store, sid) if row[0] > 10]
        for sid in ("s1", "s2", "s3", "s4")
    }
    assert got == want
    assert got["s2"] == [11, 12] and len(got["s1"]) == 4


def test_a_change_feed_appends_even_when_told_to_replace(
    store: Store, other: Store, tmp_path: Path
) -> None:
    assert portability.import_sessions(store, [_record("a", 1000.0)]).ok
    assert portability.import_sessions(other, _dump(store, tmp_path / "all.jsonl")).ok
    messages.append_messages(store, "a", [{"role": "user", "content": "more"}])
    feed = _dump(store, tmp_path / "feed.jsonl", after_id=2)
    result = portability.import_sessions(other, feed, on_conflict="replace")
    assert (result.appended, result.replaced, result.messages) == (1, 0, 1)
    assert _rows(other) == _rows(store)  # the two earlier messages are still there


def test_a_feed_message_the_follower_has_under_another_id_is_recognised_by_its_uid(
    store: Store, other: Store, tmp_path: Path
) -> None:
    assert portability.import_sessions(other, [_record("local", 500.0, n=3)]).ok
    assert portability.import_sessions(store, [_record("a", 1000.0, n=2)]).ok
    first = portability.import_sessions(other, _dump(store, tmp_path / "all.jsonl"))
    assert first.renumbered == 2  # the follower holds a's messages as ids 4 and 5
    result = portability.import_sessions(other, _dump(store, tmp_path / "feed.jsonl", after_id=0))
    assert (result.appended, result.messages, result.already_there) == (1, 0, 2)
    assert [r[2:] for r in _rows(other, "a")] == [r[2:] for r in _rows(store, "a")]


def test_new_feed_messages_are_not_lost_when_the_follower_renumbered_the_session(
    store: Store, other: Store, tmp_path: Path
) -> None:
    assert portability.import_sessions(other, [_record("z", 500.0, n=2)]).ok  # takes ids 1-2
    assert portability.import_sessions(store, [_record("a", 1000.0, n=2)]).ok  # ids 1-2
    first = portability.import_sessions(other, _dump(store, tmp_path / "all.jsonl"))
    assert first.renumbered == 2  # a is 3-4 in the follower
    messages.append_messages(
        store,
        "a",
        [{"role": "user", "content": "new 1"}, {"role": "assistant", "content": "new 2"}],
    )  # ids 3-4 in the source: the follower's ids of a's first two messages
    result = portability.import_sessions(other, _dump(store, tmp_path / "feed.jsonl", after_id=2))
    assert (result.messages, result.already_there) == (2, 0)
    assert [r[3] for r in _rows(other, "a")] == ["a #0", "a #1", "new 1", "new 2"]


def test_a_feed_for_a_session_the_follower_had_extended_keeps_the_order(
    store: Store, other: Store, tmp_path: Path
) -> None:
    assert portability.import_sessions(store, [_record("a", 1000.0)]).ok
    assert portability.import_sessions(store, [_record("b", 2000.0)]).ok  # ids 3-4
    assert portability.import_sessions(other, _dump(store, tmp_path / "all.jsonl")).ok
    messages.append_messages(other, "b", [{"role": "user", "content": "follower's own"}])  # 5
    messages.append_messages(store, "a", [{"role": "user", "content": "from the source"}])  # 5
    result = portability.import_sessions(other, _dump(store, tmp_path / "feed.jsonl", after_id=4))
    assert (result.appended, result.messages, result.errors) == (1, 1, [])
    assert (result.kept_ids, result.renumbered) == (0, 1)  # id 5 is taken here
    assert [r[3] for r in _rows(other, "a")] == ["a #0", "a #1", "from the source"]
    assert [r[0] for r in _rows(other, "a")][-1] > 5


def test_appended_messages_keep_free_ids_only_after_the_sessions_last_one(
    store: Store, other: Store, tmp_path: Path
) -> None:
    assert portability.import_sessions(store, [_record("a", 1000.0), _record("b", 2000.0)]).ok
    assert portability.import_sessions(other, _dump(store, tmp_path / "all.jsonl")).ok  # 1-4
    assert portability.import_sessions(other, [_record("x", 3000.0, n=3)]).ok  # 5-7
    messages.append_messages(other, "a", [{"role": "user", "content": "follower's own"}])  # 8
    deletion.delete_session(other, "x")  # 5-7 are free again, below a's last id here
    messages.append_messages(store, "a", [{"role": "user", "content": "from the source"}])  # 5
    result = portability.import_sessions(other, _dump(store, tmp_path / "feed.jsonl", after_id=4))
    assert (result.appended, result.messages, result.errors) == (1, 1, [])
    assert (result.kept_ids, result.renumbered) == (0, 1)
    stored = _rows(other, "a")
    assert [r[3] for r in stored] == ["a #0", "a #1", "follower's own", "from the source"]
    assert stored[-1][0] > 8


# --- system prompts and tool pins -----------------------------------------------------------


def test_a_forged_prompt_hash_is_recomputed_and_equal_prompts_share_one_row(other: Store) -> None:
    prompt = "You are Hermes. Answer briefly."
    forged = prompt_hash("something else entirely")
    records = [
        _record("p1", 1000.0, system_prompt=prompt, system_prompt_hash=forged),
        _record("p2", 2000.0, system_prompt=prompt),
    ]
    result = portability.import_sessions(other, records)
    assert (result.imported, result.errors) == (2, [])
    for sid in ("p1", "p2"):
        assert _session_column(other, sid, "system_prompt_hash") == prompt_hash(prompt)
        assert _session_column(other, sid, "system_prompt") is None
    stored = other.conn.execute("SELECT hash, prompt FROM system_prompts").fetchall()
    assert [tuple(r) for r in stored] == [(prompt_hash(prompt), prompt)]
    assert other.conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert export.session_record(other, "p1")["system_prompt"] == prompt


def test_a_prompt_hash_without_its_text_is_dropped_not_left_dangling(other: Store) -> None:
    record = _record("h1", system_prompt_hash=prompt_hash("a prompt this store never saw"))
    result = portability.import_sessions(other, [record])
    assert (result.imported, result.errors) == (1, [])
    assert _session_column(other, "h1", "system_prompt_hash") is None
    assert other.conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert any(NO_TEXT_NOTE in w for w in result.warnings), result.warnings


def test_a_prompt_hash_whose_text_the_store_has_is_linked(other: Store) -> None:
    prompt = "Shared prompt"
    assert portability.import_sessions(other, [_record("p1", 1000.0, system_prompt=prompt)]).ok
    result = portability.import_sessions(
        other, [_record("p2", 2000.0, system_prompt_hash=prompt_hash(prompt))]
    )
    assert (result.imported, result.warnings) == (1, [])
    assert _session_column(other, "p2", "system_prompt_hash") == prompt_hash(prompt)
    assert export.session_record(other, "p2")["system_prompt"] == prompt


def test_a_tool_pin_is_stored_by_content_and_exported_as_text(
    store: Store, other: Store, tmp_path: Path
) -> None:
    pin = json.dumps(["terminal", "read_file", "web_search"])
    assert portability.import_sessions(store, [_record("t1", tool_names=pin)]).ok
    assert _session_column(store, "t1", "tool_names") == prompt_hash(pin)
    found = store.conn.execute(
        "SELECT prompt FROM system_prompts WHERE hash = ?", (prompt_hash(pin),)
    )
    assert found.fetchone()[0] == pin
    assert export.session_record(store, "t1")["tool_names"] == pin
    assert portability.import_sessions(other, _dump(store, tmp_path / "t.jsonl")).ok
    assert _session_column(other, "t1", "tool_names") == prompt_hash(pin)
    assert export.session_record(other, "t1")["tool_names"] == pin


# --- NOT NULL defaults ----------------------------------------------------------------------


def test_nulls_where_the_layout_needs_a_value_get_the_default_and_are_named(
    other: Store,
) -> None:
    record = _record("d1", pinned=None, archived=None, title=None)
    result = portability.import_sessions(other, [record])
    assert (result.imported, result.errors) == (1, [])
    assert _session_column(other, "d1", "pinned") == 0
    assert _session_column(other, "d1", "archived") == 0
    notes = [w for w in result.warnings if "got the store's default" in w]
    assert len(notes) == 1, result.warnings
    assert "sessions.archived (1)" in notes[0] and "sessions.pinned (1)" in notes[0]
    assert "title" not in notes[0]  # a nullable column keeps its null, unremarked


# --- per-model usage rows -------------------------------------------------------------------

USAGE = [
    {
        "model": "anthropic/claude-sonnet-4",
        "billing_provider": "openrouter",
        "api_call_count": 3,
        "input_tokens": 1200,
        "output_tokens": 340,
        "estimated_cost_usd": 0.0123,
        "first_seen": 1_700_000_001.0,
        "last_seen": 1_700_000_009.0,
    },
    {"model": "openai/gpt-4o-mini", "task": "compression", "input_tokens": 80},
]


def test_usage_rows_arrive_whole_and_replace_does_not_duplicate_them(
    store: Store, other: Store, tmp_path: Path
) -> None:
    result = portability.import_sessions(store, [_record("u1", model_usage=USAGE)])
    assert (result.imported, result.usage_rows, result.errors) == (1, 2, [])
    rows = _usage(store, "u1")
    assert len(rows) == 2
    for given, stored in zip(USAGE, rows, strict=True):
        assert {k: stored[k] for k in given} == given
    assert rows[0]["task"] == "" and rows[1]["billing_provider"] == ""  # the columns' defaults

    dump = _dump(store, tmp_path / "u.jsonl")
    assert len(export.session_record(store, "u1")["model_usage"]) == 2
    into = portability.import_sessions(other, dump)
    assert (into.imported, into.usage_rows) == (1, 2)
    assert _usage(other, "u1") == rows
    again = portability.import_sessions(other, dump, on_conflict="replace")
    assert (again.replaced, again.usage_rows) == (1, 2)
    assert _usage(other, "u1") == rows


def test_a_null_in_a_not_null_usage_column_gets_its_default(other: Store) -> None:
    usage = [{"model": "m", "task": None, "input_tokens": None}]
    result = portability.import_sessions(other, [_record("u1", model_usage=usage)])
    assert (result.imported, result.usage_rows) == (1, 1)
    assert [(r["task"], r["input_tokens"]) for r in _usage(other, "u1")] == [("", 0)]
    assert any("session_model_usage.task (1)" in w for w in result.warnings), result.warnings


def test_usage_rows_into_a_layout_without_the_usage_table_are_reported_dropped(
    tmp_path: Path,
) -> None:
    path = _without_table(tmp_path / "old" / "state.db", "session_model_usage")
    with open_store(path) as old:
        result = portability.import_sessions(old, [_record("u1", model_usage=USAGE)])
        assert (result.imported, result.usage_rows, result.errors) == (1, 0, [])
        assert sessions.get_session(old, "u1") is not None
        assert any("session_model_usage rows (2)" in w for w in result.warnings), result.warnings


# --- through the CLI ------------------------------------------------------------------------


def _copy_db(hermes_home: Path) -> Path:
    """Create the profile "copy" and return where its store lives."""
    assert run("profile", "create", "copy").exit_code == 0
    return hermes_home / "profiles" / "copy" / "state.db"


def _in_copy(monkeypatch: pytest.MonkeyPatch, hermes_home: Path, *args: str) -> Result:
    """Run `hermes -p copy ARGS` in-process, then point HERMES_HOME back at the test's home.

    In-process, -p sets HERMES_HOME for the rest of the process (a real run ends there).
    """
    try:
        return run("-p", "copy", *args)
    finally:
        monkeypatch.setenv("HERMES_HOME", str(hermes_home))


def _max_id(path: Path) -> int:
    """Return the highest message row id of the store at path."""
    with open_store(path, read_only=True) as s:
        return int(s.conn.execute("SELECT MAX(id) FROM messages").fetchone()[0])


def test_cli_change_feed_names_the_next_id_and_imports_keep_ids(
    hermes_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = load_sample()
    copy = _copy_db(hermes_home)
    top = _max_id(main)
    full = run("sessions", "export", "--after-id", "0", "-o", str(tmp_path / "all.jsonl"))
    assert full.exit_code == 0, full.stderr
    assert f"Highest message id: {top} (next run: --after-id {top})" in full.stderr
    imported = _in_copy(monkeypatch, hermes_home, "sessions", "import", str(tmp_path / "all.jsonl"))
    assert imported.exit_code == 0, imported.stderr
    assert "Imported 12 sessions (53 messages)" in imported.stdout
    assert "Every message kept its id (53)." in imported.stdout.splitlines()

    with open_store(main) as s:
        messages.append_messages(
            s, DOCKER, [{"role": "user", "content": "next"}, {"role": "assistant", "content": "k"}]
        )
    feed = tmp_path / "feed.jsonl"
    out = run("sessions", "export", "--after-id", str(top), "-o", str(feed))
    assert out.exit_code == 0, out.stderr
    assert f"Exported 1 session (2 messages above id {top})" in out.stderr
    assert f"Highest message id: {top + 2} (next run: --after-id {top + 2})" in out.stderr
    appended = _in_copy(monkeypatch, hermes_home, "sessions", "import", str(feed))
    assert appended.exit_code == 0, appended.stderr
    assert "(2 messages)" in appended.stdout and "appended to 1" in appended.stdout
    assert "Every message kept its id (2)." in appended.stdout.splitlines()
    assert "Warning" not in appended.stderr
    with open_store(main, read_only=True) as a, open_store(copy, read_only=True) as b:
        assert _rows(a) == _rows(b)

    again = _in_copy(monkeypatch, hermes_home, "sessions", "import", str(feed))
    assert (again.exit_code, again.stderr) == (0, "")
    assert "Imported 0 sessions (0 messages)" in again.stdout
    assert "kept its id" not in again.stdout

    idle = run("sessions", "export", "--after-id", str(top + 2), "-o", str(tmp_path / "none"))
    assert idle.exit_code == 0, idle.stderr
    assert f"Highest message id: {top + 2} (next run: --after-id {top + 2})" in idle.stderr
    assert (tmp_path / "none").read_text(encoding="utf-8") == ""


def test_cli_import_warns_when_messages_were_renumbered(hermes_home: Path, tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    record = _record("mover", 2000.0, n=3)
    for i, msg in enumerate(record["messages"], 1):
        msg["id"] = i
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with open_store(default_db_path()) as s:
        assert portability.import_sessions(s, [_record("taken", 500.0, n=1)]).ok
    result = run("sessions", "import", str(path))
    assert result.exit_code == 0, result.stderr
    assert "kept its id" not in result.stdout
    assert (
        "Warning: 3 message(s) got new ids, above every id this profile's stores and the file "
        "use (a message keeps its id only when it is above every id the profile has used); 0 "
        "kept their ids" in result.stderr.splitlines()
    )


@pytest.mark.parametrize("value", ["-1", "x"])
def test_cli_after_id_must_be_a_whole_number_at_least_zero(hermes_home: Path, value: str) -> None:
    result = run("sessions", "export", "--after-id", value)
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "--after-id" in result.stderr and "Traceback" not in result.output
    assert result.stdout == ""
