"""bench/generate.py builds a store of the requested size, reproducibly from its seed."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from support.children import child_env

from hermes_state.store.connection import open_store

REPO_ROOT = Path(__file__).resolve().parents[1]
GENERATE = REPO_ROOT / "bench" / "generate.py"
MESSAGES = 2000


def generate(out: Path, seed: int = 7) -> None:
    """Run bench/generate.py in a child process into out."""
    env = child_env()
    argv = [sys.executable, str(GENERATE), "--messages", str(MESSAGES), "--seed", str(seed)]
    subprocess.run(
        [*argv, "--out", str(out), "--quiet"], env=env, check=True, capture_output=True, timeout=60
    )


def sha256(path: Path) -> str:
    """Hash a closed store file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two stores generated with the same size and seed into different directories."""
    base = tmp_path_factory.mktemp("bench")
    generate(base / "a")
    generate(base / "b")
    return base / "a" / "state.db", base / "b" / "state.db"


def test_generated_store_opens_with_requested_message_count(two_runs: tuple[Path, Path]) -> None:
    store = open_store(two_runs[0], read_only=True)
    try:
        count = store.conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    finally:
        store.close()
    assert count == MESSAGES


def test_same_seed_gives_byte_identical_store(two_runs: tuple[Path, Path]) -> None:
    first, second = two_runs
    assert sha256(first) == sha256(second)
