"""Search operators: exclusions (-word, NOT word) on every route, and what is refused.

Exclusions are checked on real stores through each route that can answer (word index,
trigram, CJK index, a chunked rebuild's scan window, a stale store's scan) and must leave out
the same messages; the word test behind them is compared with FTS5's own unicode61 reading.
The CLI is run in-process and as the real `python -m hermes_cli` process.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clitools import child, load_sample, run, run_json
from hypothesis import HealthCheck, given, settings, strategies as st

from hermes_state.records import messages, sessions
from hermes_state.search import query, search
from hermes_state.search.search import search_messages
from hermes_state.store import fts
from hermes_state.store.connection import Store, open_store

FIX_DOCKER = "20261118_091502_a1c9e2"  # the sample session about a failing Docker build


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    """A writable store with one cli session."""
    with open_store(db_path) as handle:
        sessions.create_session(handle, "cli-1", "cli")
        yield handle


def add(store: Store, content: object, *, role: str = "user", **kw: Any) -> int:
    """Append one message to cli-1; return its id."""
    return messages.append_message(store, "cli-1", role, content, **kw)


def ids(result: list[dict[str, Any]]) -> list[int]:
    """Return the hit ids, sorted."""
    return sorted(hit["id"] for hit in result)


# Every message holds "docker" and "東京", so each route finds them all; "build" decides.
BUILD_ROWS = [
    ("docker 東京 build fails", True),
    ("docker 東京 compose up", False),
    ("docker 東京 rebuild the image", False),  # "rebuild" is not the word build
    ("docker 東京 BUILD cache", True),  # case folded
    ("docker 東京 büild", True),  # accents folded, as the word index does
    ("docker 東京 build_log", True),  # "_" separates words
    ("docker 東京 builds", False),
    ("docker 東京 chat-build", True),
]


def _build_rows(store: Store) -> tuple[list[int], list[int]]:
    """Add BUILD_ROWS plus a tool call named build; return (kept ids, excluded ids)."""
    kept: list[int] = []
    excluded: list[int] = []
    for text, has_build in BUILD_ROWS:
        (excluded if has_build else kept).append(add(store, text))
    calls = [{"id": "c1", "type": "function", "function": {"name": "build", "arguments": "{}"}}]
    excluded.append(add(store, "docker 東京 calling", role="assistant", tool_calls=calls))
    return kept, excluded


def _detach(store: Store) -> None:
    """Do what the agent does to an index it found damaged: flag it, drop its triggers."""

    def fn(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO state_meta(key, value) VALUES ('fts_stale', '1')")
        for name in fts.EXTERNAL_TRIGGERS:
            conn.execute(f"DROP TRIGGER {name}")

    store.write(fn)


def _mid_rebuild(store: Store) -> None:
    """Start a chunked rebuild and index only the first rows again: the rest are scanned."""
    store.write(fts.start_chunked_rebuild)
    store.write(lambda conn: fts.rebuild_step(conn, chunk=4))


# --- exclusions on every route -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "route", "prepare"),
    [
        ("docker -build", "word", None),
        ("ocker -build", "trigram", None),  # no word "ocker": found as a substring
        ("東京 -build", "cjk", None),
        ("docker -build", "word", _mid_rebuild),  # rows 5+ come from the rebuild's scan
        ("docker -build", "scan", _detach),
    ],
    ids=["word", "trigram", "cjk", "rebuild-window", "stale-scan"],
)
def test_minus_word_leaves_out_the_same_messages_on_every_route(
    store: Store, text: str, route: str, prepare: object
) -> None:
    kept, excluded = _build_rows(store)
    if callable(prepare):
        prepare(store)
    result = search_messages(store, text, limit=50)
    assert result.route == route
    assert ids(result) == kept
    assert not set(ids(result)) & set(excluded)


def test_not_word_and_minus_word_are_the_same_exclusion(store: Store) -> None:
    kept, _ = _build_rows(store)
    assert ids(search_messages(store, "docker NOT build")) == kept
    assert ids(search_messages(store, "docker AND NOT build")) == kept
    assert ids(search_messages(store, "NOT build docker")) == kept


def test_minus_phrase_leaves_out_only_the_words_in_that_order(store: Store) -> None:
    out = add(store, "the build fails again")
    kept = [add(store, "the build never fails"), add(store, "fails the build")]
    assert ids(search_messages(store, 'the -"build fails"')) == kept
    assert out not in ids(search_messages(store, 'fails -"build fails"'))


def test_minus_prefix_leaves_out_every_word_that_starts_so(store: Store) -> None:
    kept, _ = _build_rows(store)
    builds = kept.pop(kept.index(max(kept)))  # "docker 東京 builds", the last plain row
    assert builds not in ids(search_messages(store, "docker -build*"))
    assert ids(search_messages(store, "docker -build*")) == kept


def test_exclusion_keeps_messages_where_the_text_is_inside_a_longer_word(store: Store) -> None:
    latest = add(store, "deploy the latest image")
    add(store, "deploy the test image")
    assert ids(search_messages(store, "deploy -test")) == [latest]


def test_exclusion_applies_to_the_whole_query_across_or(store: Store) -> None:
    redis = add(store, "redis cache warm")
    add(store, "postgres cache cold")
    add(store, "redis cache cold")
    assert ids(search_messages(store, "redis OR postgres -cold")) == [redis]


def test_cjk_exclusion_leaves_out_the_text_wherever_it_appears(store: Store) -> None:
    kept = add(store, "大阪での会議")
    add(store, "来週の東京での会議の予定")
    assert ids(search_messages(store, "会議 -東京")) == [kept]


def test_exclusion_of_a_cjk_word_after_a_latin_word(store: Store) -> None:
    kept = add(store, "docker in 大阪")
    add(store, "docker in 東京本社")
    assert ids(search_messages(store, "docker -東京")) == [kept]


def test_exclusion_reads_tool_output_past_what_the_word_index_holds(store: Store) -> None:
    deep = "x " * fts.TOOL_PREFIX_CHARS + "build failed"
    add(store, "docker " + deep, role="tool", tool_name="shell")
    kept = add(store, "docker ok", role="tool", tool_name="shell")
    assert ids(search_messages(store, "docker -build", role_filter="tool")) == [kept]
    _detach(store)
    scanned = search_messages(store, "docker -build", role_filter="tool")
    assert (scanned.route, ids(scanned)) == ("scan", [kept])


def test_exclusion_reads_the_text_of_structured_content_not_its_keys(store: Store) -> None:
    parts = [{"type": "text", "text": "docker image"}, {"type": "image_url", "image_url": {}}]
    structured = add(store, parts)
    add(store, [{"type": "text", "text": "docker build"}])
    assert ids(search_messages(store, "docker -build")) == [structured]
    assert ids(search_messages(store, "docker -type")) == [structured, structured + 1]


def test_exclusion_counts_match_count_matches(store: Store) -> None:
    kept, _ = _build_rows(store)
    counted = search.count_matches(store, "docker -build")
    assert (counted.count, counted.complete) == (len(kept), True)


def test_query_of_only_exclusions_finds_nothing_in_the_library(store: Store) -> None:
    _build_rows(store)
    for text in ("NOT build", "-build", '-"build fails"'):
        result = search_messages(store, text)
        assert (list(result), result.route) == ([], "none")
        assert search.count_matches(store, text).count == 0


def test_sanitizer_still_reads_a_lone_not_as_its_word() -> None:
    # SPEC §5's sanitizer (the agent's _sanitize_fts5_query) keeps its rules.
    assert query.sanitize_fts5_query("NOT hello") == "hello"
    assert query.sanitize_fts5_query("a -b") == "a NOT b"
    assert query.sanitize_fts5_query("hello and") == "hello"


# --- the word test behind exclusions equals FTS5's unicode61 -----------------------------

_PIECES = st.sampled_from(
    ["build", "Build", "BÜILD", "büild", "rebuild", "builds", "fails", "b", "uild", "x1", "東京"]
)
_SEPARATORS = st.sampled_from([" ", "-", "_", ".", ", ", "🎉", "\n", "/", "é", ""])
_TEXTS = st.lists(st.tuples(_PIECES, _SEPARATORS), max_size=8).map(
    lambda pairs: "".join(p + s for p, s in pairs)
)
_TERMS = st.sampled_from(["build", "builds", "BUILD", "büild", "build fails", "uild", "x1"])


@pytest.fixture(scope="module")
def unicode61() -> Iterator[sqlite3.Connection]:
    """An in-memory FTS5 table with the word index's tokenizer (unicode61, defaults)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(content)")
    yield conn
    conn.close()


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=_TEXTS, term=_TERMS, prefix=st.booleans())
def test_word_test_of_exclusions_agrees_with_fts5(
    unicode61: sqlite3.Connection, text: str, term: str, prefix: bool
) -> None:
    unicode61.execute("DELETE FROM t")
    unicode61.execute("INSERT INTO t(content) VALUES (?)", (text,))
    phrase = '"' + term + '"' + ("*" if prefix else "")
    found = unicode61.execute("SELECT count(*) FROM t WHERE t MATCH ?", (phrase,)).fetchone()[0]
    assert query.has_words(term, prefix, text) == found


