"""Reliability: read-only commands never write, create or checkpoint anything (SPEC §3, §15).

Every command runs as a real process, so the files compared are held open by no connection of
this test process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Holder
from reliability_helpers import file_state, run_cli, tree_listing
from support.stores import crash_with_committed_wal, populate_store, settle

from hermes_state.store.home import create_profile

SHOWN = "sess-1-00000"
READ_ONLY_COMMANDS: dict[str, list[str]] = {
    "sessions-list": ["sessions", "list"],
    "sessions-list-json": ["sessions", "list", "--json"],
    "sessions-search": ["sessions", "search", "deploy"],
    "sessions-show": ["sessions", "show", SHOWN],
    "sessions-stats": ["sessions", "stats"],
    "sessions-export": ["sessions", "export", "-o", "-"],
    "db-check": ["db", "check"],
    "db-path": ["db", "path"],
    "db-lockowners": ["db", "lockowners"],
}
# The subset that opens the database (db path and db lockowners never do).
OPENING = [n for n in READ_ONLY_COMMANDS if not n.startswith(("db-path", "db-lockowners"))]
BUNDLE = ("state.db", "state.db-wal", "state.db-shm")


def bundle_state(home: Path, names: tuple[str, ...] = BUNDLE) -> dict[str, object]:
    """Return (size, mtime_ns, sha256) of each store file in home (None when absent)."""
    return {name: file_state(home / name) for name in names}


@pytest.fixture
def populated_home(hermes_home: Path) -> Path:
    """A home with a closed, fully checkpointed store."""
    populate_store(hermes_home / "state.db", sessions_n=3, messages_per_session=20)
    settle(hermes_home / "state.db")
    return hermes_home


@pytest.mark.parametrize("name", list(READ_ONLY_COMMANDS))
def test_read_only_command_leaves_a_checkpointed_store_and_its_sidecars_untouched(
    name: str, populated_home: Path, hold_store: Callable[..., Holder]
) -> None:
    # An idle process (a gateway between turns) keeps the -wal/-shm in place, checkpointed.
    hold_store(populated_home / "state.db", "open", 60.0)
    settle(populated_home / "state.db")
    before = bundle_state(populated_home)
    assert all(before.values()), before
    proc = run_cli(READ_ONLY_COMMANDS[name], home=populated_home)
    assert proc.returncode == 0, proc.stderr
    assert bundle_state(populated_home) == before


@pytest.mark.parametrize("name", OPENING)
def test_read_only_command_never_checkpoints_a_crash_leftover_wal(
    name: str, populated_home: Path
) -> None:
    db = populated_home / "state.db"
    crash_with_committed_wal(db, SHOWN, 25)  # committed frames only in the WAL
    before = bundle_state(populated_home, ("state.db", "state.db-wal"))
    assert before["state.db-wal"][0] > 0  # type: ignore[index]
    proc = run_cli(READ_ONLY_COMMANDS[name], home=populated_home)
    assert proc.returncode == 0, proc.stderr
    assert bundle_state(populated_home, ("state.db", "state.db-wal")) == before


def test_read_only_export_sees_the_rows_that_are_only_in_a_crash_leftover_wal(
    populated_home: Path,
) -> None:
    crash_with_committed_wal(populated_home / "state.db", SHOWN, 25)
    proc = run_cli(["sessions", "export", "-o", "-", "--session-id", SHOWN], home=populated_home)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("after the last checkpoint") == 25


def fresh_state(root: Path, home: Path) -> tuple[dict[str, tuple[str, int]], int]:
    """Return the recursive listing of root and the mtime of home (a create+delete shows)."""
    return tree_listing(root), os.stat(home).st_mtime_ns


@pytest.mark.parametrize("name", list(READ_ONLY_COMMANDS))
def test_read_only_command_in_a_fresh_home_creates_no_file(name: str, hermes_home: Path) -> None:
    before = fresh_state(hermes_home.parent, hermes_home)
    proc = run_cli(READ_ONLY_COMMANDS[name], home=hermes_home)
    assert "Traceback" not in proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    assert fresh_state(hermes_home.parent, hermes_home) == before


@pytest.mark.parametrize("name", ["sessions-list", "sessions-search", "sessions-stats", "db-check"])
def test_read_only_command_in_a_fresh_named_profile_creates_no_file(
    name: str, hermes_home: Path
) -> None:
    profile = create_profile("coder")
    before = fresh_state(hermes_home, profile)
    proc = run_cli(["-p", "coder", *READ_ONLY_COMMANDS[name]], home=hermes_home)
    assert "Traceback" not in proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    assert fresh_state(hermes_home, profile) == before
