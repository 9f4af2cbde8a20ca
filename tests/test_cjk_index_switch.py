"""`hermes db cjk-index`: hermes' CJK index turned off and on again on a real store.

Off drops only hermes' own objects (the agent's tables, indexes and triggers stay as they were),
marks the store so no migration adds the index back, and CJK words are still found (by a scan);
on creates it and indexes every message, and searches find by index again. Through the library,
the in-process CLI and the real `python -m hermes_cli`.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from clitools import child, run, run_json
from support.upstream30 import build_upstream30

from hermes_state.records import messages, sessions
from hermes_state.search.search import search_messages
from hermes_state.store import cjk, migrations
from hermes_state.store.connection import open_store
from hermes_state.upkeep import cjk_index


@pytest.fixture
def store_path(db_path: Path) -> Path:
    """A store of two sessions with CJK and English messages."""
    with open_store(db_path) as store:
        sessions.create_session(store, "jp", "cli")
        sessions.create_session(store, "en", "telegram")
        for n in range(30):
            messages.append_message(store, "jp", "user", f"東京で会議がある {n}")
            messages.append_message(store, "en", "user", f"meeting in Tokyo {n}")
    return db_path


def _agent_objects(path: Path) -> list[tuple[str, str, str]]:
    """Return every schema object that is not hermes' CJK index (type, name, sql)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT type, name, COALESCE(sql, '') FROM sqlite_master").fetchall()
    finally:
        conn.close()
    return sorted(r for r in rows if not r[1].startswith("hermes_cjk"))


def _hits(path: Path, query: str) -> tuple[str, list[int]]:
    with open_store(path, read_only=True) as store:
        found = search_messages(store, query, limit=100, sort="newest")
    return found.route, [h["id"] for h in found]


def test_off_drops_only_the_index_and_search_still_finds_cjk(store_path: Path) -> None:
    before_objects = _agent_objects(store_path)
    route, before = _hits(store_path, "会議")
    assert route == "cjk" and len(before) == 30
    with open_store(store_path) as store:
        change = cjk_index.set_cjk_index(store, on=False)
        assert change.changed and change.before.installed and not change.after.installed
        assert change.before.index_bytes and change.after.off
        assert not cjk.is_installed(store.conn)
        # A later migration (install_additions runs in every one) leaves it out.
        assert store.write(migrations.install_additions) is None
        assert not cjk.is_installed(store.conn)
        # Writes go on without it, and nothing brings it back.
        messages.append_message(store, "jp", "user", "会議は明日")
        assert not cjk.is_installed(store.conn)
    assert _agent_objects(store_path) == before_objects
    route, after = _hits(store_path, "会議")
    assert route == "scan" and after[1:] == before and len(after) == 31


def test_on_again_indexes_every_message(store_path: Path) -> None:
    with open_store(store_path) as store:
        cjk_index.set_cjk_index(store, on=False)
        messages.append_message(store, "jp", "user", "会議は明日")
        left: list[int] = []
        change = cjk_index.set_cjk_index(store, on=True, on_progress=left.append)
        assert change.changed and change.after.installed and change.after.behind == 0
        assert left and left[0] >= 61  # every message, from the first
        assert not change.after.off
    route, hits = _hits(store_path, "会議")
    assert route == "cjk" and len(hits) == 31


def test_turning_it_to_what_it_is_changes_nothing(store_path: Path) -> None:
    with open_store(store_path) as store:
        assert not cjk_index.set_cjk_index(store, on=True).changed
        assert cjk_index.set_cjk_index(store, on=False).changed
        assert not cjk_index.set_cjk_index(store, on=False).changed


def test_cli_status_off_on_and_json(store_path: Path) -> None:
    shown = run("db", "cjk-index")
    assert shown.exit_code == 0 and shown.stdout.startswith("CJK index: on (")
    off = run("db", "cjk-index", "off")
    assert off.exit_code == 0 and off.stdout.startswith("CJK index: turned off")
    assert "hermes db optimize" in off.stderr
    assert (
        run("db", "cjk-index").stdout == "CJK index: off, turned off (no migration adds it back).\n"
    )
    data = run_json("db", "cjk-index", "on")
    assert data["changed"] and data["after"]["installed"] and data["after"]["behind"] == 0
    state = run_json("db", "cjk-index")
    assert state["installed"] and state["index_bytes"] > 0 and not state["off"]


def test_a_bad_switch_is_a_usage_error_that_touches_nothing(store_path: Path) -> None:
    before = _agent_objects(store_path)
    result = child("db", "cjk-index", "maybe")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "'maybe' is not one of 'on', 'off'" in result.stderr
    assert _agent_objects(store_path) == before
    with open_store(store_path, read_only=True) as store:
        assert cjk.is_installed(store.conn)


def test_the_real_process_turns_it_off(store_path: Path) -> None:
    result = child("db", "cjk-index", "off", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["after"]["off"] is True


def test_on_in_a_store_without_hermes_additions_is_refused(db_path: Path) -> None:
    """An agent's schema-30 layout `db migrate` has not upgraded gets hermes' objects only from
    `db migrate`: `on` changes nothing and says how to upgrade."""
    build_upstream30(db_path)
    before = _agent_objects(db_path)
    result = child("db", "cjk-index", "on")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "does not have hermes' additions yet; nothing was changed" in result.stderr
    assert "hermes db migrate" in result.stderr
    assert _agent_objects(db_path) == before
    with open_store(db_path, read_only=True) as store:
        assert not cjk.is_installed(store.conn)


@pytest.mark.parametrize("switch", [[], ["off"], ["on"]])
def test_a_profile_without_a_store_is_an_error_that_creates_none(
    hermes_home: Path, switch: list[str]
) -> None:
    result = child("db", "cjk-index", *switch)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("Error: No store yet at ")
    assert "Hint:" in result.stderr
    assert not (hermes_home / "state.db").exists()
