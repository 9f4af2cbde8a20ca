"""`hermes db …` and the error handler's exit codes (CliRunner)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from clitools import load_sample, run, run_json

from hermes_cli.main import EXIT_BUSY, EXIT_FAILURE, exit_code_for
from hermes_state import errors
from hermes_state.connection import open_store
from hermes_state.schema import SCHEMA_VERSION


@pytest.fixture
def sample(hermes_home: Path) -> Path:
    """The test profile's store, filled with the sample sessions."""
    return load_sample()


def test_db_path_prints_the_store_path_without_creating_it(hermes_home: Path) -> None:
    result = run("db", "path")
    assert result.stdout == f"{hermes_home / 'state.db'}\n"
    assert list(hermes_home.iterdir()) == []


def test_db_path_json_says_whether_it_exists(sample: Path) -> None:
    assert run_json("db", "path") == {"path": str(sample), "exists": True, "profile": "default"}


def test_db_check_reports_a_healthy_store(sample: Path) -> None:
    data = run_json("db", "check")
    assert data["ok"] is True
    assert [c["name"] for c in data["checks"]] == [
        "integrity",
        "foreign_keys",
        "search_indexes",
        "schema",
        "permissions",
    ]


def test_db_check_fails_on_loose_file_modes(sample: Path) -> None:
    os.chmod(sample, 0o644)
    result = run("db", "check", "--json")
    assert result.exit_code == 1
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert not checks["permissions"]["ok"] and "0644" in checks["permissions"]["detail"]


def test_db_check_on_a_garbage_file_fails_cleanly(hermes_home: Path) -> None:
    garbage = b"this is not sqlite " * 100
    (hermes_home / "state.db").write_bytes(garbage)
    result = run("db", "check")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and "hermes sessions recover" in result.stderr
    assert (hermes_home / "state.db").read_bytes() == garbage


def test_db_check_on_a_fresh_profile_fails_without_creating_a_store(hermes_home: Path) -> None:
    result = run("db", "check")
    assert result.exit_code == 1 and "No store yet" in result.stderr
    assert list(hermes_home.iterdir()) == []


def test_db_migrate_creates_a_missing_store(hermes_home: Path) -> None:
    result = run("db", "migrate")
    assert result.exit_code == 0
    assert result.stdout == f"Created {hermes_home / 'state.db'} at schema v{SCHEMA_VERSION}.\n"


def test_db_migrate_on_a_current_store_changes_nothing(sample: Path) -> None:
    assert "already at schema" in run("db", "migrate").stdout


def test_db_optimize_reports_sizes(sample: Path) -> None:
    result = run("db", "optimize")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("Database size: ")


def test_db_optimize_refuses_while_another_process_has_the_store_open(
    sample: Path, hold_store
) -> None:
    holder = hold_store(sample, "open")
    result = run("db", "optimize")
    assert result.exit_code == EXIT_BUSY
    assert f"PID {holder.proc.pid}" in result.stderr and "--force" in result.stderr


def test_db_lockowners_names_the_process_holding_the_write_lock(sample: Path, hold_store) -> None:
    holder = hold_store(sample, "lock")
    data = run_json("db", "lockowners")
    assert data["supported"] is True
    assert holder.proc.pid in {h["pid"] for h in data["holders"]}
    text = run("db", "lockowners").stdout
    assert "Locks held" in text
    assert any(line.split()[:1] == [str(holder.proc.pid)] for line in text.splitlines())


def test_db_lockowners_with_nobody_holding_says_so(sample: Path) -> None:
    assert "No process holds or has open" in run("db", "lockowners").stdout


def test_locked_and_busy_stores_map_to_exit_75() -> None:
    assert exit_code_for(errors.StoreLockedError("locked")) == EXIT_BUSY
    assert exit_code_for(errors.StoreBusyError("busy")) == EXIT_BUSY
    assert exit_code_for(errors.SessionNotFoundError("gone")) == EXIT_FAILURE


def test_a_store_newer_than_the_code_is_browsable_with_a_warning(sample: Path) -> None:
    with open_store(sample) as store:
        store.conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    result = run("sessions", "list", "--limit", "1")
    assert result.exit_code == 0
    assert "newer hermes" in result.stderr
    migrate = run("db", "migrate")
    assert migrate.exit_code == 1 and "newer than this hermes" in migrate.stderr


def test_db_migrate_finishes_a_pending_index_rebuild(sample: Path) -> None:
    from hermes_state import fts

    store = open_store(sample)
    try:
        store.write(fts.start_rebuild)  # what upgrading a large foreign layout leaves behind
        assert fts.rebuild_pending(store.conn)
    finally:
        store.close()
    result = run("db", "migrate")
    assert result.exit_code == 0, result.output
    store = open_store(sample, read_only=True)
    try:
        assert not fts.rebuild_pending(store.conn)
        assert fts.integrity_check(store.conn) == []
    finally:
        store.close()
    hits = run_json("sessions", "search", "chat-send")["hits"]
    assert hits
