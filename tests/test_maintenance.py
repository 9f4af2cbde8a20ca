"""Deleting, clearing and pruning sessions under the ledger rules, and reclaiming space."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_state.agent.compression import rotate_session
from hermes_state.agent.db import SessionDB
from hermes_state.records import ledger
from hermes_state.records.messages import append_messages, get_messages
from hermes_state.records.sessions import create_session, end_session, get_session
from hermes_state.store import fts
from hermes_state.store.connection import Store
from hermes_state.store.errors import LedgerBusyError, SessionNotFoundError, StoreBusyError
from hermes_state.upkeep import reclaim, store_check
from hermes_state.upkeep.deletion import clear_messages, delete_session
from hermes_state.upkeep.prune import prune_sessions
from hermes_state.upkeep.reclaim import optimize

NOW = time.time()
OLD = NOW - 200 * 86400
RECENT = NOW - 5 * 86400


@pytest.fixture
def store(db: SessionDB) -> Store:
    """The open store of this test's SessionDB."""
    return db.store


def _session(
    store: Store,
    sid: str,
    *,
    at: float = OLD,
    ended: bool = True,
    messages: int = 2,
    source: str = "cli",
    parent: str | None = None,
    size: int = 20,
) -> None:
    """Create a session started at `at` with messages stamped `at`, ended unless told not to."""
    create_session(store, sid, source, started_at=at, parent_session_id=parent)
    if messages:
        body = "x" * size
        append_messages(
            store,
            sid,
            [
                {"role": "user", "content": f"{sid} {i} {body}", "timestamp": at}
                for i in range(messages)
            ],
        )
    store.write(
        lambda c: c.execute("UPDATE sessions SET last_activity_at = ? WHERE id = ?", (at, sid))
    )
    if ended:
        end_session(store, sid, "user_exit")


def _ids(store: Store) -> set[str]:
    return {r[0] for r in store.conn.execute("SELECT id FROM sessions")}


def _started_admission(store: Store, sid: str) -> str:
    epoch = ledger.begin_owner_epoch(store, "gw")
    adm = ledger.admit(store, sid, "r1", {"text": "hi"})
    ledger.start(store, adm.admission_id, epoch)
    return adm.admission_id


def _files(path: Path) -> list[tuple[int, int]]:
    out = []
    for suffix in ("", "-wal"):
        if os.path.exists(str(path) + suffix):
            st = os.stat(str(path) + suffix)
            out.append((st.st_size, st.st_mtime_ns))
    return out


# --- delete and clear -------------------------------------------------------------------------


def test_delete_is_refused_while_an_admission_is_open(store: Store) -> None:
    _session(store, "abc")
    admission = _started_admission(store, "abc")

    with pytest.raises(LedgerBusyError) as err:
        delete_session(store, "abc")

    assert str(err.value) == f"session abc has open runtime work: admission {admission} (started)"
    assert err.value.open_rows == [
        {"kind": "admission", "id": admission, "session_id": "abc", "status": "started"}
    ]
    assert "abc" in _ids(store)


def test_delete_names_every_open_row(store: Store) -> None:
    _session(store, "abc")
    admission = _started_admission(store, "abc")
    epoch = ledger.current_epoch(store)
    ledger.register_execution(store, "e1", "abc", "child", epoch)
    ledger.mark_running(store, "e1", epoch)

    with pytest.raises(LedgerBusyError) as err:
        delete_session(store, "abc")

    assert str(err.value) == (
        f"session abc has open runtime work: admission {admission} (started), "
        "execution e1 (running)"
    )


@pytest.mark.parametrize("status", ["queued", "unknown", "registered"])
def test_delete_is_refused_for_every_open_status(store: Store, status: str) -> None:
    _session(store, "abc")
    epoch = ledger.begin_owner_epoch(store, "gw")
    if status == "queued":
        ledger.admit(store, "abc", "r1", {})
    elif status == "unknown":
        ledger.register_execution(store, "e1", "abc", "cron", epoch)
        ledger.mark_running(store, "e1", epoch)
        ledger.begin_owner_epoch(store, "gw-2")
    else:
        ledger.register_execution(store, "e1", "abc", "cron", epoch)

    with pytest.raises(LedgerBusyError, match=f"\\({status}\\)"):
        delete_session(store, "abc")


