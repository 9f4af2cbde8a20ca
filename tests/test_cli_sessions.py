"""`hermes sessions …` through the Typer app (CliRunner): flags, output, exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from clitools import ANSI_ESCAPE, SAMPLE, load_sample, run, run_json, sample_records
from support.damage import table_pages, zero_pages
from support.stores import populate_store

from hermes_state.records import messages, session_list, sessions
from hermes_state.store.connection import open_store
from hermes_state.store.home import default_db_path
from hermes_state.transfer import export

DOCKER = "20261118_091502_a1c9e2"
TOKYO = "20261119_073011_b7d401"
CHAT_SEND = "20261120_160245_c3f871"
NEWEST = "20261201_171845_4e5f60"


@pytest.fixture
def sample(hermes_home: Path) -> Path:
    """The test profile's store, filled with examples/sample-sessions.jsonl."""
    return load_sample()


def _ids(data: dict) -> list[str]:
    return [s["id"] for s in data["sessions"]]


# --- list -----------------------------------------------------------------------------------


def test_list_shows_newest_session_first_with_title(sample: Path) -> None:
    result = run("sessions", "list")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["ID", "Title"]
    assert lines[1].startswith(NEWEST) and "SQLite WAL checkpoint questions" in lines[1]


def test_list_output_has_no_ansi_when_not_a_terminal(sample: Path) -> None:
    assert ANSI_ESCAPE not in run("sessions", "list").stdout


def test_list_on_a_fresh_profile_prints_no_sessions_yet_and_creates_nothing(
    hermes_home: Path,
) -> None:
    result = run("sessions", "list")
    assert (result.exit_code, result.stdout) == (0, "No sessions yet.\n")
    assert list(hermes_home.iterdir()) == []


def test_list_json_has_the_documented_keys(sample: Path) -> None:
    data = run_json("sessions", "list", "--limit", "1")
    assert set(data) == {"sessions", "total", "offset", "complete", "errors", "vault_not_listed"}
    session = data["sessions"][0]
    assert list(session) == [
        "id",
        "title",
        "preview",
        "source",
        "model",
        "profile",
        "parent_session_id",
        "started_at",
        "ended_at",
        "end_reason",
        "last_active_at",
        "message_count",
        "stored_message_count",
        "tool_call_count",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "cost_usd",
        "archived",
        "pinned",
    ]
    assert data["total"] == 12
    # The vocabulary: ISO-8601 UTC times, booleans as booleans.
    assert session["started_at"] == "2026-12-01T17:18:45Z"
    assert session["archived"] is False and session["pinned"] is False
    assert session["total_tokens"] == session["input_tokens"] + session["output_tokens"]


def test_list_limit_and_offset_page_through_sessions(sample: Path) -> None:
    first = _ids(run_json("sessions", "list", "--limit", "5"))
    second = _ids(run_json("sessions", "list", "--limit", "5", "--offset", "5"))
    everything = _ids(run_json("sessions", "list", "--limit", "100"))
    assert first + second == everything[:10] and len(everything) == 12


def test_list_says_how_to_see_more_when_truncated(sample: Path) -> None:
    result = run("sessions", "list", "--limit", "2")
    assert "Showing 1-2 of 12 sessions" in result.stderr


def test_list_filters_by_source_and_excluded_source(sample: Path) -> None:
    cron = run_json("sessions", "list", "--source", "cron")
    assert {s["source"] for s in cron["sessions"]} == {"cron"} and cron["total"] == 2
    rest = run_json("sessions", "list", "--exclude-source", "cron", "--exclude-source", "cli")
    assert {s["source"] for s in rest["sessions"]} == {"telegram", "discord"}


def test_list_sort_active_orders_by_last_activity(sample: Path) -> None:
    with open_store(sample) as store:
        messages.append_message(store, DOCKER, "user", "back again", timestamp=2_000_000_000.0)
    assert _ids(run_json("sessions", "list", "--sort", "active"))[0] == DOCKER
    assert _ids(run_json("sessions", "list", "--sort", "started"))[0] == NEWEST


