"""Shared fixtures: the store path, an open SessionDB, file digests and a write-lock holder."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.children import child_env

from hermes_state.agent.db import SessionDB
from hermes_state.store.connection import is_open_in_process

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Let children take Ctrl-C, then compile the packages' bytecode once, before any test
    starts a child process."""
    # A run started in the background of a non-interactive shell (`pytest … &`) inherits SIGINT
    # ignored, and an ignored signal stays ignored across exec: every child would ignore the
    # Ctrl-C a test sends it. A handled one is reset to the default at exec.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Hundreds of tests start `python -m hermes_cli` or a library child. Where the environment
    # sets PYTHONDONTWRITEBYTECODE (this project's machines do), no child writes its .pyc, so
    # each one compiled every module it imports from source: ~0.1 s of CPU per child.
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller compiled them
    import compileall

    for package in ("hermes_state", "hermes_cli"):
        compileall.compile_dir(str(REPO_ROOT / package), quiet=1)


# A separate process with the store open: "lock" holds BEGIN IMMEDIATE, "open" only reads.
# It lets go when the test closes its stdin or after the given number of seconds.
HOLDER_CODE = """
import select, sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
if sys.argv[2] == "lock":
    conn.execute("BEGIN IMMEDIATE")
else:
    conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchall()
print("ready", time.time(), flush=True)
select.select([sys.stdin], [], [], float(sys.argv[3]))
if conn.in_transaction:
    conn.execute("COMMIT")
print("released", time.time(), flush=True)
"""


@dataclass
class Holder:
    """A process holding a store open (and maybe its write lock)."""

    proc: subprocess.Popen[str]
    ready_at: float
    released_at: float | None = None

    def release(self) -> float:
        """Let go of the store; return the wall-clock time the lock was released."""
        if self.released_at is None:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.close()
            word, stamp = self.proc.stdout.readline().split()
            assert word == "released"
            self.released_at = float(stamp)
            self.proc.wait(timeout=30)
        return self.released_at


def ask_for_wal(home: Path) -> Path:
    """Write a Hermes config asking for WAL, so new stores in home get it on any SQLite."""
    path = home / "config.yaml"
    path.write_text("database:\n  journal_mode: wal\n", encoding="utf-8")
    return path


@pytest.fixture
def wal_config(hermes_home: Path) -> Path:
    """New stores of this test's home are created in WAL mode (the user's config asks for it)."""
    return ask_for_wal(hermes_home)


@pytest.fixture
def db_path(hermes_home: Path) -> Path:
    """Where this test's store lives: <temporary HERMES_HOME>/state.db."""
    return hermes_home / "state.db"


@pytest.fixture
def db(db_path: Path) -> Iterator[SessionDB]:
    """A writable SessionDB on a fresh store, closed after the test."""
    with SessionDB(db_path) as handle:
        yield handle


@pytest.fixture
def sha256() -> Callable[[Path], str]:
    """Hash a store file; refuses a file this process has open (reading it would drop locks)."""

    def digest(path: Path) -> str:
        assert not is_open_in_process(path), f"{path} is open in this process"
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()

    return digest


@pytest.fixture
def hold_store() -> Iterator[Callable[..., Holder]]:
    """Start processes that hold a store open or locked; every one is released at teardown."""
    started: list[Holder] = []

    def start(path: Path, mode: str = "lock", seconds: float = 20.0) -> Holder:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER_CODE, str(path), mode, str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        assert proc.stdout is not None
        word, stamp = proc.stdout.readline().split()
        assert word == "ready"
        holder = Holder(proc, float(stamp))
        started.append(holder)
        return holder

    yield start
    for holder in started:
        holder.release()
