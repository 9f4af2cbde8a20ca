"""Every answer whole and true (issue 35): search titles, machine formats with every hit, query
words that start with a dash, an interrupted prune, and the filters an empty answer was under."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from clitools import child, load_sample, run
from support.children import child_env, hermes_argv
from support.stores import populate_store

from hermes_state.store.home import default_db_path

TRAVEL = "20261130_091233_3d4e5f"


@pytest.fixture
def sample(hermes_home: Path) -> Path:
    """The test profile's store, filled with examples/sample-sessions.jsonl."""
    return load_sample()


def _many_hits(db: Path, n: int = 45) -> None:
    """Add one session of n user messages that all hold the word zeppelin."""
    from hermes_state.records import messages, sessions
    from hermes_state.store.connection import open_store

    with open_store(db) as store:
        sessions.create_session(store, "zep", "cli", started_at=1_764_000_000.0)
        rows = [
            {"role": "user", "content": f"zeppelin note {i}", "timestamp": 1_764_000_000.0 + i}
            for i in range(n)
        ]
        messages.append_messages(store, "zep", rows)


# --- 2: titles ------------------------------------------------------------------------------


def test_search_finds_a_session_by_its_title_marked_as_a_title_match(sample: Path) -> None:
    result = child("sessions", "search", "Travel plans")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Title matches:"
    assert lines[1].startswith(f"{TRAVEL} · Travel plans Osaka · telegram · ")
    assert "1 session with a matching title." in lines
    # No message holds both words: the message half says so, as before.
    assert lines[-1] == "No messages match 'Travel plans'."


def test_search_json_lists_title_matches_apart_from_message_counts(sample: Path) -> None:
    data = json.loads(child("sessions", "search", "Travel plans", "--json").stdout)
    assert (data["matches"], data["sessions"], data["hits"]) == (0, 0, [])
    assert data["title_match_count"] == 1
    (match,) = data["title_matches"]
    assert match["session_id"] == TRAVEL and match["session_title"] == "Travel plans Osaka"
    assert match["last_active_at"].endswith("Z")


def test_search_title_matches_keep_message_hit_counts_intact(sample: Path) -> None:
    data = json.loads(child("sessions", "search", "chat-send", "--json").stdout)
    assert [t["session_title"] for t in data["title_matches"]] == ["chat-send rate limits"]
    # The message half is unchanged: the same hits, counted the same way.
    assert data["matches"] == len(data["hits"]) == 6


def test_search_exclusion_and_role_apply_to_titles(sample: Path) -> None:
    assert (
        json.loads(child("sessions", "search", "docker -build", "--json").stdout)[
            "title_match_count"
        ]
        == 0
    )
    data = json.loads(child("sessions", "search", "refactor", "--role", "user", "--json").stdout)
    assert data["title_matches"] == []  # a title has no role


def test_search_record_streams_note_title_matches_on_stderr(sample: Path) -> None:
    result = child("sessions", "search", "refactor", "--format", "csv")
    assert result.returncode == 0
    assert result.stdout.startswith("id,session_id,")
    assert "Note: 2 sessions with a matching title" in result.stderr


def test_list_title_filter_folds_case_and_counts(sample: Path) -> None:
    data = json.loads(child("sessions", "list", "--title", "REFACTOR", "--json").stdout)
    assert sorted(s["title"] for s in data["sessions"]) == [
        "Refactor search module",
        "Refactor search module #2",
    ]
    assert data["total"] == 2 and data["complete"] is True
    empty = child("sessions", "list", "--title", "no such title")
    assert empty.returncode == 0 and empty.stdout == "No sessions found.\n"


# --- 4: every row in machine formats ---------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "json"])
def test_search_machine_formats_give_every_hit_without_limit(hermes_home: Path, fmt: str) -> None:
    _many_hits(default_db_path())
    result = child("sessions", "search", "zeppelin", "--format", fmt)
    assert result.returncode == 0, result.stderr
    if fmt == "json":
        data = json.loads(result.stdout)
        assert len(data["hits"]) == data["matches"] == 45 and data["complete"] is True
    elif fmt == "jsonl":
        assert len(result.stdout.splitlines()) == 45
    else:
        rows = list(csv.reader(io.StringIO(result.stdout), delimiter="," if fmt == "csv" else "\t"))
        assert len(rows) == 46  # the header, then every hit
    assert "Note:" not in result.stderr