def test_list_shows_a_preview_when_there_is_no_title(sample: Path) -> None:
    row = next(
        s for s in run_json("sessions", "list")["sessions"] if s["id"] == "20261128_220940_1b2c3d"
    )
    assert row["title"] is None
    assert row["preview"].startswith("what's the difference between WAL")
    # Piped, the table is whole: the preview is printed as the library made it.
    assert row["preview"] in run("sessions", "list").stdout


def test_list_rejects_an_unknown_sort_with_exit_2(sample: Path) -> None:
    result = run("sessions", "list", "--sort", "sideways")
    assert result.exit_code == 2
    assert "--sort" in result.stderr


def test_list_all_profiles_adds_the_profile_and_reports_broken_ones(
    sample: Path, hermes_home: Path
) -> None:
    assert run("profile", "create", "empty").exit_code == 0
    assert run("profile", "create", "broken").exit_code == 0
    (hermes_home / "profiles" / "broken" / "state.db").write_bytes(b"not a database at all" * 10)
    run("profile", "create", "work")
    work_db = hermes_home / "profiles" / "work" / "state.db"
    with open_store(work_db) as store:
        sessions.create_session(store, "work-1", "cli", started_at=2_000_000_000.0)
    data = run_json("sessions", "list", "--all-profiles", "--limit", "3")
    assert [(s["id"], s["profile"]) for s in data["sessions"]][:2] == [
        ("work-1", "work"),
        (NEWEST, "default"),
    ]
    assert data["total"] == 13
    assert {(e["profile"], e["error"]) for e in data["errors"]} == {
        ("empty", "missing"),
        ("broken", "corrupt"),
    }
    plain = run("sessions", "list", "--all-profiles")
    assert "Profile" in plain.stdout.splitlines()[0]
    assert "profile broken: corrupt" in plain.stderr


# --- search ---------------------------------------------------------------------------------


def test_search_json_hits_have_the_documented_keys(sample: Path) -> None:
    data = run_json("sessions", "search", "chat-send")
    assert set(data) == {
        "query",
        "ordering",
        "route",
        "partial",
        "ranked",
        "examined",
        "candidates",
        "searched_back_to",
        "matches",
        "sessions",
        "complete",
        "hits",
        "title_match_count",
        "title_matches",
    }
    assert data["query"] == "chat-send" and data["hits"] and data["ordering"] == "rank"
    hit = data["hits"][0]
    assert set(hit) == {
        "id",
        "session_id",
        "session_title",
        "role",
        "snippet",
        "created_at",
        "tool_name",
        "source",
        "model",
        "session_started_at",
        "context",
        "vault",
    }
    assert ">>>chat-send<<<" in hit["snippet"] and hit["vault"] is None
    assert hit["created_at"].endswith("Z") and hit["session_started_at"].startswith("2026-11-")


def test_search_plain_text_marks_matches_without_ansi(sample: Path) -> None:
    result = run("sessions", "search", "chat-send")
    assert result.exit_code == 0
    assert ">>>chat-send<<<" in result.stdout and CHAT_SEND in result.stdout
    assert "chat-send rate limits" in result.stdout
    assert ANSI_ESCAPE not in result.stdout


def test_search_finds_two_character_japanese_words(sample: Path) -> None:
    hits = run_json("sessions", "search", "会議")["hits"]
    assert {h["session_id"] for h in hits} >= {TOKYO}


def test_search_filters_by_role(sample: Path) -> None:
    hits = run_json("sessions", "search", "chat-send", "--role", "tool")["hits"]
    assert hits and {h["role"] for h in hits} == {"tool"}


def test_search_on_a_fresh_profile_is_empty(hermes_home: Path) -> None:
    data = run_json("sessions", "search", "anything")
    assert (data["query"], data["hits"]) == ("anything", [])
    assert not (hermes_home / "state.db").exists()


# --- show -----------------------------------------------------------------------------------


def test_show_by_unique_prefix_prints_the_transcript(sample: Path) -> None:
    result = run("sessions", "show", "20261119")
    assert result.exit_code == 0
    assert "東京の会議の予定" in result.stdout
    assert "→ calendar.update(" in result.stdout


