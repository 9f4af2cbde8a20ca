"""A vaulted session the agent writes to again is one conversation, never two and never lost;
a profile's stores answer a session's name by one rule (issue 39, issue 33 item 8)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from clitools import child
from test_vault import OLD, home, ids, make_session, rows

from hermes_state.records.messages import append_messages
from hermes_state.records.sessions import create_session
from hermes_state.store.connection import Store, open_store
from hermes_state.store.home import default_db_path
from hermes_state.vault import (
    vault,
    vault_check,
    vault_layout,
    vault_list,
    vault_move,
    vault_return,
)

YEAR = vault.year_of(OLD)


@pytest.fixture
def live() -> Iterator[Store]:
    """A live store whose old session 'b' (3 messages) is vaulted, then resumed by the agent:
    the same id written again, 2 new messages (what the release's create_session and
    append_message do with a vaulted id)."""
    store = open_store(default_db_path())
    make_session(store, "b", title="Old chat")
    make_session(store, "keep", time.time())
    assert vault_move.move_sessions(store, home(), 90).session_ids == ("b",)
    create_session(store, "b", "telegram")
    append_messages(
        store,
        "b",
        [{"role": "user", "content": f"back again docker {i}"} for i in range(2)],
    )
    yield store
    store.close()


def vault_path() -> str:
    return str(vault.vault_dir(home()) / f"{YEAR}.db")


def contents(path: str, sid: str) -> list[str]:
    from pathlib import Path

    return [
        r[0]
        for r in rows(
            Path(path), f"SELECT content FROM messages WHERE session_id = '{sid}' ORDER BY id"
        )
    ]


def test_a_later_move_keeps_a_resumed_sessions_vaulted_history(live: Store) -> None:
    make_session(live, "e")  # something else due, so the move runs its rounds
    result = vault_move.move_sessions(live, home(), 90)
    assert result.session_ids == ("e",)
    assert result.resumed == ("b",)
    assert len(contents(vault_path(), "b")) == 3  # the vaulted history is still there
    assert "b" in ids(live)
    assert vault_check.check_vault(home(), live).ok


def test_vault_check_names_a_resumed_session_for_what_it_is(live: Store) -> None:
    report = vault_check.check_vault(home(), live)
    assert report.ok
    checks = {c["name"]: c for c in report.stores[0]["checks"]}
    assert checks["absent_from_live"]["detail"] == "ok"
    assert checks["resumed"]["sessions"] == ["b"]
    assert "vault return b" in checks["resumed"]["detail"]
    info = vault_list.list_vault(home(), live)[0]
    assert (info.hidden, info.resumed) == (0, 1)


def test_show_reads_both_parts_in_order_each_marked() -> None:
    store = open_store(default_db_path())
    try:
        make_session(store, "b", title="Old chat")
        vault_move.move_sessions(store, home(), 90)
        create_session(store, "b", "telegram")
        append_messages(store, "b", [{"role": "user", "content": "back again"}])
    finally:
        store.close()
    done = child("sessions", "show", "b", "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    msgs = [json.loads(line) for line in done.stdout.splitlines()]
    assert [m["vault"] for m in msgs] == [YEAR, YEAR, YEAR, None]
    assert msgs[-1]["content"] == "back again"
    text = child("sessions", "show", "b", "--no-pager", "--color", "never")
    assert text.returncode == 0, text.stderr
    assert f"[vault {YEAR}] resumed: its first 3 message(s)" in text.stdout
    assert "Messages: 4" in text.stdout


def test_search_finds_the_vaulted_part_of_a_resumed_session(live: Store) -> None:
    done = child("sessions", "search", "東京", "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    hits = [json.loads(line) for line in done.stdout.splitlines()]
    mine = [h for h in hits if h["session_id"] == "b"]
    assert len(mine) == 3 and {h["vault"] for h in mine} == {YEAR}


def test_return_joins_the_parts_into_one_live_session(live: Store) -> None:
    before = live.conn.execute("SELECT input_tokens FROM sessions WHERE id = 'b'").fetchone()
    result = vault_return.return_sessions(live, home(), ["b"])
    assert result.joined == ("b",)
    got = [
        r[0]
        for r in live.conn.execute(
            "SELECT content FROM messages WHERE session_id = 'b' ORDER BY id"
        )
    ]
    assert len(got) == 5 and got[-2:] == ["back again docker 0", "back again docker 1"]
    assert got[0].startswith("b hello docker")
    row = live.conn.execute(
        "SELECT message_count, title, started_at FROM sessions WHERE id = 'b'"
    ).fetchone()
    assert row[0] == 5 and row[1] == "Old chat" and row[2] == pytest.approx(OLD)
    assert before is not None
    assert contents(vault_path(), "b") == []
    assert vault_check.check_vault(home(), live).ok


def test_return_run_again_after_it_finished_exits_zero(live: Store) -> None:
    first = child("vault", "return", "b")
    assert first.returncode == 0, first.stderr
    again = child("vault", "return", "b")
    assert again.returncode == 0, again.stderr
    assert "Nothing left to return" in again.stdout and "already in the live store" in again.stdout


def test_vault_return_takes_an_exact_title() -> None:
    store = open_store(default_db_path())
    try:
        make_session(store, "s1", title="Travel plans Osaka")
        vault_move.move_sessions(store, home(), 90)
    finally:
        store.close()
    done = child("vault", "return", "Travel plans Osaka")
    assert done.returncode == 0, done.stderr
    assert "Returned 1 session(s)" in done.stdout


def test_a_prefix_naming_sessions_in_several_stores_is_ambiguous() -> None:
    store = open_store(default_db_path())
    try:
        make_session(store, "2025010_a")
        make_session(store, "2025010_b")
        vault_move.move_sessions(store, home(), 90)
        make_session(store, "2025010_c", time.time())
    finally:
        store.close()
    done = child("sessions", "show", "2025010")
    assert done.returncode != 0
    assert f"matches more than one session: 3 (1 live, 2 in vault {YEAR})" in done.stderr
    for argv in (("vault", "return", "2025010"), ("sessions", "export", "--session-id", "2025010")):
        refused = child(*argv)
        assert refused.returncode != 0 and "one session: 3 (" in refused.stderr, argv


def test_export_names_vaulted_sessions_of_several_years() -> None:
    store = open_store(default_db_path())
    try:
        make_session(store, "y1", OLD)
        make_session(store, "y2", OLD - 400 * 86400)
        vault_move.move_sessions(store, home(), 90)
    finally:
        store.close()
    assert len(vault.vault_paths(home())) == 2
    for sid in ("y1", "y2"):
        done = child("sessions", "export", "--session-id", sid, "--format", "jsonl")
        assert done.returncode == 0, done.stderr
        records = [json.loads(line) for line in done.stdout.splitlines()]
        assert [r["id"] for r in records] == [sid]


def test_export_of_a_resumed_session_is_one_record_with_every_message(live: Store) -> None:
    done = child("sessions", "export", "--session-id", "b", "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in records] == ["b"]
    assert len(records[0]["messages"]) == 5
    assert records[0]["vault_parts"] == [YEAR]


def test_a_move_verifies_a_copy_whose_ids_were_renumbered() -> None:
    """A session holding message ids an earlier move freed (an import kept them) moves into
    the year store that has the originals: its copy is renumbered and verified by content."""
    store = open_store(default_db_path())
    try:
        make_session(store, "x")
        vault_move.move_sessions(store, home(), 90)
        freed = [
            r[0] for r in rows(__import__("pathlib").Path(vault_path()), "SELECT id FROM messages")
        ]
        create_session(store, "y", "cli", started_at=OLD)

        def put(conn: object) -> None:
            for n, mid in enumerate(freed):
                conn.execute(  # type: ignore[attr-defined]
                    "INSERT INTO messages (id, session_id, role, content, timestamp)"
                    " VALUES (?, 'y', 'user', ?, ?)",
                    (mid, f"imported {n}", OLD),
                )
            conn.execute(  # type: ignore[attr-defined]
                "UPDATE sessions SET ended_at = ?, end_reason = 'user_exit',"
                " last_activity_at = ? WHERE id = 'y'",
                (OLD, OLD),
            )

        store.write(put)
        result = vault_move.move_sessions(store, home(), 90)
        assert result.session_ids == ("y",)
        assert contents(vault_path(), "y") == ["imported 0", "imported 1", "imported 2"]
        assert vault_check.check_vault(home(), store).ok
    finally:
        store.close()


def _spend(store: Store, sid: str, tokens: int) -> None:
    """Give a session token counters and a cost (as the agent's counters hold them)."""
    store.write(
        lambda c: c.execute(
            "UPDATE sessions SET input_tokens = ?, output_tokens = 10, estimated_cost_usd = ?,"
            " cost_status = 'estimated', model = 'm/x' WHERE id = ?",
            (tokens, tokens / 1000, sid),
        )
    )


def test_usage_and_stats_count_the_vault_unless_told_live() -> None:
    store = open_store(default_db_path())
    try:
        make_session(store, "old1")
        make_session(store, "old2")
        make_session(store, "new1", time.time())
        for sid, n in (("old1", 1000), ("old2", 2000), ("new1", 4000)):
            _spend(store, sid, n)
    finally:
        store.close()
    before = json.loads(child("usage", "--json").stdout)
    stats_before = json.loads(child("sessions", "stats", "--json").stdout)
    moved = child("vault", "move", "--older-than", "90d", "--yes")
    assert moved.returncode == 0, moved.stderr
    after = json.loads(child("usage", "--json").stdout)
    assert after["totals"] == before["totals"] and after["vault"] == [YEAR]
    assert after["totals"]["input_tokens"] == 7000
    live_only = json.loads(child("usage", "--json", "--live").stdout)
    assert live_only["totals"]["input_tokens"] == 4000 and live_only["vault"] is None
    assert "Live store only (--live)" in child("usage", "--live", "--no-pager").stdout
    stats_after = json.loads(child("sessions", "stats", "--json").stdout)
    for key in ("session_count", "message_count", "by_model", "by_source"):
        assert stats_after[key] == stats_before[key], key
    assert stats_after["vault"]["sessions"] == 2 and stats_after["vault"]["years"] == [YEAR]
    by_source = child("usage", "--source", "cli", "--json")
    assert by_source.returncode == 0, by_source.stderr


def test_a_move_that_fails_leaves_no_empty_vault_store(monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(default_db_path())
    try:
        make_session(store, "gone")

        def refuse(*_args: object, **_kw: object) -> int:
            raise vault.VaultError("refused for the test")

        monkeypatch.setattr(vault_move, "_copy_rows", refuse)
        with pytest.raises(vault.VaultError):
            vault_move.move_sessions(store, home(), 90)
        assert vault.vault_paths(home()) == []
        assert not list(vault.vault_dir(home()).glob("*.db*"))
        assert "gone" in ids(store)
    finally:
        store.close()


def test_an_empty_vault_store_of_another_layout_does_not_block_a_move() -> None:
    import sqlite3

    store = open_store(default_db_path())
    try:
        make_session(store, "later")
        path = vault.vault_dir(home()) / f"{YEAR}.db"
        vault_layout.create_vault_store(store, path)
        conn = sqlite3.connect(path)  # an older version's empty store: another layout
        conn.execute("DROP INDEX idx_messages_session")
        conn.commit()
        conn.close()
        result = vault_move.move_sessions(store, home(), 90)
        assert result.session_ids == ("later",)
        assert rows(path, "SELECT name FROM sqlite_master WHERE name = 'idx_messages_session'")
        assert vault_check.check_vault(home(), store).ok
    finally:
        store.close()


def test_edits_refuse_a_vaulted_session_and_delete_refuses_a_resumed_one(live: Store) -> None:
    store = live
    make_session(store, "quiet", title="Quiet one")
    vault_move.move_sessions(store, home(), 90)
    for argv in (("sessions", "rename", "Quiet one", "New"), ("sessions", "pin", "quiet")):
        done = child(*argv)
        assert done.returncode != 0, argv
        assert "in the vault" in done.stderr and "hermes vault return quiet" in done.stderr
    gone = child("sessions", "delete", "b", "--yes")
    assert gone.returncode != 0 and "hermes vault return b" in gone.stderr
    assert "b" in ids(store)
    renamed = child("sessions", "rename", "b", "Back again")
    assert renamed.returncode == 0, renamed.stderr


def test_a_live_listing_says_how_many_vaulted_sessions_it_leaves_out() -> None:
    store = open_store(default_db_path())
    try:
        make_session(store, "v1")
        make_session(store, "v2")
        make_session(store, "here", time.time())
        vault_move.move_sessions(store, home(), 90)
    finally:
        store.close()
    table = child("sessions", "list", "--no-pager")
    assert table.returncode == 0, table.stderr
    assert "Not listed: 2 vaulted session(s) (--vault includes them)." in table.stdout
    data = json.loads(child("sessions", "list", "--json").stdout)
    assert data["vault_not_listed"] == 2 and [r["id"] for r in data["sessions"]] == ["here"]
    spanned = json.loads(child("sessions", "list", "--vault", "--json").stdout)
    assert {r["id"] for r in spanned["sessions"]} == {"v1", "v2", "here"}