def test_delete_after_the_work_is_terminal_removes_the_ledger_rows(store: Store) -> None:
    _session(store, "abc")
    admission = _started_admission(store, "abc")
    ledger.finish(store, admission, "completed")
    epoch = ledger.current_epoch(store)
    ledger.register_execution(store, "e1", "abc", "child", epoch)
    ledger.mark_running(store, "e1", epoch)
    ledger.record_receipt(store, "e1", 1, {"ok": True})
    ledger.finish_execution(store, "e1")

    assert delete_session(store, "abc") == 2

    counts = [
        store.conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        for t in ("session_admissions", "worker_executions", "worker_receipts", "sessions")
    ]
    assert counts == [0, 0, 0, 0]


def test_raw_delete_is_blocked_by_the_ledger_foreign_key(db_path: Path, store: Store) -> None:
    create_session(store, "abc", "cli")
    epoch = ledger.begin_owner_epoch(store, "gw")
    ledger.register_execution(store, "e1", "abc", "child", epoch)
    ledger.finish_execution(store, "e1")
    raw = sqlite3.connect(db_path, timeout=5)
    try:
        raw.execute("PRAGMA foreign_keys=ON")
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            raw.execute("DELETE FROM sessions WHERE id = 'abc'")
    finally:
        raw.close()
    assert "abc" in _ids(store)


def test_raw_delete_of_an_execution_is_blocked_by_its_receipts(db_path: Path, store: Store) -> None:
    create_session(store, "abc", "cli")
    epoch = ledger.begin_owner_epoch(store, "gw")
    ledger.register_execution(store, "e1", "abc", "child", epoch)
    ledger.mark_running(store, "e1", epoch)
    ledger.record_receipt(store, "e1", 1, {})
    raw = sqlite3.connect(db_path, timeout=5)
    try:
        raw.execute("PRAGMA foreign_keys=ON")
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            raw.execute("DELETE FROM worker_executions WHERE execution_id = 'e1'")
    finally:
        raw.close()


def test_delete_repoints_children_to_the_deleted_sessions_parent(store: Store) -> None:
    _session(store, "grand")
    _session(store, "mid", parent="grand")
    _session(store, "kid", parent="mid")

    delete_session(store, "mid")

    assert get_session(store, "kid")["parent_session_id"] == "grand"
    assert get_messages(store, "kid")


def test_delete_of_a_root_leaves_its_children_as_roots(store: Store) -> None:
    _session(store, "root")
    _session(store, "kid", parent="root")

    delete_session(store, "root")

    assert get_session(store, "kid")["parent_session_id"] is None


