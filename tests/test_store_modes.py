"""File modes the user chose are kept: a read-only store is refused for writes (and still read),
only files hermes creates are tightened, and a directory this user cannot write is named for
the file SQLite must make there (-journal for a rollback store, -wal/-shm for a WAL one).

Every case runs the real `python -m hermes_cli` process. As root a 0444 file is still writable,
so the refusal is judged by mode bits; the read-only directory cases drop root's file
privileges (setpriv) so the directory's mode binds as it would for anyone else.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest
from clitools import child, load_sample
from hostile_env import assert_one_line_error, hermes
from support.stores import bundle_digest, settle

from hermes_state.store.connection import open_store

SESSION = "20261118_091502_a1c9e2"  # a sample session


def mode_of(path: Path) -> int:
    """Return a file's permission bits."""
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def store(hermes_home: Path) -> Path:
    """The test profile's store with the sample sessions, closed and settled."""
    path = load_sample()
    settle(path)
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "rename", SESSION, "Renamed"],
        ["sessions", "delete", SESSION, "--yes"],
        ["db", "optimize"],
        ["db", "migrate"],
    ],
    ids=["rename", "delete", "optimize", "migrate"],
)
def test_a_write_to_a_read_only_store_is_refused_and_its_mode_kept(
    store: Path, argv: list[str]
) -> None:
    os.chmod(store, 0o444)
    before = bundle_digest(store)
    proc = child(*argv)
    line = assert_one_line_error(proc)
    assert str(store) in line and "0444" in line
    assert f"Hint: Reading still works. To allow writes: chmod u+w {store}" in proc.stderr
    assert mode_of(store) == 0o444
    assert bundle_digest(store) == before


def test_reads_of_a_read_only_store_still_work(store: Path) -> None:
    os.chmod(store, 0o444)
    listed = child("sessions", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    checked = child("db", "check")
    assert checked.returncode == 0, checked.stderr
    assert "state.db is read-only (0444)" in checked.stdout
    assert mode_of(store) == 0o444


def test_restore_into_a_read_only_store_is_refused(store: Path, tmp_path: Path) -> None:
    made = child("backup", "-o", f"{tmp_path}/out/")
    assert made.returncode == 0, made.stderr
    [archive] = (tmp_path / "out").glob("*.zip")
    os.chmod(store, 0o400)
    before = bundle_digest(store)
    proc = child("restore", str(archive), "--yes")
    line = assert_one_line_error(proc)
    assert "0400" in line and "chmod u+w" in proc.stderr
    assert mode_of(store) == 0o400 and bundle_digest(store) == before
    assert not list(store.parent.glob("state.db.pre-restore-*"))


def test_a_command_leaves_the_mode_the_agent_gave_its_store(store: Path) -> None:
    os.chmod(store, 0o644)  # how Hermes Agent 0.19 leaves its files
    proc = child("sessions", "rename", SESSION, "Renamed")
    assert proc.returncode == 0, proc.stderr
    assert mode_of(store) == 0o644


def test_a_store_a_command_creates_is_private(hermes_home: Path, tmp_path: Path) -> None:
    export = tmp_path / "sample.jsonl"
    load_sample(tmp_path / "src" / "state.db")
    dumped = child(
        "sessions", "export", "-o", str(export), env={"HERMES_HOME": str(tmp_path / "src")}
    )
    assert dumped.returncode == 0, dumped.stderr
    proc = child("sessions", "import", str(export))
    assert proc.returncode == 0, proc.stderr
    assert mode_of(hermes_home / "state.db") == 0o600


def test_the_agent_library_takes_group_access_away_but_never_adds_write(store: Path) -> None:
    os.chmod(store, 0o640)
    with open_store(store):  # the agent's own role: its files are its own
        pass
    assert mode_of(store) == 0o600


def _journal_mode(path: Path, mode: str) -> None:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute(f"PRAGMA journal_mode = {mode}").fetchone()[0] == mode.lower()
    finally:
        conn.close()


def test_a_write_in_a_read_only_directory_blames_the_journal_of_a_rollback_store(
    store: Path,
) -> None:
    _journal_mode(store, "DELETE")
    home = store.parent
    before = bundle_digest(store)
    os.chmod(home, 0o555)
    try:
        proc = hermes("sessions", "rename", SESSION, "Renamed", home=home, unprivileged=True)
        listed = hermes("sessions", "list", home=home, unprivileged=True)
    finally:
        os.chmod(home, 0o700)
    line = assert_one_line_error(proc)
    assert "state.db-journal" in line and "not writable" in line and "delete journal mode" in line
    assert "-shm" not in line and "-wal" not in line
    assert "Reading still works" in proc.stderr
    assert listed.returncode == 0, listed.stderr  # a rollback store reads without a sidecar
    assert bundle_digest(store) == before


def test_a_write_in_a_read_only_directory_blames_the_wal_files_of_a_wal_store(
    store: Path,
) -> None:
    _journal_mode(store, "WAL")
    home = store.parent
    assert not Path(f"{store}-wal").exists() and not Path(f"{store}-shm").exists()
    before = bundle_digest(store)
    os.chmod(home, 0o555)
    try:
        proc = hermes("sessions", "rename", SESSION, "Renamed", home=home, unprivileged=True)
    finally:
        os.chmod(home, 0o700)
    line = assert_one_line_error(proc)
    assert "-wal and -shm" in line and "directory" in line and "-journal" not in line
    assert bundle_digest(store) == before
