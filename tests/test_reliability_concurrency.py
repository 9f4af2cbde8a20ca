"""Reliability: many writer and reader processes on one store; a held write lock (SPEC §17).

The CI run writes 8 × 100 messages; its `slow` variant (`pytest -m slow`) 8 × 5,000.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import Holder
from reliability_helpers import (
    ConcurrencyOutcome,
    child_command,
    child_env,
    run_concurrency,
    token,
    verify_store,
)

from hermes_state.records import messages, sessions
from hermes_state.store.connection import open_store
from hermes_state.store.errors import StoreLockedError
from hermes_state.store.patience import ACTIVITY_WRITE_PATIENCE_S

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not Path("/proc/locks").exists(),
    reason="naming the lock holder reads /proc/locks (Linux)",
)

WRITERS = 8
PER_WRITER = (100, pytest.param(5_000, marks=pytest.mark.slow))
READERS = 4
HOLD_S = 3.0


@pytest.fixture(scope="module", params=PER_WRITER, ids=lambda n: f"{n}-per-writer")
def outcome(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> ConcurrencyOutcome:
    """One run (8 writers × N messages, 4 readers) shared by the checks below."""
    per_writer: int = request.param
    base = tmp_path_factory.mktemp("concurrency")
    result = run_concurrency(
        base / "state.db",
        base / "work",
        writers=WRITERS,
        per_writer=per_writer,
        batch=20,
        readers=READERS,
        timeout=600 if per_writer <= 100 else 1800,
    )
    print(f"\nconcurrency ({per_writer} per writer): {result.summary()}")
    return result


def per_writer(outcome: ConcurrencyOutcome) -> int:
    """How many messages each writer of this run was asked to write."""
    (n,) = set(outcome.expected.values())
    return n


def expected_tokens(outcome: ConcurrencyOutcome) -> list[str]:
    """Every token the writers were asked to write."""
    return [token(w, i) for w, n in outcome.expected.items() for i in range(n)]


def test_concurrent_writers_report_zero_failed_writes(outcome: ConcurrencyOutcome) -> None:
    failed = {w.writer: (w.returncode, w.failures[:3], w.stderr[-500:]) for w in outcome.writers}
    assert all(w.returncode == 0 and not w.failures for w in outcome.writers), failed
    assert sum(w.written for w in outcome.writers) == WRITERS * per_writer(outcome)


def test_concurrent_writers_used_both_single_and_batched_appends(
    outcome: ConcurrencyOutcome,
) -> None:
    assert len(outcome.latencies("single")) == (WRITERS // 2) * per_writer(outcome)
    assert len(outcome.latencies("batch")) == (WRITERS // 2) * per_writer(outcome) // 20


def test_concurrent_writes_are_all_stored_exactly_once_with_healthy_indexes(
    outcome: ConcurrencyOutcome,
) -> None:
    verdict = verify_store(outcome.db_path, expected_tokens(outcome))
    assert verdict.missing == []
    assert verdict.duplicated == []
    assert verdict.unexpected == []
    assert verdict.integrity == ["ok"]
    assert verdict.fts_problems == []
    assert verdict.search_misses == []
    assert verdict.messages == WRITERS * per_writer(outcome)


def test_concurrent_readers_saw_no_errors_while_listing_searching_and_exporting(
    outcome: ConcurrencyOutcome,
) -> None:
    assert [r.errors for r in outcome.readers] == [[] for _ in outcome.readers]
    assert all(r.returncode == 0 for r in outcome.readers), [r.stderr for r in outcome.readers]
    for r in outcome.readers:
        assert set(r.iterations) == {"list", "search", "export"}, r.iterations


def test_concurrent_readers_never_saw_a_snapshot_shrink(outcome: ConcurrencyOutcome) -> None:
    assert [r.regressions for r in outcome.readers] == [0] * READERS


# --- contention -------------------------------------------------------------------------------


@pytest.fixture
def contended_store(db_path: Path) -> Path:
    """A store with one session the contention writers append to."""
    with open_store(db_path) as store:
        sessions.create_session(store, "contended", "reliability")
        messages.append_message(store, "contended", "user", "before the lock")
    return db_path


@pytest.fixture
def patient_writers(contended_store: Path) -> Iterator[Callable[[int, float], list[dict]]]:
    """Start writer children that each make one write with a patience once released."""
    procs: list[subprocess.Popen[str]] = []

    def start(count: int, patience: float) -> list[dict]:
        for _ in range(count):
            proc = subprocess.Popen(
                child_command("patient-writer", contended_store, "contended", patience),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(),
            )
            procs.append(proc)
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", proc.stderr
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outcomes = []
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            outcomes.append(json.loads(out.strip().splitlines()[-1]))
        return outcomes

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_writers_with_20s_patience_wait_out_a_3s_lock_and_succeed(
    contended_store: Path,
    hold_store: Callable[..., Holder],
    patient_writers: Callable[[int, float], list[dict]],
) -> None:
    holder = hold_store(contended_store, "lock", HOLD_S)
    outcomes = patient_writers(2, 20.0)
    released = holder.release()
    assert [o["ok"] for o in outcomes] == [True, True], outcomes
    # Delayed, not failed: each write landed only once the holder had let go.
    assert all(o["finished"] >= released - 0.25 for o in outcomes), (outcomes, released)
    assert all(o["finished"] - holder.ready_at >= HOLD_S - 0.5 for o in outcomes)
    with open_store(contended_store, read_only=True) as store:
        contents = [m["content"] for m in messages.get_messages(store, "contended")]
    assert contents.count("late") == 2


def test_activity_write_against_a_held_lock_fails_fast_as_session_persistence_failed(
    contended_store: Path, hold_store: Callable[..., Holder]
) -> None:
    holder = hold_store(contended_store, "lock", HOLD_S)
    with open_store(contended_store) as store:
        started = time.monotonic()
        with pytest.raises(StoreLockedError) as caught:
            store.write(
                lambda c: c.execute(
                    "UPDATE sessions SET last_activity_at = 1 WHERE id = ?", ("x",)
                ),
                patience=ACTIVITY_WRITE_PATIENCE_S,
            )
        elapsed = time.monotonic() - started
    holder.release()
    assert elapsed < 1.5
    assert caught.value.failure_reason == "session_persistence_failed:locked"
    assert caught.value.cause == "locked"


@linux_only
def test_exhausted_patience_logs_the_holder_pid_exactly_once(
    contended_store: Path, hold_store: Callable[..., Holder], caplog: pytest.LogCaptureFixture
) -> None:
    holder = hold_store(contended_store, "lock", HOLD_S)
    caplog.set_level(logging.WARNING, logger="hermes_state.store.lockowners")
    with open_store(contended_store) as store, pytest.raises(StoreLockedError):
        store.write(
            lambda c: messages.insert_messages(c, "contended", [{"role": "user", "content": "x"}]),
            patience=1.0,
        )
    holder.release()
    records = [r for r in caplog.records if r.name == "hermes_state.store.lockowners"]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert records[0].levelno == logging.WARNING
    assert f"PID {holder.proc.pid}" in records[0].getMessage()
    assert sum(f"PID {holder.proc.pid}" in r.getMessage() for r in caplog.records) == 1
