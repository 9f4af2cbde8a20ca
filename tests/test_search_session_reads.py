"""A search reads what it needs of the sessions table once, in its snapshot, not per statement.

Conditions on a hit's session (archived, pinned, source) and the sessions whose rows an agent's
substring index leaves out name a set of sessions. A walk runs a statement per id window, and
a subquery over every session row in each of them made a rare word on a 30,000-session store
spend its work budget on the sessions table (issue 37). These tests hold the answers equal to
the subquery form's and count the statements that read the sessions table. Title search's
ASCII prefilter is checked against the Python matcher it stands in front of.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hermes_state.records import messages, sessions
from hermes_state.search import routes, search
from hermes_state.search.query import parse_query
from hermes_state.search.search import search_messages
from hermes_state.search.title_search import search_titles, title_matches
from hermes_state.store.connection import Store, open_store

SOURCES = ("cli", "telegram", "cron", "subagent")


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    """Forty sessions of four sources, some archived, some pinned; each has a tool row and a
    user row mentioning the rare word, and common words."""
    with open_store(db_path) as handle:
        for n in range(40):
            sid = f"s{n:02d}"
            sessions.create_session(handle, sid, SOURCES[n % 4], model="m")
            messages.append_message(handle, sid, "user", f"quetzal note {n} and teapot")
            messages.append_message(handle, sid, "tool", f"output {n}: quetzalcoatl teapot")
            if n % 3 == 0:
                sessions.set_session_archived(handle, sid, True)
            if n % 5 == 0:
                sessions.set_session_pinned(handle, sid, True)
        yield handle


def _sessions_reads(store: Store) -> list[str]:
    """Start recording the statements of store's connection that read the sessions table."""
    seen: list[str] = []

    def trace(sql: str) -> None:
        if "from sessions" in sql.lower() and not sql.startswith("--"):
            seen.append(sql)

    store.conn.set_trace_callback(trace)
    return seen


FILTERS = [
    {"archived": a, "pinned": p, "source_filter": src, "exclude_sources": ex}
    for a, p, (src, ex) in itertools.product(
        (None, False, True),
        (None, False, True),
        ((None, None), (["cron"], None), (None, ["telegram", "cron"])),
    )
]


