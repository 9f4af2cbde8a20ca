"""Our SessionDB against the agent's: the caller-facing methods take the same parameters, in
the same order, with the same defaults, so code written for the agent's class runs on ours."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from hermes_state.db import SessionDB
from interop.releases import BY_KEY, ReleaseUnavailable, python_for, run_probe

# The methods issue 12 names, and the ones whose shapes it fixes.
CALLER_FACING = (
    "create_session",
    "ensure_session",
    "end_session",
    "reopen_session",
    "get_session",
    "resolve_session_id",
    "set_session_title",
    "get_session_title",
    "get_session_by_title",
    "resolve_session_by_title",
    "get_next_title_in_lineage",
    "update_system_prompt",
    "search_sessions",
    "list_sessions_rich",
    "session_count",
    "session_count_by_source",
    "message_count",
    "append_message",
    "append_messages_batch",
    "replace_messages",
    "get_messages",
    "get_messages_as_conversation",
    "search_messages",
    "update_token_counts",
    "queue_token_counts",
    "flush_token_counts",
    "usage_totals",
    "record_auxiliary_usage",
    "import_sessions",
    "export_session",
    "export_all",
    "get_compression_tip",
    "get_compression_chain",
    "clear_messages",
    "delete_session",
    "prune_sessions",
    "set_meta",
    "get_meta",
    "vacuum",
)

# Parameters of the agent's methods this library does not take, and why.
NOT_TAKEN = {
    # The gateway's compression lock and turn leases guard the agent's in-process writers; this
    # library serialises writers through SQLite transactions and the runtime ledger instead.
    "append_message": {
        "_compressed_summary": "agent-internal marker of its own summariser",
        "compression_lock_holder": "in-process guard of the agent's gateway",
        "turn_lease_holder": "in-process guard of the agent's gateway",
        "turn_lease_ttl_seconds": "in-process guard of the agent's gateway",
    },
    "append_messages_batch": {
        "compression_lock_holder": "in-process guard of the agent's gateway",
        "turn_lease_holder": "in-process guard of the agent's gateway",
        "turn_lease_ttl_seconds": "in-process guard of the agent's gateway",
    },
    "replace_messages": {"reject_active_turn_lease": "in-process guard of the agent's gateway"},
    "get_messages_as_conversation": {
        "repair_alternation": "the agent's provider-side repair, not a storage concern",
    },
    "search_messages": {"fields": "the agent's own field projection of hits"},
    "delete_session": {
        "sessions_dir": "the agent's legacy transcript files are outside the store",
        "expected_delete_ids": "a guard of the agent's desktop client",
        "expected_display_messages": "a guard of the agent's desktop client",
        "exclude_active_write_guards": "in-process guard of the agent's gateway",
        "include_compression_chain": "deleting a whole chain goes through `prune`",
    },
    "prune_sessions": {
        "sessions_dir": "the agent's legacy transcript files are outside the store",
        "exclude_active_write_guards": "in-process guard of the agent's gateway",
        "filters": "the agent's open-ended filter keywords; `prune` takes typed filters",
    },
    "export_session": {
        "include_compacted": "an export always carries every generation, with its flags",
        "include_inactive": "an export always carries every generation, with its flags",
    },
    "export_all": {
        "include_compacted": "an export always carries every generation, with its flags",
        "include_inactive": "an export always carries every generation, with its flags",
    },
    "set_meta": {"cursor": "the agent's own connection handle"},
    "ensure_session": {"kwargs": "explicit keyword parameters instead (typed)"},
    "create_session": {"kwargs": "explicit keyword parameters instead (typed)"},
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
