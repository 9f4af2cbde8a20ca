"""Stress: 30 writers killed with SIGKILL at random points lose no acknowledged write (§17)."""

from __future__ import annotations

import pytest
from reliability_helpers import CrashOutcome, crash_rounds, reliability_seed

ROUNDS = 30


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> CrashOutcome:
    """Thirty kill rounds on one store (seeded; the seed is printed)."""
    base = tmp_path_factory.mktemp("stress-crash")
    seed = reliability_seed()
    outcome = crash_rounds(base / "home" / "state.db", base / "work", ROUNDS, seed)
    print(f"\ncrash (stress, seed {seed}): {outcome.summary()}")
    return outcome


def test_stress_every_acknowledged_append_survives_30_kills(crashed: CrashOutcome) -> None:
    assert crashed.failures == []
    assert len(crashed.rounds) == ROUNDS
    assert crashed.verdict.missing == []
    assert crashed.verdict.duplicated == []
    assert crashed.verdict.unexpected == []


def test_stress_store_is_healthy_after_30_kills(crashed: CrashOutcome) -> None:
    assert crashed.verdict.integrity == ["ok"]
    assert crashed.verdict.fts_problems == []
    assert crashed.cli_exit_codes == [0] * ROUNDS
