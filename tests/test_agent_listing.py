"""The agent's pickers on SessionDB: list_sessions_rich, search_sessions_by_id,
list_cron_job_runs, and the conversation lineage they rely on."""

from __future__ import annotations

from typing import Any

from hermes_state.agent.db import SessionDB

T0 = 1_700_000_000.0


def ids(rows: list[dict[str, Any]]) -> list[str]:
    """The ids of listed rows, in order."""
    return [r["id"] for r in rows]


def say(db: SessionDB, session_id: str, text: str, at: float) -> None:
    """Append one user message stamped at `at`."""
    db.append_messages(session_id, [{"role": "user", "content": text, "timestamp": at}])


def child(db: SessionDB, session_id: str, parent: str, marker: str, at: float) -> None:
    """Create a child session carrying a how-it-came-to-be marker in its model_config."""
    db.create_session(
        session_id,
        "cli",
        parent_session_id=parent,
        model_config={marker: parent},
        started_at=at,
    )


def compressed(db: SessionDB, root: str, tip: str, *, at: float, tip_at: float) -> None:
    """A conversation started at `at` that compression continued in `tip` (started `tip_at`)."""
    db.create_session(root, "cli", started_at=at, system_prompt="You are Hermes.")
    say(db, root, f"{root} first words", at)
    db.rotate_session(root, tip, started_at=tip_at)
    say(db, tip, f"{tip} latest words", tip_at)


# --- which conversations are listed --------------------------------------------------------------


def test_listing_hides_runs_the_agent_delegated(db: SessionDB) -> None:
    db.create_session("parent", "cli", started_at=T0)
    child(db, "run", "parent", "_delegate_from", T0 + 1)
    assert ids(db.list_sessions_rich()) == ["parent"]


def test_listing_with_include_subagents_shows_delegated_runs(db: SessionDB) -> None:
    db.create_session("parent", "cli", started_at=T0)
    child(db, "run", "parent", "_delegate_from", T0 + 1)
    assert ids(db.list_sessions_rich(include_subagents=True)) == ["run", "parent"]


def test_listing_shows_a_branch_as_a_conversation_of_its_own(db: SessionDB) -> None:
    db.create_session("parent", "cli", started_at=T0)
    child(db, "branch", "parent", "_branched_from", T0 + 1)
    assert ids(db.list_sessions_rich()) == ["branch", "parent"]


def test_listing_shows_a_reset_as_a_conversation_of_its_own(db: SessionDB) -> None:
    db.create_session("parent", "cli", started_at=T0)
    child(db, "fresh", "parent", "_reset_from", T0 + 1)
    assert ids(db.list_sessions_rich()) == ["fresh", "parent"]


def test_listing_shows_a_compressed_conversation_once_as_its_live_tip(db: SessionDB) -> None:
    compressed(db, "root", "tip", at=T0, tip_at=T0 + 100)
    [row] = db.list_sessions_rich()
    assert row["id"] == "tip"
    assert row["_lineage_root_id"] == "root"


def test_compressed_conversation_row_keeps_the_roots_start_time(db: SessionDB) -> None:
    compressed(db, "root", "tip", at=T0, tip_at=T0 + 100)
    [row] = db.list_sessions_rich()
    assert row["started_at"] == T0
    assert row["preview"].startswith("tip latest words")
    assert row["end_reason"] is None


def test_compressed_conversation_row_shows_the_roots_title_when_the_tip_has_none(
    db: SessionDB,
) -> None:
    compressed(db, "root", "tip", at=T0, tip_at=T0 + 100)
    db.set_session_title("root", "Release plan")
    [row] = db.list_sessions_rich()
    assert (row["id"], row["title"]) == ("tip", "Release plan")


def test_session_count_matches_the_conversations_a_listing_shows(db: SessionDB) -> None:
    compressed(db, "root", "tip", at=T0, tip_at=T0 + 100)
    child(db, "run", "root", "_delegate_from", T0 + 1)
    child(db, "branch", "tip", "_branched_from", T0 + 200)
    db.create_session("solo", "cli", started_at=T0 + 300)
    assert db.session_count(exclude_children=True) == len(db.list_sessions_rich()) == 3


def test_compressed_conversation_row_without_projection_is_the_root(db: SessionDB) -> None:
    compressed(db, "root", "tip", at=T0, tip_at=T0 + 100)
    [row] = db.list_sessions_rich(project_compression_tips=False)
    assert row["id"] == "root" and "_lineage_root_id" not in row


def test_listing_with_compact_rows_leaves_out_the_system_prompt(db: SessionDB) -> None:
    db.create_session("s", "cli", system_prompt="A very long system prompt.")
    [full] = db.list_sessions_rich()
    [compact] = db.list_sessions_rich(compact_rows=True)
    assert full["system_prompt"] == "A very long system prompt."
    assert "system_prompt" not in compact
    assert compact["id"] == "s" and "preview" in compact and "last_active" in compact


def test_listing_with_include_pinned_adds_a_pinned_session_the_page_left_out(
    db: SessionDB,
) -> None:
    db.create_session("pinned", "cli", started_at=T0)
    db.set_session_pinned("pinned", True)
    db.set_session_archived("pinned", True)
    db.create_session("recent", "cli", started_at=T0 + 10)
    assert ids(db.list_sessions_rich()) == ["recent"]
    assert ids(db.list_sessions_rich(include_pinned=True)) == ["recent", "pinned"]


