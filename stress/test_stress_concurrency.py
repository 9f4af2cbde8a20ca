"""Stress: 8 writer processes × 5,000 messages and 4 readers on one store (SPEC §17)."""

from __future__ import annotations

import pytest
from reliability_helpers import ConcurrencyOutcome, run_concurrency, token, verify_store

WRITERS = 8
READERS = 4


@pytest.fixture(scope="module", params=[5_000], ids=lambda n: f"{n}-per-writer")
def outcome(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> ConcurrencyOutcome:
    """One stress-sized run shared by the checks below."""
    per_writer: int = request.param
    base = tmp_path_factory.mktemp("stress-concurrency")
    result = run_concurrency(
        base / "state.db",
        base / "work",
        writers=WRITERS,
        per_writer=per_writer,
        batch=20,
        readers=READERS,
        timeout=1800,
    )
    print(f"\nconcurrency (stress): {result.summary()}")
    return result


def test_stress_writers_report_zero_failed_writes(outcome: ConcurrencyOutcome) -> None:
    assert [(w.writer, w.failures[:3]) for w in outcome.writers if w.failures] == []
    assert all(w.returncode == 0 for w in outcome.writers), [w.stderr for w in outcome.writers]
    assert sum(w.written for w in outcome.writers) == sum(outcome.expected.values())


def test_stress_writes_are_all_stored_exactly_once_with_healthy_indexes(
    outcome: ConcurrencyOutcome,
) -> None:
    expected = [token(w, i) for w, n in outcome.expected.items() for i in range(n)]
    verdict = verify_store(outcome.db_path, expected, search_sample=200)
    assert verdict.missing == []
    assert verdict.duplicated == []
    assert verdict.unexpected == []
    assert verdict.integrity == ["ok"]
    assert verdict.fts_problems == []
    assert verdict.search_misses == []
    assert verdict.messages == len(expected)


def test_stress_readers_saw_no_errors_and_no_shrinking_snapshot(
    outcome: ConcurrencyOutcome,
) -> None:
    assert [r.errors[:3] for r in outcome.readers if r.errors] == []
    assert [r.regressions for r in outcome.readers] == [0] * READERS
    assert all(set(r.iterations) == {"list", "search", "export"} for r in outcome.readers)
