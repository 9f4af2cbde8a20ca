"""sanitize_fts5_query: SPEC §5 rules, and the property that its output is always valid FTS5."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hermes_state.search.search import MAX_QUERY_CHARS, parse_query, sanitize_fts5_query


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("chat-send", '"chat-send"'),
        ("hello AND", "hello"),
        ("OR hello", "hello"),
        ("NOT hello", "hello"),
        ("hello and", "hello"),
        ("my-app.config.ts", '"my-app.config.ts"'),
        ("P2.2", '"P2.2"'),
        ("snake_case_name", '"snake_case_name"'),
        ('"hello world"', '"hello world"'),
        ('say "hello world', "say hello world"),
        ("dock*", "dock*"),
        ("*dock", "dock"),
        ("dock**", "dock*"),
        ("*", ""),
        ("a (b OR c) d", "a b OR c d"),
        ("foo:bar", "foo bar"),
        ("col:value ^start", "col value start"),
        ("c++ & rust", "c rust"),
        ("NEAR(a b)", '"NEAR" a b'),
        ("a AND OR b", "a OR b"),
        ("docker NOT compose", "docker NOT compose"),
        ("AND OR NOT", ""),
        ("", ""),
        ("   ", ""),
        ("🎉🎉", ""),
        ("東京 会議", "東京 会議"),
    ],
)
def test_sanitize_rule(text: str, expected: str) -> None:
    assert sanitize_fts5_query(text) == expected


def test_sanitize_caps_query_length() -> None:
    out = sanitize_fts5_query("a" * (MAX_QUERY_CHARS + 500))
    assert out == "a" * MAX_QUERY_CHARS


def test_sanitize_removes_lone_surrogates() -> None:
    assert sanitize_fts5_query("doc\ud800ker") == "docker"


def test_sanitize_quotes_operator_words_used_as_prefixes() -> None:
    assert sanitize_fts5_query("AND*") == '"AND"*'


def test_parse_marks_negated_terms_and_groups() -> None:
    q = parse_query("a b NOT c OR d")
    assert [[(t.text, t.negated) for t in g] for g in q.groups] == [
        [("a", False), ("b", False), ("c", True)],
        [("d", False)],
    ]


def test_parse_keeps_phrase_prefix() -> None:
    (term,) = parse_query('"chat se"*').terms()
    assert term.phrase and term.prefix and term.text == "chat se"


@pytest.fixture(scope="module")
def fts_table() -> sqlite3.Connection:
    """An in-memory FTS5 table to run sanitized queries against."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(content)")
    conn.execute("INSERT INTO t(content) VALUES ('hello world'), ('chat-send docker')")
    return conn


_interesting = st.sampled_from(
    [
        '"',
        "*",
        "-",
        ".",
        "_",
        ":",
        "^",
        "(",
        ")",
        "{",
        "}",
        "+",
        "AND",
        "OR",
        "NOT",
        "NEAR",
        "and",
        " ",
        "\x00",
        "\x1a",
        "\t",
        "東京",
        "🎉",
        "\ud800",
        "\udfff",
        "é",
        "'",
        "\\",
        "%",
    ]
)
_query_text = st.lists(st.one_of(_interesting, st.text(max_size=8)), max_size=20).map("".join)


@settings(
    max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.one_of(st.text(max_size=60), _query_text))
def test_sanitized_query_is_empty_or_valid_fts5(fts_table: sqlite3.Connection, text: str) -> None:
    out = sanitize_fts5_query(text)
    if out:
        fts_table.execute("SELECT rowid FROM t WHERE t MATCH ?", (out,)).fetchall()