def test_show_by_title_shows_the_session_with_that_title(sample: Path) -> None:
    result = run("sessions", "show", "Refactor search module #2")
    assert "Session:  20261122_113000_e11b21" in result.stdout


def test_show_includes_compacted_rows_and_marks_them(sample: Path) -> None:
    out = run("sessions", "show", "20261122_101500").stdout
    assert out.count("[compacted]") == 4


def test_show_hides_inactive_rows_unless_all(sample: Path) -> None:
    with open_store(sample) as store:
        messages.append_message(store, DOCKER, "user", "rewound turn", active=0)
    assert "rewound turn" not in run("sessions", "show", DOCKER).stdout
    assert "rewound turn [inactive]" not in run("sessions", "show", DOCKER).stdout
    shown = run("sessions", "show", DOCKER, "--all").stdout
    assert "[inactive]" in shown and "rewound turn" in shown


def test_show_json_is_the_export_record(sample: Path) -> None:
    data = run_json("sessions", "show", TOKYO)
    expected = next(r for r in sample_records() if r["id"] == TOKYO)
    assert data["id"] == TOKYO and data["title"] == expected["title"]
    assert [m["message_uid"] for m in data["messages"]] == [
        m["message_uid"] for m in expected["messages"]
    ]


def test_show_unknown_id_fails_with_a_hint(sample: Path) -> None:
    result = run("sessions", "show", "nope")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: No session has the id, id prefix or exact title 'nope'")
    assert "Hint: Name the session by its id (see: hermes sessions list)." in result.stderr
    assert "Traceback" not in result.output


def test_show_on_a_fresh_profile_fails_and_creates_nothing(hermes_home: Path) -> None:
    result = run("sessions", "show", "x")
    assert result.exit_code == 1 and "No store yet" in result.stderr
    assert list(hermes_home.iterdir()) == []


# --- export / import ------------------------------------------------------------------------


def test_export_then_import_round_trips_through_the_cli(
    sample: Path, tmp_path: Path, hermes_home: Path
) -> None:
    dump = tmp_path / "all.jsonl"
    result = run("sessions", "export", "-o", str(dump))
    assert result.exit_code == 0, result.stderr
    assert "Exported 12 sessions (53 stored messages, every generation)" in result.stderr
    run("profile", "create", "copy")
    imported = run("-p", "copy", "sessions", "import", str(dump))
    assert imported.exit_code == 0, imported.stderr
    assert "Imported 12 sessions (53 messages)" in imported.stdout
    with (
        open_store(sample, read_only=True) as a,
        open_store(hermes_home / "profiles" / "copy" / "state.db", read_only=True) as b,
    ):
        for sid in (DOCKER, TOKYO):
            assert messages.get_messages(a, sid, include_inactive=True) == messages.get_messages(
                b, sid, include_inactive=True
            )
            assert sessions.get_session(a, sid) == sessions.get_session(b, sid)


def test_export_to_stdout_writes_one_session_per_line(sample: Path) -> None:
    result = run("sessions", "export", "--source", "discord")
    lines = result.stdout.splitlines()
    assert [json.loads(line)["source"] for line in lines] == ["discord", "discord"]


def test_export_session_id_accepts_prefixes_and_titles(sample: Path) -> None:
    out = run("sessions", "export", "--session-id", "2026111", "--session-id", "Grocery list")
    assert out.exit_code == 1 and "more than one session" in out.stderr
    out = run("sessions", "export", "--session-id", "20261118", "--session-id", "Grocery list")
    assert [json.loads(line)["id"] for line in out.stdout.splitlines()] == [
        DOCKER,
        "20261124_183322_f00d01",
    ]


def test_export_newer_than_an_iso_date_selects_later_sessions(sample: Path) -> None:
    out = run("sessions", "export", "--format", "json", "--newer-than", "2026-11-29")
    ids = [r["id"] for r in json.loads(out.stdout)]
    assert ids == ["20261129_030000_2c3d4e", "20261130_091233_3d4e5f", NEWEST]