def test_delete_of_a_missing_session_raises(store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        delete_session(store, "nope")


def test_clear_messages_keeps_the_session_row(store: Store) -> None:
    _session(store, "abc", messages=3)

    assert clear_messages(store, "abc") == 3
    assert get_messages(store, "abc", include_inactive=True) == []
    assert get_session(store, "abc")["message_count"] == 0


def test_clear_messages_is_refused_while_work_is_open(store: Store) -> None:
    _session(store, "abc", messages=3)
    _started_admission(store, "abc")

    with pytest.raises(LedgerBusyError):
        clear_messages(store, "abc")
    assert len(get_messages(store, "abc")) == 3


# --- prune ------------------------------------------------------------------------------------


def test_prune_deletes_old_ended_sessions_only(store: Store) -> None:
    _session(store, "old")
    _session(store, "recent", at=RECENT)

    result = prune_sessions(store, 90, now=NOW)

    assert (result.sessions, result.messages, result.session_ids) == (1, 2, ("old",))
    assert _ids(store) == {"recent"}


def test_prune_keeps_pinned_sessions(store: Store) -> None:
    _session(store, "pinned")
    store.write(lambda c: c.execute("UPDATE sessions SET pinned = 1 WHERE id = 'pinned'"))

    assert prune_sessions(store, 90, now=NOW).sessions == 0
    assert "pinned" in _ids(store)


def test_prune_keeps_sessions_that_have_not_ended(store: Store) -> None:
    _session(store, "open", ended=False)

    assert prune_sessions(store, 90, now=NOW).sessions == 0
    assert "open" in _ids(store)


def test_prune_takes_several_sources_and_excluded_sources(store: Store) -> None:
    _session(store, "a", source="cli")
    _session(store, "b", source="cron")
    _session(store, "c", source="telegram")
    assert prune_sessions(
        store, 90, now=NOW, sources=["cli", "cron"], dry_run=True
    ).session_ids == (
        "a",
        "b",
    )
    result = prune_sessions(store, 90, now=NOW, exclude_sources=["telegram"])
    assert result.session_ids == ("a", "b") and result.exclude_sources == ("telegram",)
    assert _ids(store) == {"c"}


def test_prune_started_after_keeps_older_sessions(store: Store) -> None:
    _session(store, "oldest", at=OLD - 86400 * 30)
    _session(store, "old")
    result = prune_sessions(store, 90, now=NOW, started_after=OLD - 86400)
    assert result.session_ids == ("old",) and _ids(store) == {"oldest"}


def test_prune_reports_progress_per_chunk_against_the_planned_total(store: Store) -> None:
    for i in range(3):
        _session(store, f"s{i}", messages=0)
    seen: list[tuple[int, int]] = []
    prune_sessions(store, 90, now=NOW, progress=lambda done, total: seen.append((done, total)))
    assert seen[0] == (0, 3) and seen[-1] == (3, 3)


def test_prune_judges_age_by_the_latest_message(store: Store) -> None:
    _session(store, "revived")
    append_messages(store, "revived", [{"role": "user", "content": "back", "timestamp": RECENT}])
    store.write(
        lambda c: c.execute("UPDATE sessions SET last_activity_at = ? WHERE id = 'revived'", (OLD,))
    )

    assert prune_sessions(store, 90, now=NOW).sessions == 0


def test_prune_judges_age_by_last_activity(store: Store) -> None:
    _session(store, "touched")
    store.write(
        lambda c: c.execute(
            "UPDATE sessions SET last_activity_at = ? WHERE id = 'touched'", (RECENT,)
        )
    )

    assert prune_sessions(store, 90, now=NOW).sessions == 0


def test_prune_reports_busy_sessions_and_keeps_them(store: Store) -> None:
    _session(store, "busy")
    _session(store, "idle")
    admission = _started_admission(store, "busy")

    result = prune_sessions(store, 90, now=NOW)

    assert result.session_ids == ("idle",)
    assert [b["session_id"] for b in result.busy] == ["busy"]
    assert result.busy[0]["open_rows"][0]["id"] == admission
    assert "busy" in _ids(store)


def test_prune_removes_terminal_ledger_rows_of_what_it_deletes(store: Store) -> None:
    _session(store, "done")
    ledger.finish(store, _started_admission(store, "done"), "completed")

    result = prune_sessions(store, 90, now=NOW)

    assert (result.sessions, result.ledger_rows_removed) == (1, 1)


def test_prune_repoints_children_of_deleted_parents(store: Store) -> None:
    _session(store, "keep-root", at=RECENT)
    _session(store, "old-mid", parent="keep-root")
    _session(store, "old-mid2", parent="old-mid")
    _session(store, "kid", at=RECENT, parent="old-mid2")

    result = prune_sessions(store, 90, now=NOW)

    assert set(result.session_ids) == {"old-mid", "old-mid2"}
    assert get_session(store, "kid")["parent_session_id"] == "keep-root"
    assert result.children_repointed >= 1


def test_prune_keeps_a_compression_ancestor_of_a_continuing_session(store: Store) -> None:
    _session(store, "A", ended=False)
    rotate_session(store, "A", "B", started_at=RECENT)

    result = prune_sessions(store, 90, now=NOW)

    assert result.sessions == 0
    assert result.kept_for_lineage == ("A",)


def test_prune_filters_by_source(store: Store) -> None:
    _session(store, "tg", source="telegram")
    _session(store, "cli", source="cli")

    assert prune_sessions(store, 90, source="telegram", now=NOW).session_ids == ("tg",)
    assert _ids(store) == {"cli"}


def test_prune_handles_more_sessions_than_one_in_list_holds(store: Store) -> None:
    rows = [(f"s{i:04d}", "cli", OLD, OLD + 1, "user_exit") for i in range(1900)]
    store.write(
        lambda c: c.executemany(
            "INSERT INTO sessions (id, source, started_at, ended_at, end_reason)"
            " VALUES (?, ?, ?, ?, ?)",
            rows,
        )
    )

    assert prune_sessions(store, 90, now=NOW).sessions == 1900
    assert _ids(store) == set()


def test_prune_dry_run_writes_nothing(db_path: Path, store: Store) -> None:
    _session(store, "old")
    _session(store, "old2")
    store.checkpoint_passive()
    files, changes = _files(db_path), store.conn.total_changes

    result = prune_sessions(store, 90, dry_run=True, now=NOW)

    assert (result.dry_run, result.sessions) == (True, 2)
    assert (_files(db_path), store.conn.total_changes) == (files, changes)
    assert _ids(store) == {"old", "old2"}


def test_prune_dry_run_reports_what_the_real_run_deletes(store: Store) -> None:
    _session(store, "old", messages=5, size=300)
    _session(store, "old2", messages=3)
    _session(store, "recent", at=RECENT)

    preview = prune_sessions(store, 90, dry_run=True, now=NOW).to_dict()
    real = prune_sessions(store, 90, now=NOW).to_dict()

    keys = ("sessions", "messages", "session_ids", "bytes_reclaimable")
    assert {k: preview[k] for k in keys} == {k: real[k] for k in keys}
    assert preview["bytes_reclaimable"] > 5 * 300


def test_prune_refuses_a_negative_age(store: Store) -> None:
    with pytest.raises(ValueError):
        prune_sessions(store, -1)


# --- optimize ---------------------------------------------------------------------------------


def _generate(store: Store, sessions: int, per_session: int, size: int) -> None:
    for s in range(sessions):
        sid = f"gen{s:03d}"
        create_session(store, sid, "cli", started_at=OLD if s >= 2 else RECENT)
        batch = [
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": f"{sid} turn {i} " + ("lorem ipsum dolor sit amet " * (size // 27)),
                "timestamp": OLD if s >= 2 else RECENT,
            }
            for i in range(per_session)
        ]
        append_messages(store, sid, batch)
        end_session(store, sid, "user_exit")