# --- what a strict reader refuses -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("NOT docker", "only exclusions"),
        ("-docker", "only exclusions"),
        ('-"docker build"', "only exclusions"),
        ("docker OR -build", "alternative of OR only leaves words out"),
        ("NEAR(docker build)", "NEAR(...) is not supported"),
        ("(docker OR podman) build", "parentheses do not group"),
        ("role:user docker", "role: filters are not supported"),
        ("content:docker", "content: filters are not supported"),
        ("{content tool_name}: docker", "{column set}: filters"),
        ("^docker", "'^'"),
        ("doc*er", "'*' inside"),
        ("*ocker", "'*' inside"),
        ("docker *", "'*' alone"),
        ("docker -", "'-' alone"),
        ("docker | podman", "'|' alone"),
        ("!docker", "'!' is not NOT"),
        ("docker NOT", "NOT at the end"),
        ("OR docker", "OR at the start"),
        ("docker AND OR build", "two operators in a row"),
        ("docker NOT NOT build", "two operators in a row"),
        ("docker NOT -build", "double negation"),
        ('docker "build', "quote is not closed"),
        ('docker ""', "empty phrase"),
        ("docker -🎉", "nothing to leave out"),
    ],
)
def test_query_problem_names_what_it_refuses(text: str, says: str) -> None:
    problem = query.query_problem(text)
    assert problem is not None and says in problem.message, problem
    assert problem.hint