def test_export_markdown_is_readable(sample: Path) -> None:
    out = run("sessions", "export", "--format", "md", "--session-id", TOKYO).stdout
    assert out.startswith("# Hermes sessions export") and "## 東京の会議の予定" in out


def test_export_refuses_to_overwrite_a_file(sample: Path, tmp_path: Path) -> None:
    target = tmp_path / "x.jsonl"
    target.write_text("mine", encoding="utf-8")
    result = run("sessions", "export", "-o", str(target))
    assert result.exit_code == 1
    assert "Refusing to overwrite" in result.stderr and "-o -" in result.stderr
    assert target.read_text(encoding="utf-8") == "mine"


def test_export_refuses_a_directory(sample: Path, tmp_path: Path) -> None:
    result = run("sessions", "export", "-o", str(tmp_path))
    assert result.exit_code == 1 and "is a directory" in result.stderr


def test_export_bad_age_is_a_usage_error_naming_the_flag(sample: Path) -> None:
    result = run("sessions", "export", "--older-than", "soon")
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
    assert "--older-than" in result.stderr and "90d" in result.stderr and "2w" in result.stderr


def test_export_of_a_fresh_profile_is_empty_and_creates_no_store(hermes_home: Path) -> None:
    result = run("sessions", "export", "--format", "json")
    assert (result.exit_code, result.stdout) == (0, "[]\n")
    assert not (hermes_home / "state.db").exists()


def test_import_reports_bad_lines_and_exits_1(hermes_home: Path, tmp_path: Path) -> None:
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], "{broken", lines[1]]) + "\n", encoding="utf-8")
    result = run("sessions", "import", str(bad))
    assert result.exit_code == 1
    assert "Imported 2 sessions" in result.stdout
    assert "Error: line 2: invalid JSON" in result.stderr


def test_import_replace_overwrites_existing_sessions(sample: Path, tmp_path: Path) -> None:
    record = next(r for r in sample_records() if r["id"] == DOCKER)
    record["title"] = "Docker build (edited)"
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert "skipped 1" in run("sessions", "import", str(path)).stdout
    assert "replaced 1" in run("sessions", "import", str(path), "--on-conflict", "replace").stdout
    assert run_json("sessions", "show", DOCKER)["title"] == "Docker build (edited)"


# --- prune / delete / rename ----------------------------------------------------------------


def test_prune_dry_run_lists_and_deletes_nothing(sample: Path) -> None:
    result = run("sessions", "prune", "--older-than", "2026-11-25", "--dry-run")
    assert result.exit_code == 0
    assert "7 ended sessions last active before" in result.stdout
    assert "Dry run: nothing deleted." in result.stdout
    assert run_json("sessions", "list")["total"] == 12


def test_prune_yes_deletes_old_ended_sessions(sample: Path) -> None:
    result = run("sessions", "prune", "--older-than", "2026-11-25", "--yes")
    assert result.exit_code == 0, result.stderr
    assert "Pruned 7 session(s)" in result.stdout
    assert run_json("sessions", "list")["total"] == 5


def test_prune_aborts_on_eof(sample: Path) -> None:
    result = run("sessions", "prune", "--older-than", "2026-11-25", input="")
    assert result.exit_code == 1
    assert "[y/N]" in result.stderr and "Aborted" in result.stderr
    assert run_json("sessions", "list")["total"] == 12


def test_prune_compact_with_dry_run_writes_nothing(sample: Path) -> None:
    before = sample.read_bytes()
    result = run("sessions", "prune", "--older-than", "2026-11-25", "--compact", "--dry-run")
    assert result.exit_code == 0 and "Dry run: nothing deleted." in result.stdout
    assert sample.read_bytes() == before


def test_prune_compact_takes_no_value(sample: Path) -> None:
    before = sample.read_bytes()
    result = run("sessions", "prune", "--compact=yes", "--yes")
    assert result.exit_code == 2 and "--compact" in result.stderr
    assert "Traceback" not in result.stderr and sample.read_bytes() == before


