"""`sessions list` shows the live store unless --vault; with it, vaulted sessions too, marked
with their year (SPEC §21; issue #27 item 4)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from clitools import child, run, run_json

from hermes_state.records.messages import append_messages
from hermes_state.records.sessions import create_session, end_session
from hermes_state.store.connection import Store, open_store
from hermes_state.store.home import default_db_path
from hermes_state.vault import vault

NOW = time.time()
OLD = NOW - 400 * 86400
YEAR = vault.year_of(OLD)


def _session(store: Store, sid: str, at: float, source: str = "cli") -> None:
    create_session(store, sid, source, started_at=at)
    append_messages(store, sid, [{"role": "user", "content": f"{sid} hello", "timestamp": at}])
    store.write(
        lambda c: c.execute("UPDATE sessions SET last_activity_at = ? WHERE id = ?", (at, sid))
    )
    end_session(store, sid, "user_exit")


@pytest.fixture
def moved() -> Iterator[None]:
    """Two old sessions moved into the vault by the real process, two recent ones live."""
    store = open_store(default_db_path())
    _session(store, "old1", OLD, "cron")
    _session(store, "old2", OLD + 60)
    _session(store, "new1", NOW - 3600)
    _session(store, "new2", NOW - 60)
    store.close()
    result = child("vault", "move", "--older-than", "30d", "--yes")
    assert result.returncode == 0, result.stderr
    yield


def test_list_shows_only_the_live_store_without_vault(moved: None) -> None:
    doc = run_json("sessions", "list")
    assert [s["id"] for s in doc["sessions"]] == ["new2", "new1"] and doc["total"] == 2
    assert "vault" not in doc["sessions"][0]


def test_list_vault_includes_vaulted_sessions_marked(moved: None) -> None:
    result = child("sessions", "list", "--vault", "--json")
    doc = json.loads(result.stdout)
    got = [(s["id"], s["vault"]) for s in doc["sessions"]]
    assert got == [("new2", None), ("new1", None), ("old2", YEAR), ("old1", YEAR)]
    assert doc["total"] == 4 and doc["complete"]
    assert doc["sessions"][-1]["message_count"] == 1


def test_list_vault_marks_rows_for_people(moved: None) -> None:
    result = child("sessions", "list", "--vault", "--no-pager")
    assert result.returncode == 0, result.stderr
    old = [line for line in result.stdout.splitlines() if line.startswith("old")]
    assert len(old) == 2 and all(f"[vault {YEAR}]" in line for line in old)


def test_list_vault_filters_and_pages_across_stores(moved: None) -> None:
    doc = run_json("sessions", "list", "--vault", "--source", "cron")
    assert [s["id"] for s in doc["sessions"]] == ["old1"]
    page = run_json("sessions", "list", "--vault", "-n", "2", "--offset", "1")
    assert [s["id"] for s in page["sessions"]] == ["new1", "old2"] and not page["complete"]


def test_list_vault_hides_a_session_the_live_store_has(moved: None) -> None:
    back = child("vault", "return", "old2")
    assert back.returncode == 0, back.stderr
    crashed = child(
        "vault", "move", "--older-than", "30d", "--yes", env={vault.CRASH_ENV: "verified"}
    )
    assert crashed.returncode != 0
    doc = run_json("sessions", "list", "--vault")
    assert [(s["id"], s["vault"]) for s in doc["sessions"]].count(("old2", None)) == 1
    assert [s["id"] for s in doc["sessions"]].count("old2") == 1 and doc["total"] == 4


def test_list_vault_with_all_profiles_is_refused(moved: None) -> None:
    result = child("sessions", "list", "--vault", "--all-profiles")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--vault" in result.stderr


def test_list_help_states_the_vault_rules() -> None:
    text = " ".join(run("sessions", "list", "--help").stdout.split())
    assert "list and browse only with --vault" in text
