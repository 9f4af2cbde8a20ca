"""Runtime ledger: owner epochs, the admission FIFO, worker executions and receipts."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.children import child_env

from hermes_state.agent.db import SessionDB
from hermes_state.records import ledger
from hermes_state.records.ledger import (
    AdmissionConflictError,
    LedgerNotFoundError,
    LedgerStateError,
    ReceiptConflictError,
    ReceiptSequenceError,
    StaleEpochError,
)
from hermes_state.records.sessions import create_session
from hermes_state.store.connection import Store
from hermes_state.store.errors import SessionNotFoundError


@pytest.fixture
def store(db: SessionDB) -> Store:
    """The open store of this test's SessionDB, with session s1."""
    create_session(db.store, "s1", "telegram")
    return db.store


def _running(store: Store, execution_id: str = "e1") -> int:
    epoch = ledger.begin_owner_epoch(store, "gw-1")
    ledger.register_execution(store, execution_id, "s1", "child", epoch)
    ledger.mark_running(store, execution_id, epoch)
    return epoch


# --- epochs -----------------------------------------------------------------------------------


def test_begin_owner_epoch_counts_up_from_one(store: Store) -> None:
    assert [ledger.begin_owner_epoch(store, "gw") for _ in range(3)] == [1, 2, 3]
    assert ledger.current_epoch(store) == 3


def test_epoch_bump_turns_a_started_admission_unknown(store: Store) -> None:
    epoch = ledger.begin_owner_epoch(store, "gw-1")
    adm = ledger.admit(store, "s1", "r1", {"text": "hi"})
    ledger.start(store, adm.admission_id, epoch)

    ledger.begin_owner_epoch(store, "gw-2")

    assert ledger.get_admission(store, adm.admission_id).status == "unknown"


def test_epoch_bump_leaves_queued_admissions_queued(store: Store) -> None:
    ledger.begin_owner_epoch(store, "gw-1")
    adm = ledger.admit(store, "s1", "r1", {"text": "hi"})

    ledger.begin_owner_epoch(store, "gw-2")

    assert ledger.get_admission(store, adm.admission_id).status == "queued"


def test_unknown_admission_blocks_the_next_one(store: Store) -> None:
    epoch = ledger.begin_owner_epoch(store, "gw-1")
    first = ledger.admit(store, "s1", "r1", {"text": "one"})
    second = ledger.admit(store, "s1", "r2", {"text": "two"})
    ledger.start(store, first.admission_id, epoch)
    new_epoch = ledger.begin_owner_epoch(store, "gw-2")

    assert ledger.next_admission(store, "s1") is None
    with pytest.raises(LedgerStateError, match="must wait"):
        ledger.start(store, second.admission_id, new_epoch)


def test_resolving_the_unknown_admission_lets_the_next_one_run(store: Store) -> None:
    epoch = ledger.begin_owner_epoch(store, "gw-1")
    first = ledger.admit(store, "s1", "r1", {"text": "one"})
    second = ledger.admit(store, "s1", "r2", {"text": "two"})
    ledger.start(store, first.admission_id, epoch)
    new_epoch = ledger.begin_owner_epoch(store, "gw-2")

    resolved = ledger.resolve_unknown(store, first.admission_id, "interrupted")

    assert (resolved.status, resolved.outcome) == ("terminal", "interrupted")
    assert ledger.next_admission(store, "s1").admission_id == second.admission_id
    assert ledger.start(store, second.admission_id, new_epoch).status == "started"


