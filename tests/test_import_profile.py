"""Importing into a profile of several stores: message ids never collide across the live store
and the vault, renumbering never cascades, vaulted sessions are present, title clashes have a
way past. Real stores, the real vault, in-process and real `hermes` processes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clitools import child, run

from hermes_state.agent.db import SessionDB
from hermes_state.records import messages, sessions
from hermes_state.store.connection import Store, open_store
from hermes_state.store.home import default_db_path
from hermes_state.transfer import portability
from hermes_state.vault import vault, vault_check, vault_import, vault_move

OLD = time.time() - 400 * 86400
RECENT = time.time() - 2 * 86400


def _record(sid: str, started_at: float, ids: list[int] | None = None, **extra: Any) -> dict:
    """An export record of one session, its messages given these row ids (or two without)."""
    n = len(ids) if ids is not None else 2
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": f"{sid} {i}", "timestamp": started_at + i} for i in range(n)
    ]
    for msg, row_id in zip(msgs, ids or [], strict=False):
        msg["id"] = row_id
    return {"id": sid, "source": "cli", "started_at": started_at, "messages": msgs, **extra}


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _ids(store: Store, sid: str) -> list[int]:
    """Return a session's message ids in order."""
    sql = "SELECT id FROM messages WHERE session_id = ? ORDER BY id"
    return [r[0] for r in store.conn.execute(sql, (sid,))]


def _make(store: Store, sid: str, at: float, n: int = 3, title: str | None = None) -> None:
    """Create an ended session of n messages, last active at."""
    sessions.create_session(store, sid, "cli", started_at=at)
    messages.append_messages(
        store, sid, [{"role": "user", "content": f"{sid} {i}", "timestamp": at} for i in range(n)]
    )
    store.write(
        lambda c: c.execute(
            "UPDATE sessions SET last_activity_at = ?, title = ? WHERE id = ?", (at, title, sid)
        )
    )
    sessions.end_session(store, sid, "user_exit")


@pytest.fixture
def vaulted(hermes_home: Path) -> Iterator[Store]:
    """The test profile with "a" and "b" (message ids 1-6) in the vault and "c" (7-9) live."""
    store = open_store(default_db_path())
    _make(store, "a", OLD, title="Fix Docker build")
    _make(store, "b", OLD)
    _make(store, "c", RECENT)
    moved = vault_move.move_sessions(store, hermes_home, 90)
    assert sorted(moved.session_ids) == ["a", "b"]
    yield store
    store.close()


def _year() -> str:
    return vault.year_of(OLD)


# --- ids across the profile's stores ---------------------------------------------------------


def test_an_id_a_vault_store_holds_is_not_reused_even_when_the_live_store_never_used_it(
    vaulted: Store, hermes_home: Path
) -> None:
    # A live store made again from nothing: its counter starts at 0, the vault holds 1-6.
    vaulted.close()
    for suffix in ("", "-wal", "-shm", "-journal"):
        target = Path(str(default_db_path()) + suffix)
        if target.exists():
            os.unlink(target)
    with open_store(default_db_path()) as live:
        others = vault_import.other_stores(live)
        assert others.high_id == 6
        result = portability.import_sessions(
            live, [_record("x", 1000.0, [2, 3]), _record("y", 2000.0, [20, 21])], others=others
        )
        assert (result.imported, result.errors) == (2, [])
        assert _ids(live, "x") == [22, 23]  # above the vault's 6 and the file's 21
        assert _ids(live, "y") == [20, 21]  # above every id used: kept
        assert (result.kept_ids, result.renumbered) == (2, 2)


def test_ids_freed_in_the_live_store_by_a_move_are_not_reused(vaulted: Store) -> None:
    # 1-6 are free in state.db (their sessions are in the vault), but used in the profile.
    result = portability.import_sessions(
        vaulted, [_record("x", 1000.0, [1, 2])], others=vault_import.other_stores(vaulted)
    )
    assert result.ok
    assert _ids(vaulted, "x") == [10, 11]
    assert result.renumbered == 2
    assert vault_check.check_vault(vaulted.path.parent, vaulted).ok


