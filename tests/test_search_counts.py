"""Search says how many: matches and sessions, exact or "at least" when it stopped counting.

Counts come from the search's own walk (every match when it examined every candidate, else
the ones it found before its 2,000th match or its work budget); --all counts them all. Checked
on real stores through the library, the in-process CLI and the real `python -m hermes_cli`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from clitools import child, run, run_json

from hermes_state.records import messages, sessions
from hermes_state.search import walk
from hermes_state.search.search import search_messages
from hermes_state.search.walk import RANK_CANDIDATES
from hermes_state.store.connection import Store, open_store

MANY = RANK_CANDIDATES + 100  # more matches than a default search counts


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    """A writable store with three sessions: cli-1 and cli-2 (cli), tg-1 (telegram)."""
    with open_store(db_path) as handle:
        for sid, source in (("cli-1", "cli"), ("cli-2", "cli"), ("tg-1", "telegram")):
            sessions.create_session(handle, sid, source)
        yield handle


def fill(store: Store, sid: str, texts: list[str], role: str = "user") -> list[int]:
    """Append the texts to a session in one transaction; return their ids."""
    return messages.append_messages(store, sid, [{"role": role, "content": t} for t in texts])


def many(store: Store) -> None:
    """Write MANY messages with the word "common", over the three sessions."""
    for n, sid in enumerate(("cli-1", "cli-2", "tg-1")):
        fill(store, sid, [f"common word {i}" for i in range(n, MANY, 3)])


# --- the library -----------------------------------------------------------------------------


def test_counts_are_exact_when_every_candidate_was_examined(store: Store) -> None:
    fill(store, "cli-1", ["needle one", "needle two"])
    fill(store, "tg-1", ["needle three", "hay"])
    result = search_messages(store, "needle", limit=1)
    assert (len(result), result.matches, result.sessions, result.complete) == (1, 3, 2, True)


@pytest.mark.parametrize(("text", "route"), [("needle", "word"), ("eedl", "trigram")])
def test_newest_first_counts_past_the_page(store: Store, text: str, route: str) -> None:
    fill(store, "cli-1", ["needle one", "needle two"])
    fill(store, "cli-2", ["needle three"])
    result = search_messages(store, text, limit=1, sort="newest")
    assert result.route == route
    assert (result.matches, result.sessions, result.complete) == (3, 2, True)


def test_counts_follow_the_filters_and_exclusions(store: Store) -> None:
    fill(store, "cli-1", ["needle red", "needle blue"])
    fill(store, "tg-1", ["needle red"], role="assistant")
    result = search_messages(store, "needle -blue", source_filter="cli")
    assert (result.matches, result.sessions, result.complete) == (1, 1, True)
    result = search_messages(store, "needle -blue", role_filter="assistant")
    assert (result.matches, result.sessions) == (1, 1)


def test_a_search_stops_counting_at_its_2000th_match(store: Store) -> None:
    many(store)
    for sort in ("rank", "newest", "oldest"):
        result = search_messages(store, "common", sort=sort)
        assert (len(result), result.matches, result.complete) == (20, RANK_CANDIDATES, False)
        assert result.sessions == 3 and not result.partial


def test_complete_search_counts_every_match(store: Store) -> None:
    many(store)
    for sort in ("rank", "newest"):
        result = search_messages(store, "common", sort=sort, complete=True)
        assert (len(result), result.matches, result.sessions, result.complete) == (
            20,
            MANY,
            3,
            True,
        )


def test_complete_search_counts_with_exclusions(store: Store) -> None:
    many(store)
    fill(store, "tg-1", ["common but skipped"] * 5)
    result = search_messages(store, "common -skipped", complete=True)
    assert (result.matches, result.complete) == (MANY, True)


def test_counts_of_a_search_cut_by_its_budget_are_lower_bounds(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(store, "tg-1", ["budget word"])
    fill(store, "cli-1", [f"budget word {i}" for i in range(400)])
    monkeypatch.setattr(walk, "PROGRESS_STEPS", 1)
    monkeypatch.setattr(walk, "SEARCH_BUDGET_STEPS", 2000)
    monkeypatch.setattr(walk, "FIRST_WINDOW_IDS", 16)
    result = search_messages(store, "budget", source_filter="telegram", sort="newest")
    assert (result.partial, result.matches, result.sessions, result.complete) == (
        True,
        0,
        0,
        False,
    )
    full = search_messages(store, "budget", source_filter="telegram", complete=True)
    assert (full.matches, full.sessions, full.complete) == (1, 1, True)


def test_an_empty_search_counts_nothing_exactly(store: Store) -> None:
    result = search_messages(store, "absent")
    assert (result.matches, result.sessions, result.complete) == (0, 0, True)


# --- the CLI ---------------------------------------------------------------------------------


def test_cli_ends_with_how_many_matches_in_how_many_sessions(store: Store) -> None:
    fill(store, "cli-1", ["needle one", "needle two"])
    fill(store, "tg-1", ["needle three"])
    result = run("sessions", "search", "needle")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.rstrip("\n").splitlines()[-1] == "3 matches in 2 sessions."
    limited = run("sessions", "search", "needle", "--limit", "1").stdout.splitlines()[-1]
    assert limited == "3 matches in 2 sessions; showing 1 (--limit 0 shows all)."
    one = run("sessions", "search", "one").stdout.splitlines()[-1]
    assert one == "1 match in 1 session."


def test_cli_json_carries_the_counts_beside_the_hits(store: Store) -> None:
    fill(store, "cli-1", ["needle one", "needle two"])
    fill(store, "tg-1", ["needle three"])
    data = run_json("sessions", "search", "needle", "--limit", "2")
    assert (data["matches"], data["sessions"], data["complete"]) == (3, 2, True)
    assert [h["session_id"] for h in data["hits"]] and len(data["hits"]) == 2


def test_cli_record_formats_print_only_the_records(store: Store) -> None:
    fill(store, "cli-1", ["needle one", "needle two"])
    lines = run("sessions", "search", "needle", "--format", "tsv").stdout.splitlines()
    assert len(lines) == 3 and "matches in" not in "".join(lines)


def test_process_says_at_least_when_it_stopped_counting(store: Store) -> None:
    many(store)
    shown = child("sessions", "search", "common")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-1] == (
        "At least 2,000 matches in 3 sessions (--all counts every one); "
        "showing 20 (--limit 0 shows all)."
    )
    data = json.loads(child("sessions", "search", "common", "--json", "-n", "20").stdout)
    assert (data["matches"], data["sessions"], data["complete"]) == (2000, 3, False)
    # Without -n a machine format asks for every hit: every match is counted, as --all.
    whole = json.loads(child("sessions", "search", "common", "--json").stdout)
    assert (whole["matches"], whole["complete"], len(whole["hits"])) == (MANY, True, MANY)


def test_process_counts_every_match_with_all(store: Store) -> None:
    many(store)
    shown = child("sessions", "search", "common", "--all")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-1] == (
        f"{MANY:,} matches in 3 sessions; showing 20 (--limit 0 shows all)."
    )
    data = json.loads(child("sessions", "search", "common", "--all", "--json").stdout)
    assert (data["matches"], data["sessions"], data["complete"]) == (MANY, 3, True)
