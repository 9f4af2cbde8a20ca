"""What `hermes sessions recover` leaves on disk: the rows a symlinked store keeps in its WAL, a
target name that is not UTF-8, private scratch directories reaped after a killed run, and the
modes of what it creates. Each case runs the real `hermes` process."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import stores
from support.children import child_env, hermes_argv
from test_recover_hang import hard_time_limit  # noqa: F401 (autouse: no test runs unbounded)

from hermes_state.recover.recover import WORK_PREFIX


def hermes(home: Path, *args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    """Run `hermes ARGS` (bytes allowed, for names that are not UTF-8) against home."""
    return subprocess.run(
        [os.fsencode(a) if isinstance(a, str) else a for a in hermes_argv(*args)],  # type: ignore[arg-type]
        capture_output=True,
        env=child_env(home),
        timeout=120,
    )


def count(db: Path | bytes, table: str = "messages") -> int:
    """Count a table's rows of a closed store (opened read-only)."""
    uri = Path(os.fsdecode(db)).resolve().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def wal_store(tmp_path: Path) -> Path:
    """A store in WAL mode whose last 30 messages are only in its -wal (a crashed writer)."""
    db = tmp_path / "real" / "state.db"
    db.parent.mkdir()
    stores.make_wal_store(db)
    stores.populate_store(db, sessions_n=2, messages_per_session=20, content_size=50)
    stores.crash_with_committed_wal(db, "sess-1-00000", 30)
    assert os.path.getsize(str(db) + "-wal") > 0
    return db


def test_recover_through_a_symlinked_store_keeps_the_rows_in_its_wal(
    wal_store: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.db").symlink_to(wal_store)
    target = tmp_path / "out" / "new.db"
    done = hermes(home, "sessions", "recover", "--to", str(target), "--json")
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["verification"]["ok"] is True
    assert count(target) == 2 * 20 + 30  # the 30 rows that were only in the WAL too


def test_recover_to_a_name_that_is_not_utf8_writes_it_or_says_why_in_one_line(
    wal_store: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    stores.copy_bundle(wal_store, home / "state.db")
    target = os.fsencode(tmp_path) + b"/recovered-\xff.db"
    done = hermes(home, "sessions", "recover", "--to", target)
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert os.path.exists(target) and count(target) == 70


def test_directories_recover_creates_are_private_and_so_is_the_target(
    wal_store: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    stores.copy_bundle(wal_store, home / "state.db")
    out_dir = tmp_path / "out"
    target = out_dir / "new.db"
    old = os.umask(0o022)
    try:
        done = hermes(home, "sessions", "recover", "--to", str(target))
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr.decode()
    assert stat.S_IMODE(out_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(str(target) + ".recovery.json").stat().st_mode) == 0o600


def test_recover_refuses_to_create_a_whole_missing_path(wal_store: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    stores.copy_bundle(wal_store, home / "state.db")
    target = tmp_path / "not-mounted" / "hermes" / "new.db"
    done = hermes(home, "sessions", "recover", "--to", str(target))
    assert done.returncode == 1
    errors = [line for line in done.stderr.decode().splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "does not exist" in errors[0]
    assert not (tmp_path / "not-mounted").exists()


SLOW_RECOVER = """
import sys, time
from hermes_state.recover import recover as r
real = r.take_source
def slow(source, work, report):
    out = real(source, work, report)
    print("copied", flush=True)
    time.sleep(60)  # killed here, with the scratch copy on disk
    return out
r.take_source = slow
r.recover(sys.argv[1], sys.argv[2])
"""


def test_a_killed_recover_leaves_a_private_scratch_copy_that_the_next_run_removes(
    wal_store: Path, tmp_path: Path
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_RECOVER, str(wal_store), str(out_dir / "a.db")],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(tmp_path),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "copied"
        left = [p for p in out_dir.iterdir() if p.name.startswith(WORK_PREFIX)]
        assert len(left) == 1
        assert stat.S_IMODE(left[0].stat().st_mode) == 0o700
        copies = [p for p in left[0].iterdir() if p.name.startswith("state.db")]
        assert copies and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in copies)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert any(p.name.startswith(WORK_PREFIX) for p in out_dir.iterdir())  # SIGKILL: no cleanup
    home = tmp_path / "home"
    home.mkdir()
    stores.copy_bundle(wal_store, home / "state.db")
    time.sleep(0.05)
    done = hermes(home, "sessions", "recover", "--to", str(out_dir / "b.db"))
    assert done.returncode == 0, done.stderr.decode()
    assert not [p for p in out_dir.iterdir() if p.name.startswith(WORK_PREFIX)]
