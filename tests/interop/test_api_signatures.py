"""Our SessionDB against the agent's: the caller-facing methods take the same parameters, in
the same order, with the same defaults, so code written for the agent's class runs on ours."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from hermes_state.agent.db import SessionDB
from interop.releases import BY_KEY, ReleaseUnavailable, python_for, run_probe

# Every public method both field releases (0.19 and 0.22) have, and the 0.22 ones callers use.
CALLER_FACING = (
    "append_message",
    "append_messages_batch",
    "apply_telegram_topic_migration",
    "archive_and_compact",
    "archive_sessions",
    "backfill_repo_roots",
    "bind_telegram_topic",
    "claim_handoff",
    "clear_compression_failure_cooldown",
    "clear_messages",
    "close",
    "complete_handoff",
    "count_empty_sessions",
    "create_session",
    "delete_empty_sessions",
    "delete_session",
    "delete_session_if_empty",
    "delete_sessions",
    "delete_telegram_topic_binding",
    "disable_telegram_topic_mode",
    "distinct_session_cwds",
    "enable_telegram_topic_mode",
    "end_session",
    "ensure_session",
    "export_all",
    "export_session",
    "export_session_lineage",
    "fail_handoff",
    "finalize_orphaned_compression_sessions",
    "find_latest_gateway_session_for_peer",
    "find_session_by_origin",
    "flush_token_counts",
    "get_ancestor_display_prefix",
    "get_anchored_view",
    "get_compression_chain",
    "get_compression_failure_cooldown",
    "get_compression_fallback_streak",
    "get_compression_lineage",
    "get_compression_lock_holder",
    "get_compression_tip",
    "get_conversation_root",
    "get_handoff_state",
    "get_messages",
    "get_messages_around",
    "get_messages_as_conversation",
    "get_meta",
    "get_next_title_in_lineage",
    "get_resume_conversations",
    "get_session",
    "get_session_by_title",
    "get_session_title",
    "get_telegram_topic_binding",
    "get_telegram_topic_binding_by_session",
    "has_archived_messages",
    "has_platform_message_id",
    "import_sessions",
    "is_telegram_session_linked_to_topic",
    "is_telegram_topic_mode_enabled",
    "list_cron_job_runs",
    "list_gateway_sessions",
    "list_pending_handoffs",
    "list_prune_candidates",
    "list_recent_user_messages",
    "list_sessions_rich",
    "list_telegram_topic_bindings_for_chat",
    "list_unlinked_telegram_sessions_for_user",
    "load_gateway_routing_entries",
    "maybe_auto_prune_and_vacuum",
    "message_count",
    "optimize_fts",
    "promote_to_session_reset",
    "prune_empty_ghost_sessions",
    "prune_sessions",
    "queue_token_counts",
    "rebuild_fts",
    "record_auxiliary_usage",
    "record_compression_failure_cooldown",
    "record_gateway_session_peer",
    "refresh_compression_lock",
    "release_compression_lock",
    "reopen_session",
    "replace_gateway_routing_entries",
    "replace_messages",
    "request_handoff",
    "resolve_resume_session_id",
    "resolve_session_by_title",
    "resolve_session_id",
    "rewind_to_message",
    "sanitize_title",
    "save_gateway_routing_entry",
    "search_messages",
    "search_sessions",
    "search_sessions_by_id",
    "session_count",
    "session_count_by_source",
    "set_compression_fallback_streak",
    "set_expiry_finalized",
    "set_latest_user_api_content",
    "set_meta",
    "set_session_archived",
    "set_session_title",
    "try_acquire_compression_lock",
    "update_session_billing_route",
    "update_session_cwd",
    "update_session_meta",
    "update_session_model",
    "update_system_prompt",
    "update_token_counts",
    "usage_totals",
    "vacuum",
)

# Parameters of the agent's methods this library does not take, and why.
NOT_TAKEN = {
    # Fences of the agent's own turn machinery (compression locks held across a turn, turn
    # leases): accepted by append_message/replace_messages so positions line up, not checked.
    "delete_session": {
        "expected_display_messages": "checked by count of live messages, not message by message",
    },
    "prune_sessions": {
        "filters": "the agent's filter keywords (prune_filters), taken as **filters"
    },
    "set_meta": {},
    "ensure_session": {"kwargs": "explicit keyword parameters instead (typed)"},
    "create_session": {"kwargs": "explicit keyword parameters instead (typed)"},
    "archive_and_compact": {
        name: "0.22's watermark compaction protocol (its compressor's bookkeeping)"
        for name in (
            "model_config_patch",
            "watermark",
            "lock_holder",
            "tail_count",
            "carried_messages",
            "covered_ids",
            "unresolved_held",
        )
    },
    "rewind_to_message": {
        "preserve_compaction_handoff": "0.22's composite summary carrier (its compressor's)",
        "expected_target_content": "0.22's composite summary carrier (its compressor's)",
    },
}


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[list[str | None]] | None]:
    """The parameters of the newest release's SessionDB methods."""
    release = BY_KEY["r31"]
    try:
        python_for(release)
    except ReleaseUnavailable as exc:
        pytest.skip(str(exc))
    home: Path = tmp_path_factory.mktemp("signatures") / "home"
    home.mkdir()
    return run_probe(release, "signatures", home, ",".join(CALLER_FACING))


def _ours(name: str) -> list[list[str | None]]:
    params = list(inspect.signature(getattr(SessionDB, name)).parameters.values())[1:]
    return [
        [p.name, p.kind.name, None if p.default is inspect.Parameter.empty else repr(p.default)]
        for p in params
    ]


@pytest.mark.parametrize("name", CALLER_FACING)
def test_our_method_takes_the_agents_parameters(name: str, upstream: dict) -> None:
    theirs = upstream[name]
    assert theirs is not None, f"the agent's SessionDB has no {name}"
    skipped = NOT_TAKEN.get(name, {})
    ours = {p[0]: p for p in _ours(name)}
    positional = [p for p in _ours(name) if p[1] == "POSITIONAL_OR_KEYWORD"]
    aligned = True  # positions line up until the first agent parameter we do not take
    for index, (pname, kind, default) in enumerate(theirs):
        if pname in skipped:
            aligned = aligned and kind != "POSITIONAL_OR_KEYWORD"
            continue
        assert pname in ours, f"{name}: no parameter {pname!r}"
        assert ours[pname][2] == default, (
            f"{name}({pname}): default {ours[pname][2]} instead of the agent's {default}"
        )
        if kind == "POSITIONAL_OR_KEYWORD" and aligned:
            assert index < len(positional) and positional[index][0] == pname, (
                f"{name}: {pname!r} is not positional parameter {index + 1} as in the agent"
            )
        if kind == "KEYWORD_ONLY":
            assert ours[pname][1] in ("KEYWORD_ONLY", "POSITIONAL_OR_KEYWORD"), name
    theirs_names = {p[0] for p in theirs}
    for pname, kind, _default in _ours(name):
        if pname not in theirs_names:
            assert kind == "KEYWORD_ONLY", (
                f"{name}: our extra parameter {pname!r} must be keyword-only, so that the "
                "agent's positional calls still line up"
            )
