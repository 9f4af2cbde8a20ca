"""`sessions search` hides archived sessions unless --archived, as `sessions list` does.

Run on the sample store through the in-process CLI and the real `python -m hermes_cli`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clitools import child, load_sample, run, run_json

from hermes_state.records import sessions
from hermes_state.store.connection import open_store

FIX_DOCKER = "20261118_091502_a1c9e2"  # the sample session about a failing Docker build
NIGHTLY = "20261121_060000_d90a11"  # one of the two sample sessions mentioning chat-send


@pytest.fixture
def archived_sample(hermes_home: Path) -> Path:
    """The sample store with the Docker and the nightly digest sessions archived."""
    path = load_sample()
    with open_store(path) as store:
        sessions.set_session_archived(store, FIX_DOCKER, True)
        sessions.set_session_archived(store, NIGHTLY, True)
    return path


def _sessions_of(data: dict[str, Any]) -> set[str]:
    """Return the session ids of a search document's hits."""
    return {h["session_id"] for h in data["hits"]}


def test_search_leaves_out_archived_sessions_and_archived_includes_them(
    archived_sample: Path,
) -> None:
    default = run_json("sessions", "search", "chat-send")
    assert NIGHTLY not in _sessions_of(default) and _sessions_of(default)
    included = run_json("sessions", "search", "chat-send", "--archived")
    assert _sessions_of(included) == _sessions_of(default) | {NIGHTLY}
    assert (default["sessions"], included["sessions"]) == (1, 2)


def test_search_agrees_with_list_on_which_sessions_are_shown(archived_sample: Path) -> None:
    listed = {s["id"] for s in run_json("sessions", "list")["sessions"]}
    found = _sessions_of(run_json("sessions", "search", "the", "--limit", "0"))
    assert found <= listed and FIX_DOCKER not in found
    listed_all = {s["id"] for s in run_json("sessions", "list", "--archived")["sessions"]}
    found_all = _sessions_of(run_json("sessions", "search", "the", "--limit", "0", "--archived"))
    assert found_all <= listed_all and FIX_DOCKER in found_all


def test_search_says_when_only_archived_sessions_match(archived_sample: Path) -> None:
    result = run("sessions", "search", "docker")
    assert result.exit_code == 0
    assert result.stdout == "No messages match 'docker'.\n"
    assert "Note: archived sessions have matches; --archived includes them." in result.stderr
    nothing = run("sessions", "search", "zzzabsent")
    assert nothing.stderr == ""


def test_process_hides_archived_sessions_unless_asked(archived_sample: Path) -> None:
    hidden = child("sessions", "search", "docker", "--json")
    assert hidden.returncode == 0, hidden.stderr
    assert json.loads(hidden.stdout)["hits"] == []
    assert "--archived includes them" in hidden.stderr
    shown = child("sessions", "search", "docker", "--archived")
    assert shown.returncode == 0, shown.stderr
    assert FIX_DOCKER in shown.stdout and shown.stdout.splitlines()[-1] == "1 match in 1 session."
