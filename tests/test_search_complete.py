"""Filtered search on a generated 20,000-message store equals hand-written SQL, every time.

Each query kind (word, multi-word, prefix, substring, CJK) is run with every combination of
the filters (source, excluded source, role, time window, archived, pinned, rewound rows) and
compared with SQL written here independently: joins where the library uses subqueries, the
index tables queried directly. Each search runs twice to show the same hits come back.
An exclusion (-word) is compared with FTS5 itself reading each candidate's whole text.
"""

from __future__ import annotations

import itertools
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.children import child_env

from hermes_state.search import search, walk
from hermes_state.store import cjk
from hermes_state.store.connection import Store, open_store

REPO_ROOT = Path(__file__).resolve().parents[1]
MESSAGES = 20_000
PAGE = 100  # hits compared per search (deep enough to reach past most filtered matches)

# Terms the generator plants: a common word (~47 % of rows), a rare one, a substring only the
# trigram index finds, and a 2-character CJK word (~1 %).
QUERIES = {
    "word": "checkpoint",
    "two words": "checkpoint deploy",
    "prefix": "checkp*",
    "rare": "quetzal",
    "substring": "etzal",
    "cjk": "会議",
}
# Each filter, at two values: every combination of present filters is tried (2^6 = 64), the
# value alternating between combinations.
FILTERS: dict[str, tuple[Any, Any]] = {
    "sources": (["cron"], ["telegram", "slack"]),
    "excluded": (["cli"], ["discord", "whatsapp"]),
    "roles": (["tool"], ["user", "assistant"]),
    "window": ((1_750_000_000.0, 1_760_000_000.0), (None, 1_740_000_000.0)),
    "archived": (False, True),
    "pinned": (True, False),
}