def test_prune_bad_duration_exits_2_naming_the_flag(sample: Path) -> None:
    result = run("sessions", "prune", "--older-than", "90x")
    assert result.exit_code == 2
    assert "--older-than" in result.stderr and "'90x'" in result.stderr


def test_delete_asks_and_keeps_the_session_when_declined(sample: Path) -> None:
    result = run("sessions", "delete", DOCKER, input="n\n")
    assert result.exit_code == 1 and "Aborted" in result.stderr
    assert run_json("sessions", "list")["total"] == 12


def test_delete_with_confirmation_removes_the_session(sample: Path) -> None:
    result = run("sessions", "delete", "Fix Docker build", input="y\n")
    assert result.exit_code == 0, result.stderr
    assert f"Deleted session '{DOCKER}' (5 messages)." in result.stdout
    assert run("sessions", "show", DOCKER).exit_code == 1


def test_rename_sets_a_title(sample: Path) -> None:
    result = run("sessions", "rename", "20261128_220940", "WAL", "vs", "DELETE")
    assert result.stdout == "Session '20261128_220940_1b2c3d' renamed to: WAL vs DELETE\n"


def test_rename_to_a_title_in_use_fails_with_a_hint(sample: Path) -> None:
    result = run("sessions", "rename", "20261128_220940", "Fix Docker build")
    assert result.exit_code == 1
    assert f"already in use by session {DOCKER}" in result.stderr
    assert result.stderr.splitlines()[1].startswith("Hint: ")


def flags(session_id: str) -> tuple[int, int]:
    """(pinned, archived) of a session, read through the library."""
    with open_store(default_db_path(), read_only=True) as store:
        row = sessions.get_session(store, session_id)
    return row["pinned"], row["archived"]


def test_pin_and_unpin_by_id_prefix_and_title(sample: Path) -> None:
    result = run("sessions", "pin", "20261128_220940", "Fix Docker build")
    assert result.exit_code == 0, result.stderr
    assert f"Pinned session '{DOCKER}' (Fix Docker build).\n" in result.stdout
    assert flags(DOCKER) == (1, 0) and flags("20261128_220940_1b2c3d") == (1, 0)
    again = run("sessions", "pin", DOCKER)
    assert again.stdout == f"Session '{DOCKER}' (Fix Docker build) is already pinned.\n"
    assert run("sessions", "unpin", DOCKER).stdout == (
        f"Unpinned session '{DOCKER}' (Fix Docker build).\n"
    )
    assert flags(DOCKER) == (0, 0)


def test_archive_hides_from_list_and_unarchive_brings_it_back(sample: Path) -> None:
    assert run("sessions", "archive", DOCKER).exit_code == 0
    assert flags(DOCKER) == (0, 1)
    assert DOCKER not in _ids(run_json("sessions", "list", "--limit", "50"))
    assert run("sessions", "unarchive", DOCKER).exit_code == 0
    assert DOCKER in _ids(run_json("sessions", "list", "--limit", "50"))


def test_pin_with_an_unknown_id_changes_nothing_and_exits_1(sample: Path) -> None:
    result = run("sessions", "pin", DOCKER, "no-such-session")
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "Error: No session has the id, id prefix or exact title 'no-such"
    )
    assert flags(DOCKER) == (0, 0)


# --- stats / recover ------------------------------------------------------------------------


def test_stats_json_counts_sources_models_and_files(sample: Path) -> None:
    data = run_json("sessions", "stats")
    assert data["session_count"] == 12
    assert {r["source"]: r["session_count"] for r in data["by_source"]} == {
        "cli": 5,
        "telegram": 3,
        "discord": 2,
        "cron": 2,
    }
    assert data["top_sessions"][0]["id"] == "20261122_101500_e11b20"
    assert data["store"]["files"]["db"] > 0


def test_stats_text_shows_totals(sample: Path) -> None:
    out = run("sessions", "stats").stdout
    assert "Sessions:       12" in out and "49 live, 53 stored" in out and "By model" in out


def test_stats_on_a_fresh_profile_is_zero(hermes_home: Path) -> None:
    assert run_json("sessions", "stats")["session_count"] == 0
    assert list(hermes_home.iterdir()) == []


