"""Issue 26, "every answer whole and true": the listing, date, wrapping and habit cases.

Each case runs the real `python -m hermes_cli` process (a pseudo-terminal where the case is
about a terminal) against a store built here with the library, so the expected answer is known.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from clitools import child, load_sample, pty_child

from hermes_cli.rendering.layout import display_width
from hermes_state.records import messages, sessions
from hermes_state.store.connection import open_store
from hermes_state.store.home import default_db_path

DAY = 86400.0
SGR = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # colours and line edits (progress)
MANY = 30  # more than the 20 rows a person sees by default


def _store_of_many() -> Path:
    """A store of MANY ended sessions, one started each hour back from now, one message each."""
    path = default_db_path()
    now = time.time()
    with open_store(path) as store:
        for i in range(MANY):
            sid = f"s{i:03d}"
            sessions.create_session(store, sid, "cli", started_at=now - (i + 1) * 3600)
            # Ten minutes inside each hour, so "5 hours ago" keeps exactly s000..s005.
            messages.append_message(
                store, sid, "user", f"hello {i}", timestamp=now - i * 3600 + 600
            )
            sessions.end_session(store, sid, "user_exit")
    return path


def _ids(proc: Any) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line)["id"] for line in proc.stdout.splitlines()]


# --- 3. machine formats return every row, or say they do not --------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "tsv", "json"])
def test_machine_formats_list_every_session_by_default(hermes_home: Path, fmt: str) -> None:
    _store_of_many()
    proc = child("sessions", "list", "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    if fmt == "json":
        data = json.loads(proc.stdout)
        assert len(data["sessions"]) == MANY and data["total"] == MANY and data["complete"]
    else:
        header = 0 if fmt == "jsonl" else 1
        assert len(proc.stdout.splitlines()) == MANY + header
    assert proc.stderr == ""


def test_a_limited_machine_answer_says_it_is_limited(hermes_home: Path) -> None:
    _store_of_many()
    proc = child("sessions", "list", "--format", "jsonl", "-n", "5")
    assert len(_ids(proc)) == 5
    assert f"Showing 1-5 of {MANY} sessions" in proc.stderr
    data = json.loads(child("sessions", "list", "--json", "--limit", "5").stdout)
    assert (len(data["sessions"]), data["total"], data["complete"]) == (5, MANY, False)


def test_a_person_sees_twenty_rows_and_how_to_see_more(hermes_home: Path) -> None:
    _store_of_many()
    proc = child("sessions", "list", "--no-pager")
    assert proc.returncode == 0, proc.stderr
    assert sum(line.startswith("s0") for line in proc.stdout.splitlines()) == 20
    assert f"Showing 1-20 of {MANY} sessions" in proc.stderr


# --- 13. --since means last activity, in every command ---------------------------------------


def _old_but_active() -> None:
    """Two ended sessions started 10 days ago: one spoke an hour ago, one not since it began."""
    now = time.time()
    with open_store(default_db_path()) as store:
        for sid, spoke in (("busy", now - 3600), ("quiet", now - 10 * DAY)):
            sessions.create_session(store, sid, "cli", started_at=now - 10 * DAY)
            messages.append_message(store, sid, "user", "hi", timestamp=spoke)
            sessions.end_session(store, sid, "user_exit")


@pytest.mark.parametrize("sort", ["started", "active"])
def test_list_since_keeps_sessions_active_since_whatever_the_sort(
    hermes_home: Path, sort: str
) -> None:
    _old_but_active()
    assert _ids(
        child("sessions", "list", "--since", "1d", "--sort", sort, "--format", "jsonl")
    ) == ["busy"]
    until = child("sessions", "list", "--until", "1d", "--format", "jsonl")
    assert _ids(until) == ["quiet"]


def test_export_and_prune_since_mean_activity_too(hermes_home: Path) -> None:
    _old_but_active()
    exported = child("sessions", "export", "--since", "1d")
    assert _ids(exported) == ["busy"]
    plan = child("sessions", "prune", "--older-than", "0", "--since", "1d", "--dry-run", "--json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["session_ids"] == ["busy"]
    assert "active at or after WHEN" in " ".join(child("sessions", "list", "--help").stdout.split())


# --- 14. a home that does not exist is not an empty one --------------------------------------


@pytest.mark.parametrize(
    "args",
    [("sessions", "list"), ("sessions", "search", "docker"), ("sessions", "stats")],
    ids=lambda a: a[1],
)
def test_a_mistyped_hermes_home_is_an_error_not_an_empty_store(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    missing = tmp_path / "hermse"
    proc = child(*args, env={"HERMES_HOME": str(missing)})
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "does not exist" in proc.stderr and "HERMES_HOME" in proc.stderr
    assert "Traceback" not in proc.stderr and not missing.exists()


def test_an_existing_home_without_a_store_is_still_empty(hermes_home: Path) -> None:
    hermes_home.mkdir(exist_ok=True)
    proc = child("sessions", "list")
    assert (proc.returncode, proc.stdout.strip()) == (0, "No sessions yet.")


# --- 16. wrapped to a terminal, raw into a pipe ----------------------------------------------


def test_long_lines_wrap_to_the_terminal_and_stay_whole_in_a_pipe(hermes_home: Path) -> None:
    _store_of_many()
    long_line = " ".join(f"word{i}" for i in range(300))  # about 2,000 cells on one line
    with open_store(default_db_path()) as store:
        messages.append_message(store, "s000", "assistant", long_line)
    for args in (
        ("sessions", "list", "--no-pager"),
        ("sessions", "show", "s000", "--no-pager"),
        ("sessions", "prune", "--older-than", "0", "--dry-run"),
    ):
        shown = pty_child(*args, columns=60)
        assert shown.returncode == 0, shown.output
        for line in shown.output.splitlines():
            assert display_width(SGR.sub("", line)) <= 60, (args, line)
    listed = pty_child("sessions", "list", "--no-pager", columns=60).output
    assert "--limit 0 for all" in listed  # the footer is wrapped, not cut
    piped = child("sessions", "show", "s000", "--no-pager")
    assert long_line in piped.stdout.splitlines()


# --- 17. habits of git, gh, llm and atuin -----------------------------------------------------


def test_n_reverse_and_natural_dates(hermes_home: Path) -> None:
    _store_of_many()
    newest = _ids(child("sessions", "list", "-n", "3", "--format", "jsonl"))
    oldest = _ids(child("sessions", "list", "-n", "3", "--reverse", "--format", "jsonl"))
    assert newest == ["s000", "s001", "s002"] and oldest == ["s029", "s028", "s027"]
    hours = {"5 hours ago": 5, "an hour ago": 1, "yesterday": None}
    for phrase, back in hours.items():
        found = _ids(child("sessions", "list", "--since", phrase, "--format", "jsonl"))
        if back is not None:
            assert len(found) == back + 1, phrase  # s000 .. s00{back}: active since then
        else:
            assert found and set(found) <= {f"s{i:03d}" for i in range(MANY)}
    bad = child("sessions", "list", "--since", "a fortnight ago")
    assert bad.returncode == 2 and "last monday" in bad.stderr


def test_output_flags_before_the_command_and_picked_fields(hermes_home: Path) -> None:
    load_sample()
    data = json.loads(child("--json", "sessions", "list", "-n", "2").stdout)
    assert len(data["sessions"]) == 2
    picked = child("sessions", "list", "--json=id,title", "-n", "2")
    assert picked.returncode == 0, picked.stderr
    assert all(set(s) == {"id", "title"} for s in json.loads(picked.stdout)["sessions"])
    tsv = child("sessions", "list", "--format", "tsv", "--fields", "title,id", "-n", "1")
    assert tsv.stdout.splitlines()[0] == "title\tid"
    wrong = child("sessions", "list", "--json=id,colour")
    assert wrong.returncode == 2 and "unknown field 'colour'" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    shown = child("--no-pager", "sessions", "show", "Fix Docker build")
    assert shown.returncode == 0 and "Session:" in shown.stdout


def test_import_and_prune_speak_json(hermes_home: Path, tmp_path: Path) -> None:
    from clitools import SAMPLE

    done = child("sessions", "import", str(SAMPLE), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["imported"] == 12 and report["ok"] and report["errors"] == []
    again = json.loads(child("sessions", "import", str(SAMPLE), "--json").stdout)
    assert (again["imported"], again["skipped"]) == (0, 12)
    plan = child("sessions", "prune", "--older-than", "0", "--dry-run", "--json")
    data = json.loads(plan.stdout)
    assert data["dry_run"] and data["sessions"] == len(data["session_ids"]) > 0
    first = data["details"][0]
    assert set(first) == {"id", "title", "last_active_at", "messages", "bytes"}
    pruned = child("sessions", "prune", "--older-than", "0", "--yes", "--json")
    assert pruned.returncode == 0, pruned.stderr
    assert json.loads(pruned.stdout)["sessions"] == data["sessions"]


def test_prune_dry_run_shows_title_age_and_size(hermes_home: Path) -> None:
    load_sample()
    proc = child("sessions", "prune", "--older-than", "0", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout.splitlines()[1].split()
    assert head[:2] == ["ID", "Title"] and "Size" in head
    assert "Refactor search module #2" in proc.stdout and "KiB" not in head


# --- 7. the agent's --resume ------------------------------------------------------------------


def test_the_agents_resume_option_gets_a_pointer_not_a_usage_dump(hermes_home: Path) -> None:
    proc = child("--resume", "20261118_091502_a1c9e2")
    assert proc.returncode == 2
    first, hint = proc.stderr.splitlines()
    assert "Hermes Agent's own command line" in first
    assert "hermes sessions show ID" in hint


def test_search_takes_n_and_fields_and_a_limited_record_stream_says_so(hermes_home: Path) -> None:
    load_sample()
    proc = child("sessions", "search", "chat-send", "-n", "1", "--format", "jsonl")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1
    assert "matches in 2 sessions; showing 1" in proc.stderr
    picked = child("sessions", "search", "chat-send", "--json=session_id,role")
    hits = json.loads(picked.stdout)["hits"]
    assert hits and all(set(h) == {"session_id", "role"} for h in hits)