@pytest.mark.parametrize(
    "text",
    [
        "docker",
        "docker -build",
        "docker NOT build",
        "docker AND build",
        "docker AND NOT build",
        "redis OR postgres -cold",
        '"docker build" -"build fails"',
        "build*",
        "chat-send",
        "--verbose",  # a flag's text, not an exclusion
        "f(x) print()",  # parentheses inside a word are punctuation, as the index reads them
        "docker and not build",  # lowercase operators are words
        '"role:user"',  # quoted: searched as text
        "会議 -東京",
        "🎉",
        "",
    ],
)
def test_query_problem_accepts_what_it_honours(text: str) -> None:
    assert query.query_problem(text) is None


def test_a_query_past_the_term_cap_is_searched_with_a_warning_not_refused() -> None:
    text = " ".join(f"w{i}" for i in range(query.MAX_QUERY_TERMS + 5))
    assert query.query_problem(text) is None
    (warning,) = query.query_warnings(text)
    assert f"first {query.MAX_QUERY_TERMS} terms" in warning.message


# --- the CLI ---------------------------------------------------------------------------------


def test_cli_minus_word_leaves_out_the_docker_build_message(hermes_home: Path) -> None:
    load_sample()
    every = run_json("sessions", "search", "docker")["hits"]
    assert any("build fails" in h["snippet"] for h in every)
    hits = run_json("sessions", "search", "docker -build")["hits"]
    assert hits and all("build" not in h["snippet"].lower().replace("dockerfile", "") for h in hits)
    assert {h["session_id"] for h in hits} == {FIX_DOCKER}  # still the Dockerfile message
    assert run_json("sessions", "search", "docker NOT build")["hits"] == hits


@pytest.mark.parametrize("text", ["NOT docker", "-docker", "NEAR(docker build)", "role:user x"])
def test_cli_refuses_with_one_line_and_exit_2(hermes_home: Path, text: str) -> None:
    load_sample()
    result = run("sessions", "search", "--", text)
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: Invalid value for QUERY: ") and "Traceback" not in line


def test_process_refuses_a_query_of_only_exclusions_and_honours_one_after_a_word(
    hermes_home: Path,
) -> None:
    load_sample()
    refused = child("sessions", "search", "NOT docker")
    assert refused.returncode == 2 and refused.stdout == ""
    (line,) = refused.stderr.splitlines()
    assert "only exclusions" in line and "compose -docker" in line
    shown = child("sessions", "search", "--json", "--", "docker", "-build")
    assert shown.returncode == 0, shown.stderr
    snippets = [h["snippet"] for h in json.loads(shown.stdout)["hits"]]
    assert snippets and not any("Docker<<< build" in s for s in snippets)


def test_process_says_when_it_searched_only_the_first_terms(hermes_home: Path) -> None:
    load_sample()
    words = " ".join(["docker"] * (query.MAX_QUERY_TERMS + 1))
    proc = child("sessions", "search", words)
    assert proc.returncode == 0, proc.stderr
    assert f"Note: only the first {query.MAX_QUERY_TERMS} terms" in proc.stderr


def test_search_help_documents_the_query_syntax(hermes_home: Path) -> None:
    text = run("sessions", "search", "--help").stdout
    for needle in ("Query syntax:", "docker -compose", "NOT compose", "Refused with a message"):
        assert needle in text, needle
    assert "--archived" in text and "Include archived sessions." in text