def test_owner_killed_mid_turn_leaves_unknown_for_the_next_owner(db_path: Path) -> None:
    code = (
        "import os, sys, time\n"
        "from hermes_state.records import ledger\n"
        "from hermes_state.agent.db import SessionDB\n"
        "db = SessionDB(sys.argv[1])\n"
        "db.create_session('s1', 'telegram')\n"
        "epoch = ledger.begin_owner_epoch(db.store, 'gw-old')\n"
        "adm = ledger.admit(db.store, 's1', 'r1', {'text': 'hi'})\n"
        "ledger.start(db.store, adm.admission_id, epoch)\n"
        "print(adm.admission_id, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(db_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        admission_id = proc.stdout.readline().strip()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    with SessionDB(db_path) as db:
        assert ledger.get_admission(db.store, admission_id).status == "started"
        ledger.begin_owner_epoch(db.store, "gw-new")
        assert ledger.get_admission(db.store, admission_id).status == "unknown"
        assert ledger.next_admission(db.store, "s1") is None


# --- admissions -------------------------------------------------------------------------------


def test_admit_with_the_same_payload_returns_the_same_admission(store: Store) -> None:
    first = ledger.admit(store, "s1", "r1", {"a": 1, "b": [1, 2]})
    again = ledger.admit(store, "s1", "r1", {"b": [1, 2], "a": 1})

    assert again == first
    assert len(ledger.list_admissions(store, "s1")) == 1


def test_admit_with_a_different_payload_is_a_conflict(store: Store) -> None:
    ledger.admit(store, "s1", "r1", {"text": "hi"})

    with pytest.raises(AdmissionConflictError):
        ledger.admit(store, "s1", "r1", {"text": "bye"})


def test_same_request_id_in_another_session_is_a_separate_admission(store: Store) -> None:
    create_session(store, "s2", "telegram")
    one = ledger.admit(store, "s1", "r1", {"text": "hi"})
    two = ledger.admit(store, "s2", "r1", {"text": "hi"})

    assert one.admission_id != two.admission_id


def test_payload_digest_is_sha256_of_canonical_json(store: Store) -> None:
    adm = ledger.admit(store, "s1", "r1", {"z": "ü", "a": 1.5})

    canonical = json.dumps({"a": 1.5, "z": "ü"}, separators=(",", ":"), ensure_ascii=False)
    assert adm.payload_json == canonical
    assert adm.payload_digest == hashlib.sha256(canonical.encode()).hexdigest()


def test_admit_refuses_a_payload_that_is_not_an_object(store: Store) -> None:
    with pytest.raises(TypeError):
        ledger.admit(store, "s1", "r1", ["not", "an", "object"])  # type: ignore[arg-type]


def test_admit_to_a_missing_session_raises(store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        ledger.admit(store, "nope", "r1", {})


def test_next_admission_is_first_in_first_out(store: Store) -> None:
    epoch = ledger.begin_owner_epoch(store, "gw")
    ids = [ledger.admit(store, "s1", f"r{i}", {"i": i}).admission_id for i in range(3)]

    seen = []
    while (nxt := ledger.next_admission(store, "s1")) is not None:
        seen.append(nxt.admission_id)
        ledger.start(store, nxt.admission_id, epoch)
        ledger.finish(store, nxt.admission_id, "completed")
    assert seen == ids


def test_next_admission_waits_while_one_is_started(store: Store) -> None:
    epoch = ledger.begin_owner_epoch(store, "gw")
    first = ledger.admit(store, "s1", "r1", {})
    ledger.admit(store, "s1", "r2", {})
    ledger.start(store, first.admission_id, epoch)

    assert ledger.next_admission(store, "s1") is None


def test_start_with_a_stale_epoch_raises(store: Store) -> None:
    old = ledger.begin_owner_epoch(store, "gw-1")
    ledger.begin_owner_epoch(store, "gw-2")
    adm = ledger.admit(store, "s1", "r1", {})

    with pytest.raises(StaleEpochError):
        ledger.start(store, adm.admission_id, old)
    assert ledger.get_admission(store, adm.admission_id).status == "queued"


def test_start_out_of_fifo_order_is_refused(store: Store) -> None:
    epoch = ledger.begin_owner_epoch(store, "gw")
    ledger.admit(store, "s1", "r1", {})
    second = ledger.admit(store, "s1", "r2", {})

    with pytest.raises(LedgerStateError, match="must wait"):
        ledger.start(store, second.admission_id, epoch)


def test_start_stamps_the_owner_epoch(store: Store) -> None:
    epoch = ledger.begin_owner_epoch(store, "gw")
    adm = ledger.admit(store, "s1", "r1", {})

    assert ledger.start(store, adm.admission_id, epoch).owner_epoch == epoch


def test_finish_requires_a_started_admission(store: Store) -> None:
    adm = ledger.admit(store, "s1", "r1", {})

    with pytest.raises(LedgerStateError):
        ledger.finish(store, adm.admission_id, "completed")


def test_finish_rejects_an_unknown_outcome(store: Store) -> None:
    epoch = ledger.begin_owner_epoch(store, "gw")
    adm = ledger.admit(store, "s1", "r1", {})
    ledger.start(store, adm.admission_id, epoch)

    with pytest.raises(ValueError):
        ledger.finish(store, adm.admission_id, "done-ish")


def test_finish_replayed_with_the_same_outcome_is_a_no_op(store: Store) -> None:
    epoch = ledger.begin_owner_epoch(store, "gw")
    adm = ledger.admit(store, "s1", "r1", {})
    ledger.start(store, adm.admission_id, epoch)
    done = ledger.finish(store, adm.admission_id, "completed")

    assert ledger.finish(store, adm.admission_id, "completed") == done
    with pytest.raises(LedgerStateError):
        ledger.finish(store, adm.admission_id, "failed")


def test_resolve_unknown_requires_an_unknown_admission(store: Store) -> None:
    adm = ledger.admit(store, "s1", "r1", {})

    with pytest.raises(LedgerStateError):
        ledger.resolve_unknown(store, adm.admission_id, "cancelled")


def test_cancel_withdraws_a_queued_admission(store: Store) -> None:
    adm = ledger.admit(store, "s1", "r1", {})

    cancelled = ledger.cancel_admission(store, adm.admission_id)
    assert (cancelled.status, cancelled.outcome) == ("terminal", "cancelled")


def test_unknown_admission_id_raises_not_found(store: Store) -> None:
    with pytest.raises(LedgerNotFoundError):
        ledger.get_admission(store, "adm_missing")


# --- executions and receipts ------------------------------------------------------------------


def test_epoch_bump_turns_a_running_execution_unknown(store: Store) -> None:
    _running(store)
    ledger.register_execution(store, "e2", "s1", "cron", ledger.current_epoch(store))

    ledger.begin_owner_epoch(store, "gw-2")

    assert ledger.get_execution(store, "e1").status == "unknown"
    assert ledger.get_execution(store, "e2").status == "registered"


def test_register_execution_with_a_stale_epoch_raises(store: Store) -> None:
    old = ledger.begin_owner_epoch(store, "gw-1")
    ledger.begin_owner_epoch(store, "gw-2")

    with pytest.raises(StaleEpochError):
        ledger.register_execution(store, "e1", "s1", "child", old)


def test_register_execution_refuses_an_unknown_kind(store: Store) -> None:
    epoch = ledger.begin_owner_epoch(store, "gw")

    with pytest.raises(ValueError):
        ledger.register_execution(store, "e1", "s1", "daemon", epoch)


def test_receipts_must_be_consecutive(store: Store) -> None:
    _running(store)
    for seq in (1, 2, 3):
        ledger.record_receipt(store, "e1", seq, {"step": seq})

    assert ledger.get_execution(store, "e1").last_sequence == 3
    assert [r.sequence for r in ledger.list_receipts(store, "e1")] == [1, 2, 3]


def test_receipt_gap_raises(store: Store) -> None:
    _running(store)
    ledger.record_receipt(store, "e1", 1, {"step": 1})

    with pytest.raises(ReceiptSequenceError, match="expected 2"):
        ledger.record_receipt(store, "e1", 3, {"step": 3})


def test_receipt_replay_with_the_same_payload_returns_the_stored_one(store: Store) -> None:
    _running(store)
    stored = ledger.record_receipt(store, "e1", 1, {"result": "ok", "n": 1})
    ledger.record_receipt(store, "e1", 2, {"result": "more"})

    assert ledger.record_receipt(store, "e1", 1, {"n": 1, "result": "ok"}) == stored
    assert ledger.get_execution(store, "e1").last_sequence == 2


def test_receipt_replay_with_a_different_payload_is_a_conflict(store: Store) -> None:
    _running(store)
    ledger.record_receipt(store, "e1", 1, {"result": "ok"})

    with pytest.raises(ReceiptConflictError):
        ledger.record_receipt(store, "e1", 1, {"result": "different"})


def test_receipt_requires_a_running_execution(store: Store) -> None:
    epoch = ledger.begin_owner_epoch(store, "gw")
    ledger.register_execution(store, "e1", "s1", "compute", epoch)

    with pytest.raises(LedgerStateError):
        ledger.record_receipt(store, "e1", 1, {})


def test_receipt_payload_is_returned_decoded(store: Store) -> None:
    _running(store)

    assert ledger.record_receipt(store, "e1", 1, {"x": [1, 2]}).payload == {"x": [1, 2]}


def test_finish_execution_settles_an_unknown_execution(store: Store) -> None:
    _running(store)
    ledger.begin_owner_epoch(store, "gw-2")

    assert ledger.finish_execution(store, "e1").status == "terminal"


def test_mark_running_with_a_stale_epoch_raises(store: Store) -> None:
    epoch = ledger.begin_owner_epoch(store, "gw-1")
    ledger.register_execution(store, "e1", "s1", "kanban", epoch)
    ledger.begin_owner_epoch(store, "gw-2")

    with pytest.raises(StaleEpochError):
        ledger.mark_running(store, "e1", epoch)