def test_store_file_shrinks_after_prune_and_optimize(db_path: Path, store: Store) -> None:
    _generate(store, sessions=40, per_session=500, size=500)  # 20,000 messages of ~500 bytes
    store.checkpoint_passive()
    wal = Path(str(db_path) + "-wal")
    before = os.stat(db_path).st_size + (os.stat(wal).st_size if wal.exists() else 0)

    pruned = prune_sessions(store, 90, now=NOW)
    result = optimize(store)

    assert (pruned.sessions, pruned.messages) == (38, 19_000)
    assert result.bytes_before >= before * 0.9
    assert result.bytes_after < before * 0.15
    assert result.wal_bytes_after == 0
    assert fts.integrity_check(store.conn) == []
    assert len(get_messages(store, "gen000")) == 500


def test_optimize_beside_another_process_vacuums_a_small_store(
    db_path: Path, store: Store, hold_store: Callable
) -> None:
    _session(store, "s1")
    holder = hold_store(db_path, "open")

    result = optimize(store)

    assert (result.vacuumed, result.forced, result.vacuum_skipped) == (True, False, "")
    assert any(f"PID {holder.proc.pid}" in p for p in result.other_processes)


def test_optimize_beside_another_process_merges_in_steps_and_skips_a_long_vacuum(
    db_path: Path, store: Store, hold_store: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(30):
        _session(store, f"s{i}", messages=40, size=300)
    for i in range(0, 30, 2):
        delete_session(store, f"s{i}")
    monkeypatch.setattr(reclaim, "VACUUM_BESIDE_OTHERS_MAX_BYTES", 0)
    holder = hold_store(db_path, "open")
    size_before = db_path.stat().st_size

    result = optimize(store)

    assert (result.vacuumed, result.fts_optimized) == (False, True)
    assert f"PID {holder.proc.pid}" in result.vacuum_skipped
    assert "free pages" in result.vacuum_skipped
    assert db_path.stat().st_size == size_before  # nothing rewritten
    assert fts.integrity_check(store.conn) == []
    # The merge left each index with one segment level's worth of work done: a full optimize
    # afterwards finds nothing more to merge.
    assert store.write(lambda conn: fts.merge_step(conn, start=True)) is False


def test_optimize_rebuild_refuses_beside_another_process(
    db_path: Path, store: Store, hold_store: Callable
) -> None:
    _session(store, "s1")
    holder = hold_store(db_path, "open")

    with pytest.raises(StoreBusyError) as err:
        optimize(store, rebuild_fts=True)

    assert f"PID {holder.proc.pid}" in str(err.value)


def test_optimize_forced_runs_under_another_process_and_names_it(
    db_path: Path, store: Store, hold_store: Callable
) -> None:
    _session(store, "s1")
    holder = hold_store(db_path, "open")

    result = optimize(store, force=True)

    assert (result.vacuumed, result.forced) == (True, True)
    assert any(f"PID {holder.proc.pid}" in p for p in result.other_processes)


def test_optimize_without_vacuum_does_not_need_the_store_to_itself(
    db_path: Path, store: Store, hold_store: Callable
) -> None:
    _session(store, "s1")
    hold_store(db_path, "open")

    result = optimize(store, vacuum=False)

    assert (result.fts_optimized, result.vacuumed) == (True, False)


def test_optimize_rebuilds_fts_on_request(store: Store) -> None:
    _session(store, "s1")

    result = optimize(store, rebuild_fts=True)

    assert result.fts_rebuilt
    assert fts.integrity_check(store.conn) == []


# --- after a delete: tidy in proportion to it ------------------------------------------------


@pytest.fixture
def ten_sessions(db_path: Path) -> Path:
    """A settled store of ten sessions of 100 messages each."""
    from support.stores import populate_store, settle

    populate_store(db_path, sessions_n=10, messages_per_session=100)
    settle(db_path)
    return db_path


def _delete_and_reclaim(db_path: Path, numbers: range, **options: bool) -> reclaim.OptimizeResult:
    from hermes_state.store.connection import open_store

    with open_store(db_path, role="edit") as store:
        store_check.require_intact(store)
        deleted = sum(delete_session(store, f"sess-1-{i:05d}") for i in numbers)
        return reclaim.reclaim_after_delete(store, deleted, **options)


def test_a_small_delete_from_a_large_store_keeps_the_freed_pages_and_says_so(
    ten_sessions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reclaim, "REWRITE_ALWAYS_MAX_BYTES", 0)  # treat the store as large
    size = os.stat(ten_sessions).st_size
    result = _delete_and_reclaim(ten_sessions, range(1))
    assert not result.vacuumed and not result.fts_optimized
    assert result.free_bytes > 0 and os.stat(ten_sessions).st_size >= size
    assert "reused for new rows" in result.rewrite_deferred


def test_compact_or_a_large_share_freed_rewrites_the_file(
    ten_sessions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reclaim, "REWRITE_ALWAYS_MAX_BYTES", 0)
    size = os.stat(ten_sessions).st_size
    result = _delete_and_reclaim(ten_sessions, range(1), compact=True)
    assert result.vacuumed and result.free_bytes == 0 and not result.rewrite_deferred
    assert os.stat(ten_sessions).st_size < size
    half = _delete_and_reclaim(ten_sessions, range(1, 4))  # 3 of the 9 left: over a quarter
    assert half.vacuumed and half.free_bytes == 0