def _combos() -> list[dict[str, Any]]:
    """Every subset of the filters, each present filter at one of its two values."""
    names = list(FILTERS)
    combos = []
    for n, present in enumerate(itertools.product((False, True), repeat=len(names))):
        combos.append(
            {name: FILTERS[name][(n + i) % 2] for i, name in enumerate(names) if present[i]}
        )
    return combos


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated 50,000-message store with some archived/pinned sessions and rewound rows."""
    out = tmp_path_factory.mktemp("complete")
    env = child_env()
    generate = [sys.executable, str(REPO_ROOT / "bench" / "generate.py")]
    subprocess.run(
        [*generate, "--messages", str(MESSAGES), "--seed", "11", "--out", str(out), "--quiet"],
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    path = out / "state.db"
    conn = sqlite3.connect(path)
    with conn:
        # Every 7th session archived, every 11th pinned, every 13th message rewound.
        conn.execute("UPDATE sessions SET archived = 1 WHERE rowid % 7 = 0")
        conn.execute("UPDATE sessions SET pinned = 1 WHERE rowid % 11 = 0")
        conn.execute("UPDATE messages SET active = 0, compacted = 0 WHERE id % 13 = 0")
    conn.close()
    return path


@pytest.fixture(scope="module")
def store(store_path: Path) -> Iterator[Store]:
    opened = open_store(store_path, read_only=True)
    yield opened
    opened.close()


def _filters_sql(combo: dict[str, Any]) -> tuple[str, list[Any]]:
    """The WHERE conditions of the filters, written against a LEFT JOIN of sessions s."""
    sources, excluded, roles = combo.get("sources"), combo.get("excluded"), combo.get("roles")
    window = combo.get("window", (None, None))
    flags = {k: combo[k] for k in ("archived", "pinned") if k in combo}
    conds = [
        "(m.active = 1 OR m.compacted = 1)",
        "(m.display_kind IS NULL OR m.display_kind <> 'hidden')",
    ]
    params: list[Any] = []
    if sources:
        conds.append(f"s.source IN ({','.join('?' * len(sources))})")
        params += sources
    if excluded:
        conds.append(f"(s.source IS NULL OR s.source NOT IN ({','.join('?' * len(excluded))}))")
        params += excluded
    if roles:
        conds.append(f"m.role IN ({','.join('?' * len(roles))})")
        params += roles
    after, before = window
    if after is not None:
        conds.append("m.timestamp >= ?")
        params.append(after)
    if before is not None:
        conds.append("m.timestamp < ?")
        params.append(before)
    for column, wanted in flags.items():
        conds.append(f"COALESCE(s.{column}, 0) {'<>' if wanted else '='} 0")
    return " AND ".join(conds), params


def _truth(
    conn: sqlite3.Connection, kind: str, text: str, where: str, params: list[Any], uncovered: bool
) -> list[int]:
    """Every matching message id, newest first, by SQL written for each index directly.

    The query's candidates are kept in a temporary table of conn (one per kind and coverage):
    each test runs one kind on a connection of its own.
    """
    # Candidates come from the index (or, for CJK, a LIKE over all messages) in a subquery;
    # the filters are joins here, where the library uses subqueries.
    if kind in ("word", "two words", "prefix", "rare"):
        found = "SELECT rowid AS id FROM messages_fts WHERE messages_fts MATCH ?"
        args: list[Any] = [text]
    elif kind == "substring":
        # The agent's substring index leaves out tool rows and cron/subagent sessions; every
        # search scans exactly those rows too (a filter never adds hits).
        found = "SELECT rowid AS id FROM messages_fts_trigram WHERE content LIKE ?"
        args = [f"%{text}%"]
        if uncovered:
            found += (
                " UNION SELECT id FROM messages WHERE id NOT IN "
                "(SELECT id FROM messages_fts_trigram_src) "
                "AND (content LIKE ? OR tool_name LIKE ? OR tool_calls LIKE ?)"
            )
            args += [f"%{text}%"] * 3
    else:
        found = (
            "SELECT id FROM messages WHERE content LIKE ? OR tool_name LIKE ? OR tool_calls LIKE ?"
        )
        args = [f"%{text}%"] * 3
    table = f"found_{'all' if uncovered else 'covered'}"
    conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {table} AS {found}", args)
    rows = conn.execute(
        f"SELECT m.id FROM {table} AS f CROSS JOIN messages m ON m.id = f.id "
        f"LEFT JOIN sessions s ON s.id = m.session_id WHERE {where} ORDER BY m.id DESC",
        params,
    )
    return [r[0] for r in rows]


def _options(combo: dict[str, Any]) -> dict[str, Any]:
    """The search_messages keywords of a filter combination."""
    window = combo.get("window", (None, None))
    return {
        "source_filter": combo.get("sources"),
        "exclude_sources": combo.get("excluded"),
        "role_filter": combo.get("roles"),
        "after": window[0],
        "before": window[1],
        **{k: combo[k] for k in ("archived", "pinned") if k in combo},
    }


@pytest.mark.parametrize("kind", list(QUERIES))
def test_filtered_search_equals_sql_for_every_filter_combination(
    store: Store, store_path: Path, kind: str
) -> None:
    text = QUERIES[kind]
    truth_conn = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)
    mismatches = []
    try:
        for n, combo in enumerate(_combos()):
            where, params = _filters_sql(combo)
            truth = _truth(truth_conn, kind, text, where, params, True)
            options = {**_options(combo), "limit": PAGE, "sort": "newest", "context": False}
            first = search.search_messages(store, text, **options)
            again = search.search_messages(store, text, **options)
            got = [h["id"] for h in first]
            if got != [h["id"] for h in again] or first.examined != again.examined:
                mismatches.append(("not deterministic", combo))
            if first.partial or got != truth[:PAGE]:
                mismatches.append(("default", combo, len(got), len(truth), first.partial))
            if n % 3 == 0:  # the budget never binds at this size: --all on a third of them
                complete = search.search_messages(store, text, complete=True, **options)
                if [h["id"] for h in complete] != truth[:PAGE]:
                    mismatches.append(("complete", combo, len(complete), len(truth)))
    finally:
        truth_conn.close()
    assert mismatches == []


@pytest.mark.parametrize("kind", ["word", "two words", "prefix", "cjk"])
def test_ranked_search_ranks_exactly_the_filtered_matches(
    store: Store, store_path: Path, kind: str
) -> None:
    text = QUERIES[kind]
    table, match = (
        ("hermes_cjk", search.parse_query(text))
        if kind == "cjk"
        else ("messages_fts", search.parse_query(text))
    )
    truth_conn = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)
    try:
        for sources, roles in itertools.product(
            [None, *FILTERS["sources"]], [None, *FILTERS["roles"]]
        ):
            where, params = _filters_sql({"sources": sources, "roles": roles})
            if kind == "cjk":
                fts_match: str = cjk.cjk_match_expr(text)
            else:
                fts_match = match.fts()
            truth = [
                r[0]
                for r in truth_conn.execute(
                    f"SELECT m.id FROM {table} JOIN messages m ON m.id = {table}.rowid "
                    f"LEFT JOIN sessions s ON s.id = m.session_id WHERE {table} MATCH ? "
                    f"AND {where} ORDER BY {table}.rank, m.id DESC LIMIT 50",
                    [fts_match, *params],
                )
            ]
            options: dict[str, Any] = {"source_filter": sources, "role_filter": roles}
            ranked = search.search_messages(store, text, limit=50, complete=True, **options)
            assert ranked.ordering == "rank"
            assert [h["id"] for h in ranked] == truth, (sources, roles)
            default = search.search_messages(store, text, limit=50, **options)
            assert default.ordering in ("rank", "rank_recent") and not default.partial
            if default.ordering == "rank":
                assert [h["id"] for h in default] == truth, (sources, roles)
            else:
                assert default.ranked == walk.RANK_CANDIDATES
    finally:
        truth_conn.close()


def _oracle_has(conn: sqlite3.Connection, ids: list[int], word: str) -> set[int]:
    """The ids whose whole text holds word, as FTS5's unicode61 reads it (an in-memory table)."""
    from hermes_state.shapes.content import content_text

    oracle = sqlite3.connect(":memory:")
    oracle.execute("CREATE VIRTUAL TABLE o USING fts5(content, tool_name, tool_calls)")
    for at in range(0, len(ids), 500):
        chunk = ids[at : at + 500]
        rows = conn.execute(
            "SELECT id, content, tool_name, tool_calls FROM messages "
            f"WHERE id IN ({','.join('?' * len(chunk))})",
            chunk,
        )
        oracle.executemany(
            "INSERT INTO o(rowid, content, tool_name, tool_calls) VALUES (?, ?, ?, ?)",
            [(i, content_text(c, sep=" "), n, t) for i, c, n, t in rows],
        )
    found = {r[0] for r in oracle.execute("SELECT rowid FROM o WHERE o MATCH ?", (word,))}
    oracle.close()
    return found


@pytest.mark.parametrize(
    "combo", [{}, {"roles": ["tool"]}, {"sources": ["cron"], "archived": False}]
)
def test_exclusion_equals_fts5_over_each_whole_message(
    store: Store, store_path: Path, combo: dict[str, Any]
) -> None:
    truth_conn = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)
    try:
        where, params = _filters_sql(combo)
        wanted = _truth(truth_conn, "word", "checkpoint", where, params, False)
        excluded = _oracle_has(truth_conn, wanted, "deploy")
        truth = [i for i in wanted if i not in excluded]
    finally:
        truth_conn.close()
    options = {**_options(combo), "limit": PAGE, "sort": "newest", "context": False}
    got = search.search_messages(store, "checkpoint -deploy", **options)
    assert [h["id"] for h in got] == truth[:PAGE]
    counted = search.search_messages(store, "checkpoint -deploy", complete=True, **options)
    assert (counted.matches, counted.complete) == (len(truth), True)