def test_stats_all_profiles_reports_each_profile(sample: Path) -> None:
    run("profile", "create", "fresh")
    data = run_json("sessions", "stats", "--all-profiles")
    assert [p["profile"] for p in data["profiles"]] == ["default"]
    assert data["errors"] == [
        {"profile": "fresh", "error": "missing", "message": data["errors"][0]["message"]}
    ]


def test_recover_copies_the_store_into_a_new_file(sample: Path, tmp_path: Path) -> None:
    target = tmp_path / "new.db"
    data = run_json("sessions", "recover", "--to", str(target))
    assert data["accepted"] and data["installed"] is False
    assert data["tables"]["sessions"]["copied"] == 12
    with open_store(target, read_only=True) as store:
        assert session_list.count_sessions(store) == 12


def test_recover_prints_counts_verdict_and_what_to_do_next(sample: Path, tmp_path: Path) -> None:
    target = tmp_path / "new.db"
    result = run("sessions", "recover", "--to", str(target))
    assert result.exit_code == 0, result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines() if line}
    assert rows["sessions"][:4] == ["12", "12", "0", "copied"]  # expected, recovered, lost
    assert "Verification: ok (integrity ok, 0 foreign key violations" in result.stdout
    assert f"Wrote {target}; report: " in result.stdout
    assert "The live store was not replaced." in result.stdout
    assert "Lost:" not in result.stderr and "Skipped" not in result.stderr


def test_recover_of_a_damaged_store_says_what_was_lost_and_keeps_the_copy(
    db_path: Path, tmp_path: Path
) -> None:
    populate_store(db_path, sessions_n=4, messages_per_session=300)
    leaves = table_pages(db_path, "messages")
    zero_pages(db_path, leaves[len(leaves) // 2 : len(leaves) // 2 + 2])
    target = tmp_path / "salvaged.db"
    result = run("sessions", "recover", "--to", str(target))
    assert result.exit_code == 1, result.stdout + result.stderr
    assert "Verification: ok" in result.stdout
    assert f"The partial copy was kept at {target}" in result.stderr
    assert "--allow-partial" in result.stderr
    with open_store(target, read_only=True) as store:
        kept = store.conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert 0 < kept < 4 * 300


def test_recover_refuses_an_existing_target(sample: Path, tmp_path: Path) -> None:
    target = tmp_path / "new.db"
    target.write_bytes(b"")
    result = run("sessions", "recover", "--to", str(target))
    assert result.exit_code == 1 and result.stderr.startswith("Error: ")


# --- read-only commands ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("sessions", "list"),
        ("sessions", "search", "docker"),
        ("sessions", "show", DOCKER),
        ("sessions", "stats"),
        ("sessions", "export"),
        ("db", "check"),
        ("db", "path"),
        ("db", "lockowners"),
    ],
)
def test_read_only_commands_leave_the_store_untouched(sample: Path, args: tuple[str, ...]) -> None:
    wal = Path(str(sample) + "-wal")
    before = (os.stat(sample).st_mtime_ns, os.stat(sample).st_size)
    wal_before = wal.stat().st_size if wal.exists() else 0
    result = run(*args)
    assert result.exit_code == 0, result.stderr
    assert (os.stat(sample).st_mtime_ns, os.stat(sample).st_size) == before
    # SQLite may create an empty -wal for a reader; nothing is ever written to it.
    assert (wal.stat().st_size if wal.exists() else 0) == wal_before


def test_show_json_is_the_export_record_in_the_documented_vocabulary(sample: Path) -> None:
    from hermes_cli.rendering import records

    with open_store(sample, read_only=True) as store:
        record = export.export_session(store, TOKYO)
    shown = run_json("sessions", "show", TOKYO)
    assert shown["vault"] is None  # read from the live store
    expected = records.session(record, "default")
    assert {k: v for k, v in shown.items() if k not in ("messages", "vault")} == expected
    assert shown["messages"] == [
        {**records.message(m, TOKYO), "vault": None} for m in record["messages"]
    ]
    assert shown["started_at"] == records.iso_utc(record["started_at"])


