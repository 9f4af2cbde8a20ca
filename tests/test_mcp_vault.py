"""`hermes mcp` reads the vault as the CLI does (issue #29): search spans it unless live_only,
list_sessions only with vault=true, get_session falls back to it; "vault" is the year or null.

Driven by the MCP SDK's own client over stdio, on a real store whose old sessions were moved by
the library's own move (hermes_state.vault.vault_move.move_sessions).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clitools import run_json
from mcp import ClientSession
from test_mcp import data, drive, error, fake_key

from hermes_state.records.messages import append_messages
from hermes_state.records.sessions import create_session, end_session, set_session_title
from hermes_state.store.connection import Store, open_store
from hermes_state.store.home import default_db_path
from hermes_state.vault import vault, vault_move

NOW = time.time()
OLD = NOW - 400 * 86400
YEAR = vault.year_of(OLD)
KEY = fake_key()


def _session(store: Store, sid: str, at: float, source: str, texts: list[str]) -> None:
    """Write an ended session of user messages, last active at `at`."""
    create_session(store, sid, source, started_at=at)
    append_messages(
        store,
        sid,
        [{"role": "user", "content": t, "timestamp": at + i} for i, t in enumerate(texts)],
    )
    store.write(
        lambda c: c.execute("UPDATE sessions SET last_activity_at = ? WHERE id = ?", (at, sid))
    )
    end_session(store, sid, "user_exit")


@pytest.fixture
def moved() -> Path:
    """Two old sessions moved into the vault, two recent ones live; return the vault store."""
    with open_store(default_db_path()) as store:
        _session(store, "old1", OLD, "cron", ["kubernetes rollout stalled overnight"])
        _session(store, "old2", OLD + 60, "cli", ["kubernetes pods", f"token {KEY} leaked"])
        set_session_title(store, "old2", f"pods with {KEY}")
        _session(store, "new1", NOW - 3600, "cli", ["kubernetes upgrade done", "all green"])
        _session(store, "new2", NOW - 60, "telegram", ["lunch plans"])
        result = vault_move.move_sessions(store, store.path.parent, 30)
    assert sorted(result.session_ids) == ["old1", "old2"]
    return vault.vault_paths(default_db_path().parent)[0][1]


def call(tmp_path: Path, *calls: tuple[str, dict[str, Any]], flags: tuple[str, ...] = ()) -> Any:
    """Return the answers of one server to these (tool, arguments) calls, in order."""

    async def go(s: ClientSession) -> list[Any]:
        return [await s.call_tool(tool, arguments) for tool, arguments in calls]

    return drive(tmp_path, go, *flags)


def pages(tmp_path: Path, tool: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """Return every page of one call, followed through its next_cursor."""

    async def go(s: ClientSession) -> list[dict[str, Any]]:
        got = [data(await s.call_tool(tool, arguments))]
        while got[-1]["next_cursor"] is not None and len(got) < 10:
            got.append(
                data(await s.call_tool(tool, {**arguments, "cursor": got[-1]["next_cursor"]}))
            )
        return got

    return drive(tmp_path, go)


def test_search_finds_vaulted_messages_marked_with_their_year(tmp_path: Path, moved: Path) -> None:
    (found,) = call(tmp_path, ("search_messages", {"query": "kubernetes", "sort": "oldest"}))
    hits = [(h["session_id"], h["vault"]) for h in data(found)["hits"]]
    assert hits == [("old1", YEAR), ("old2", YEAR), ("new1", None)]
    cli = run_json("sessions", "search", "kubernetes", "--sort", "oldest")
    assert [(h["session_id"], h["vault"]) for h in cli["hits"]] == hits
    assert data(found)["matches"] == cli["matches"] == 3


def test_live_only_gives_the_hits_of_search_live(tmp_path: Path, moved: Path) -> None:
    (found,) = call(tmp_path, ("search_messages", {"query": "kubernetes", "live_only": True}))
    cli = run_json("sessions", "search", "kubernetes", "--live", "--limit", "10")
    assert data(found)["hits"] == cli["hits"]
    assert [(h["session_id"], h["vault"]) for h in cli["hits"]] == [("new1", None)]


def test_search_pages_across_the_stores_with_the_cursor(tmp_path: Path, moved: Path) -> None:
    got = pages(tmp_path, "search_messages", {"query": "kubernetes", "limit": 1})
    cli = run_json("sessions", "search", "kubernetes")
    assert [h["id"] for p in got for h in p["hits"]] == [h["id"] for h in cli["hits"]]
    assert len(got) == 3


def test_a_source_only_the_vault_has_filters_a_spanning_search(tmp_path: Path, moved: Path) -> None:
    spanning, live = call(
        tmp_path,
        ("search_messages", {"query": "kubernetes", "sources": ["cron"]}),
        ("search_messages", {"query": "kubernetes", "sources": ["cron"], "live_only": True}),
    )
    assert [(h["session_id"], h["vault"]) for h in data(spanning)["hits"]] == [("old1", YEAR)]
    assert error(live).startswith("Error (bad_argument): sources: no session comes from 'cron'")


def test_list_sessions_keeps_to_the_live_store_without_vault(tmp_path: Path, moved: Path) -> None:
    (listed,) = call(tmp_path, ("list_sessions", {}))
    rows = [(r["id"], r["vault"]) for r in data(listed)["sessions"]]
    assert rows == [("new2", None), ("new1", None)] and data(listed)["total"] == 2


def test_list_sessions_with_vault_pages_through_both_stores_marked(
    tmp_path: Path, moved: Path
) -> None:
    got = pages(tmp_path, "list_sessions", {"vault": True, "limit": 3})
    rows = [(r["id"], r["vault"], r["message_count"]) for p in got for r in p["sessions"]]
    assert rows == [("new2", None, 1), ("new1", None, 2), ("old2", YEAR, 2), ("old1", YEAR, 1)]
    assert [p["total"] for p in got] == [4, 4]
    cli = run_json("sessions", "list", "--vault")
    assert [(s["id"], s["vault"]) for s in cli["sessions"]] == [r[:2] for r in rows]


def test_get_session_reads_a_vaulted_session_from_its_store(tmp_path: Path, moved: Path) -> None:
    async def go(s: ClientSession) -> list[dict[str, Any]]:
        first = data(await s.call_tool("get_session", {"session": "old2", "limit": 1}))
        args = {"session": "old2", "limit": 1, "cursor": first["next_cursor"]}
        live = data(await s.call_tool("get_session", {"session": "new1"}))
        return [first, data(await s.call_tool("get_session", args)), live]

    first, second, live = drive(tmp_path, go)
    head = first["session"]
    assert (head["id"], head["vault"], head["source"]) == ("old2", YEAR, "cli")
    assert head["message_count"] == 2
    assert [m["content"] for m in first["messages"]] == ["kubernetes pods"]
    assert [m["content"] for m in second["messages"]] == ["token [REDACTED:openai_key] leaked"]
    assert second["next_cursor"] is None and live["session"]["vault"] is None


def test_vaulted_secrets_are_redacted_like_live_ones(tmp_path: Path, moved: Path) -> None:
    asked: list[tuple[str, dict[str, Any]]] = [
        ("search_messages", {"query": "leaked"}),
        ("get_session", {"session": "old2"}),
        ("list_sessions", {"vault": True}),
    ]
    found, shown, listed = (data(a) for a in call(tmp_path, *asked))
    assert KEY not in json.dumps([found, shown, listed])
    assert "[REDACTED:openai_key]" in found["hits"][0]["snippet"]
    assert found["hits"][0]["session_title"] == "pods with [REDACTED:openai_key]"
    assert (
        shown["session"]["title"]
        == listed["sessions"][2]["title"]
        == found["hits"][0]["session_title"]
    )
    plain = [data(a) for a in call(tmp_path, *asked, flags=("--no-redact",))]
    assert (
        plain[0]["hits"][0]["session_title"] == plain[1]["session"]["title"] == f"pods with {KEY}"
    )


def test_the_server_never_writes_the_live_or_vault_stores(
    tmp_path: Path, moved: Path, sha256: Callable[[Path], str]
) -> None:
    live = default_db_path()

    def state() -> list[Any]:
        return [
            (sha256(p), p.stat().st_mtime_ns, sorted(x.name for x in p.parent.iterdir()))
            for p in (live, moved)
        ]

    before = state()
    answers = call(
        tmp_path,
        ("search_messages", {"query": "kubernetes"}),
        ("search_messages", {"query": "kubernetes", "sort": "newest", "limit": 1}),
        ("list_sessions", {"vault": True}),
        ("get_session", {"session": "old1"}),
        ("get_session", {"session": "no-such"}),
    )
    assert [a.isError for a in answers] == [False, False, False, False, True]
    assert state() == before


def test_get_usage_counts_the_vault_unless_live_only(tmp_path: Path) -> None:
    """get_usage sums the live store and every vault year, as `hermes usage` does."""
    old = time.time() - 400 * 86400
    store = open_store(default_db_path())
    try:
        for sid, at, tokens in (("u_old", old, 300), ("u_new", time.time(), 40)):
            store.write(
                lambda c, sid=sid, at=at, tokens=tokens: c.execute(
                    "INSERT INTO sessions (id, source, started_at, ended_at, end_reason,"
                    " input_tokens, model) VALUES (?, 'cli', ?, ?, 'user_exit', ?, 'm/x')",
                    (sid, at, at, tokens),
                )
            )
        vault_move.move_sessions(store, default_db_path().parent, 90)
    finally:
        store.close()

    async def go(s: ClientSession) -> tuple[dict[str, Any], dict[str, Any]]:
        both = data(await s.call_tool("get_usage", {}))
        live = data(await s.call_tool("get_usage", {"live_only": True}))
        return both, live

    both, live = drive(tmp_path, go)
    assert both["totals"]["input_tokens"] == 340 and both["vault"] == [vault.year_of(old)]
    assert live["totals"]["input_tokens"] == 40 and live["vault"] is None