def test_listing_orders_by_start_time_newest_first_by_default(db: SessionDB) -> None:
    compressed(db, "old-root", "old-tip", at=T0, tip_at=T0 + 10)
    db.create_session("newer", "cli", started_at=T0 + 500)
    say(db, "newer", "hello", T0 + 600)
    say(db, "old-tip", "still going", T0 + 5000)
    assert ids(db.list_sessions_rich()) == ["newer", "old-tip"]


def test_listing_by_last_active_uses_the_activity_of_the_whole_chain(db: SessionDB) -> None:
    compressed(db, "old-root", "old-tip", at=T0, tip_at=T0 + 10)
    db.create_session("newer", "cli", started_at=T0 + 500)
    say(db, "newer", "hello", T0 + 600)
    say(db, "old-tip", "still going", T0 + 5000)
    rows = db.list_sessions_rich(order_by_last_active=True)
    assert ids(rows) == ["old-tip", "newer"]
    assert rows[0]["last_active"] == T0 + 5000


# --- search by id -------------------------------------------------------------------------------


def test_search_by_id_ranks_exact_then_prefix_then_substring(db: SessionDB) -> None:
    db.create_session("abc", "cli", started_at=T0)
    db.create_session("abcdef", "cli", started_at=T0 + 1)
    db.create_session("xabc", "cli", started_at=T0 + 2)
    db.create_session("unrelated", "cli", started_at=T0 + 3)
    assert ids(db.search_sessions_by_id("abc")) == ["abc", "abcdef", "xabc"]


def test_search_by_id_ignores_case(db: SessionDB) -> None:
    db.create_session("Session-ABC", "cli", started_at=T0)
    assert ids(db.search_sessions_by_id("session-abc")) == ["Session-ABC"]


def test_search_by_id_keeps_newest_first_within_one_rank(db: SessionDB) -> None:
    db.create_session("abc-1", "cli", started_at=T0)
    db.create_session("abc-2", "cli", started_at=T0 + 1)
    assert ids(db.search_sessions_by_id("abc")) == ["abc-2", "abc-1"]


def test_search_by_the_root_id_finds_the_live_tip(db: SessionDB) -> None:
    compressed(db, "root-1234", "tip-5678", at=T0, tip_at=T0 + 10)
    [row] = db.search_sessions_by_id("root-1234")
    assert row["id"] == "tip-5678"
    assert row["_lineage_root_id"] == "root-1234"


def test_search_by_an_empty_id_finds_nothing(db: SessionDB) -> None:
    db.create_session("abc", "cli")
    assert db.search_sessions_by_id("   ") == []


def test_search_by_id_respects_the_limit(db: SessionDB) -> None:
    for i in range(5):
        db.create_session(f"abc{i}", "cli", started_at=T0 + i)
    assert len(db.search_sessions_by_id("abc", limit=2)) == 2


# --- cron job runs ------------------------------------------------------------------------------


def test_cron_job_runs_are_one_jobs_sessions_newest_first(db: SessionDB) -> None:
    db.create_session("cron_job1_a", "cron", started_at=T0)
    db.create_session("cron_job1_b", "cron", started_at=T0 + 10)
    db.create_session("cron_job10_a", "cron", started_at=T0 + 20)
    db.create_session("cron_job1x", "cron", started_at=T0 + 30)
    db.create_session("cron_job1_cli", "cli", started_at=T0 + 40)
    assert ids(db.list_cron_job_runs("job1")) == ["cron_job1_b", "cron_job1_a"]


def test_cron_job_id_with_like_wildcards_matches_only_itself(db: SessionDB) -> None:
    db.create_session("cron_a_b_1", "cron", started_at=T0)
    db.create_session("cron_aXb_1", "cron", started_at=T0 + 1)
    db.create_session("cron_a%_1", "cron", started_at=T0 + 2)
    assert ids(db.list_cron_job_runs("a_b")) == ["cron_a_b_1"]
    assert ids(db.list_cron_job_runs("a%")) == ["cron_a%_1"]


def test_cron_job_runs_page_with_limit_and_offset(db: SessionDB) -> None:
    for i in range(4):
        db.create_session(f"cron_j_{i}", "cron", started_at=T0 + i)
    assert ids(db.list_cron_job_runs("j", limit=2, offset=1)) == ["cron_j_2", "cron_j_1"]


def test_cron_job_runs_carry_preview_and_last_active(db: SessionDB) -> None:
    db.create_session("cron_j_1", "cron", started_at=T0)
    say(db, "cron_j_1", "nightly report", T0 + 5)
    [row] = db.list_cron_job_runs("j")
    assert row["preview"] == "nightly report"
    assert row["last_active"] == T0 + 5


# --- lineage ------------------------------------------------------------------------------------


def test_compression_lineage_runs_from_root_to_tip(db: SessionDB) -> None:
    db.create_session("a", "cli", started_at=T0)
    db.rotate_session("a", "b", started_at=T0 + 1)
    db.rotate_session("b", "c", started_at=T0 + 2)
    assert db.get_compression_lineage("b") == ["a", "b", "c"]


def test_compression_lineage_on_a_cycle_returns_each_session_once(db: SessionDB) -> None:
    db.create_session("a", "cli", started_at=T0)
    db.rotate_session("a", "b", started_at=T0 + 1)
    db.rotate_session("b", "c", started_at=T0 + 2)
    db.end_session("c", "compression")
    db._execute_write(
        lambda conn: conn.execute("UPDATE sessions SET parent_session_id = 'c' WHERE id = 'a'")
    )
    for start in ("a", "b", "c"):
        lineage = db.get_compression_lineage(start)
        assert sorted(lineage) == ["a", "b", "c"], start
        assert start in lineage


def test_compression_lineage_of_an_unknown_session_is_empty(db: SessionDB) -> None:
    assert db.get_compression_lineage("nope") == []
