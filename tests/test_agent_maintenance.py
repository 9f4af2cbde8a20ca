"""The agent's deletes and housekeeping on SessionDB: delegated runs, bulk and empty-session
deletes, prune filters, archiving, transcript files, auto-prune, ghosts and orphaned
compression continuations."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from hermes_state.agent.db import SessionDB
from hermes_state.store.errors import LedgerBusyError

NOW = time.time()
DAY = 86400.0
OLD = NOW - 200 * DAY
RECENT = NOW - 2 * DAY


def old_session(
    db: SessionDB,
    sid: str,
    *,
    at: float = OLD,
    messages: int = 2,
    ended: bool = True,
    **columns: Any,
) -> None:
    """A session started at `at` whose messages are stamped `at`, ended then unless told not to."""
    db.create_session(sid, "cli", started_at=at, **columns)
    if messages:
        db.append_messages(
            sid,
            [{"role": "user", "content": f"{sid} {i}", "timestamp": at} for i in range(messages)],
        )
    if ended:
        db.end_session(sid, "user_exit", ended_at=at)


def delegated(db: SessionDB, sid: str, parent: str) -> None:
    """A run the agent delegated from `parent` (it carries the marker)."""
    db.create_session(sid, "cli", parent_session_id=parent, model_config={"_delegate_from": parent})


def exists(db: SessionDB, sid: str) -> bool:
    """Whether the store still has the session."""
    return db.get_session(sid) is not None


def transcript_files(directory: Path, sid: str) -> list[Path]:
    """Write the three kinds of transcript file of one session; return them."""
    directory.mkdir(exist_ok=True)
    paths = [
        directory / f"{sid}.json",
        directory / f"{sid}.jsonl",
        directory / f"request_dump_{sid}_20240101.json",
    ]
    for path in paths:
        path.write_text("{}", encoding="utf-8")
    return paths


# --- delete_session ------------------------------------------------------------------------------


def test_delete_session_takes_the_runs_it_delegated(db: SessionDB) -> None:
    db.create_session("parent", "cli")
    delegated(db, "run", "parent")
    delegated(db, "nested-run", "run")
    assert db.delete_session("parent") is True
    assert [exists(db, s) for s in ("parent", "run", "nested-run")] == [False, False, False]


def test_delete_session_repoints_an_ordinary_child_to_the_grandparent(db: SessionDB) -> None:
    db.create_session("grand", "cli")
    db.create_session("parent", "cli", parent_session_id="grand")
    db.create_session("kid", "cli", parent_session_id="parent")
    assert db.delete_session("parent") is True
    assert db.get_session("kid")["parent_session_id"] == "grand"


def test_delete_session_makes_an_ordinary_child_of_a_root_a_root(db: SessionDB) -> None:
    db.create_session("parent", "cli")
    db.create_session("kid", "cli", parent_session_id="parent")
    db.delete_session("parent")
    assert db.get_session("kid")["parent_session_id"] is None


def test_delete_session_of_an_unknown_id_is_false(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.delete_session("nope") is False
    assert exists(db, "s")


def test_delete_session_deletes_its_messages(db: SessionDB) -> None:
    old_session(db, "s", messages=3)
    db.delete_session("s")
    assert db.message_count() == 0


def test_delete_session_with_open_ledger_work_is_refused(db: SessionDB) -> None:
    db.create_session("busy", "cli")
    db.admit("busy", "request-1", {"text": "hi"})
    with pytest.raises(LedgerBusyError):
        db.delete_session("busy")
    assert exists(db, "busy")


def test_delete_session_whose_delegated_run_has_open_work_is_refused(db: SessionDB) -> None:
    db.create_session("parent", "cli")
    delegated(db, "run", "parent")
    db.admit("run", "request-1", {"text": "hi"})
    with pytest.raises(LedgerBusyError):
        db.delete_session("parent")
    assert exists(db, "parent") and exists(db, "run")


# --- delete_sessions -----------------------------------------------------------------------------


def test_delete_sessions_counts_a_repeated_id_once(db: SessionDB) -> None:
    db.create_session("a", "cli")
    db.create_session("b", "cli")
    assert db.delete_sessions(["a", "a", "b", "a"]) == 2
    assert not exists(db, "a") and not exists(db, "b")


def test_delete_sessions_ignores_non_strings_and_unknown_ids(db: SessionDB) -> None:
    db.create_session("a", "cli")
    assert db.delete_sessions([None, 3, "", "nope", "a"]) == 1  # type: ignore[list-item]
    assert not exists(db, "a")


def test_delete_sessions_skips_a_session_with_open_ledger_work(db: SessionDB) -> None:
    db.create_session("busy", "cli")
    db.create_session("idle", "cli")
    db.admit("busy", "request-1", {"text": "hi"})
    skipped: list[str] = []
    assert db.delete_sessions(["busy", "idle"], skipped_ids=skipped) == 1
    assert skipped == ["busy"]
    assert exists(db, "busy") and not exists(db, "idle")


def test_delete_sessions_skips_a_session_whose_delegated_run_is_busy(db: SessionDB) -> None:
    db.create_session("parent", "cli")
    delegated(db, "run", "parent")
    db.admit("run", "request-1", {"text": "hi"})
    skipped: list[str] = []
    assert db.delete_sessions(["parent"], skipped_ids=skipped) == 0
    assert skipped == ["parent"]
    assert exists(db, "parent") and exists(db, "run")


def test_delete_sessions_takes_delegated_runs_too(db: SessionDB) -> None:
    db.create_session("parent", "cli")
    delegated(db, "run", "parent")
    db.delete_sessions(["parent"])
    assert not exists(db, "run")


# --- empty sessions ------------------------------------------------------------------------------


def _empties(db: SessionDB) -> None:
    """One deletable empty session and one of each kind that must stay."""
    old_session(db, "empty", messages=0)
    old_session(db, "live-empty", messages=0, ended=False)
    old_session(db, "archived-empty", messages=0)
    db.set_session_archived("archived-empty", True)
    old_session(db, "pinned-empty", messages=0)
    db.set_session_pinned("pinned-empty", True)
    old_session(db, "with-messages", messages=1)


def test_count_empty_sessions_counts_ended_unarchived_unpinned_ones(db: SessionDB) -> None:
    _empties(db)
    assert db.count_empty_sessions() == 1


def test_delete_empty_sessions_deletes_only_ended_unarchived_unpinned_ones(
    db: SessionDB,
) -> None:
    _empties(db)
    assert db.delete_empty_sessions() == 1
    assert not exists(db, "empty")
    for kept in ("live-empty", "archived-empty", "pinned-empty", "with-messages"):
        assert exists(db, kept), kept


def test_delete_session_if_empty_deletes_an_untouched_session(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.delete_session_if_empty("s") is True
    assert not exists(db, "s")


def test_delete_session_if_empty_keeps_a_titled_session(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.set_session_title("s", "Named")
    assert db.delete_session_if_empty("s") is False
    assert exists(db, "s")


def test_delete_session_if_empty_keeps_a_session_with_messages(db: SessionDB) -> None:
    old_session(db, "s", messages=1, ended=False)
    assert db.delete_session_if_empty("s") is False
    assert exists(db, "s")


def test_delete_session_if_empty_keeps_a_session_with_children(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.create_session("kid", "cli", parent_session_id="s")
    assert db.delete_session_if_empty("s") is False
    assert exists(db, "s")


def test_delete_session_if_empty_keeps_a_session_under_a_live_compression_lock(
    db: SessionDB,
) -> None:
    db.create_session("s", "cli")
    db.try_acquire_compression_lock("s", "compressor", ttl_seconds=600)
    assert db.delete_session_if_empty("s") is False
    assert exists(db, "s")


def test_delete_session_if_empty_ignores_an_expired_compression_lock(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.try_acquire_compression_lock("s", "compressor", ttl_seconds=-1)
    assert db.delete_session_if_empty("s") is True


def test_delete_session_if_empty_of_an_unknown_session_is_false(db: SessionDB) -> None:
    assert db.delete_session_if_empty("nope") is False


# --- prune with the agent's filters --------------------------------------------------------------


def test_prune_title_like_matches_a_substring_without_regard_to_case(db: SessionDB) -> None:
    old_session(db, "smoke")
    db.set_session_title("smoke", "Nightly Smoke test")
    old_session(db, "real")
    db.set_session_title("real", "Real work")
    assert db.prune_sessions(90, title_like="SMOKE") == 1
    assert not exists(db, "smoke") and exists(db, "real")


def test_prune_max_messages_keeps_longer_sessions(db: SessionDB) -> None:
    old_session(db, "short", messages=1)
    old_session(db, "long", messages=5)
    assert db.prune_sessions(90, max_messages=2) == 1
    assert not exists(db, "short") and exists(db, "long")


def test_prune_provider_ignores_case(db: SessionDB) -> None:
    old_session(db, "or", billing_provider="OpenRouter")
    old_session(db, "an", billing_provider="anthropic")
    assert db.prune_sessions(90, provider="openrouter") == 1
    assert not exists(db, "or") and exists(db, "an")


def test_prune_started_window_without_an_age_bound(db: SessionDB) -> None:
    old_session(db, "before", at=NOW - 300 * DAY)
    old_session(db, "inside", at=NOW - 200 * DAY)
    old_session(db, "after", at=NOW - 100 * DAY)
    deleted = db.prune_sessions(None, started_after=NOW - 250 * DAY, started_before=NOW - 150 * DAY)
    assert deleted == 1
    assert [exists(db, s) for s in ("before", "inside", "after")] == [True, False, True]


def test_prune_keeps_pinned_sessions_unless_include_pinned(db: SessionDB) -> None:
    old_session(db, "pinned")
    db.set_session_pinned("pinned", True)
    assert db.prune_sessions(90) == 0
    assert db.prune_sessions(90, include_pinned=True) == 1
    assert not exists(db, "pinned")


def test_prune_keeps_sessions_younger_than_the_cutoff(db: SessionDB) -> None:
    old_session(db, "old")
    old_session(db, "recent", at=RECENT)
    assert db.prune_sessions(90) == 1
    assert exists(db, "recent")


def test_prune_with_an_unknown_filter_keyword_is_a_type_error(db: SessionDB) -> None:
    old_session(db, "s")
    with pytest.raises(TypeError):
        db.prune_sessions(90, titel_like="typo")
    assert exists(db, "s")


def test_list_prune_candidates_lists_without_deleting_least_active_first(
    db: SessionDB,
) -> None:
    old_session(db, "older", at=NOW - 300 * DAY)
    old_session(db, "old", at=NOW - 200 * DAY)
    old_session(db, "recent", at=RECENT)
    rows = db.list_prune_candidates(90)
    assert [r["id"] for r in rows] == ["older", "old"]
    assert {"id", "source", "title", "last_active", "message_count", "archived"} <= set(rows[0])
    assert exists(db, "older") and exists(db, "old")


def test_list_prune_candidates_applies_the_filters(db: SessionDB) -> None:
    old_session(db, "short", messages=1)
    old_session(db, "long", messages=4)
    assert [r["id"] for r in db.list_prune_candidates(90, max_messages=1)] == ["short"]


def test_list_prune_candidates_whole_lineages_leaves_out_a_continued_ancestor(
    db: SessionDB,
) -> None:
    old_session(db, "root", ended=False)
    db.rotate_session("root", "tip", started_at=RECENT)
    assert [r["id"] for r in db.list_prune_candidates(90)] == ["root"]
    assert db.list_prune_candidates(90, whole_lineages=True) == []


# --- archive -------------------------------------------------------------------------------------


def test_archive_sessions_archives_old_ended_sessions_only(db: SessionDB) -> None:
    old_session(db, "ended")
    old_session(db, "live", ended=False)
    assert db.archive_sessions(90) == 1
    assert db.get_session("ended")["archived"] == 1
    assert db.get_session("live")["archived"] == 0


def test_archive_sessions_a_second_time_matches_nothing(db: SessionDB) -> None:
    old_session(db, "ended")
    db.archive_sessions(90)
    assert db.archive_sessions(90) == 0
    assert db.get_session("ended")["archived"] == 1


def test_archive_sessions_archives_the_conversations_ancestors_too(db: SessionDB) -> None:
    old_session(db, "root", ended=False)
    db.rotate_session("root", "tip", started_at=OLD + 1)
    db.end_session("tip", "user_exit", ended_at=OLD + 2)
    assert db.archive_sessions(90) == 1
    assert db.get_session("tip")["archived"] == 1
    assert db.get_session("root")["archived"] == 1


def test_archive_sessions_never_archives_an_ancestor_of_a_conversation_in_use(
    db: SessionDB,
) -> None:
    old_session(db, "root", ended=False)
    db.rotate_session("root", "tip", started_at=RECENT)
    assert db.archive_sessions(90) == 0
    assert db.get_session("root")["archived"] == 0


def test_archive_sessions_with_an_unknown_filter_is_a_type_error(db: SessionDB) -> None:
    old_session(db, "ended")
    with pytest.raises(TypeError):
        db.archive_sessions(90, colour="blue")


# --- transcript files ----------------------------------------------------------------------------


def test_delete_session_with_sessions_dir_removes_its_transcript_files(
    db: SessionDB, hermes_home: Path
) -> None:
    sessions_dir = hermes_home / "sessions"
    db.create_session("s", "cli")
    files = transcript_files(sessions_dir, "s")
    db.delete_session("s", sessions_dir=sessions_dir)
    assert [p.exists() for p in files] == [False, False, False]


def test_delete_session_leaves_other_sessions_transcript_files(
    db: SessionDB, hermes_home: Path
) -> None:
    sessions_dir = hermes_home / "sessions"
    db.create_session("s", "cli")
    db.create_session("s2", "cli")
    transcript_files(sessions_dir, "s")
    others = transcript_files(sessions_dir, "s2")
    db.delete_session("s", sessions_dir=sessions_dir)
    assert all(p.exists() for p in others)


def test_delete_session_without_sessions_dir_leaves_transcript_files(
    db: SessionDB, hermes_home: Path
) -> None:
    db.create_session("s", "cli")
    files = transcript_files(hermes_home / "sessions", "s")
    db.delete_session("s")
    assert all(p.exists() for p in files)


def test_delete_session_removes_the_transcripts_of_delegated_runs(
    db: SessionDB, hermes_home: Path
) -> None:
    sessions_dir = hermes_home / "sessions"
    db.create_session("parent", "cli")
    delegated(db, "run", "parent")
    files = transcript_files(sessions_dir, "run")
    db.delete_session("parent", sessions_dir=sessions_dir)
    assert not any(p.exists() for p in files)


def test_refused_delete_leaves_transcript_files(db: SessionDB, hermes_home: Path) -> None:
    sessions_dir = hermes_home / "sessions"
    db.create_session("s", "cli")
    files = transcript_files(sessions_dir, "s")
    assert db.delete_session("s", sessions_dir, expected_delete_ids=["something-else"]) is False
    assert exists(db, "s") and all(p.exists() for p in files)


def test_prune_removes_transcripts_of_pruned_sessions_only(
    db: SessionDB, hermes_home: Path
) -> None:
    sessions_dir = hermes_home / "sessions"
    old_session(db, "old")
    old_session(db, "recent", at=RECENT)
    gone = transcript_files(sessions_dir, "old")
    kept = transcript_files(sessions_dir, "recent")
    assert db.prune_sessions(90, sessions_dir=sessions_dir) == 1
    assert not any(p.exists() for p in gone)
    assert all(p.exists() for p in kept)


def test_session_id_with_a_path_separator_never_touches_files_outside(
    db: SessionDB, hermes_home: Path
) -> None:
    sessions_dir = hermes_home / "sessions"
    sessions_dir.mkdir()
    outside = hermes_home / "victim.json"
    outside.write_text("keep me", encoding="utf-8")
    db.create_session("../victim", "cli")
    assert db.delete_session("../victim", sessions_dir=sessions_dir) is True
    assert outside.read_text(encoding="utf-8") == "keep me"


# --- auto-prune ----------------------------------------------------------------------------------


def test_auto_prune_prunes_old_sessions_and_records_when_it_ran(db: SessionDB) -> None:
    old_session(db, "old")
    result = db.maybe_auto_prune_and_vacuum(retention_days=90, vacuum=False)
    assert (result["skipped"], result["pruned"]) == (False, 1)
    assert "error" not in result
    assert not exists(db, "old")
    assert abs(float(db.get_meta("last_auto_prune") or 0) - time.time()) < 60


def test_auto_prune_skips_within_the_interval(db: SessionDB) -> None:
    db.maybe_auto_prune_and_vacuum(retention_days=90, vacuum=False)
    old_session(db, "old")
    result = db.maybe_auto_prune_and_vacuum(retention_days=90, min_interval_hours=24)
    assert (result["skipped"], result["pruned"], result["vacuumed"]) == (True, 0, False)
    assert exists(db, "old")


def test_auto_prune_runs_again_once_the_interval_has_passed(db: SessionDB) -> None:
    db.set_meta("last_auto_prune", str(time.time() - 25 * 3600))
    old_session(db, "old")
    result = db.maybe_auto_prune_and_vacuum(retention_days=90, min_interval_hours=24)
    assert (result["skipped"], result["pruned"]) == (False, 1)


def test_auto_prune_with_an_unreadable_stamp_runs_as_if_never_run(db: SessionDB) -> None:
    db.set_meta("last_auto_prune", "not a time")
    old_session(db, "old")
    result = db.maybe_auto_prune_and_vacuum(retention_days=90, vacuum=False)
    assert (result["skipped"], result["pruned"]) == (False, 1)
    assert "error" not in result


def test_auto_prune_on_a_read_only_store_reports_the_error_instead_of_raising(
    db: SessionDB, db_path: Path
) -> None:
    old_session(db, "old")
    with SessionDB(db_path, read_only=True) as reader:
        result = reader.maybe_auto_prune_and_vacuum(retention_days=90)
    assert result["error"]
    assert (result["skipped"], result["pruned"]) == (False, 0)
    assert exists(db, "old")


# --- ghosts and orphaned continuations -----------------------------------------------------------


def _tui(db: SessionDB, sid: str, *, at: float, title: str | None = None) -> None:
    """An empty TUI session started and ended at `at`."""
    db.create_session(sid, "tui", started_at=at)
    if title:
        db.set_session_title(sid, title)
    db.end_session(sid, "tui_shutdown", ended_at=at)


def test_prune_empty_ghost_sessions_deletes_old_empty_untitled_tui_sessions(
    db: SessionDB,
) -> None:
    _tui(db, "ghost", at=NOW - 2 * DAY)
    assert db.prune_empty_ghost_sessions() == 1
    assert not exists(db, "ghost")


def test_prune_empty_ghost_sessions_keeps_what_is_not_a_ghost(db: SessionDB) -> None:
    _tui(db, "titled", at=NOW - 2 * DAY, title="Kept")
    _tui(db, "young", at=NOW - 3600)
    _tui(db, "talked", at=NOW - 2 * DAY)
    db.append_messages("talked", [{"role": "user", "content": "hi", "timestamp": NOW - 2 * DAY}])
    old_session(db, "cli-empty", messages=0)
    db.create_session("live", "tui", started_at=NOW - 2 * DAY)
    assert db.prune_empty_ghost_sessions() == 0
    for sid in ("titled", "young", "talked", "cli-empty", "live"):
        assert exists(db, sid), sid


def test_prune_empty_ghost_sessions_keeps_a_ghost_ended_less_than_a_day_ago(
    db: SessionDB,
) -> None:
    db.create_session("ghost", "tui", started_at=NOW - 2 * DAY)
    db.end_session("ghost", "tui_shutdown", ended_at=NOW - 3600)
    assert db.prune_empty_ghost_sessions() == 0
    assert exists(db, "ghost")


def _continuation(db: SessionDB, parent: str, tip: str, *, at: float) -> None:
    """A compression that started `tip` at `at` with the kept context, never used since."""
    db.create_session(parent, "cli", started_at=at - 10)
    db.append_messages(parent, [{"role": "user", "content": "long chat", "timestamp": at - 10}])
    db.rotate_session(
        parent, tip, kept_messages=[{"role": "user", "content": "summary"}], started_at=at
    )


def test_finalize_orphaned_compression_sessions_ends_unused_week_old_ones(
    db: SessionDB,
) -> None:
    _continuation(db, "p", "orphan", at=NOW - 8 * DAY)
    assert db.finalize_orphaned_compression_sessions() == 1
    row = db.get_session("orphan")
    assert row["end_reason"] == "orphaned_compression" and row["ended_at"] is not None
    assert db.message_count("orphan") == 1


def test_finalize_orphaned_compression_sessions_keeps_used_or_young_ones(
    db: SessionDB,
) -> None:
    _continuation(db, "p1", "used", at=NOW - 8 * DAY)
    db.update_token_counts("used", input_tokens=5, api_call_count=1)
    _continuation(db, "p2", "young", at=NOW - 2 * DAY)
    assert db.finalize_orphaned_compression_sessions() == 0
    assert db.get_session("used")["ended_at"] is None
    assert db.get_session("young")["ended_at"] is None