@pytest.mark.parametrize("via", ["file", "stdin"])
def test_renumbering_never_cascades_onto_ids_a_later_session_of_the_file_keeps(
    hermes_home: Path, tmp_path: Path, via: str
) -> None:
    with open_store(default_db_path()) as live:
        assert portability.import_sessions(live, [_record("here", 100.0, [1, 2, 3])]).ok
    # "early" (started first, so first in the file) has ids the store holds; "late" has 4-6,
    # free and above the store's. Renumbering early into 4-6 would push late off its ids.
    path = _jsonl(
        tmp_path / "in.jsonl",
        [_record("early", 1000.0, [1, 2, 3]), _record("late", 2000.0, [4, 5, 6])],
    )
    # A stream is read whole (spooled) before the first id is given: it cascades no more.
    before = sorted(p.name for p in hermes_home.iterdir())
    if via == "file":
        result = run("sessions", "import", str(path), "--json")
    else:
        result = run("sessions", "import", "-", "--json", input=path.read_text(encoding="utf-8"))
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in hermes_home.iterdir()) == before  # the spool left nothing
    summary = json.loads(result.stdout)
    assert (summary["kept_ids"], summary["renumbered"]) == (3, 3)
    with open_store(default_db_path(), read_only=True) as live:
        assert _ids(live, "late") == [4, 5, 6]
        assert _ids(live, "early") == [7, 8, 9]  # above the file's 6, in the conversation's order


def test_a_replace_keeps_the_sessions_own_ids_and_new_ones_above_the_floor(
    hermes_home: Path,
) -> None:
    with open_store(default_db_path()) as live:
        assert portability.import_sessions(live, [_record("s", 100.0, [1, 2])]).ok
        assert portability.import_sessions(live, [_record("t", 200.0, [3, 4])]).ok
        again = portability.import_sessions(
            live, [_record("s", 100.0, [1, 2])], on_conflict="replace"
        )
        assert (again.replaced, again.kept_ids, again.renumbered) == (1, 2, 0)
        assert _ids(live, "s") == [1, 2]
        # Another session's ids are not "own": that replace is renumbered.
        taken = portability.import_sessions(
            live, [_record("s", 100.0, [3, 4])], on_conflict="replace"
        )
        assert (taken.kept_ids, taken.renumbered) == (0, 2)
        assert _ids(live, "s") == [5, 6] and _ids(live, "t") == [3, 4]


# --- the vault's sessions are present --------------------------------------------------------


