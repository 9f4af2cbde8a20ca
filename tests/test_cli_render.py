"""Durations, relative times, truncation and match highlighting (pure functions)."""

from __future__ import annotations

import pytest

from hermes_cli import durations, render

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90 * 86400),
        ("90d", 90 * 86400),
        ("12h", 12 * 3600),
        ("30m", 1800),
        ("2w", 14 * 86400),
    ],
)
def test_durations_parse_the_documented_forms(text: str, seconds: float) -> None:
    assert durations.parse_age_seconds(text) == seconds


def test_an_iso_date_is_a_cutoff_in_local_time() -> None:
    from datetime import datetime

    assert durations.parse_cutoff("2026-01-31") == datetime(2026, 1, 31).timestamp()


@pytest.mark.parametrize("text", ["", "abc", "90x", "-5d", "1 2", "2026-13-40"])
def test_bad_durations_are_rejected(text: str) -> None:
    with pytest.raises(durations.DurationError):
        durations.parse_cutoff(text, now=NOW)


@pytest.mark.parametrize(
    ("age", "shown"),
    [
        (5, "just now"),
        (5 * 60, "5m ago"),
        (3 * 3600, "3h ago"),
        (30 * 3600, "yesterday"),
        (4 * 86400, "4d ago"),
    ],
)
def test_relative_time_reads_like_a_person_would_say_it(age: float, shown: str) -> None:
    assert render.relative_time(NOW - age, now=NOW) == shown


def test_relative_time_of_old_or_missing_times() -> None:
    assert render.relative_time(NOW - 30 * 86400, now=NOW).count("-") == 2
    assert render.relative_time(None, now=NOW) == "?"
    assert render.relative_time(float("nan"), now=NOW) == "?"


def test_truncate_cuts_to_the_width_with_an_ellipsis() -> None:
    assert render.truncate("a" * 50, 10) == "a" * 9 + "…"
    assert render.truncate("short", 10) == "short"
    assert render.truncate("line one\nline two", 40) == "line one line two"


def test_truncate_counts_wide_characters_twice() -> None:
    cut = render.truncate("東京の会議の予定について", 10)
    assert render.display_width(cut) <= 10 and cut.endswith("…")


def test_split_matches_finds_marked_words() -> None:
    assert render.split_matches("a >>>b<<< c >>>d<<<") == [
        ("a ", False),
        ("b", True),
        (" c ", False),
        ("d", True),
    ]


def test_split_matches_leaves_unbalanced_markers_as_text() -> None:
    assert render.split_matches("x >>>y") == [("x >>>y", False)]


def test_human_bytes_and_compact_numbers() -> None:
    assert render.human_bytes(512) == "512 B"
    assert render.human_bytes(3 * 1024 * 1024) == "3.0 MB"
    assert render.compact_number(950) == "950"
    assert render.compact_number(12_345) == "12.3k"
