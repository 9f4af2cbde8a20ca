"""`hermes backup` beside another process's EXCLUSIVE lock (issue #35, item 1): it says who holds
the store, waits with the command's patience (--wait, --no-wait) and exits 75 when it runs out,
instead of retrying in silence forever; the scratch a killed backup leaves is reaped by the next.
All through the real `hermes` process, against a real lock held by another process."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from clitools import child, load_sample
from support.children import child_env, hermes_argv

from hermes_state.backups import archive_check, archive_format
from hermes_state.store.errors import StoreLockedError
from hermes_state.store.home import default_db_path
from hermes_state.store.patience import Waiting
from hermes_state.store.snapshot import sqlite_snapshot

# Another process holding the store's EXCLUSIVE lock (a rollback-journal store: no reader gets
# in) until the test closes its stdin.
EXCLUSIVE_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
conn.execute("BEGIN EXCLUSIVE")
print("ready", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


class Exclusive:
    """A child process that holds a store's EXCLUSIVE lock until released."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", EXCLUSIVE_HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def release(self) -> None:
        """Let go of the lock (idempotent)."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture
def store(hermes_home: Path) -> Path:
    """The sample store, in the rollback-journal mode new stores get by default."""
    path = load_sample()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        conn.close()
    return path


@pytest.fixture
def exclusive(store: Path) -> Iterator[Exclusive]:
    """The store, EXCLUSIVE-locked by another process for the test's duration."""
    holder = Exclusive(store)
    try:
        yield holder
    finally:
        holder.release()


def _scratch(hermes_home: Path) -> list[str]:
    folder = hermes_home / "backups"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_backup_under_an_exclusive_lock_says_who_and_exits_75_when_wait_runs_out(
    exclusive: Exclusive, hermes_home: Path
) -> None:
    started = time.monotonic()
    done = child("backup", "--wait", "3")
    took = time.monotonic() - started
    assert done.returncode == 75, (done.returncode, done.stderr)
    assert took < 10, took  # 3 s of patience, plus the interpreter's start on a busy machine
    assert (
        f"Waiting for up to 3s: state.db is locked by PID {exclusive.proc.pid} (" in done.stderr
    ), done.stderr
    assert "Error: Cannot back up state.db: state.db stayed locked by another process for 3." in (
        done.stderr
    )
    assert "no archive was written" in done.stderr and "Hint: " in done.stderr
    assert "Traceback" not in done.stderr
    assert _scratch(hermes_home) == []  # no archive, no scratch left behind


def test_backup_no_wait_gives_up_at_once(exclusive: Exclusive, hermes_home: Path) -> None:
    started = time.monotonic()
    done = child("--no-wait", "backup")
    assert done.returncode == 75, done.stderr
    assert time.monotonic() - started < 8
    assert "stayed locked" in done.stderr and "Waiting" not in done.stderr
    assert _scratch(hermes_home) == []


def test_backup_waits_for_a_lock_released_within_its_patience(
    exclusive: Exclusive, hermes_home: Path
) -> None:
    proc = subprocess.Popen(
        hermes_argv("backup", "--wait", "30", "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()  # the one waiting notice, after a second of waiting
    assert line.startswith("Waiting for up to 30s: state.db is locked by PID"), line
    exclusive.release()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    archive = Path(json.loads(out)["archive"])
    with zipfile.ZipFile(archive) as zf:
        assert "state.db" in zf.namelist()
    assert archive_check.verify_backup(archive).ok


def test_a_killed_backup_leaves_scratch_that_the_next_run_reaps(
    exclusive: Exclusive, hermes_home: Path
) -> None:
    proc = subprocess.Popen(
        hermes_argv("backup", "--wait", "60"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("Waiting for up to 60s")  # mid-run
    left = [n for n in _scratch(hermes_home) if n.startswith(archive_format.BACKUP_WORK_PREFIX)]
    assert len(left) == 1, _scratch(hermes_home)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert left[0] in _scratch(hermes_home)  # what SIGKILL leaves: nothing ran to remove it
    exclusive.release()
    again = child("backup", "--json")
    assert again.returncode == 0, again.stderr
    names = _scratch(hermes_home)
    assert not [n for n in names if n.startswith(archive_format.BACKUP_WORK_PREFIX)], names
    assert len([n for n in names if n.endswith(".zip")]) == 1
    assert str(hermes_home / "backups" / left[0]) in json.loads(again.stdout)["cleaned"]


def test_the_snapshot_gives_up_after_its_patience_and_names_the_holder(
    exclusive: Exclusive, tmp_path: Path
) -> None:
    told: list[float] = []
    started = time.monotonic()
    with pytest.raises(StoreLockedError) as caught:
        sqlite_snapshot(
            default_db_path(),
            tmp_path / "copy.db",
            waiting=Waiting(patience=1.5, notify=lambda _path, waited: told.append(waited)),
        )
    took = time.monotonic() - started
    assert 1.5 <= took < 4, took
    assert len(told) == 1 and told[0] >= 1.0
    assert f"PID {exclusive.proc.pid}" in str(caught.value)
