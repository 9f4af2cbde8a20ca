"""The agent's session-row API on SessionDB: compression locks and cooldowns, working
directories, token accounting, model and route switches, resets, handoff, titles."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hermes_state.agent.db import SessionDB
from hermes_state.shapes import model_config
from hermes_state.store.errors import InvalidTitleError, TitleInUseError

T0 = 1_700_000_000.0


def column(db: SessionDB, session_id: str, name: str) -> Any:
    """One column of one session row, read straight from the store."""
    row = db._conn.execute(f"SELECT {name} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return row[0]


def usage_rows(db: SessionDB, session_id: str) -> list[dict[str, Any]]:
    """The per-route usage rows of a session, ordered by their key."""
    rows = db._conn.execute(
        "SELECT model, billing_provider, billing_base_url, billing_mode, task, input_tokens, "
        "output_tokens, api_call_count, estimated_cost_usd FROM session_model_usage "
        "WHERE session_id = ? ORDER BY model, billing_provider, billing_base_url, task",
        (session_id,),
    ).fetchall()
    return [dict(r) for r in rows]


def lock_expiry(db: SessionDB, session_id: str) -> float:
    """When a session's compression lock row expires."""
    row = db._conn.execute(
        "SELECT expires_at FROM compression_locks WHERE session_id = ?", (session_id,)
    ).fetchone()
    return float(row[0])


# --- compression lock --------------------------------------------------------------------------


