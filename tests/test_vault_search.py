"""`sessions search` spans the live store and the vault: one answer, ranked exactly as one
store holding every session would rank it (SPEC §21; issue #27 item 4)."""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from clitools import child, run, run_json

from hermes_state.records.messages import append_messages
from hermes_state.records.sessions import create_session, end_session
from hermes_state.search import search, walk
from hermes_state.search.query import parse_query, tame_prefixes
from hermes_state.store.connection import Store, open_store
from hermes_state.store.home import default_db_path
from hermes_state.vault import vault, vault_bm25, vault_list, vault_search

NOW = time.time()
OLD = NOW - 400 * 86400
WORDS = ("docker build deploy gateway error timeout cache token python rust").split()  # noqa: SIM905
QUERIES = [
    "docker",  # one word
    "docker build",  # several words
    "docker OR gateway",  # OR
    "error timeout OR cache",  # OR of AND-groups
    '"docker build"',  # a phrase
    "buil*",  # a prefix
    "東京",  # CJK (the bigram index ranks too)
]


def _fill(store: Store, seed: int = 7) -> None:
    """Write the same sessions, in the same order, to a store: old ended ones and recent ones."""
    rnd = random.Random(seed)
    for n in range(24):
        at = OLD + n * 3600 if n % 2 else NOW - 86400 - n * 60
        sid = f"s{n:02d}"
        create_session(store, sid, "cron" if n % 5 == 0 else "cli", started_at=at)
        msgs = []
        for i in range(rnd.randint(2, 9)):
            words = [rnd.choice(WORDS) for _ in range(rnd.randint(1, 30))]
            if rnd.random() < 0.2:
                words.append("東京タワー")
            msgs.append(
                {
                    "role": rnd.choice(["user", "assistant"]),
                    "content": " ".join(words),
                    "timestamp": at + i,
                }
            )
        append_messages(store, sid, msgs)
        store.write(
            lambda c, sid=sid, at=at: c.execute(
                "UPDATE sessions SET last_activity_at = ? WHERE id = ?", (at + 60, sid)
            )
        )
        end_session(store, sid, "user_exit")


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """(split live store, one store holding everything): the same sessions, the old half of
    the first moved into the vault by the real `hermes vault move`."""
    live = open_store(default_db_path())
    _fill(live)
    live.close()
    moved = child("vault", "move", "--older-than", "30d", "--yes")
    assert moved.returncode == 0, moved.stderr
    combined = open_store(tmp_path / "all" / "state.db")
    _fill(combined)
    live = open_store(default_db_path())
    yield live, combined
    live.close()
    combined.close()


def home() -> Path:
    return default_db_path().parent


def _single_ranks(store: Store, query: str) -> dict[int, float]:
    """Return FTS5's own rank of every match in one store (its walk, as search ranks)."""
    parsed = tame_prefixes(parse_query(query))
    with contextlib.ExitStack() as stack:
        part = vault_search._open_part(
            stack, None, store, store, parsed, _no_filters(), False, None
        )
        vault_search._find_all([part], parsed, "rank", 20, True)
        return dict(part.found.walk.ranks)


def _spanning_scores(live: Store, query: str) -> dict[int, float]:
    """Return the recomputed rank of every match across the live store and the vault."""
    parsed = tame_prefixes(parse_query(query))
    with contextlib.ExitStack() as stack:
        parts = [
            vault_search._open_part(stack, None, live, live, parsed, _no_filters(), False, None)
        ]
        for year, path in vault.vault_paths(home()):
            s = stack.enter_context(contextlib.closing(vault.open_vault(path, read_only=True)))
            parts.append(
                vault_search._open_part(stack, year, s, live, parsed, _no_filters(), False, None)
            )
        vault_search._find_all(parts, parsed, "rank", 20, True)
        pool = [(n, i) for n, p in enumerate(parts) for i in p.found.walk.ids]
        return {i: r for (_, i), r in vault_search._score(parts, pool).items()}


def _no_filters() -> dict[str, object]:
    return {
        "source_filter": None,
        "exclude_sources": None,
        "role_filter": None,
        "include_inactive": False,
        "after": None,
        "before": None,
    }


def _ids(result: list[dict[str, object]]) -> list[object]:
    return [h["id"] for h in result]


def test_the_split_really_spans_both_stores(stores: tuple[Store, Store]) -> None:
    live, _ = stores
    assert len(vault.vault_paths(home())) == 1
    hits = vault_search.search_spanning(live, home(), "docker", limit=1000)
    assert {h["vault"] for h in hits} == {None, vault.year_of(OLD)}


@pytest.mark.parametrize("query", QUERIES)
def test_ranked_search_spanning_equals_one_store(stores: tuple[Store, Store], query: str) -> None:
    live, combined = stores
    one = search.search_messages(combined, query, limit=1000, archived=False)
    both = vault_search.search_spanning(live, home(), query, limit=1000, archived=False)
    assert one.ordering == both.ordering == "rank"
    assert _ids(both) == _ids(one) and len(one) > 3
    assert (both.matches, both.sessions, both.complete) == (one.matches, one.sessions, True)


@pytest.mark.parametrize("query", QUERIES)
def test_recomputed_bm25_equals_one_stores_fts5_rank(
    stores: tuple[Store, Store], query: str
) -> None:
    live, combined = stores
    want = _single_ranks(combined, query)
    got = _spanning_scores(live, query)
    assert got.keys() == want.keys() and want
    for i, rank in want.items():
        assert got[i] == pytest.approx(rank, rel=1e-9, abs=0), i


