"""The vault: moving old session groups out of the live store, returning them, listing and
checking the vault (SPEC §21), through the library and the real `hermes` process."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from clitools import child

from hermes_state.records import ledger
from hermes_state.records.messages import append_messages
from hermes_state.records.sessions import create_session, end_session
from hermes_state.store.connection import Store, open_store
from hermes_state.store.home import default_db_path
from hermes_state.vault import vault, vault_check, vault_list, vault_move, vault_return

NOW = time.time()
OLD = NOW - 400 * 86400
RECENT = NOW - 2 * 86400


def make_session(
    store: Store,
    sid: str,
    at: float = OLD,
    *,
    parent: str | None = None,
    ended: bool = True,
    n: int = 3,
    title: str | None = None,
    text: str = "hello docker",
) -> None:
    """Create a session of n messages stamped at, ended unless told not to."""
    create_session(store, sid, "cli", started_at=at, parent_session_id=parent)
    append_messages(
        store,
        sid,
        [{"role": "user", "content": f"{sid} {text} 東京 {i}", "timestamp": at} for i in range(n)],
    )
    store.write(
        lambda c: c.execute(
            "UPDATE sessions SET last_activity_at = ?, title = ? WHERE id = ?", (at, title, sid)
        )
    )
    if ended:
        end_session(store, sid, "user_exit")


@pytest.fixture
def live() -> Iterator[Store]:
    """The test profile's live store, with old chains, an old single, a recent one, and an old
    session whose child is still open."""
    store = open_store(default_db_path())
    make_session(store, "a", title="Chain")
    make_session(store, "a2", parent="a")
    make_session(store, "b")
    make_session(store, "c", RECENT)
    make_session(store, "d")
    make_session(store, "d2", parent="d", ended=False)
    yield store
    store.close()


def ids(store: Store) -> set[str]:
    return {r[0] for r in store.conn.execute("SELECT id FROM sessions")}


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def home() -> Path:
    return default_db_path().parent


def test_move_takes_whole_old_groups_and_leaves_the_rest(live: Store) -> None:
    result = vault_move.move_sessions(live, home(), 90)
    assert sorted(result.session_ids) == ["a", "a2", "b"]
    assert ids(live) == {"c", "d", "d2"}
    path = vault.vault_dir(home()) / f"{vault.year_of(OLD)}.db"
    assert {r[0] for r in rows(path, "SELECT id FROM sessions")} == {"a", "a2", "b"}
    assert result.held_back == 1  # d: its child d2 is still open


def test_vault_store_has_the_live_layout_and_delete_journal(live: Store) -> None:
    vault_move.move_sessions(live, home(), 90)
    path = vault.vault_paths(home())[0][1]
    shape = "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY 2"
    assert rows(path, shape) == rows(default_db_path(), shape)
    assert rows(path, "PRAGMA journal_mode") == [("delete",)]
    assert rows(path, "SELECT * FROM schema_version") == rows(
        default_db_path(), "SELECT * FROM schema_version"
    )


def test_move_keeps_message_ids_uids_and_search_indexes(live: Store) -> None:
    before = rows(default_db_path(), "SELECT id, message_uid, content FROM messages ORDER BY id")
    vault_move.move_sessions(live, home(), 90)
    path = vault.vault_paths(home())[0][1]
    after = rows(path, "SELECT id, message_uid, content FROM messages ORDER BY id")
    assert set(after) <= set(before) and len(after) == 9
    hits = rows(path, "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'docker'")
    assert len(hits) == 9
    assert vault_check.check_vault(home(), live).ok


def test_move_keeps_pinned_and_busy_groups(live: Store) -> None:
    live.write(lambda c: c.execute("UPDATE sessions SET pinned = 1 WHERE id = 'a2'"))
    epoch = ledger.begin_owner_epoch(live, "gw")
    adm = ledger.admit(live, "b", "r1", {"text": "hi"})
    ledger.start(live, adm.admission_id, epoch)
    result = vault_move.move_sessions(live, home(), 90)
    assert result.session_ids == ()
    assert [b["session_id"] for b in result.busy] == ["b"]
    assert {"a", "a2", "b"} <= ids(live)


def test_dry_run_moves_nothing(live: Store) -> None:
    result = vault_move.move_sessions(live, home(), 90, dry_run=True)
    assert sorted(result.session_ids) == ["a", "a2", "b"]
    assert vault.vault_paths(home()) == []
    assert len(ids(live)) == 6


def test_return_brings_the_whole_group_back_with_ids_and_uids(live: Store) -> None:
    before = rows(default_db_path(), "SELECT id, message_uid, session_id FROM messages")
    vault_move.move_sessions(live, home(), 90)
    result = vault_return.return_sessions(live, home(), ["a2"])
    assert sorted(result.session_ids) == ["a", "a2"] and result.with_group == ("a",)
    assert result.renumbered == 0 and result.kept_ids == 6
    after = rows(default_db_path(), "SELECT id, message_uid, session_id FROM messages")
    assert {r for r in before if r[2] in ("a", "a2")} <= set(after)
    path = vault.vault_paths(home())[0][1]
    assert {r[0] for r in rows(path, "SELECT id FROM sessions")} == {"b"}
    assert rows(default_db_path(), "SELECT title FROM sessions WHERE id = 'a'") == [("Chain",)]


def test_return_renumbers_only_ids_taken_meanwhile(live: Store) -> None:
    vault_move.move_sessions(live, home(), 90)
    path = vault.vault_paths(home())[0][1]
    taken = rows(path, "SELECT min(id) FROM messages WHERE session_id = 'b'")[0][0]
    make_session(live, "e", RECENT, n=1)
    live.write(lambda c: c.execute("UPDATE messages SET id = ? WHERE session_id = 'e'", (taken,)))
    result = vault_return.return_sessions(live, home(), ["b"])
    assert result.renumbered == 1 and result.kept_ids == 2
    assert rows(default_db_path(), "SELECT count(*) FROM messages WHERE session_id = 'b'") == [(3,)]


def test_return_gives_a_clashing_title_the_session_id(live: Store) -> None:
    vault_move.move_sessions(live, home(), 90)
    make_session(live, "f", RECENT, title="Chain")
    result = vault_return.return_sessions(live, home(), ["a"])
    assert result.title_clashes == 1
    assert rows(default_db_path(), "SELECT title FROM sessions WHERE id = 'a'") == [("Chain [a]",)]


def test_a_new_column_of_the_live_store_is_added_to_the_vault_store(live: Store) -> None:
    vault_move.move_sessions(live, home(), 90)
    live.write(lambda c: c.execute("ALTER TABLE messages ADD COLUMN plugin_note TEXT"))
    live.forget_columns()
    make_session(live, "g")
    live.write(lambda c: c.execute("UPDATE messages SET plugin_note = 'kept' WHERE session_id='g'"))
    vault_move.move_sessions(live, home(), 90)
    path = vault.vault_paths(home())[0][1]
    assert rows(path, "SELECT DISTINCT plugin_note FROM messages WHERE session_id = 'g'") == [
        ("kept",)
    ]


def test_list_describes_each_store(live: Store) -> None:
    vault_move.move_sessions(live, home(), 90)
    [info] = vault_list.list_vault(home(), live)
    assert (info.sessions, info.messages, info.hidden) == (3, 9, 0)
    assert info.first_started == pytest.approx(OLD) and info.bytes > 0


def test_check_reports_a_session_in_both_places(live: Store) -> None:
    vault_move.move_sessions(live, home(), 90)
    path = vault.vault_paths(home())[0][1]
    conn = sqlite3.connect(path)
    conn.execute("UPDATE sessions SET id = 'c' WHERE id = 'b'")
    conn.commit()
    conn.close()
    report = vault_check.check_vault(home(), live)
    assert not report.ok and "absent_from_live" in report.problems[0]


# --- through the real `hermes` process ------------------------------------------------------


def test_cli_move_list_check_return(live: Store) -> None:
    live.close()
    dry = child("vault", "move", "--older-than", "90d", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert sorted(json.loads(dry.stdout)["session_ids"]) == ["a", "a2", "b"]
    done = child("vault", "move", "--older-than", "90d", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["sessions"] == 3 and out["reclaimed"] is not None
    listed = json.loads(child("vault", "list", "--json").stdout)
    assert [s["session_count"] for s in listed["stores"]] == [3]
    checked = child("vault", "check", "--json")
    assert checked.returncode == 0 and json.loads(checked.stdout)["ok"]
    back = child("vault", "return", "b")
    assert back.returncode == 0 and "Returned 1 session(s)" in back.stdout


def test_cli_move_asks_before_moving(live: Store) -> None:
    live.close()
    done = child("vault", "move", "--older-than", "90d", input="n\n")
    assert done.returncode == 1 and "Aborted" in done.stderr
    assert vault.vault_paths(home()) == []


def test_cli_bad_input_is_one_line_and_a_hint(live: Store) -> None:
    live.close()
    bad = child("vault", "move", "--older-than", "soon")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    missing = child("vault", "return", "nope")
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.startswith("Error: ") and "Hint" in missing.stderr


def test_cli_check_exits_1_on_a_problem(live: Store) -> None:
    vault_move.move_sessions(live, home(), 90)
    live.close()
    path = vault.vault_paths(home())[0][1]
    conn = sqlite3.connect(path)
    conn.execute("UPDATE sessions SET id = 'c' WHERE id = 'b'")
    conn.commit()
    conn.close()
    done = child("vault", "check")
    assert done.returncode == 1 and "absent_from_live" in done.stdout


# --- reads spanning live and vault ------------------------------------------------------------


def test_show_finds_a_vaulted_session_and_marks_it(live: Store) -> None:
    vault_move.move_sessions(live, home(), 90)
    live.close()
    year = vault.year_of(OLD)
    shown = child("sessions", "show", "b", "--no-pager")
    assert shown.returncode == 0, shown.stderr
    assert f"[vault {year}]" in shown.stdout and "b hello docker" in shown.stdout
    doc = json.loads(child("sessions", "show", "b", "--json").stdout)
    assert doc["vault"] == year and all(m["vault"] == year for m in doc["messages"])
    live_doc = json.loads(child("sessions", "show", "c", "--json").stdout)
    assert live_doc["vault"] is None


def test_export_spans_live_and_vault_with_marks(live: Store) -> None:
    vault_move.move_sessions(live, home(), 90)
    live.close()
    done = child("sessions", "export", "-o", "-")
    assert done.returncode == 0, done.stderr
    marks = {r["id"]: r["vault"] for r in map(json.loads, done.stdout.splitlines())}
    year = vault.year_of(OLD)
    assert marks == {"a": year, "a2": year, "b": year, "c": None, "d": None, "d2": None}
    one = child("sessions", "export", "-o", "-", "--session-id", "b")
    assert [json.loads(x)["id"] for x in one.stdout.splitlines()] == ["b"]


def test_rows_an_insert_trigger_would_rewrite_move_and_return_as_they_were(live: Store) -> None:
    # The release's display trigger fills a NULL display_order on insert; the agent leaves it
    # NULL after an edit. A copy must keep NULL (else verification refuses every such session).
    live.write(
        lambda c: c.execute("UPDATE messages SET display_order = NULL WHERE session_id = 'b'")
    )
    before = rows(
        default_db_path(), "SELECT id, display_order FROM messages WHERE session_id = 'b'"
    )
    assert before and all(order is None for _, order in before)
    result = vault_move.move_sessions(live, home(), 90)
    assert "b" in result.session_ids
    path = vault.vault_paths(home())[0][1]
    assert rows(path, "SELECT id, display_order FROM messages WHERE session_id = 'b'") == before
    vault_return.return_sessions(live, home(), ["b"])
    back = rows(default_db_path(), "SELECT id, display_order FROM messages WHERE session_id = 'b'")
    assert back == before


def test_a_later_move_of_lower_ids_fills_every_search_index() -> None:
    with open_store(default_db_path()) as store:
        make_session(store, "low", RECENT)  # ids 1-3: they move second, below the vault's mark
        make_session(store, "high")
        assert vault_move.move_sessions(store, home(), 90).session_ids == ("high",)
        store.write(
            lambda c: (
                c.execute(
                    "UPDATE sessions SET started_at = ?, last_activity_at = ? WHERE id = 'low'",
                    (OLD, OLD),
                ),
                c.execute("UPDATE messages SET timestamp = ? WHERE session_id = 'low'", (OLD,)),
            )
        )
        assert vault_move.move_sessions(store, home(), 90).session_ids == ("low",)
        path = vault.vault_paths(home())[0][1]
        words = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'docker' ORDER BY 1"
        assert rows(path, words) == [(i,) for i in range(1, 7)]
        subs = "SELECT rowid FROM messages_fts_trigram WHERE messages_fts_trigram MATCH 'ocke'"
        assert len(rows(path, subs)) == 6
        grams = "SELECT rowid FROM hermes_cjk WHERE hermes_cjk MATCH '東京' ORDER BY 1"
        assert rows(path, grams) == [(i,) for i in range(1, 7)]
        assert rows(path, "SELECT count(*) FROM hermes_cjk_pending") == [(0,)]
        state = "SELECT key, value FROM state_meta WHERE key LIKE 'fts_rebuild%'"
        assert rows(path, state) == []
        assert vault_check.check_vault(home(), store).ok


def test_move_takes_its_messages_out_of_the_live_search_indexes_in_bulk(live: Store) -> None:
    # Tool rows and cron sessions are left out of the substring index: the bulk 'delete' must
    # leave them out too (FTS5's own check, content compared, fails on any wrong 'delete').
    create_session(live, "cr", "cron", started_at=OLD)
    append_messages(
        live,
        "cr",
        [
            {"role": "user", "content": "cron docker run", "timestamp": OLD},
            {"role": "tool", "content": "docker output " * 50, "timestamp": OLD},
        ],
    )
    live.write(
        lambda c: c.execute("UPDATE sessions SET last_activity_at = ? WHERE id = 'cr'", (OLD,))
    )
    end_session(live, "cr", "user_exit")
    assert "cr" in vault_move.move_sessions(live, home(), 90).session_ids
    for table in ("messages_fts", "messages_fts_trigram"):
        live.conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
    left = rows(
        default_db_path(), "SELECT id FROM messages WHERE content LIKE '%docker%' ORDER BY 1"
    )
    words = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'docker' ORDER BY 1"
    subs = (
        "SELECT rowid FROM messages_fts_trigram WHERE messages_fts_trigram MATCH 'ocke' ORDER BY 1"
    )
    assert rows(default_db_path(), words) == left
    assert rows(default_db_path(), subs) == left
    # The window closed for the live delete was open again when it committed.
    state = "SELECT key FROM state_meta WHERE key LIKE 'fts_rebuild%'"
    assert rows(default_db_path(), state) == []
