"""Durations, relative times, truncation and match highlighting (pure functions)."""

from __future__ import annotations

import pytest

from hermes_cli.rendering import layout, render
from hermes_cli.shared import durations

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
    assert render.human_bytes(3 * 1024 * 1024) == "3.0 MiB"
    assert render.compact_number(950) == "950"
    assert render.compact_number(12_345) == "12.3k"


# --- fitting tables and text to a width -----------------------------------------------------


def _columns() -> list[layout.Column]:
    return [
        layout.Column("ID"),
        layout.Column("Title", shrink_to=8, prefer=20),
        layout.Column("Model", shrink_to=6, prefer=12, drop=1),
        layout.Column("Count", "right", drop=2),
    ]


def test_fit_without_a_width_keeps_every_column_whole() -> None:
    fitted = layout.fit(_columns(), [20, 40, 30, 5], None)
    assert (fitted.widths, fitted.dropped) == ([20, 40, 30, 5], [])


def test_fit_shrinks_before_it_drops_and_shares_room_by_need() -> None:
    fitted = layout.fit(_columns(), [20, 40, 30, 5], 60)
    assert fitted.dropped == [] and fitted.widths[0] == 20 and fitted.widths[3] == 5
    assert sum(fitted.widths) + 2 * 3 == 60
    assert fitted.widths[1] > 8 and fitted.widths[2] > 6  # both grew from their floor


def test_fit_drops_whole_columns_in_their_rank_order_and_never_the_id() -> None:
    assert layout.fit(_columns(), [20, 40, 30, 5], 38).dropped == ["Model"]
    assert layout.fit(_columns(), [20, 40, 30, 5], 29).dropped == ["Model", "Count"]
    tiny = layout.fit(_columns(), [20, 40, 30, 5], 10)
    assert tiny.columns == [0, 1] and tiny.widths[0] == 20  # overflows rather than cut the id


def test_wrap_breaks_at_spaces_and_inside_words_only_when_it_must() -> None:
    lines = layout.wrap_pieces([("one two three four", None)], 9)
    assert ["".join(t for t, _ in line) for line in lines] == ["one two", "three", "four"]
    cjk = layout.wrap_pieces([("東京の会議の予定", None)], 6)
    assert ["".join(t for t, _ in line) for line in cjk] == ["東京の", "会議の", "予定"]


def test_wrap_keeps_the_style_of_each_piece() -> None:
    (line,) = layout.wrap_pieces([("a ", None), ("match here", "match"), (" z", None)], 40)
    assert line == [("a ", None), ("match here", "match"), (" z", None)]


def test_display_width_counts_combining_marks_as_zero() -> None:
    assert layout.display_width("e\u0301") == 1 and layout.display_width("東") == 2


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"])
def test_local_time_per_minute_is_the_formatted_time_of_every_second(
    zone: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transcript formats each minute once; across DST edges (Lord Howe moves 30 minutes,
    Kolkata is +05:30) every second still shows its own local minute."""
    import time
    from datetime import datetime

    monkeypatch.setenv("TZ", zone)
    time.tzset()
    monkeypatch.setattr(render, "_MINUTES", {})
    monkeypatch.setattr(render, "_MINUTES_KEPT", 50)  # and the memo is emptied when full
    try:
        # US fall back 2026-11-01, Lord Howe back 2026-04-05 and forward 2025-10-05 (half hours)
        edges = [1_793_512_800.0, 1_775_314_800.0, 1_759_591_800.0]
        for edge in edges:
            for ts in (edge + k * 7.3 for k in range(-1500, 1500)):
                expected = datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")
                assert render.local_time(ts) == expected, ts
        assert 0 < len(render._MINUTES) <= 50
    finally:
        monkeypatch.undo()
        time.tzset()
