"""Stress: many more fuzzed search inputs than the CI run, with a fresh (printed) seed (§17).

Each fuzzer runs in a child process, so a crash inside SQLite is reported with its input
instead of taking the test run down.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from reliability_helpers import build_search_store, fuzz_search, reliability_seed


@pytest.fixture(scope="module")
def search_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fuzzers' store."""
    return build_search_store(tmp_path_factory.mktemp("stress-search") / "state.db")


def test_stress_search_messages_never_crashes_or_raises_for_5000_random_inputs(
    search_db: Path, tmp_path: Path
) -> None:
    outcome = fuzz_search("library", search_db, tmp_path, examples=5_000, seed=reliability_seed())
    assert outcome.returncode == 0, outcome.describe()


def test_stress_cli_search_never_crashes_for_1000_random_inputs(
    search_db: Path, tmp_path: Path
) -> None:
    outcome = fuzz_search(
        "cli", search_db.parent, tmp_path, examples=1_000, seed=reliability_seed()
    )
    assert outcome.returncode == 0, outcome.describe()