@pytest.mark.parametrize("sort", ["newest", "oldest"])
def test_newest_and_oldest_merge_as_one_store(stores: tuple[Store, Store], sort: str) -> None:
    live, combined = stores
    for query in ("docker", "ocker", "東京"):
        one = search.search_messages(combined, query, limit=1000, sort=sort)
        both = vault_search.search_spanning(live, home(), query, limit=1000, sort=sort)
        assert _ids(both) == _ids(one), query
        assert (both.route, both.ordering) == (one.route, one.ordering)


def test_ranked_candidates_are_the_globally_newest(
    stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    live, combined = stores
    # A small candidate cap stands in for a store with more than RANK_CANDIDATES matches.
    monkeypatch.setattr(walk, "RANK_CANDIDATES", 15)
    one = search.search_messages(combined, "docker", limit=10)
    both = vault_search.search_spanning(live, home(), "docker", limit=10)
    assert one.ordering == both.ordering == "rank_recent"
    assert _ids(both) == _ids(one) and both.ranked == one.ranked == 15


def test_search_marks_vault_hits_in_every_format(stores: tuple[Store, Store]) -> None:
    year = vault.year_of(OLD)
    doc = json.loads(child("sessions", "search", "docker", "-n", "0", "--json").stdout)
    assert {h["vault"] for h in doc["hits"]} == {None, year}
    tsv = child(
        "sessions", "search", "docker", "-n", "0", "--format", "tsv", "--fields", "session_id,vault"
    )
    assert tsv.returncode == 0 and f"\t{year}" in tsv.stdout
    people = child("sessions", "search", "docker", "-n", "0", "--no-pager")
    vaulted = [line for line in people.stdout.splitlines() if f"[vault {year}]" in line]
    assert vaulted and all(" · " in line for line in vaulted)  # in the header line


def test_search_live_leaves_the_vault_out(stores: tuple[Store, Store]) -> None:
    live, _ = stores
    doc = json.loads(child("sessions", "search", "docker", "-n", "0", "--live", "--json").stdout)
    assert doc["hits"] and {h["vault"] for h in doc["hits"]} == {None}
    alone = search.search_messages(live, "docker", limit=1000, archived=False)
    assert [h["id"] for h in doc["hits"]] == _ids(alone)


def test_a_session_in_both_places_is_found_once_live(stores: tuple[Store, Store]) -> None:
    live, combined = stores
    back = child("vault", "return", "s01")
    assert back.returncode == 0, back.stderr
    # A move killed after verifying leaves s01 in the live store and the vault.
    crashed = child(
        "vault", "move", "--older-than", "30d", "--yes", env={vault.CRASH_ENV: "verified"}
    )
    assert crashed.returncode != 0
    assert vault_list.live_ids(live, ["s01"]) == {"s01"}
    doc = run_json("sessions", "search", "docker", "-n", "0")
    mine = [h for h in doc["hits"] if h["session_id"] == "s01"]
    assert mine and {h["vault"] for h in mine} == {None}
    one = search.search_messages(combined, "docker", limit=1000, archived=False)
    assert doc["matches"] == one.matches and doc["sessions"] == one.sessions


def test_source_filter_applies_in_each_store(stores: tuple[Store, Store]) -> None:
    _, combined = stores
    doc = run_json("sessions", "search", "docker", "--source", "cron", "-n", "0")
    one = search.search_messages(
        combined, "docker", limit=1000, source_filter=["cron"], archived=False
    )
    assert [h["id"] for h in doc["hits"]] == _ids(one) and one
    assert {h["source"] for h in doc["hits"]} == {"cron"}


def test_since_after_a_vault_year_skips_that_store(stores: tuple[Store, Store]) -> None:
    doc = run_json("sessions", "search", "docker", "--since", "30d", "-n", "0")
    assert doc["hits"] and {h["vault"] for h in doc["hits"]} == {None}


def test_searching_writes_no_store(stores: tuple[Store, Store]) -> None:
    path = vault.vault_paths(home())[0][1]
    before = (path.stat().st_mtime_ns, path.stat().st_size)
    for sort in ("rank", "newest", "oldest"):
        assert run("sessions", "search", "docker build", "--sort", sort, "--json").exit_code == 0
    assert (path.stat().st_mtime_ns, path.stat().st_size) == before
    assert not path.with_name(path.name + "-journal").exists()


def test_bad_query_is_one_line_error_not_traceback(stores: tuple[Store, Store]) -> None:
    bad = child("sessions", "search", "(docker")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


def test_search_help_states_the_vault_rules() -> None:
    text = " ".join(run("sessions", "search", "--help").stdout.split())
    assert "search --live leaves them out" in text and "--live" in text


def test_varints_decode_sqlite_format() -> None:
    assert vault_bm25.varints(bytes([0x05, 0x81, 0x00, 0x7F])) == [5, 128, 127]


def test_only_a_walked_substring_route_reads_the_left_out_sessions(
    stores: tuple[Store, Store],
) -> None:
    live, combined = stores
    reads: list[str] = []
    live.conn.set_trace_callback(lambda sql: reads.append(sql) if "_delegate_from" in sql else None)
    word = vault_search.search_spanning(live, home(), "docker", limit=50)
    assert word.route == "word" and not reads  # listed, never walked: never read
    found = vault_search.search_spanning(live, home(), "ocke", limit=200, sort="newest")
    live.conn.set_trace_callback(None)
    assert found.route == "trigram" and len(reads) == 1
    one = search.search_messages(combined, "ocke", limit=200, sort="newest")
    assert _ids(found) == _ids(one) and found
    cron = {f"s{n:02d}" for n in range(0, 24, 5)}  # their rows are left out of the index
    assert cron & {h["session_id"] for h in found}