def test_search_limit_in_a_machine_format_is_honoured_and_said(hermes_home: Path) -> None:
    _many_hits(default_db_path())
    result = child("sessions", "search", "zeppelin", "--format", "jsonl", "-n", "5")
    assert len(result.stdout.splitlines()) == 5
    assert "Note: 45 matches in 1 session; showing 5 (--limit 0 shows all)." in result.stderr


def test_search_on_a_terminal_still_shows_twenty_by_default(hermes_home: Path) -> None:
    _many_hits(default_db_path())
    text = run("sessions", "search", "zeppelin").stdout
    assert text.count("\n    ") == 20
    assert text.rstrip().endswith("45 matches in 1 session; showing 20 (--limit 0 shows all).")


def test_search_every_hit_examines_every_message(hermes_home: Path) -> None:
    # -n 0 (and a machine format without -n) is --all: counts exact, never a budget cut.
    _many_hits(default_db_path())
    data = json.loads(child("sessions", "search", "zeppelin", "-n", "0", "--json").stdout)
    assert (data["complete"], data["partial"], data["ordering"]) == (True, False, "rank")
    assert data["ranked"] == data["matches"] == 45  # a count, never null


# --- 8: the query ----------------------------------------------------------------------------


def test_an_empty_query_is_a_usage_error(sample: Path) -> None:
    for query in ("", "   "):
        result = child("sessions", "search", query)
        assert result.returncode == 2
        assert "the query is empty" in result.stderr and "Traceback" not in result.stderr


def test_an_unquoted_dash_word_after_the_first_word_is_an_exclusion(sample: Path) -> None:
    quoted = json.loads(child("sessions", "search", "docker -build", "--json").stdout)
    bare = child("sessions", "search", "docker", "-build", "--json")
    assert bare.returncode == 0, bare.stderr
    data = json.loads(bare.stdout)
    assert data["query"] == "docker -build"
    assert [h["id"] for h in data["hits"]] == [h["id"] for h in quoted["hits"]]
    # Real options still work around it, -n with its value too.
    mixed = child("sessions", "search", "docker", "-n", "1", "-build", "--role", "assistant")
    assert mixed.returncode == 0, mixed.stderr
    assert mixed.stdout.count(" · assistant · ") == 1


def test_a_dash_word_first_is_still_refused(sample: Path) -> None:
    result = child("sessions", "search", "-build")
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_no_match_names_the_active_filters(sample: Path) -> None:
    result = child(
        "sessions", "search", "docker", "--since", "2d", "--source", "cli", "--role", "tool"
    )
    assert result.returncode == 0
    assert result.stdout == (
        "No messages match 'docker' (with --source cli, --role tool, --since 2d).\n"
    )


# --- 3: Ctrl-C in a long write ---------------------------------------------------------------


def _ended_sessions(db: Path, n: int) -> None:
    """Fill a store with n small sessions, all ended long ago (prune candidates)."""
    populate_store(db, sessions_n=n, messages_per_session=2, content_size=20)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE sessions SET ended_at = started_at + 50, end_reason = 'user_exit'")
    conn.close()


def test_ctrl_c_in_prune_says_what_it_did_and_exits_130(hermes_home: Path) -> None:
    db = default_db_path()
    _ended_sessions(db, 1000)
    pause = hermes_home / "paused"
    env = child_env(extra={"HERMES_CLI_PAUSE_AT": f"prune:450:{pause}"})
    proc = subprocess.Popen(
        hermes_argv("sessions", "prune", "--older-than", "1d", "--yes"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not pause.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pause.exists()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.splitlines()[-1] == (
        "Interrupted: deleted 450 of 1,000 sessions; the store is healthy (each batch of "
        "deletions is all or nothing); run the same command again to finish."
    )
    assert "Traceback" not in err
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 550
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    again = child("sessions", "prune", "--older-than", "1d", "--yes")
    assert again.returncode == 0 and "Pruned 550 session(s)" in again.stdout


def test_the_pause_hook_does_nothing_unset(hermes_home: Path) -> None:
    assert "HERMES_CLI_PAUSE_AT" not in os.environ
    _ended_sessions(default_db_path(), 3)
    done = child("sessions", "prune", "--older-than", "1d", "--yes")
    assert done.returncode == 0 and "Pruned 3 session(s)" in done.stdout


# --- 7: date words ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("this month", (2026, 12, 1)),
        ("last month", (2026, 11, 1)),
        ("this week", (2026, 12, 7)),  # weeks start on Monday
        ("last week", (2026, 11, 30)),
        ("this year", (2026, 1, 1)),
        ("last year", (2025, 1, 1)),
        ("2026-11", (2026, 11, 1)),
    ],
)
def test_calendar_words_name_the_midnight_that_starts_the_period(
    text: str, expected: tuple[int, int, int]
) -> None:
    from datetime import datetime

    from hermes_cli.shared.durations import parse_cutoff

    now = datetime(2026, 12, 13, 12, 0).timestamp()
    assert parse_cutoff(text, now=now) == datetime(*expected).timestamp()


