"""search_messages on real stores: routing, filters, snippets, context, rebuilds, foreign rows."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from support.children import child_env

from hermes_state.records import messages, sessions
from hermes_state.search import search, walk
from hermes_state.search.hits import _hits
from hermes_state.search.routes import _filters, _Route
from hermes_state.search.search import HIT_KEYS, search_messages
from hermes_state.search.walk import _Found, _Walk
from hermes_state.store import cjk, fts
from hermes_state.store.connection import Store, open_store


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    """A writable store with a cli and a telegram session."""
    with open_store(db_path) as handle:
        sessions.create_session(handle, "cli-1", "cli", model="model-a")
        sessions.create_session(handle, "tg-1", "telegram", model="model-b")
        yield handle


def add(store: Store, content: str | None, *, sid: str = "cli-1", role: str = "user", **kw) -> int:
    """Append one message; return its id."""
    return messages.append_message(store, sid, role, content, **kw)


def ids(result: list[dict]) -> list[int]:
    """Return the message ids of the hits, in order."""
    return [hit["id"] for hit in result]


# --- word queries --------------------------------------------------------------------------


def test_hit_has_documented_keys(store: Store) -> None:
    add(store, "docker compose up")
    (hit,) = search_messages(store, "docker")
    assert tuple(hit) == HIT_KEYS
    assert (hit["source"], hit["model"], hit["role"]) == ("cli", "model-a", "user")


def test_hyphenated_query_matches_the_hyphenated_word(store: Store) -> None:
    mid = add(store, "run chat-send to deliver")
    add(store, "chat about sending")
    assert ids(search_messages(store, "chat-send")) == [mid]


def test_dotted_query_matches_the_dotted_name(store: Store) -> None:
    mid = add(store, "edit my-app.config.ts now")
    add(store, "the app config")
    assert ids(search_messages(store, "my-app.config.ts")) == [mid]


def test_quoted_phrase_requires_adjacent_words(store: Store) -> None:
    mid = add(store, "the build failed badly")
    add(store, "failed the build")
    assert ids(search_messages(store, '"build failed"')) == [mid]


def test_or_and_not_operators(store: Store) -> None:
    a = add(store, "redis cache")
    b = add(store, "postgres cache")
    add(store, "mysql cache")
    assert sorted(ids(search_messages(store, "redis OR postgres"))) == [a, b]
    assert sorted(ids(search_messages(store, "cache NOT mysql"))) == [a, b]


def test_prefix_query(store: Store) -> None:
    mid = add(store, "kubernetes deployment")
    assert ids(search_messages(store, "kuber*")) == [mid]


def test_snippet_marks_matches(store: Store) -> None:
    add(store, "before words the docker daemon crashed after words")
    (hit,) = search_messages(store, "docker")
    assert ">>>docker<<<" in hit["snippet"]


def test_context_is_previous_message_the_hit_and_next_cut_to_200_chars(store: Store) -> None:
    before = add(store, "q" * 500)
    mid = add(store, "the answer is docker", role="assistant")
    after = add(store, "thanks")
    add(store, "unrelated other session", sid="tg-1")
    (hit,) = search_messages(store, "answer")
    assert hit["id"] == mid
    assert [(c["id"], c["role"], len(c["content"])) for c in hit["context"]] == [
        (before, "user", 200),
        (mid, "assistant", 20),
        (after, "user", 6),
    ]


@pytest.mark.parametrize("query", ["answer", "nswe"], ids=["word", "substring"])
def test_context_skips_rewound_and_hidden_neighbours(store: Store, query: str) -> None:
    shown_before = add(store, "visible before")
    rewound = add(store, "rewound before")
    mid = add(store, "the answer is here", role="assistant")
    add(store, "hidden after", display_kind="hidden")
    shown_after = add(store, "visible after")
    store.conn.execute("UPDATE messages SET active = 0, compacted = 0 WHERE id = ?", (rewound,))
    result = search_messages(store, query)
    assert result.route == ("word" if query == "answer" else "trigram")
    (hit,) = result
    assert hit["id"] == mid and ">>>" in hit["snippet"]
    assert [c["id"] for c in hit["context"]] == [shown_before, mid, shown_after]
    # Rewound context is shown again when inactive rows are asked for; hidden never.
    (hit,) = search_messages(store, query, include_inactive=True)
    assert [c["id"] for c in hit["context"]] == [rewound, mid, shown_after]


def test_context_of_structured_content_is_its_text(store: Store) -> None:
    # Structured content is stored behind a NUL marker: SQLite's substr() sees it as empty.
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 3000}}
    before = add(store, [{"type": "text", "text": "look at this picture"}, image])
    mid = add(store, "the quetzal in the picture", role="assistant")
    (hit,) = search_messages(store, "quetzal")
    assert hit["context"] == [
        {"id": before, "role": "user", "content": "look at this picture [image_url]"},
        {"id": mid, "role": "assistant", "content": "the quetzal in the picture"},
    ]


def test_substring_takes_wildcard_characters_and_quotes_literally(store: Store) -> None:
    kept = add(store, 'set my_var to "hi there" now')
    add(store, "set myXvar to hi  there now")
    for query in ("y_va", '"i there"'):
        result = search_messages(store, query)
        assert (result.route, ids(result)) == ("trigram", [kept]), query


def test_substring_folds_case_beyond_ascii(store: Store) -> None:
    kept = add(store, "an ÉCOLE nearby")
    result = search_messages(store, "écol")
    assert (result.route, ids(result)) == ("trigram", [kept])


def test_scan_finds_words_inside_structured_content(store: Store) -> None:
    # LIKE stops at the NUL that marks structured content; the scan reads past it.
    image = {"type": "image_url", "image_url": {"url": "data:,x"}}
    kept = add(store, [{"type": "text", "text": "an ox in the field"}, image])
    add(store, "nothing here")
    result = search_messages(store, "ie")  # in "field": no word, too short for trigrams
    assert (result.route, ids(result)) == ("scan", [kept])
    assert ">>>ie<<<" in result[0]["snippet"]
    assert ids(search_messages(store, "ie NOT ox")) == []


def test_hit_the_word_index_lost_still_gets_a_snippet(store: Store) -> None:
    kept = add(store, "alpha lost word")
    gone = add(store, "beta lost word")
    # Drop one row's entry from the index behind the triggers' back: a walk over a copy of the
    # index taken earlier can still offer the id, and its snippet must come from the text.
    row = store.conn.execute("SELECT content FROM messages WHERE id = ?", (gone,)).fetchone()
    store.conn.execute(
        "INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', ?, ?)",
        (gone, row[0]),
    )
    found = search.search_messages(store, "lost")
    assert ids(found) == [kept]
    page = _hits(
        store,
        _Found(
            [gone, kept],
            "newest",
            _Route("word", [], "messages_fts", "lost"),
            _Walk([gone, kept], {gone: 0, kept: 0}, exhausted=True),
            {gone, kept},
        ),
        search.tame_prefixes(search.parse_query("lost")),
        _filters(store, None, None, None, False),
        [gone, kept],
    )
    assert [h["id"] for h in page] == [gone, kept]
    assert [">>>lost<<<" in h["snippet"] for h in page] == [True, True]


def test_empty_or_unsearchable_query_returns_nothing(store: Store) -> None:
    add(store, "anything")
    assert search_messages(store, "") == []
    assert search_messages(store, '   "  AND ') == []


# --- substring and CJK ---------------------------------------------------------------------


def test_substring_found_through_trigram_index(store: Store) -> None:
    mid = add(store, "restart the docker daemon")
    result = search_messages(store, "ocker")
    assert ids(result) == [mid]
    assert result.route == "trigram"
    assert ">>>ocker<<<" in result[0]["snippet"]


@pytest.mark.parametrize("word", ["東京", "会議", "数据"])
def test_two_character_cjk_word_found_in_mixed_text(store: Store, word: str) -> None:
    mid = add(store, "明日は東京で会議があります and 数据库 migration")
    add(store, "京都 and 議論 and 数学")
    result = search_messages(store, word)
    assert ids(result) == [mid]
    assert result.route == "cjk"
    assert f">>>{word}<<<" in result[0]["snippet"]


def test_single_cjk_character_found_anywhere_in_a_run(store: Store) -> None:
    a = add(store, "東京")
    b = add(store, "南京")
    add(store, "大阪")
    assert sorted(ids(search_messages(store, "京"))) == [a, b]


def test_three_character_cjk_word_needs_all_characters_in_order(store: Store) -> None:
    mid = add(store, "東京都に住む")
    add(store, "東京と京都")
    assert ids(search_messages(store, "東京都")) == [mid]


def test_cjk_word_combined_with_latin_word(store: Store) -> None:
    mid = add(store, "東京 docker")
    add(store, "東京 podman")
    assert ids(search_messages(store, "東京 docker")) == [mid]


def test_korean_word_found(store: Store) -> None:
    mid = add(store, "내일 회의 있어요")
    assert ids(search_messages(store, "회의")) == [mid]


# --- filters and row states ----------------------------------------------------------------


def test_source_and_exclude_filters(store: Store) -> None:
    cli = add(store, "shared word")
    tg = add(store, "shared word", sid="tg-1")
    assert ids(search_messages(store, "shared", source_filter=["telegram"])) == [tg]
    assert ids(search_messages(store, "shared", exclude_sources=["telegram"])) == [cli]


def test_role_filter(store: Store) -> None:
    add(store, "shared word")
    reply = add(store, "shared word", role="assistant")
    assert ids(search_messages(store, "shared", role_filter=["assistant"])) == [reply]


def test_time_window_filter(store: Store) -> None:
    early = add(store, "windowed word", timestamp=100.0)
    middle = add(store, "windowed word", timestamp=200.0)
    late = add(store, "windowed word", timestamp=300.0)
    assert ids(search_messages(store, "windowed", after=200.0, sort="oldest")) == [middle, late]
    assert ids(search_messages(store, "windowed", before=200.0)) == [early]
    assert ids(search_messages(store, "windowed", after=150.0, before=250.0)) == [middle]
    # Every route applies it: a substring query goes through the trigram index.
    assert ids(search_messages(store, "ndowe", after=250.0)) == [late]


def test_rewound_rows_hidden_by_default_and_shown_with_include_inactive(store: Store) -> None:
    live = add(store, "rewind target")
    gone = add(store, "rewind target")
    archived = add(store, "rewind target")
    store.conn.execute("UPDATE messages SET active = 0, compacted = 0 WHERE id = ?", (gone,))
    store.conn.execute("UPDATE messages SET active = 0, compacted = 1 WHERE id = ?", (archived,))
    assert sorted(ids(search_messages(store, "rewind"))) == [live, archived]
    assert sorted(ids(search_messages(store, "rewind", include_inactive=True))) == [
        live,
        gone,
        archived,
    ]


def test_hidden_display_kind_never_found(store: Store) -> None:
    add(store, "secret steer note", display_kind="hidden")
    shown = add(store, "visible steer note")
    assert ids(search_messages(store, "steer")) == [shown]


def test_newest_and_oldest_sorts(store: Store) -> None:
    found = [add(store, f"sorted word {i}") for i in range(4)]
    newest = search_messages(store, "sorted", sort="newest")
    assert (ids(newest), newest.ordering) == (found[::-1], "newest")
    assert ids(search_messages(store, "sorted", sort="oldest")) == found


def test_offset_pages_through_hits_without_repeats(store: Store) -> None:
    found = [add(store, f"page word {i}") for i in range(7)]
    pages = [
        ids(search_messages(store, "page", limit=3, offset=o, sort="newest")) for o in (0, 3, 6)
    ]
    assert [i for page in pages for i in page] == found[::-1]


# --- bounded ordering ----------------------------------------------------------------------


def test_selective_query_is_ranked_by_relevance(store: Store) -> None:
    weak = add(store, "zebra " + "filler " * 60)
    strong = add(store, "zebra zebra zebra")
    result = search_messages(store, "zebra")
    assert result.ordering == "rank"
    assert ids(result) == [strong, weak]


def test_large_match_set_ranks_only_the_newest_candidates(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(walk, "RANK_CANDIDATES", 5)
    best_but_old = add(store, "common common common common")
    recent = [add(store, f"common filler {i} " + "pad " * 30) for i in range(10)]
    result = search_messages(store, "common", limit=3)
    assert result.ordering == "rank_recent"
    assert best_but_old not in ids(result)
    assert set(ids(result)) <= set(recent[-5:])


def test_filters_that_reject_recent_candidates_still_find_older_matches(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(walk, "RANK_CANDIDATES", 3)
    old = add(store, "common word", sid="tg-1")
    for i in range(8):
        add(store, f"common word {i}")
    result = search_messages(store, "common", source_filter=["telegram"])
    assert ids(result) == [old]


def test_common_multi_word_and_prefix_queries_are_ranked_among_the_newest_matches(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(walk, "RANK_CANDIDATES", 3)
    best_but_old = add(store, "frequent word frequent word frequent word")
    recent = [add(store, f"frequent word {i} " + "pad " * 20) for i in range(5)]
    for query in ("frequent word", "frequ*"):
        result = search_messages(store, query, limit=2)
        assert (result.ordering, result.ranked, result.partial) == ("rank_recent", 3, False)
        assert ids(result) and set(ids(result)) <= set(recent[-3:])
        everything = search_messages(store, query, complete=True)
        assert (everything.ordering, ids(everything)[0]) == ("rank", best_but_old)


def test_prefix_query_is_ranked_and_marks_whole_words(store: Store) -> None:
    old = add(store, "kubernetes cluster kubernetes")
    new = add(store, "kubectl apply " + "pad " * 30)
    result = search_messages(store, "kube*")
    assert (ids(result), result.ordering) == ([old, new], "rank")
    assert ">>>kubectl<<<" in result[1]["snippet"]
    assert ids(search_messages(store, "kube*", sort="newest")) == [new, old]


def test_prefix_shorter_than_three_characters_is_searched_as_a_word(store: Store) -> None:
    plan = add(store, "plan ab works")
    add(store, "abacus bread")
    assert ids(search_messages(store, "ab*")) == [plan]


# --- rebuilds, stale and foreign rows --------------------------------------------------------


def test_search_during_rebuild_finds_indexed_and_pending_rows_once(store: Store) -> None:
    first = messages.append_messages(
        store, "cli-1", [{"role": "user", "content": f"window needle {i}"} for i in range(10)]
    )
    store.write(fts.start_chunked_rebuild)
    store.write(lambda conn: fts.rebuild_step(conn, chunk=4))  # 1-4 indexed again, 5-10 pending
    later = add(store, "window needle late")  # above the high water: indexed by trigger
    result = search_messages(store, "needle", limit=50)
    assert sorted(ids(result)) == sorted([*first, later])
    assert len(ids(result)) == len(set(ids(result)))
    assert all(">>>needle<<<" in hit["snippet"] for hit in result)


def _detach(store: Store) -> None:
    """Do what the agent does to an index it found damaged: flag it, drop its triggers."""

    def fn(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO state_meta(key, value) VALUES ('fts_stale', '1')")
        for name in fts.EXTERNAL_TRIGGERS:
            conn.execute(f"DROP TRIGGER {name}")

    store.write(fn)


def test_stale_store_is_served_by_a_bounded_scan(store: Store) -> None:
    mid = add(store, "stale but findable")
    _detach(store)
    result = search_messages(store, "findable")
    assert (ids(result), result.route) == ([mid], "scan")


def test_scan_cut_by_the_budget_says_how_far_it_got(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = add(store, "capped word")
    for _ in range(300):
        add(store, "something else")
    _detach(store)
    monkeypatch.setattr(walk, "PROGRESS_STEPS", 1)
    monkeypatch.setattr(walk, "SEARCH_BUDGET_STEPS", 500)
    monkeypatch.setattr(walk, "FIRST_WINDOW_IDS", 16)
    result = search_messages(store, "capped")
    assert (ids(result), result.route, result.partial) == ([], "scan", True)
    assert result.candidates == 301 and 0 < (result.examined or 0) < 301
    assert result.searched_back_to is not None
    again = search_messages(store, "capped")
    assert (again.examined, again.searched_back_to) == (result.examined, result.searched_back_to)
    assert ids(search_messages(store, "capped", complete=True)) == [old]


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="no sqlite3 shell")
def test_foreign_cjk_row_found_before_and_after_catch_up_exactly_once(
    db_path: Path, store: Store
) -> None:
    sql = (
        "INSERT INTO messages (session_id, role, content, timestamp) "
        "VALUES ('cli-1', 'user', '東京の会議 from the shell', 1.0);"
    )
    done = subprocess.run(["sqlite3", str(db_path), sql], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    foreign = store.conn.execute("SELECT MAX(id) FROM messages").fetchone()[0]
    assert ids(search_messages(store, "会議")) == [foreign]  # via the bounded catch-up scan
    cjk.catch_up(store.conn)
    assert ids(search_messages(store, "会議")) == [foreign]  # now via the index


def test_read_only_store_is_searchable(db_path: Path, store: Store) -> None:
    mid = add(store, "read only docker 東京")
    with open_store(db_path, read_only=True) as ro:
        assert ids(search_messages(ro, "docker")) == [mid]
        assert ids(search_messages(ro, "東京")) == [mid]
        assert ids(search_messages(ro, "ocker")) == [mid]


def test_short_unindexable_query_falls_back_to_scan(store: Store) -> None:
    mid = add(store, "plugh xyzzy")
    result = search_messages(store, "yz")
    assert (ids(result), result.route) == ([mid], "scan")


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(max_size=30))
def test_fuzzed_queries_never_raise(store: Store, text: str) -> None:
    if not store.conn.execute("SELECT 1 FROM messages LIMIT 1").fetchone():
        add(store, "seed text 東京 docker chat-send")
    search_messages(store, text)


def test_cjk_punctuation_alone_does_not_route_to_the_cjk_index(store: Store) -> None:
    mid = add(store, "run docker now")
    result = search_messages(store, "「docker」")
    assert (ids(result), result.route) == ([mid], "word")


def test_read_only_search_of_an_upstream_layout(db_path: Path) -> None:
    from support.upstream30 import build_upstream30
    from test_fts import add_upstream_fts

    build_upstream30(db_path)
    add_upstream_fts(db_path, extra_rows=3)
    with open_store(db_path, read_only=True) as ro:
        words = search_messages(ro, "upstream")
        cjk = search_messages(ro, "東京")
        assert (len(words), words.route) == (3, "word")
        assert len(cjk) == 3


def test_filter_values_with_lone_surrogates_do_not_raise(store: Store) -> None:
    mid = add(store, "deploy now")
    # A lone surrogate reads as U+FFFD, as writers store it: "cli\ud800" is another source.
    assert search_messages(store, "deploy", source_filter=["cli\ud800"]) == []
    assert ids(search_messages(store, "deploy", exclude_sources="\udfffcli")) == [mid]


def test_wildcard_term_next_to_another_term_finds_substrings_without_crashing(
    db_path: Path, store: Store
) -> None:
    mid = add(store, "redeploy xab_cx now")
    add(store, "redeploy xabqcx now")  # '_' must not act as a LIKE wildcard
    store.close()
    # In a child: SQLite 3.40's trigram LIKE crashes on '%ab_c%' next to another LIKE.
    code = (
        "import sys; from pathlib import Path;"
        " from hermes_state.store.connection import open_store;"
        " from hermes_state.search.search import search_messages;"
        " s = open_store(Path(sys.argv[1]), read_only=True);"
        " r = search_messages(s, 'ab_c deploy'); print(r.route, [h['id'] for h in r])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(db_path)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split(maxsplit=1) == ["trigram", f"[{mid}]\n"]


def test_index_walk_cut_by_the_budget_is_partial_and_complete_finds_everything(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    wanted = add(store, "budget word", sid="tg-1")
    for i in range(400):
        add(store, f"budget word {i}")
    monkeypatch.setattr(walk, "PROGRESS_STEPS", 1)
    monkeypatch.setattr(walk, "SEARCH_BUDGET_STEPS", 2000)
    monkeypatch.setattr(walk, "FIRST_WINDOW_IDS", 16)
    result = search_messages(store, "budget", source_filter="telegram", sort="newest")
    assert (ids(result), result.route, result.partial) == ([], "word", True)
    assert result.candidates == 401 and 0 < (result.examined or 0) < 401
    full = search_messages(store, "budget", source_filter="telegram", complete=True)
    assert (ids(full), full.partial) == ([wanted], False)
    # The progress handler is gone again: plain statements on the connection run unhindered.
    assert store.conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 401


def test_cjk_text_with_a_lone_surrogate_is_indexed_as_stored(store: Store) -> None:
    mid = add(store, "会議は東\ud800京で")  # stored as 会議は東\ufffd京で
    assert ids(search_messages(store, "会議")) == [mid]
    assert search_messages(store, "東京") == []  # the replacement character stays between them
    assert fts.integrity_check(store.conn) == []


# --- time and session-flag filters ---------------------------------------------------------


def test_after_keeps_messages_written_at_or_after_the_moment(store: Store) -> None:
    add(store, "dated word", timestamp=100.0)
    recent = add(store, "dated word", timestamp=200.0)
    assert ids(search_messages(store, "dated", after=200.0)) == [recent]


def test_archived_filter_keeps_or_drops_messages_of_archived_sessions(store: Store) -> None:
    kept = add(store, "flagged word")
    hidden = add(store, "flagged word", sid="tg-1")
    sessions.set_session_archived(store, "tg-1", True)
    assert ids(search_messages(store, "flagged", archived=False)) == [kept]
    assert ids(search_messages(store, "flagged", archived=True)) == [hidden]
    assert sorted(ids(search_messages(store, "flagged"))) == [kept, hidden]


def test_pinned_filter_keeps_messages_of_pinned_sessions_only(store: Store) -> None:
    add(store, "flagged word")
    pinned = add(store, "flagged word", sid="tg-1")
    sessions.set_session_pinned(store, "tg-1", True)
    assert ids(search_messages(store, "flagged", pinned=True)) == [pinned]


# --- counting --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "route"),
    [("needle", "word"), ("eedl", "trigram"), ("会議", "cjk"), ("ne", "scan")],
)
def test_count_matches_counts_what_the_search_pages_through(
    store: Store, query: str, route: str
) -> None:
    for i in range(7):
        add(store, f"needle 会議 {i}", sid="cli-1" if i % 2 else "tg-1")
    add(store, "unrelated words")
    expected = search_messages(store, query, limit=100, source_filter=["telegram"])
    count = search.count_matches(store, query, source_filter=["telegram"])
    assert (count.count, count.complete, count.route) == (len(expected), True, route)
    assert len(expected) == 4


def test_count_matches_of_an_or_query_counts_each_message_once(store: Store) -> None:
    add(store, "alpha beta")
    add(store, "alpha")
    add(store, "beta")
    assert search.count_matches(store, "lph OR eta").count == 3  # trigram: two groups


def test_count_matches_honours_time_and_flag_filters(store: Store) -> None:
    add(store, "flagged word", timestamp=100.0)
    add(store, "flagged word", timestamp=300.0)
    add(store, "flagged word", sid="tg-1", timestamp=300.0)
    sessions.set_session_archived(store, "tg-1", True)
    count = search.count_matches(store, "flagged", after=200.0, archived=False)
    assert count.count == 1


def test_count_matches_stops_at_the_cap_and_says_there_are_more(store: Store) -> None:
    for i in range(5):
        add(store, f"capped word {i}")
    assert search.count_matches(store, "capped", cap=3) == search.MatchCount(3, False, "word")


def test_count_matches_over_budget_gives_no_count_and_leaves_the_connection_usable(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    add(store, "budget word")
    monkeypatch.setattr(walk, "PROGRESS_STEPS", 1)
    count = search.count_matches(store, "budget", budget_s=-1.0)
    assert (count.count, count.complete) == (None, False)
    assert store.conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 1


def test_count_matches_stops_when_asked(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    add(store, "stopped word")
    monkeypatch.setattr(walk, "PROGRESS_STEPS", 1)
    assert search.count_matches(store, "stopped", should_stop=lambda: True).count is None


def test_count_matches_of_an_unsearchable_query_is_zero(store: Store) -> None:
    assert search.count_matches(store, "   ") == search.MatchCount(0, True, "none")


def test_hits_without_context_skip_the_neighbours(store: Store) -> None:
    add(store, "before")
    add(store, "needle here")
    (hit,) = search_messages(store, "needle", context=False)
    assert hit["context"] == [] and ">>>needle<<<" in hit["snippet"]


def test_offset_pages_through_equally_ranked_hits_without_repeats(store: Store) -> None:
    found = {add(store, "kettle") for _ in range(7)}  # every hit scores the same
    pages = [ids(search_messages(store, "kettle", limit=2, offset=o)) for o in (0, 2, 4, 6)]
    seen = [i for page in pages for i in page]
    assert sorted(seen) == sorted(found)