# --- the same filters everywhere ------------------------------------------------------------


def test_list_since_and_until_take_dates_and_durations(sample: Path) -> None:
    since = _ids(run_json("sessions", "list", "--since", "2026-11-29"))
    assert since == [NEWEST, "20261130_091233_3d4e5f", "20261129_030000_2c3d4e"]
    window = run_json("sessions", "list", "--since", "2026-11-20", "--until", "2026-11-21")
    assert _ids(window) == [CHAT_SEND] and window["total"] == 1
    assert run_json("sessions", "list", "--since", "1m")["total"] == 0  # nothing in the last minute


def test_search_since_and_until_filter_by_message_time(sample: Path) -> None:
    every = run_json("sessions", "search", "chat-send")["hits"]
    later = run_json("sessions", "search", "chat-send", "--since", "2026-11-21")["hits"]
    assert {h["session_id"] for h in later} == {"20261121_060000_d90a11"}
    earlier = run_json("sessions", "search", "chat-send", "--until", "2026-11-21")["hits"]
    assert len(later) + len(earlier) == len(every)


def test_export_takes_repeated_sources_exclusions_and_since_until(sample: Path) -> None:
    out = run("sessions", "export", "--source", "cron", "--source", "discord")
    assert {json.loads(x)["source"] for x in out.stdout.splitlines()} == {"cron", "discord"}
    out = run("sessions", "export", "--exclude-source", "cli", "--since", "2026-11-29")
    assert [json.loads(x)["id"] for x in out.stdout.splitlines()] == [
        "20261129_030000_2c3d4e",
        "20261130_091233_3d4e5f",
    ]
    old_name = run("sessions", "export", "--newer-than", "2026-11-29", "--exclude-source", "cli")
    assert old_name.stdout == out.stdout


def test_prune_since_and_exclude_source_narrow_what_is_deleted(sample: Path) -> None:
    result = run(
        "sessions",
        "prune",
        "--until",
        "2026-11-25",
        "--since",
        "2026-11-20",
        "--exclude-source",
        "cron",
        "--dry-run",
    )
    assert result.exit_code == 0, result.stderr
    listed = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("2026")]
    assert "Refactor search module #2" in result.stdout  # the preview names what goes
    assert listed == [
        CHAT_SEND,
        "20261122_101500_e11b20",
        "20261122_113000_e11b21",
        "20261124_183322_f00d01",
    ]


@pytest.mark.parametrize("command", ["list", "export", "prune"])
def test_a_bad_since_is_a_usage_error_naming_the_flag(sample: Path, command: str) -> None:
    result = run("sessions", command, "--since", "lately")
    assert result.exit_code == 2 and "--since" in result.stderr and "2w" in result.stderr


# --- edits act on exactly one session (issue 14) ------------------------------------------------


def test_rename_by_a_lineage_title_is_refused_naming_the_numbered_session(sample: Path) -> None:
    from hermes_state.agent.db import SessionDB

    with SessionDB(sample) as db:
        db.set_session_title("20261122_101500_e11b20", None)  # "Refactor search module" is gone
    result = run("sessions", "rename", "Refactor search module", "X")
    assert result.exit_code == 1
    assert "20261122_113000_e11b21" in result.stderr  # the "#2" is named as a candidate
    with SessionDB(sample) as db:
        assert db.get_session_title("20261122_113000_e11b21") == "Refactor search module #2"


def test_delete_by_exact_title_deletes_that_session_only(sample: Path) -> None:
    result = run("sessions", "delete", "Refactor search module", "--yes")
    assert result.exit_code == 0, result.stderr
    shown = run("sessions", "show", "20261122_113000_e11b21")
    assert shown.exit_code == 0  # "#2" is still there
    gone = run("sessions", "show", "20261122_101500_e11b20")
    assert gone.exit_code == 1


def test_an_ambiguous_prefix_is_refused_with_its_candidates(sample: Path) -> None:
    result = run("sessions", "delete", "2026112", "--yes")
    assert result.exit_code == 1
    assert "20261120_160245_c3f871" in result.stderr and "more than one" in result.stderr