def test_export_everything_and_import_it_back_skips_vaulted_sessions_as_present(
    vaulted: Store, tmp_path: Path
) -> None:
    vaulted.close()
    everything = tmp_path / "all.jsonl"
    exported = child("sessions", "export", "-o", str(everything))
    assert exported.returncode == 0, exported.stderr
    marks = {json.loads(line)["id"]: json.loads(line)["vault"] for line in everything.open()}
    assert marks == {"a": _year(), "b": _year(), "c": None}

    back = child("sessions", "import", str(everything))
    assert back.returncode == 0, back.stderr
    assert (
        f"Imported 0 sessions (0 messages); replaced 0; skipped 3 already present "
        f"(2 in vault {_year()})." in back.stdout.splitlines()
    )
    assert back.stderr == ""  # no "dropped field" warning for the export's own vault marker
    with open_store(default_db_path(), read_only=True) as live:
        assert [r[0] for r in live.conn.execute("SELECT id FROM sessions")] == ["c"]
    checked = child("vault", "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr

    as_json = child("sessions", "import", str(everything), "--json")
    summary = json.loads(as_json.stdout)
    assert summary["elsewhere"] == {f"vault {_year()}": 2} and summary["skipped"] == 3

    replaced = child("sessions", "import", str(everything), "--on-conflict", "replace")
    assert replaced.returncode == 0, replaced.stderr
    assert "replaced 1; skipped 2 already present" in replaced.stdout
    assert "2 session(s) are in this profile's vault and were not replaced" in replaced.stderr
    assert "`hermes vault return ID` first" in replaced.stderr
    with open_store(default_db_path(), read_only=True) as live:
        assert [r[0] for r in live.conn.execute("SELECT id FROM sessions")] == ["c"]


def test_a_change_feed_for_a_vaulted_session_is_not_made_live(vaulted: Store) -> None:
    feed = _record("a", OLD, [100], messages_after_id=9)
    result = portability.import_sessions(vaulted, [feed], others=vault_import.other_stores(vaulted))
    assert (result.skipped, result.elsewhere, result.appended) == (1, {f"vault {_year()}": 1}, 0)
    assert any(
        "change-feed record(s) are for sessions in this profile's vault" in w
        for w in (result.warnings)
    )
    assert sessions.get_session(vaulted, "a") is None


def test_the_agents_import_sessions_skips_a_vaulted_session(vaulted: Store) -> None:
    vaulted.close()
    with SessionDB(default_db_path()) as db:
        summary = db.import_sessions([_record("a", OLD), _record("new", 3000.0)])
    assert summary["ok"] and summary["skipped_ids"] == ["a"] and summary["imported_ids"] == ["new"]
    with open_store(default_db_path(), read_only=True) as live:
        assert sessions.get_session(live, "a") is None
        assert _ids(live, "new") == [10, 11]


# --- title clashes ---------------------------------------------------------------------------


def test_a_title_clash_fails_by_default_and_names_the_ways_past(hermes_home: Path) -> None:
    with open_store(default_db_path()) as live:
        assert portability.import_sessions(live, [_record("a", 1.0, title="Fix Docker build")]).ok
        result = portability.import_sessions(live, [_record("b", 2.0, title="Fix Docker build")])
    assert result.imported == 0
    assert result.errors[0].message == (
        "title 'Fix Docker build' is already used by session a in this store "
        "(--on-title-clash rename imports it as 'Fix Docker build #2', skip leaves it out)"
    )


def test_rename_numbers_a_clashing_title_as_compression_numbers_a_continuation(
    hermes_home: Path, tmp_path: Path
) -> None:
    with open_store(default_db_path()) as live:
        assert portability.import_sessions(
            live,
            [
                _record("a", 1.0, title="Fix Docker build"),
                _record("a2", 2.0, title="Fix Docker build #2"),
            ],
        ).ok
    path = _jsonl(
        tmp_path / "in.jsonl",
        [
            _record("b", 3.0, title="Fix Docker build"),
            _record("c", 4.0, title="Fix Docker build #2"),
            _record("d", 5.0, title="Other"),
        ],
    )
    done = run("sessions", "import", str(path), "--on-title-clash", "rename")
    assert done.exit_code == 0, done.stderr
    assert "Imported 3 sessions (6 messages)" in done.stdout
    assert (
        "2 title(s) were already used here by other sessions, so they were imported numbered: "
        "'Fix Docker build' -> 'Fix Docker build #3'; 'Fix Docker build #2' -> "
        "'Fix Docker build #4'"
    ) in done.stderr.replace("\n", " ").replace("Warning: ", "")
    with open_store(default_db_path(), read_only=True) as live:
        titles = {sid: sessions.get_session(live, sid)["title"] for sid in "bcd"}
    assert titles == {"b": "Fix Docker build #3", "c": "Fix Docker build #4", "d": "Other"}


def test_skip_leaves_a_clashing_session_out_and_exits_0(hermes_home: Path, tmp_path: Path) -> None:
    with open_store(default_db_path()) as live:
        assert portability.import_sessions(live, [_record("a", 1.0, title="Same")]).ok
    path = _jsonl(tmp_path / "in.jsonl", [_record("b", 2.0, title="Same"), _record("c", 3.0)])
    done = run("sessions", "import", str(path), "--on-title-clash", "skip", "--json")
    assert done.exit_code == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["imported"], summary["title_skipped"], summary["errors"]) == (1, 1, [])
    assert any("line 1: b ('Same')" in w for w in summary["warnings"])
    with open_store(default_db_path(), read_only=True) as live:
        assert sessions.get_session(live, "b") is None
        assert sessions.get_session(live, "c") is not None


def test_a_bad_title_clash_choice_is_a_usage_error(hermes_home: Path, tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "in.jsonl", [_record("b", 2.0)])
    done = run("sessions", "import", str(path), "--on-title-clash", "merge")
    assert done.exit_code == 2
    assert "--on-title-clash" in done.stderr and "Traceback" not in done.output


def test_a_renamed_session_keeps_its_numbered_title_when_a_feed_updates_it(
    hermes_home: Path,
) -> None:
    with open_store(default_db_path()) as live:
        assert portability.import_sessions(live, [_record("a", 1.0, title="Same")]).ok
        first = portability.import_sessions(
            live, [_record("b", 2.0, [10, 11], title="Same")], on_title_clash="rename"
        )
        assert first.retitled == 1
        feed = _record("b", 2.0, [12], title="Same", messages_after_id=11)
        again = portability.import_sessions(live, [feed], on_title_clash="rename")
        assert (again.appended, again.messages, again.errors) == (1, 1, [])
        assert sessions.get_session(live, "b")["title"] == "Same #2"
        assert _ids(live, "b") == [10, 11, 12]