def test_mo_and_y_count_calendar_months_back() -> None:
    from datetime import datetime

    from hermes_cli.shared.durations import DurationError, parse_cutoff

    now = datetime(2026, 3, 31, 9, 30).timestamp()
    assert parse_cutoff("1mo", now=now) == datetime(2026, 2, 28, 9, 30).timestamp()
    assert parse_cutoff("1y", now=now) == datetime(2025, 3, 31, 9, 30).timestamp()
    assert parse_cutoff("18mo", now=now) == datetime(2024, 9, 30, 9, 30).timestamp()
    for bad in ("2026-13", "1.5mo", "mo", "next month"):
        with pytest.raises(DurationError):
            parse_cutoff(bad, now=now)


def test_since_and_until_take_months_and_period_words(sample: Path) -> None:
    november = child("sessions", "list", "--since", "2026-11", "--until", "2026-12", "--json")
    ids = [s["id"] for s in json.loads(november.stdout)["sessions"]]
    assert len(ids) == 11 and "20261201_171845_4e5f60" not in ids
    from datetime import UTC, datetime

    first = datetime.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    before = (
        first.replace(year=first.year - 1, month=12)
        if first.month == 1
        else first.replace(month=first.month - 1)
    )

    def utc(moment: datetime) -> str:
        return datetime.fromtimestamp(moment.timestamp(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    spent = child("usage", "--since", "last month", "--until", "this month", "--json")
    assert spent.returncode == 0, spent.stderr
    data = json.loads(spent.stdout)
    assert (data["since_at"], data["until_at"]) == (utc(before), utc(first))
    for when in ("this month", "1y", "1mo", "last week", "this week"):
        assert child("sessions", "list", "--since", when).returncode == 0, when
    refused = child("sessions", "list", "--since", "2026-13")
    assert refused.returncode == 2 and "a month like 2026-11" in refused.stderr


# --- 14: gh's --json spelling ----------------------------------------------------------------


def test_json_with_a_field_list_after_a_space_points_at_the_equals_form(sample: Path) -> None:
    result = child("sessions", "list", "--json", "id,title,source")
    assert result.returncode == 2
    assert "--json=id,title,source" in result.stderr and "Traceback" not in result.stderr
    one = child("sessions", "list", "--json", "id")
    assert one.returncode == 2 and "Hint: fields follow an equals sign: --json=id" in one.stderr
    fine = child("sessions", "list", "--json=id,title,source")
    assert list(json.loads(fine.stdout)["sessions"][0]) == ["id", "title", "source"]


# --- 6: the resume command -------------------------------------------------------------------


def _fake_agent(root: Path) -> Path:
    """Make an environment that looks like Hermes Agent's: bin/hermes (a Python script that
    says what it was given) and run_agent.py in site-packages."""
    import sys

    bin_dir = root / "bin"
    site = root / "lib" / "python3.11" / "site-packages"
    bin_dir.mkdir(parents=True)
    site.mkdir(parents=True)
    (site / "run_agent.py").write_text("")
    (bin_dir / "python").symlink_to(sys.executable)
    script = bin_dir / "hermes"
    script.write_text(
        f"#!{bin_dir / 'python'}\nimport sys\nprint('agent resumes', *sys.argv[1:])\n"
    )
    script.chmod(0o755)
    return script


def _this_tool_first(tmp: Path) -> Path:
    """Make a folder holding this tool as `hermes` (to put first on PATH)."""
    import sys

    folder = tmp / "tool-bin"
    folder.mkdir()
    tool = folder / "hermes"
    tool.write_text(f"#!{sys.executable}\nfrom hermes_cli.main import main\nmain()\n")
    tool.chmod(0o755)
    return folder


def test_resume_command_names_the_agent_even_when_this_tool_is_first_on_path(
    sample: Path, tmp_path: Path
) -> None:
    agent = _fake_agent(tmp_path / "agent-env")
    path = os.pathsep.join([str(_this_tool_first(tmp_path)), str(agent.parent), "/usr/bin", "/bin"])
    result = child("sessions", "resume-command", "Fix Docker build", env={"PATH": path})
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line == f"{agent} --resume 20261118_091502_a1c9e2"
    # Pasted into a shell whose first `hermes` is this tool, the line runs the agent.
    pasted = subprocess.run(
        ["sh", "-c", line], capture_output=True, text=True, env={**child_env(), "PATH": path}
    )
    assert pasted.stdout == "agent resumes --resume 20261118_091502_a1c9e2\n", pasted.stderr


def test_resume_command_says_when_it_cannot_find_the_agent(sample: Path, tmp_path: Path) -> None:
    path = os.pathsep.join([str(_this_tool_first(tmp_path)), "/usr/bin", "/bin"])
    result = child("sessions", "resume-command", "20261118", "--json", env={"PATH": path})
    data = json.loads(result.stdout)
    assert data["argv"] == ["hermes", "--resume", "20261118_091502_a1c9e2"]
    assert data["agent_found"] is False
    assert "Hermes Agent's `hermes` was not found on PATH" in result.stderr


def test_resume_command_takes_the_agent_from_the_environment_and_the_profile(
    hermes_home: Path, tmp_path: Path
) -> None:
    assert run("profile", "create", "work").exit_code == 0
    from hermes_state.store.home import profile_home

    load_sample(profile_home("work") / "state.db")
    result = child(
        "-p",
        "work",
        "sessions",
        "resume-command",
        "Grocery list",
        env={"HERMES_AGENT_BIN": "/opt/agent/bin/hermes"},
    )
    assert result.stdout == "/opt/agent/bin/hermes -p work --resume 20261124_183322_f00d01\n"
    assert result.stderr == ""


# --- 11: one vocabulary ----------------------------------------------------------------------

ISO = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"


def test_prune_json_says_times_as_iso_and_days_to_the_second(sample: Path) -> None:
    import re

    plan = json.loads(
        child(
            "sessions", "prune", "--older-than", "1d", "--since", "1y", "--dry-run", "--json"
        ).stdout
    )
    assert plan["older_than_days"] == 1.0
    assert re.match(ISO, plan["until_at"]) and re.match(ISO, plan["since_at"])
    assert "cutoff" not in plan and "active_after" not in plan
    assert plan["details"] and all(re.match(ISO, d["last_active_at"]) for d in plan["details"])
    odd = json.loads(
        child("sessions", "prune", "--older-than", "300d", "--dry-run", "--json").stdout
    )
    assert odd["older_than_days"] == 300.0
    done = json.loads(child("sessions", "prune", "--older-than", "1d", "--yes", "--json").stdout)
    assert done["sessions"] == 11 and re.match(ISO, done["until_at"])


def test_search_json_counts_are_never_null_and_times_are_iso(sample: Path) -> None:
    data = json.loads(child("sessions", "search", "docker", "--all", "--json").stdout)
    assert data["ranked"] == data["matches"] and data["ordering"] == "rank"
    newest = json.loads(child("sessions", "search", "docker", "--sort", "newest", "--json").stdout)
    assert newest["ranked"] == 0


def test_vault_list_reads_like_every_table_and_its_json_like_every_document(
    sample: Path, hermes_home: Path
) -> None:
    import re

    env = {"HOME": str(hermes_home.parent)}
    moved = child("vault", "move", "--older-than", "1d", "--yes", env=env)
    assert moved.returncode == 0, moved.stderr
    table = child("vault", "list", env=env)
    header = table.stdout.splitlines()[0]
    assert header.split() == [
        "Year",
        "Sessions",
        "Messages",
        "Size",
        "First",
        "started",
        "Last",
        "active",
        "Path",
    ]
    assert f"~/{hermes_home.name}/vault/2026.db" in table.stdout
    (store,) = json.loads(child("vault", "list", "--json", env=env).stdout)["stores"]
    assert store["session_count"] == 11 and store["message_count"] > 0
    assert re.match(ISO, store["first_started_at"]) and re.match(ISO, store["last_active_at"])
    assert store["path"] == str(hermes_home / "vault" / "2026.db")


# --- 12: db optimize names the real cause ----------------------------------------------------


def _delete_journal_store(home: Path) -> Path:
    """Put the sample store in home, in DELETE journal mode (as the agent's 0.20+ releases)."""
    db = load_sample(home / "state.db")
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    conn.close()
    return db


def test_optimize_on_a_read_only_file_system_says_so(tmp_path: Path) -> None:
    from hostile_env import assert_one_line_error, hermes, remount_read_only, small_filesystem

    with small_filesystem(tmp_path / "ro", "20m") as mount:
        home = mount / "home"
        home.mkdir()
        _delete_journal_store(home)
        remount_read_only(mount)
        proc = hermes("db", "optimize", home=home)
        line = assert_one_line_error(proc)
        assert (
            line == f"Error: {home / 'state.db'} is on a read-only file system; nothing was written"
        )
        assert "Hint: Remount it read-write" in proc.stderr
        assert "owner" not in proc.stderr


def test_optimize_in_a_read_only_directory_names_the_journal_it_needs(tmp_path: Path) -> None:
    from hostile_env import assert_one_line_error, hermes

    home = tmp_path / "home"
    home.mkdir()
    _delete_journal_store(home)
    home.chmod(0o555)
    try:
        proc = hermes("db", "optimize", home=home, unprivileged=True)
    finally:
        home.chmod(0o755)
    line = assert_one_line_error(proc)
    assert "state.db-journal" in line and "delete journal mode" in line
    assert "-wal" not in proc.stderr and "-shm" not in proc.stderr


# --- 13: profile sizes, --model, restore into an empty home ----------------------------------


def test_profile_list_shows_store_vault_and_backups_and_their_total(
    sample: Path, hermes_home: Path
) -> None:
    assert child("vault", "move", "--older-than", "3d", "--yes").returncode == 0
    assert child("backup").returncode == 0
    (row,) = json.loads(child("profile", "list", "--json").stdout)["profiles"]
    vault_files = list((hermes_home / "vault").glob("*.db"))
    archives = list((hermes_home / "backups").glob("*.zip"))
    assert vault_files and archives
    assert row["vault_bytes"] == sum(p.stat().st_size for p in vault_files)
    assert row["backup_bytes"] == sum(p.stat().st_size for p in archives)
    store = sum(
        p.stat().st_size for p in hermes_home.glob("state.db*") if ".pre-restore" not in p.name
    )
    assert row["store_bytes"] == store
    assert row["total_bytes"] == row["store_bytes"] + row["vault_bytes"] + row["backup_bytes"]
    table = child("profile", "list").stdout
    assert table.splitlines()[0].split() == [
        "Profile",
        "Active",
        "Store",
        "Vault",
        "Backups",
        "Total",
        "Path",
    ]


def test_list_model_filter_keeps_only_that_models_sessions(sample: Path) -> None:
    data = json.loads(child("sessions", "list", "--model", "openai/gpt-4.1", "--json").stdout)
    assert data["total"] == 3 and {s["model"] for s in data["sessions"]} == {"openai/gpt-4.1"}
    unknown = child("sessions", "list", "--model", "gpt-4.1")
    assert unknown.returncode == 2
    assert "did you mean 'openai/gpt-4.1'?" in unknown.stderr


def test_restore_into_an_empty_home_does_not_ask_to_replace(sample: Path, tmp_path: Path) -> None:
    assert child("backup").returncode == 0
    (archive,) = (sample.parent / "backups").glob("*.zip")
    empty = tmp_path / "fresh"
    empty.mkdir()
    proc = child("restore", str(archive), input="y\n", env={"HERMES_HOME": str(empty)})
    assert proc.returncode == 0, proc.stderr
    assert "Nothing here is replaced. Restore the archive here? [y/N]" in proc.stderr
    assert "Replace" not in proc.stderr
    assert (
        json.loads(child("sessions", "list", "--json", env={"HERMES_HOME": str(empty)}).stdout)[
            "total"
        ]
        == 12
    )


# --- 9, 10: narrow and colour terminals (a real pseudo-terminal of the given size) -----------


def test_list_at_60_columns_keeps_the_continuation_mark(sample: Path) -> None:
    from clitools import pty_child

    text = pty_child("sessions", "list", "--no-pager", columns=60, env={"NO_COLOR": "1"}).output
    rows = {line.split()[0]: line for line in text.splitlines() if line[:8].isdigit()}
    second, first = rows["20261122_113000_e11b21"], rows["20261122_101500_e11b20"]
    assert " #2 " in second and "#2" not in first
    assert all(len(line) <= 60 for line in text.splitlines())


def test_a_vaulted_hit_keeps_its_whole_mark_at_60_columns(sample: Path) -> None:
    from clitools import pty_child

    assert child("vault", "move", "--older-than", "3d", "--yes").returncode == 0
    text = pty_child(
        "sessions", "search", "chat-send", "--no-pager", columns=60, env={"NO_COLOR": "1"}
    ).output
    headers = [line for line in text.splitlines() if line.startswith("20261120_160245_c3f871 · ")]
    assert headers and all("[vault 2026]" in line for line in headers)
    assert "[vault 20…" not in text


def test_a_marked_cjk_match_is_never_split_across_lines(sample: Path) -> None:
    import re

    from clitools import pty_child

    for columns in (60, 61, 62, 63):
        text = pty_child(
            "sessions", "search", "会議", "--no-pager", columns=columns, env={"NO_COLOR": "1"}
        ).output
        snippets = [line for line in text.splitlines() if line.startswith("    ")]
        assert any(">>>会議<<<" in line for line in snippets)
        for line in snippets:
            assert line.count(">>>") == line.count("<<<"), (columns, line)
            assert not re.search(r"(^|[^>])>{1,2}$|^\s*<{1,2}([^<]|$)", line), (columns, line)


def test_a_long_role_is_cut_before_the_session_title(hermes_home: Path) -> None:
    from clitools import pty_child

    from hermes_state.records import messages, sessions
    from hermes_state.store.connection import open_store

    with open_store(default_db_path()) as store:
        sessions.create_session(store, "t1", "cli", started_at=1_764_000_000.0)
        sessions.set_session_title(store, "t1", "Quarterly report numbers")
        messages.append_messages(
            store,
            "t1",
            [
                {
                    "role": "tool",
                    "tool_name": "mcp_filesystem_read_multiple_files_with_metadata",
                    "content": "zeppelin figures for the quarter",
                    "timestamp": 1_764_000_001.0,
                }
            ],
        )
    text = pty_child(
        "sessions", "search", "zeppelin", "--no-pager", columns=60, env={"NO_COLOR": "1"}
    ).output
    (header,) = [line for line in text.splitlines() if line.startswith("t1 · ")]
    assert "Quarterly report nu" in header and "tool (mcp_" in header and "…" in header
    assert len(header) <= 60


def test_a_confirmation_prompt_wraps_at_spaces(sample: Path) -> None:
    from clitools import pty_child

    out = pty_child(
        "sessions",
        "delete",
        "20261118_091502_a1c9e2",
        columns=60,
        input="n\n",
        env={"NO_COLOR": "1"},
    ).output
    question = (
        "Delete session '20261118_091502_a1c9e2' (Fix Docker build) and its 5 stored messages "
        "(5 live, the rest earlier generations)? [y/N]"
    )
    start = out.index("Delete session")
    lines = out[start : out.index("[y/N]") + 5].splitlines()
    assert len(lines) > 1 and all(len(line) <= 59 for line in lines)
    assert " ".join(lines) == question  # every break is at a space


def test_usage_at_80_columns_gives_exact_counts_and_one_cost_column(sample: Path) -> None:
    from clitools import pty_child

    text = pty_child("usage", "--no-pager", columns=80, env={"NO_COLOR": "1"}).output
    header = text.splitlines()[1]
    assert header.split() == ["Model", "Sessions", "Input", "Output", "Cost"]
    assert "138,805" in text and "k " not in text  # 138.8k only when the columns need it
    assert "Not shown: Calls, Cache read, Cache write, Reasoning (0 in every row)." in text
    by_session = pty_child(
        "usage", "--by", "session", "--no-pager", columns=80, env={"NO_COLOR": "1"}
    ).output
    assert "Refactor search module #2" in by_session  # titles whole: no duplicate cost column
