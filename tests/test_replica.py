"""`hermes replicate` and `hermes restore --from` without the replication engine running: the
DELETE-mode refusal (nothing started, journal mode unchanged), the missing-binary error, bad
targets, and the configuration written for Litestream."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from clitools import run
from support.children import child_env, hermes_argv
from support.stores import make_wal_store, populate_store

from hermes_state.backups import replica
from hermes_state.backups.replica_status import ReplicaStatus


def _mode(db: Path) -> str:
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


def _delete_mode_store(db: Path) -> None:
    """A store as an agent on a WAL-reset-vulnerable SQLite keeps it: DELETE journal mode."""
    populate_store(db, sessions_n=2, messages_per_session=10)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    finally:
        conn.close()


def _tables(db: Path) -> set[str]:
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()


def test_delete_mode_store_is_refused_before_anything_starts(
    hermes_home: Path, tmp_path: Path
) -> None:
    db = hermes_home / "state.db"
    _delete_mode_store(db)
    target = tmp_path / "replica"
    # A real process, with the binary reachable: the refusal must come before it is run.
    done = subprocess.run(
        hermes_argv("replicate", "--to", target.as_uri()),
        env=child_env(hermes_home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("Error: Refusing continuous replication")
    assert "(DELETE) is not in WAL mode" in first
    assert "--snapshot" in done.stderr and "journal_mode: wal" in done.stderr
    assert _mode(db) == "delete"  # unchanged
    assert not target.exists()  # litestream never wrote anything
    assert not (hermes_home / ".state.db-litestream").exists()
    assert not [p for p in hermes_home.iterdir() if p.name.startswith(".hermes-replica-")]
    assert not {t for t in _tables(db) if t.startswith("_litestream")}


def test_a_delete_mode_vault_store_is_not_refused(
    hermes_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Vault stores are hermes's own, kept in DELETE mode: pushed as snapshots, never streamed.
    make_wal_store(hermes_home / "state.db")
    _delete_mode_store(hermes_home / "vault" / "2024.db")
    monkeypatch.setenv("HERMES_LITESTREAM", str(tmp_path / "no-such-litestream"))
    result = run("replicate", "--to", (tmp_path / "r").as_uri())
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: HERMES_LITESTREAM=")  # past the journal check
    assert _mode(hermes_home / "vault" / "2024.db") == "delete"


def test_only_vault_stores_in_wal_is_an_error(hermes_home: Path, tmp_path: Path) -> None:
    _delete_mode_store(hermes_home / "vault" / "2024.db")
    result = run("replicate", "--to", (tmp_path / "r").as_uri())
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: No store in WAL mode to stream")
    assert "--snapshot" in result.stderr


def test_missing_binary_is_one_line_with_the_install_hint(
    hermes_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_wal_store(hermes_home / "state.db")
    monkeypatch.setenv("HERMES_LITESTREAM", str(tmp_path / "no-such-litestream"))
    result = run("replicate", "--to", (tmp_path / "r").as_uri())
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Error: HERMES_LITESTREAM=")
    assert lines[1] == "Hint: Install it with: pip install 'hermes-state[replica]'"
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--to", "http://example.invalid/x"], "not a replica URL"),
        (["--to", "file://relative/path"], "absolute path"),
        (["--to", "file:///"], "root directory"),
        (["--to", "s3://"], "no bucket or host"),
        (["--to", "s3://b/p?x=1"], "no query"),
        (["--to", "file:///tmp/r", "--endpoint", "http://127.0.0.1:9"], "s3:// targets only"),
        (["--to", "s3://b/p", "--endpoint", "ftp://x"], "not an endpoint URL"),
    ],
)
def test_bad_targets_are_refused_in_one_line(hermes_home: Path, args: list[str], said: str) -> None:
    make_wal_store(hermes_home / "state.db")
    result = run("replicate", *args)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and said in result.stderr.splitlines()[0]
    assert "Traceback" not in result.stderr


def test_options_that_do_not_go_together(hermes_home: Path, tmp_path: Path) -> None:
    url = (tmp_path / "r").as_uri()
    assert run("replicate", "--to", url, "--snapshot", "--status").exit_code == 2
    assert run("replicate", "--to", url, "--json").exit_code == 2
    assert run("restore").exit_code == 2
    assert run("restore", "--at", "yesterday", str(tmp_path / "x.zip")).exit_code == 2
    bad_at = run("restore", "--from", url, "--at", "someday")
    assert bad_at.exit_code == 2 and "--at 'someday'" in bad_at.stderr


def test_nothing_to_replicate_is_an_error(hermes_home: Path, tmp_path: Path) -> None:
    result = run("replicate", "--to", (tmp_path / "r").as_uri())
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: No store to replicate")


def test_config_names_every_store_under_the_target(hermes_home: Path, tmp_path: Path) -> None:
    make_wal_store(hermes_home / "state.db")
    make_wal_store(hermes_home / "vault" / "2023.db")
    make_wal_store(hermes_home / "vault" / "2024.db")
    (hermes_home / "vault" / "notes.txt").write_text("not a store", encoding="utf-8")
    stores = replica.stores_of(hermes_home)
    assert [s.rel for s in stores] == ["state.db", "vault/2023.db", "vault/2024.db"]
    target = replica.parse_target("s3://bucket/hermes/", "http://127.0.0.1:9000")
    work = tmp_path / "work"
    work.mkdir()
    path = replica.write_config(work, [(s.path, s.rel) for s in stores], target)
    assert os.stat(path).st_mode & 0o777 == 0o600
    config = json.loads(path.read_text(encoding="utf-8"))
    assert config["dbs"][1] == {
        "path": str(hermes_home / "vault" / "2023.db"),
        "replica": {
            "url": "s3://bucket/hermes/vault/2023.db",
            "endpoint": "http://127.0.0.1:9000",
            "force-path-style": True,
        },
    }


def test_all_profiles_puts_named_profiles_under_profiles(hermes_home: Path) -> None:
    make_wal_store(hermes_home / "state.db")
    named = hermes_home / "profiles" / "coder"
    named.mkdir(parents=True)
    make_wal_store(named / "state.db")
    rels = [s.rel for s in replica.stores_of(hermes_home, all_profiles=True)]
    assert rels == ["state.db", "profiles/coder/state.db"]
    assert [s.rel for s in replica.stores_of(hermes_home)] == ["state.db"]


def test_status_reads_lag_and_the_missing_snapshot() -> None:
    status = ReplicaStatus("state.db", "file:///r/state.db", files=3)
    status.latest_txid, status.latest_time = 7, 1000.0
    status.local_txid, status.local_time = 9, 1004.5
    assert status.behind == 2 and status.lag_s == 4.5
    assert status.problem() is not None and "no snapshot" in status.problem()  # type: ignore[operator]
    status.snapshot = True
    assert status.problem() is None and status.restorable
    assert ReplicaStatus("state.db", "u").problem() == ("the replica holds nothing for this store")


def test_follow_needs_a_name_and_a_good_one(hermes_home: Path, tmp_path: Path) -> None:
    url = (tmp_path / "r").as_uri()
    assert run("replicate", "--follow", url).exit_code == 2
    assert run("replicate", "--follow", url, "--to", url, "--as", "x").exit_code == 2
    assert run("replicate", "--to", url, "--as", "x").exit_code == 2
    bad = run("replicate", "--follow", url, "--as", "../etc")
    assert bad.exit_code == 1 and "not a machine name" in bad.stderr
    assert not (hermes_home / "machines").exists()


def _two_machines(home: Path) -> None:
    """This machine's store and a followed copy of a laptop's (as --follow keeps it)."""
    populate_store(home / "state.db", sessions_n=2, messages_per_session=4, seed=1)
    populate_store(
        home / "machines" / "laptop" / "state.db", sessions_n=3, messages_per_session=4, seed=2
    )


def test_machine_all_lists_and_marks_every_machines_sessions(hermes_home: Path) -> None:
    _two_machines(hermes_home)
    data = json.loads(run("sessions", "list", "--machine", "all", "--json").stdout)
    by_machine = {s["id"]: s["machine"] for s in data["sessions"]}
    assert data["total"] == 5
    assert {k for k, v in by_machine.items() if v == "laptop"} == {
        "sess-2-00000",
        "sess-2-00001",
        "sess-2-00002",
    }
    assert {k for k, v in by_machine.items() if v is None} == {"sess-1-00000", "sess-1-00001"}
    text = run("sessions", "list", "--machine", "all").stdout
    assert (
        "[machine laptop] session 2-0" in text
        and "[machine" not in text.split("session 1-0")[0].splitlines()[-1]
    )
    only = json.loads(run("sessions", "list", "--machine", "laptop", "--json").stdout)
    assert {s["id"] for s in only["sessions"]} == set(by_machine) - {"sess-1-00000", "sess-1-00001"}
    plain = json.loads(run("sessions", "list", "--json").stdout)
    assert "machine" not in plain["sessions"][0] and plain["total"] == 2


def test_machine_search_and_show_read_the_followed_copy(hermes_home: Path) -> None:
    _two_machines(hermes_home)
    own = json.loads(run("sessions", "search", "deploy", "--json", "-n", "0").stdout)
    both = json.loads(
        run("sessions", "search", "deploy", "--machine", "all", "--json", "-n", "0").stdout
    )
    laptop = json.loads(
        run("sessions", "search", "deploy", "--machine", "laptop", "--json", "-n", "0").stdout
    )
    assert both["matches"] == own["matches"] + laptop["matches"] > own["matches"]
    assert {h["machine"] for h in laptop["hits"]} == {"laptop"}
    assert {h["session_id"] for h in both["hits"] if h["machine"] is None} == {
        h["session_id"] for h in own["hits"]
    }
    newest = json.loads(
        run("sessions", "search", "deploy", "--machine", "all", "--sort", "newest", "--json").stdout
    )
    times = [h["created_at"] for h in newest["hits"]]
    assert times == sorted(times, reverse=True)
    shown = run("sessions", "show", "sess-2-00001", "--machine", "all")
    assert shown.exit_code == 0 and shown.stdout.startswith("[machine laptop] from the copy in")
    assert run("sessions", "show", "sess-2-00001").exit_code != 0  # not on this machine
    head = json.loads(
        run("sessions", "show", "sess-2-00001", "--machine", "laptop", "--json").stdout
    )
    assert head["machine"] == "laptop"


def test_machine_unknown_and_conflicting_options(hermes_home: Path) -> None:
    _two_machines(hermes_home)
    unknown = run("sessions", "list", "--machine", "desk")
    assert unknown.exit_code == 1
    assert unknown.stderr.startswith("Error: No copy of machine 'desk'")
    assert "Followed here: laptop" in unknown.stderr
    assert run("sessions", "list", "--machine", "all", "--vault").exit_code == 2