@pytest.mark.parametrize("query", ["quetzal", "etzalco", "teapot"])
def test_resolved_session_conditions_give_the_subquery_answer(
    store: Store, query: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def answer(**kw: object) -> list[tuple[object, ...]]:
        found = search_messages(store, query, limit=1000, context=False, **kw)  # type: ignore[arg-type]
        return [(h["id"], h["session_id"]) for h in found]

    resolved = [answer(**kw) for kw in FILTERS]
    monkeypatch.setattr(routes, "INLINE_SESSIONS", 0)  # every condition stays a subquery
    subquery = [answer(**kw) for kw in FILTERS]
    assert resolved == subquery
    assert len({tuple(r) for r in resolved}) > 5  # the filters keep and drop different hits


def test_a_word_search_reads_each_session_condition_once(store: Store) -> None:
    reads = _sessions_reads(store)
    found = search_messages(
        store, "quetzal", archived=False, pinned=False, exclude_sources=["telegram"]
    )
    kept = [n for n in range(40) if n % 3 and n % 5 and SOURCES[n % 4] != "telegram"]
    assert found and found.matches == len(kept) == 16  # the user row of each kept session
    # One read per condition, and the hits' own session lookups: never one per walk window.
    on_flags = [s for s in reads if "WHERE COALESCE(archived" in s or "WHERE COALESCE(pinned" in s]
    assert len(on_flags) == 2
    assert not [s for s in reads if "IN (SELECT id FROM sessions" in s]


def test_conditions_naming_many_sessions_stay_a_subquery(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(routes, "INLINE_SESSIONS", 10)  # 14 sessions are archived, 8 pinned
    with store.snapshot() as conn:
        many = routes._filters(store, None, None, None, False, archived=True, conn=conn)
        mixed = routes._filters(
            store, None, None, None, False, archived=False, pinned=True, conn=conn
        )
    assert "IN (SELECT id FROM sessions WHERE COALESCE(archived, 0) <> 0)" in many.sql
    assert "json_each" in mixed.sql and "archived" in mixed.sql


def test_no_archived_session_drops_the_condition(db_path: Path) -> None:
    with open_store(db_path) as handle:
        sessions.create_session(handle, "a", "cli")
        with handle.snapshot() as conn:
            kept = routes._filters(handle, None, None, None, False, archived=False, conn=conn)
            only = routes._filters(handle, None, None, None, False, archived=True, conn=conn)
    assert "sessions" not in kept.sql and not kept.narrows  # every candidate is a hit again
    assert only.sql.endswith("AND 0") and only.narrows  # no archived session: no hit


def test_substring_scan_reads_left_out_sessions_once(store: Store) -> None:
    reads = _sessions_reads(store)
    found = search_messages(store, "etzalco", archived=None, limit=1000)
    # Every tool row holds it; the agent's substring index leaves tool rows out.
    assert found.route == "trigram" and len(found) == 40
    left_out = [s for s in reads if "_delegate_from" in s]
    assert len(left_out) == 1 and left_out[0].startswith("SELECT id FROM sessions")
    count = search.count_matches(store, "quetzal note", archived=None)
    assert count.count == 40


# --- titles ---------------------------------------------------------------------------------

WORDS = ["Docker", "docker", "café", "Cafe", "CAFÉ", "会議", "plan", "plans", "a_b", "x-y", "ß"]
title_text = st.lists(st.sampled_from([*WORDS, " ", "-", "_", "é", "!"]), max_size=6).map("".join)
query_text = st.lists(
    st.sampled_from(
        ["docker", "cafe", "café", "会議", "plan", "plan*", "-plan", "ocker", "OR", "_"]
    ),
    min_size=1,
    max_size=3,
).map(" ".join)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(titles=st.lists(title_text, min_size=1, max_size=8, unique=True), query=query_text)
def test_title_prefilter_keeps_every_title_python_matches(
    tmp_path: Path, titles: list[str], query: str
) -> None:
    with tempfile.TemporaryDirectory(dir=tmp_path) as d, open_store(Path(d) / "state.db") as handle:
        for n, title in enumerate(titles):
            sessions.create_session(handle, f"t{n}", "cli")
            handle.conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, f"t{n}"))
        found = {r["id"] for r in search_titles(handle, query)}
    parsed = parse_query(query)
    expected = set()
    if parsed.wanted().groups:
        expected = {f"t{n}" for n, t in enumerate(titles) if title_matches(t, parsed)}
    assert found == expected


def test_an_unchanged_store_is_not_read_again_and_a_changed_one_is(store: Store) -> None:
    search_messages(store, "quetzal", archived=False)
    reads = _sessions_reads(store)
    again = search_messages(store, "quetzal", archived=False, limit=1000)
    assert not [s for s in reads if "COALESCE(archived" in s]  # kept: nothing changed
    with open_store(store.path) as other:  # another connection archives a session
        sessions.set_session_archived(other, "s01", True)
    after = search_messages(store, "quetzal", archived=False, limit=1000)
    assert [s for s in reads if "COALESCE(archived" in s]
    assert {h["session_id"] for h in again} - {h["session_id"] for h in after} == {"s01"}


def test_a_session_id_that_is_not_text_keeps_the_subquery(db_path: Path) -> None:
    """A foreign writer stored a session id as a BLOB: a json list of ids cannot name it, so
    the condition stays the subquery, which compares it as the column does."""
    with open_store(db_path) as handle:
        sessions.create_session(handle, "text-id", "cli")
        messages.append_message(handle, "text-id", "user", "quetzal in a text session")
        handle.write(
            lambda c: c.execute(
                "INSERT INTO sessions (id, source, started_at, archived) "
                "VALUES (x'626c6f62', 'cli', 1.0, 1)"
            )
        )
        handle.write(
            lambda c: c.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES (x'626c6f62', 'user', 'quetzal in a blob session', 2.0)"
            )
        )
        with handle.snapshot() as conn:
            kept = routes._filters(handle, None, None, None, False, archived=False, conn=conn)
        assert "IN (SELECT id FROM sessions WHERE COALESCE(archived, 0) <> 0)" in kept.sql
        found = search_messages(handle, "quetzal", archived=False, limit=10)
        assert [h["session_id"] for h in found] == ["text-id"]
        both = search_messages(handle, "quetzal", archived=None, limit=10)
        assert len(both) == 2