def test_compression_lock_is_granted_to_the_first_claimant(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.try_acquire_compression_lock("s", "worker-a") is True
    assert db.get_compression_lock_holder("s") == "worker-a"


def test_compression_lock_is_refused_while_another_holder_has_a_live_one(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.try_acquire_compression_lock("s", "worker-a", ttl_seconds=600)
    assert db.try_acquire_compression_lock("s", "worker-b", ttl_seconds=600) is False
    assert db.get_compression_lock_holder("s") == "worker-a"


def test_expired_compression_lock_reads_as_unheld(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.try_acquire_compression_lock("s", "worker-a", ttl_seconds=-1)
    assert db.get_compression_lock_holder("s") is None


def test_expired_compression_lock_is_taken_over_by_the_next_claimant(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.try_acquire_compression_lock("s", "crashed", ttl_seconds=-1)
    assert db.try_acquire_compression_lock("s", "worker-b", ttl_seconds=600) is True
    assert db.get_compression_lock_holder("s") == "worker-b"


def test_compression_lock_is_not_released_by_another_holder(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.try_acquire_compression_lock("s", "worker-a", ttl_seconds=600)
    db.release_compression_lock("s", "worker-b")
    assert db.get_compression_lock_holder("s") == "worker-a"


def test_compression_lock_released_by_its_holder_can_be_claimed_again(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.try_acquire_compression_lock("s", "worker-a", ttl_seconds=600)
    db.release_compression_lock("s", "worker-a")
    assert db.get_compression_lock_holder("s") is None
    assert db.try_acquire_compression_lock("s", "worker-b", ttl_seconds=600) is True


def test_late_holder_cannot_release_a_lock_taken_over_from_it(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.try_acquire_compression_lock("s", "slow", ttl_seconds=-1)
    db.try_acquire_compression_lock("s", "fresh", ttl_seconds=600)
    db.release_compression_lock("s", "slow")
    assert db.get_compression_lock_holder("s") == "fresh"


def test_refresh_extends_a_live_lock_its_holder_owns(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.try_acquire_compression_lock("s", "worker-a", ttl_seconds=5)
    before = time.time()
    assert db.refresh_compression_lock("s", "worker-a", ttl_seconds=3600) is True
    assert lock_expiry(db, "s") >= before + 3600


def test_refresh_by_another_holder_is_refused_and_changes_nothing(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.try_acquire_compression_lock("s", "worker-a", ttl_seconds=60)
    expiry = lock_expiry(db, "s")
    assert db.refresh_compression_lock("s", "worker-b", ttl_seconds=3600) is False
    assert lock_expiry(db, "s") == expiry


def test_refresh_of_an_expired_lock_is_refused(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.try_acquire_compression_lock("s", "worker-a", ttl_seconds=-1)
    assert db.refresh_compression_lock("s", "worker-a", ttl_seconds=600) is False
    assert db.get_compression_lock_holder("s") is None


def test_compression_lock_without_a_session_id_is_refused(db: SessionDB) -> None:
    assert db.try_acquire_compression_lock("", "worker-a") is False


# --- compression cooldown and fallback streak ----------------------------------------------------


def test_compression_cooldown_is_reported_until_it_expires(db: SessionDB) -> None:
    db.create_session("s", "cli")
    until = time.time() + 600
    db.record_compression_failure_cooldown("s", until, "provider timed out")
    assert db.get_compression_failure_cooldown("s") == {
        "cooldown_until": until,
        "error": "provider timed out",
    }


def test_expired_compression_cooldown_reads_as_none(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.record_compression_failure_cooldown("s", time.time() - 1, "old failure")
    assert db.get_compression_failure_cooldown("s") is None


def test_cleared_compression_cooldown_reads_as_none(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.record_compression_failure_cooldown("s", time.time() + 600, "boom")
    db.clear_compression_failure_cooldown("s")
    assert db.get_compression_failure_cooldown("s") is None


def test_fallback_streak_starts_at_zero_and_reads_back_what_was_set(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.get_compression_fallback_streak("s") == 0
    db.set_compression_fallback_streak("s", 3)
    assert db.get_compression_fallback_streak("s") == 3


def test_fallback_streak_is_never_stored_below_zero(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.set_compression_fallback_streak("s", -4)
    assert db.get_compression_fallback_streak("s") == 0


def test_fallback_streak_of_an_unknown_session_is_zero(db: SessionDB) -> None:
    assert db.get_compression_fallback_streak("nope") == 0


# --- working directory -------------------------------------------------------------------------


def test_update_session_cwd_with_empty_git_fields_keeps_the_known_ones(db: SessionDB) -> None:
    db.create_session("s", "cli", cwd="/repo", git_branch="main", git_repo_root="/repo")
    db.update_session_cwd("s", "/repo", "", None)
    row = db.get_session("s")
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == ("/repo", "main", "/repo")


def test_update_session_cwd_in_the_same_directory_updates_a_given_branch(db: SessionDB) -> None:
    db.create_session("s", "cli", cwd="/repo", git_branch="main", git_repo_root="/repo")
    db.update_session_cwd("s", "/repo", "feature", None)
    row = db.get_session("s")
    assert (row["git_branch"], row["git_repo_root"]) == ("feature", "/repo")


def test_update_session_cwd_to_another_directory_replaces_branch_and_root(db: SessionDB) -> None:
    db.create_session("s", "cli", cwd="/repo", git_branch="main", git_repo_root="/repo")
    db.update_session_cwd("s", "/tmp/scratch", None, None)
    row = db.get_session("s")
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == ("/tmp/scratch", None, None)


def test_update_session_cwd_with_replace_git_meta_clears_them_in_place(db: SessionDB) -> None:
    db.create_session("s", "cli", cwd="/repo", git_branch="main", git_repo_root="/repo")
    db.update_session_cwd("s", "/repo", None, None, replace_git_meta=True)
    row = db.get_session("s")
    assert (row["git_branch"], row["git_repo_root"]) == (None, None)


def test_update_session_cwd_returns_a_rising_git_metadata_generation(db: SessionDB) -> None:
    db.create_session("s", "cli")
    first = db.update_session_cwd("s", "/a")
    second = db.update_session_cwd("s", "/b")
    assert isinstance(first, int) and isinstance(second, int)
    assert second > first


def test_update_session_cwd_of_an_unknown_session_returns_none(db: SessionDB) -> None:
    assert db.update_session_cwd("nope", "/a") is None


def test_distinct_session_cwds_counts_the_sessions_of_each_directory(db: SessionDB) -> None:
    db.create_session("a1", "cli", cwd="/a", started_at=T0)
    db.create_session("a2", "cli", cwd="/a", started_at=T0 + 10)
    db.end_session("a2", "user_exit", ended_at=T0 + 50)
    db.create_session("b1", "cli", cwd="/b", started_at=T0 + 5)
    db.create_session("none", "cli", started_at=T0 + 7)
    found = {r["cwd"]: (r["sessions"], r["last_active"]) for r in db.distinct_session_cwds()}
    assert found == {"/a": (2, T0 + 50), "/b": (1, T0 + 5)}


def test_distinct_session_cwds_leaves_out_archived_sessions_unless_asked(db: SessionDB) -> None:
    db.create_session("a1", "cli", cwd="/a", started_at=T0)
    db.create_session("z1", "cli", cwd="/archived", started_at=T0)
    db.set_session_archived("z1", True)
    assert [r["cwd"] for r in db.distinct_session_cwds()] == ["/a"]
    shown = {r["cwd"] for r in db.distinct_session_cwds(include_archived=True)}
    assert shown == {"/a", "/archived"}


def test_backfill_repo_roots_fills_only_sessions_without_a_root(db: SessionDB) -> None:
    db.create_session("empty", "cli", cwd="/w")
    db.create_session("known", "cli", cwd="/w", git_repo_root="/elsewhere")
    db.create_session("other", "cli", cwd="/x")
    db.backfill_repo_roots({"/w": "/w-root"})
    assert column(db, "empty", "git_repo_root") == "/w-root"
    assert column(db, "known", "git_repo_root") == "/elsewhere"
    assert column(db, "other", "git_repo_root") is None


# --- token accounting ----------------------------------------------------------------------------


def _requested(db: SessionDB, session_id: str = "s") -> None:
    """A session created on the route the agent asked for."""
    db.create_session(
        session_id,
        "cli",
        model="requested-model",
        billing_provider="openrouter",
        billing_base_url="https://openrouter.example/v1",
        billing_mode="api",
    )


def _route(db: SessionDB, session_id: str = "s") -> tuple[Any, ...]:
    """A session's model and billing route."""
    row = db.get_session(session_id)
    return (row["model"], row["billing_provider"], row["billing_base_url"], row["billing_mode"])


def test_first_accounted_call_replaces_the_requested_route(db: SessionDB) -> None:
    _requested(db)
    db.update_token_counts(
        "s",
        input_tokens=100,
        output_tokens=20,
        model="fallback-model",
        billing_provider="anthropic",
        billing_base_url="https://anthropic.example",
        billing_mode="subscription",
        api_call_count=1,
    )
    assert _route(db) == (
        "fallback-model",
        "anthropic",
        "https://anthropic.example",
        "subscription",
    )


def test_later_calls_leave_the_sessions_route_alone(db: SessionDB) -> None:
    _requested(db)
    db.update_token_counts(
        "s", input_tokens=10, model="m1", billing_provider="p1", api_call_count=1
    )
    db.update_token_counts(
        "s",
        input_tokens=10,
        model="m2",
        billing_provider="p2",
        billing_base_url="https://p2.example",
        api_call_count=1,
    )
    assert _route(db)[:2] == ("m1", "p1")


def test_metadata_only_report_changes_neither_route_nor_totals(db: SessionDB) -> None:
    _requested(db)
    db.update_token_counts("s", model="other-model", billing_provider="other-provider")
    row = db.get_session("s")
    assert _route(db) == (
        "requested-model",
        "openrouter",
        "https://openrouter.example/v1",
        "api",
    )
    assert (row["input_tokens"], row["output_tokens"], row["api_call_count"]) == (0, 0, 0)
    assert usage_rows(db, "s") == []


def test_metadata_only_report_does_not_fill_an_empty_model(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.update_token_counts("s", model="some-model")
    assert db.get_session("s")["model"] is None


def test_usage_rows_are_split_by_model_and_billing_route(db: SessionDB) -> None:
    db.create_session("s", "cli", model="m1", billing_provider="p1")
    for model, provider, tokens in (
        ("m1", "p1", 10),
        ("m1", "p1", 5),
        ("m2", "p1", 7),
        ("m1", "p2", 3),
    ):
        db.update_token_counts(
            "s", input_tokens=tokens, model=model, billing_provider=provider, api_call_count=1
        )
    got = {(r["model"], r["billing_provider"]): r["input_tokens"] for r in usage_rows(db, "s")}
    assert got == {("m1", "p1"): 15, ("m2", "p1"): 7, ("m1", "p2"): 3}
    assert db.get_session("s")["input_tokens"] == 25


def test_call_without_a_model_is_counted_on_the_sessions_route(db: SessionDB) -> None:
    db.create_session(
        "s", "cli", model="session-model", billing_provider="p1", billing_base_url="https://p1"
    )
    db.update_token_counts("s", input_tokens=9, output_tokens=1, api_call_count=1)
    [row] = usage_rows(db, "s")
    assert (row["model"], row["billing_provider"], row["billing_base_url"]) == (
        "session-model",
        "p1",
        "https://p1",
    )
    assert (row["input_tokens"], row["output_tokens"]) == (9, 1)


def test_absolute_report_sets_the_totals_and_adds_no_usage_row(db: SessionDB) -> None:
    db.create_session("s", "cli", model="m1")
    db.update_token_counts("s", input_tokens=10, output_tokens=2, model="m1", api_call_count=1)
    db.update_token_counts(
        "s", input_tokens=500, output_tokens=40, model="m1", api_call_count=9, absolute=True
    )
    row = db.get_session("s")
    assert (row["input_tokens"], row["output_tokens"], row["api_call_count"]) == (500, 40, 9)
    assert [(r["input_tokens"], r["api_call_count"]) for r in usage_rows(db, "s")] == [(10, 1)]


def test_report_without_a_cost_leaves_an_unknown_cost_null(db: SessionDB) -> None:
    db.create_session("s", "cli", model="m1")
    db.update_token_counts("s", input_tokens=10, model="m1", api_call_count=1)
    row = db.get_session("s")
    assert row["estimated_cost_usd"] is None
    assert row["actual_cost_usd"] is None


def test_report_without_a_cost_keeps_the_cost_already_known(db: SessionDB) -> None:
    db.create_session("s", "cli", model="m1")
    db.update_token_counts(
        "s", input_tokens=10, model="m1", api_call_count=1, estimated_cost_usd=0.25
    )
    db.update_token_counts("s", input_tokens=10, model="m1", api_call_count=1)
    row = db.get_session("s")
    assert row["estimated_cost_usd"] == pytest.approx(0.25)
    assert row["actual_cost_usd"] is None


def test_report_for_a_missing_session_creates_it_with_the_given_source(db: SessionDB) -> None:
    db.update_token_counts("late", input_tokens=3, api_call_count=1, source="telegram")
    row = db.get_session("late")
    assert (row["source"], row["input_tokens"]) == ("telegram", 3)


def test_task_report_counts_in_the_totals_but_never_becomes_the_route(db: SessionDB) -> None:
    _requested(db)
    db.update_token_counts(
        "s",
        input_tokens=30,
        model="voice-model",
        billing_provider="voice-provider",
        api_call_count=1,
        task="voice",
    )
    assert _route(db)[:2] == ("requested-model", "openrouter")
    assert db.get_session("s")["input_tokens"] == 30
    [row] = usage_rows(db, "s")
    assert (row["model"], row["billing_provider"], row["task"]) == (
        "voice-model",
        "voice-provider",
        "voice",
    )


def test_record_auxiliary_usage_adds_only_a_task_usage_row(db: SessionDB) -> None:
    db.create_session("s", "cli", model="main-model", billing_provider="p1")
    db.update_token_counts("s", input_tokens=100, model="main-model", api_call_count=1)
    db.record_auxiliary_usage("s", "title_generation", model="small-model", input_tokens=40)
    row = db.get_session("s")
    assert (row["input_tokens"], row["api_call_count"], row["model"]) == (100, 1, "main-model")
    aux = [r for r in usage_rows(db, "s") if r["task"] == "title_generation"]
    assert [(r["model"], r["input_tokens"], r["billing_provider"]) for r in aux] == [
        ("small-model", 40, "")
    ]
    assert sum(r["input_tokens"] for r in usage_rows(db, "s") if not r["task"]) == 100


def test_record_auxiliary_usage_without_a_task_records_nothing(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.record_auxiliary_usage("s", "", model="small-model", input_tokens=40)
    assert usage_rows(db, "s") == []


# --- model, route and model_config -------------------------------------------------------------


def test_update_session_model_with_a_provider_replaces_the_whole_route(db: SessionDB) -> None:
    old = {"provider": "old", "base_url": "https://old", "api_mode": "chat", "temperature": 0.2}
    db.create_session("s", "cli", model="m-old", model_config=old)
    db.update_session_model("s", "m-new", "anthropic", base_url="https://new")
    config = model_config.parse(db.get_session("s")["model_config"])
    route = {"provider": "anthropic", "base_url": "https://new", "api_mode": None}
    assert db.get_session("s")["model"] == "m-new"
    assert {k: config[k] for k in route} == route
    assert config["gateway_runtime"] == route
    assert config["temperature"] == 0.2


def test_update_session_model_without_a_provider_keeps_the_route(db: SessionDB) -> None:
    db.create_session("s", "cli", model="m-old", model_config={"provider": "old"})
    db.update_session_model("s", "m-new")
    config = model_config.parse(db.get_session("s")["model_config"])
    assert db.get_session("s")["model"] == "m-new"
    assert config["provider"] == "old"


def test_update_session_model_drops_the_browser_model_lock(db: SessionDB) -> None:
    cfg = {"provider": "old", "browser_model_lock": "m-old"}
    db.create_session("s", "cli", model="m-old", model_config=cfg)
    db.update_session_model("s", "m-new")
    config = model_config.parse(db.get_session("s")["model_config"])
    assert "browser_model_lock" not in config


def test_update_session_model_writes_queued_counts_under_the_old_model(db: SessionDB) -> None:
    db.create_session("s", "cli", model="m-old")
    db.queue_token_counts("s", input_tokens=12, api_call_count=1)
    db.update_session_model("s", "m-new")
    assert [(r["model"], r["input_tokens"]) for r in usage_rows(db, "s")] == [("m-old", 12)]


def test_update_session_billing_route_sets_provider_and_base_url(db: SessionDB) -> None:
    db.create_session(
        "s", "cli", billing_provider="p1", billing_base_url="https://p1", billing_mode="api"
    )
    db.update_session_billing_route("s", provider="p2", base_url="https://p2")
    row = db.get_session("s")
    assert (row["billing_provider"], row["billing_base_url"], row["billing_mode"]) == (
        "p2",
        "https://p2",
        "api",
    )


def test_update_session_billing_route_sets_the_mode_when_given(db: SessionDB) -> None:
    db.create_session("s", "cli", billing_mode="api")
    db.update_session_billing_route(
        "s", provider="p2", base_url="https://p2", billing_mode="subscription"
    )
    assert db.get_session("s")["billing_mode"] == "subscription"


def test_update_session_meta_replaces_model_config_and_the_given_model(db: SessionDB) -> None:
    db.create_session("s", "cli", model="m1", model_config={"a": 1})
    db.update_session_meta("s", '{"b": 2}', model="m2")
    row = db.get_session("s")
    assert model_config.parse(row["model_config"]) == {"b": 2}
    assert row["model"] == "m2"


def test_update_session_meta_without_a_model_keeps_the_model(db: SessionDB) -> None:
    db.create_session("s", "cli", model="m1", model_config={"a": 1})
    db.update_session_meta("s", '{"b": 2}')
    assert db.get_session("s")["model"] == "m1"


# --- session reset -------------------------------------------------------------------------------


def test_promote_to_session_reset_ends_a_live_session(db: SessionDB) -> None:
    db.create_session("s", "telegram")
    assert db.promote_to_session_reset("s") is True
    row = db.get_session("s")
    assert row["ended_at"] is not None and row["end_reason"] == "session_reset"


def test_promote_to_session_reset_replaces_an_accidental_end(db: SessionDB) -> None:
    db.create_session("s", "telegram")
    db.end_session("s", "agent_close")
    assert db.promote_to_session_reset("s", reason="daily") is True
    assert db.get_session("s")["end_reason"] == "daily"


def test_promote_to_session_reset_keeps_a_deliberate_end(db: SessionDB) -> None:
    db.create_session("s", "telegram")
    db.end_session("s", "compression")
    assert db.promote_to_session_reset("s") is False
    assert db.get_session("s")["end_reason"] == "compression"


def test_promote_to_session_reset_of_an_unknown_session_is_false(db: SessionDB) -> None:
    assert db.promote_to_session_reset("nope") is False


# --- handoff -----------------------------------------------------------------------------------


def test_requested_handoff_is_pending_for_its_platform(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.request_handoff("s", "telegram") is True
    assert db.get_handoff_state("s") == {"state": "pending", "platform": "telegram", "error": None}
    assert [r["id"] for r in db.list_pending_handoffs()] == ["s"]


def test_handoff_cannot_be_requested_while_one_is_in_flight(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.request_handoff("s", "telegram")
    assert db.request_handoff("s", "discord") is False
    assert db.get_handoff_state("s")["platform"] == "telegram"


def test_pending_handoff_is_claimed_by_one_caller_only(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.request_handoff("s", "telegram")
    assert db.claim_handoff("s") is True
    assert db.claim_handoff("s") is False
    assert db.get_handoff_state("s")["state"] == "running"
    assert db.list_pending_handoffs() == []


def test_handoff_without_a_request_cannot_be_claimed(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.claim_handoff("s") is False
    assert db.get_handoff_state("s")["state"] is None


def test_completed_handoff_allows_a_new_request(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.request_handoff("s", "telegram")
    db.claim_handoff("s")
    db.complete_handoff("s")
    assert db.get_handoff_state("s")["state"] == "completed"
    assert db.request_handoff("s", "discord") is True


def test_failed_handoff_records_its_reason_and_allows_a_new_request(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.request_handoff("s", "telegram")
    assert db.fail_handoff("s", "gateway offline") is True
    assert db.get_handoff_state("s") == {
        "state": "failed",
        "platform": "telegram",
        "error": "gateway offline",
    }
    assert db.request_handoff("s", "telegram") is True
    assert db.get_handoff_state("s")["error"] is None


def test_fail_handoff_with_only_states_leaves_other_states_alone(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.request_handoff("s", "telegram")
    db.claim_handoff("s")
    db.complete_handoff("s")
    assert db.fail_handoff("s", "too late", only_states=("pending", "running")) is False
    assert db.get_handoff_state("s")["state"] == "completed"


def test_fail_handoff_keeps_a_long_reason_to_500_characters(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.request_handoff("s", "telegram")
    db.fail_handoff("s", "x" * 2000)
    assert db.get_handoff_state("s")["error"] == "x" * 500


def test_handoff_state_of_an_unknown_session_is_none(db: SessionDB) -> None:
    assert db.get_handoff_state("nope") is None
    assert db.request_handoff("nope", "telegram") is False


# --- titles --------------------------------------------------------------------------------------


def test_set_auto_title_if_empty_titles_an_untitled_session(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.set_auto_title_if_empty("s", "  Fix the   build ") is True
    assert db.get_session_title("s") == "Fix the build"


def test_set_auto_title_if_empty_never_replaces_an_existing_title(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.set_session_title("s", "Chosen by the user")
    assert db.set_auto_title_if_empty("s", "Generated") is False
    assert db.get_session_title("s") == "Chosen by the user"


def test_set_auto_title_if_empty_on_an_unknown_session_is_false(db: SessionDB) -> None:
    assert db.set_auto_title_if_empty("nope", "Generated") is False


def test_title_moves_from_a_compression_ancestor_to_its_continuation(db: SessionDB) -> None:
    db.create_session("root", "cli")
    db.set_session_title("root", "Release plan")
    db.rotate_session("root", "tip")
    assert db.set_session_title("tip", "Release plan") is True
    assert db.get_session_title("tip") == "Release plan"
    assert db.get_session_title("root") is None


def test_title_moves_from_an_ancestor_two_compressions_back(db: SessionDB) -> None:
    db.create_session("root", "cli")
    db.set_session_title("root", "Release plan")
    db.rotate_session("root", "mid")
    db.rotate_session("mid", "tip")
    assert db.set_session_title("tip", "Release plan") is True
    assert db.get_session_title("root") is None


def test_title_of_a_branchs_parent_still_conflicts(db: SessionDB) -> None:
    db.create_session("parent", "cli")
    db.set_session_title("parent", "Release plan")
    db.end_session("parent", "compression")
    db.create_session(
        "branch", "cli", parent_session_id="parent", model_config={"_branched_from": "parent"}
    )
    with pytest.raises(TitleInUseError):
        db.set_session_title("branch", "Release plan")
    assert db.get_session_title("parent") == "Release plan"


def test_title_held_by_an_unrelated_session_still_conflicts(db: SessionDB) -> None:
    db.create_session("root", "cli")
    db.set_session_title("root", "Release plan")
    db.rotate_session("root", "tip")
    db.create_session("other", "cli")
    with pytest.raises(TitleInUseError):
        db.set_session_title("other", "Release plan")
    assert db.get_session_title("root") == "Release plan"


def test_title_held_by_a_compression_descendant_still_conflicts(db: SessionDB) -> None:
    db.create_session("root", "cli")
    db.rotate_session("root", "tip")
    db.set_session_title("tip", "Release plan")
    with pytest.raises(TitleInUseError):
        db.set_session_title("root", "Release plan")


def test_sanitize_title_is_callable_on_the_class(db: SessionDB) -> None:
    assert SessionDB.sanitize_title("  Deploy\u200b  the\n app\t") == "Deploy the app"
    assert db.sanitize_title("Deploy") == "Deploy"


def test_sanitize_title_of_blank_text_is_none() -> None:
    assert SessionDB.sanitize_title(" \t\n\u200b ") is None
    assert SessionDB.sanitize_title(None) is None


def test_sanitize_title_refuses_a_title_over_the_maximum_length() -> None:
    assert SessionDB.sanitize_title("x" * SessionDB.MAX_TITLE_LENGTH) is not None
    with pytest.raises(InvalidTitleError):
        SessionDB.sanitize_title("x" * (SessionDB.MAX_TITLE_LENGTH + 1))
