"""Recover never waits without bound: a garbage -wal beside the store, a lock held elsewhere.

A -wal file beside a rollback-journal store put the work copy's main connection in WAL mode
(holding a shared lock for as long as it is open) while the search-index check's connection
opened the file in rollback mode and waited, without end, for an exclusive lock. The tests run
the real ``hermes`` process under a timeout, so a hang fails them instead of stalling the run.

``hard_time_limit`` (autouse here, imported by the other recover test modules) fails any
recover test that runs longer than RECOVER_TEST_LIMIT_S.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from support import stores
from support.children import child_env, hermes_argv

from hermes_state.recover.recover_report import Verification
from hermes_state.recover.recover_verify import IndexCheck

RECOVER_TEST_LIMIT_S = 180  # any one recover test; a recovery here takes seconds
CHILD_TIMEOUT_S = 60  # one `hermes sessions recover` of a test store


class TimeLimitExceeded(Exception):
    """A recover test ran past RECOVER_TEST_LIMIT_S (something waits without bound)."""


@pytest.fixture(autouse=True)
def hard_time_limit() -> Iterator[None]:
    """Fail the test if it runs longer than RECOVER_TEST_LIMIT_S, instead of hanging the run."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only
        return

    def expire(_signum: int, _frame: FrameType | None) -> None:
        raise TimeLimitExceeded(f"the test ran longer than {RECOVER_TEST_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, RECOVER_TEST_LIMIT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def recover_child(source: Path, target: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `hermes sessions recover --from source --to target ARGS` under CHILD_TIMEOUT_S."""
    argv = hermes_argv("sessions", "recover", "--from", str(source), "--to", str(target), *args)
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=child_env(extra={"NO_COLOR": "1"}),
            stdin=subprocess.DEVNULL,
            timeout=CHILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`hermes sessions recover` did not finish in {CHILD_TIMEOUT_S} s: {exc}")


def make_store(path: Path, journal_mode: str) -> Path:
    """Build a store through the library, settled, its file in the given journal mode."""
    stores.populate_store(path, sessions_n=6, messages_per_session=60, content_size=200)
    stores.settle(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert conn.execute(f"PRAGMA journal_mode={journal_mode}").fetchone()[0] == journal_mode
    finally:
        conn.close()
    stores.drop_sidecars(path)
    return path


def put_garbage_wal(db: Path, size: int = 100_000) -> None:
    """Leave a -wal of random bytes (no WAL header) beside a closed store."""
    Path(str(db) + "-wal").write_bytes(random.Random(5).randbytes(size))


@pytest.mark.parametrize("journal_mode", ["delete", "wal"])
def test_recover_with_a_garbage_wal_beside_the_store_finishes(
    tmp_path: Path, journal_mode: str
) -> None:
    db = make_store(tmp_path / "src" / "state.db", journal_mode)
    total = stores.count_rows(db, "messages")
    put_garbage_wal(db)
    target = tmp_path / "out.db"
    started = time.monotonic()
    proc = recover_child(db, target, "--allow-partial", "--json")
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < CHILD_TIMEOUT_S
    report = json.loads(proc.stdout)
    assert report["verified"] and report["verification"]["fts_checked"], report["verification"]
    assert report["verification"]["incomplete"] == []
    assert report["tables"]["messages"]["recovered"] == total
    assert stores.count_rows(target, "messages") == total


def test_recover_with_a_garbage_wal_and_invalid_rows_finishes(tmp_path: Path) -> None:
    # Rows moved to lost_and_found make the recovery wait for the copy's index check early.
    db = make_store(tmp_path / "src" / "state.db", "delete")
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")
        conn.execute("UPDATE messages SET timestamp = 'last tuesday' WHERE id = 7")
    finally:
        conn.close()
    put_garbage_wal(db)
    proc = recover_child(db, tmp_path / "out.db", "--allow-partial", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["verified"] and report["lost_and_found"] == {"invalid values": 1}
    messages = report["tables"]["messages"]
    assert (messages["expected"], messages["recovered"], messages["lost"]) == (360, 359, 1)


def test_index_check_gives_up_on_a_lock_held_elsewhere_and_says_so(tmp_path: Path) -> None:
    db = make_store(tmp_path / "state.db", "delete")
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # as a connection that never lets go would
        started = time.monotonic()
        check = IndexCheck(db, busy_s=0.5, limit_s=20)
        assert check.problems() == []
        assert time.monotonic() - started < 15
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert check.incomplete is not None and "locked" in check.incomplete
    assert "could not complete" in check.describe()


def test_index_check_is_stopped_at_its_deadline(tmp_path: Path) -> None:
    db = make_store(tmp_path / "state.db", "delete")
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        # Its lock wait would outlast the deadline: the wait for it ends at the deadline.
        check = IndexCheck(db, busy_s=3, limit_s=1)
        check.wait()
        assert time.monotonic() - started < 15
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert check.incomplete is not None and "did not finish within 1 s" in check.incomplete


def test_a_check_that_could_not_complete_fails_the_verification() -> None:
    checked = Verification(integrity=["ok"], schema_version=31, expected_schema_version=31)
    assert checked.ok
    checked.incomplete.append("the FTS5 integrity-check could not complete: database is locked")
    assert not checked.ok and checked.to_dict()["ok"] is False
