"""Issue 14, "Everyday commands an operator can trust": each numbered case, end to end.

Every command runs as its own `python -m hermes_cli` process with HERMES_HOME set to the test's
home. Answers are checked against SQL written here, against the files on disk, or against
another command. Most cases read a store generated once per module by bench/generate.py
(6,000 messages), with some turns rewound, some sessions pinned and one lineage still open, so
that live, shown and stored message counts all differ; tests that change a store work on a copy.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clitools import REPO_ROOT, child, load_sample
from support.children import child_env

from hermes_state.store import home

MESSAGES = 6000
SEED = 2
# A visible search hit: a live row or compacted history, never a hidden display row.
VISIBLE = (
    "(m.active = 1 OR m.compacted = 1) AND (m.display_kind IS NULL OR m.display_kind <> 'hidden')"
)
SESSION_ID = re.compile(r"^\d{8}_\d{6}_[0-9a-f]{6}\b")
PIPE_BYTES = 4096  # the reader's pipe is shrunk to one page, so any longer output overflows it
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
GENERATE = (sys.executable, str(REPO_ROOT / "bench" / "generate.py"), "--quiet")
HERMES = (sys.executable, "-m", "hermes_cli")
RAM = Path("/dev/shm")  # a tmpfs on Linux: commits there cost no fsync


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated store: rewound turns, pinned sessions and an open lineage tip added.

    Tests that only read it use its directory as their HERMES_HOME; the rest copy it.
    """
    out = tmp_path_factory.mktemp("everyday")
    env = child_env()
    # Generated in RAM where there is a tmpfs: its ~1,000 small commits cost fsyncs, not work.
    with tempfile.TemporaryDirectory(dir=RAM if RAM.is_dir() else out) as scratch:
        subprocess.run(
            [*GENERATE, "--messages", str(MESSAGES), "--seed", str(SEED), "--out", scratch],
            env=env,
            check=True,
            capture_output=True,
            timeout=600,
        )
        db = out / "state.db"
        shutil.copyfile(Path(scratch) / "state.db", db)
    conn = sqlite3.connect(db)
    with conn:
        # Rewound turns: stored, neither live nor shown.
        conn.execute("UPDATE messages SET active = 0 WHERE id % 17 = 0 AND active = 1")
        conn.execute("UPDATE sessions SET pinned = 1 WHERE rowid % 11 = 0")
        # The newest compression lineage goes on: its tip is open, so prune keeps its ancestors.
        (tip,) = conn.execute(
            "SELECT c.id FROM sessions c JOIN sessions p ON p.id = c.parent_session_id "
            "WHERE p.end_reason = 'compression' ORDER BY c.started_at DESC LIMIT 1"
        ).fetchone()
        conn.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?", (tip,))
    conn.close()
    return db


@pytest.fixture
def copied(generated: Path, hermes_home: Path) -> Path:
    """A copy of the generated store as this test's own state.db."""
    db = hermes_home / "state.db"
    shutil.copyfile(generated, db)
    return db


@pytest.fixture
def ram_home(generated: Path, tmp_path: Path) -> Iterator[Path]:
    """A home of its own holding a copy of the generated store, in RAM where there is a tmpfs.

    For commands that commit once per session: on disk, fsyncs would take most of their time.
    """
    with tempfile.TemporaryDirectory(dir=RAM if RAM.is_dir() else tmp_path) as scratch:
        shutil.copyfile(generated, Path(scratch) / "state.db")
        yield Path(scratch)


def hermes(*args: str, home_dir: Path | None = None, input: str | None = None) -> Any:
    """Run `hermes ARGS` as a process (in home_dir when given, else the test's HERMES_HOME)."""
    return child(*args, env={"HERMES_HOME": str(home_dir)} if home_dir else None, input=input)


def hermes_json(*args: str, home_dir: Path | None = None) -> Any:
    """Run a --json command, require exit 0, and return the parsed stdout."""
    proc = hermes(*args, "--json", home_dir=home_dir)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def sql(db: Path, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run a query on a store, read-only, on a connection of its own."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


def one(db: Path, query: str, params: tuple[Any, ...] = ()) -> Any:
    """Return the single value a query selects."""
    return sql(db, query, params)[0][0]


def word_hits(db: Path, match: str, where: str = "", params: tuple[Any, ...] = ()) -> list[int]:
    """Every visible message the word index matches, filtered by joins, best rank first."""
    rows = sql(
        db,
        "SELECT m.id FROM messages_fts f JOIN messages m ON m.id = f.rowid "
        "JOIN sessions s ON s.id = m.session_id "
        f"WHERE messages_fts MATCH ? AND {VISIBLE} {where} ORDER BY f.rank, m.id DESC",
        (match, *params),
    )
    return [r[0] for r in rows]


def assert_error(proc: Any, code: int) -> list[str]:
    """Require a failure with exit code `code`: an `Error:` line (+ hint), no traceback."""
    lines = proc.stderr.splitlines()
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert lines and lines[0].startswith("Error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert all(line.startswith(("Error: ", "Hint: ")) for line in lines), proc.stderr
    return lines


def human(size: int) -> str:
    """A byte count as the CLI prints it for files of a KiB to a GiB (one decimal)."""
    if size >= 1 << 20:
        return f"{size / (1 << 20):.1f} MiB"
    return f"{size / 1024:.1f} KiB"


# --- 1. search ------------------------------------------------------------------------------


def test_filtered_search_equals_hand_written_sql_and_repeats_exactly(generated: Path) -> None:
    args = ("sessions", "search", "checkpoint", "--role", "tool", "--source", "cron")
    first = hermes(*args, "--limit", "100", "--json", home_dir=generated.parent)
    again = hermes(*args, "--limit", "100", "--json", home_dir=generated.parent)
    truth = word_hits(generated, "checkpoint", "AND m.role = 'tool' AND s.source = 'cron'")
    assert first.returncode == 0, first.stderr
    document = json.loads(first.stdout)
    assert 0 < len(truth) <= 100
    assert [h["id"] for h in document["hits"]] == truth
    assert (document["ordering"], document["partial"]) == ("rank", False)
    assert again.stdout == first.stdout


def test_filtered_search_deeper_than_the_limit_is_the_sql_top(generated: Path) -> None:
    args = ("sessions", "search", "checkpoint", "--role", "assistant")
    filters = ("--source", "telegram", "--source", "discord", "--limit", "100")
    document = hermes_json(*args, *filters, home_dir=generated.parent)
    truth = word_hits(
        generated, "checkpoint", "AND m.role = 'assistant' AND s.source IN ('telegram', 'discord')"
    )
    assert len(truth) > 100
    assert [h["id"] for h in document["hits"]] == truth[:100]


def test_several_bare_words_are_one_query(generated: Path) -> None:
    where = generated.parent
    bare = hermes("sessions", "search", "docker", "nginx", "--limit", "0", "--json", home_dir=where)
    quoted = hermes("sessions", "search", "docker nginx", "--limit", "0", "--json", home_dir=where)
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout == quoted.stdout
    ids = sorted(h["id"] for h in json.loads(bare.stdout)["hits"])
    assert ids == sorted(word_hits(generated, "docker nginx"))
    assert len(ids) < len(word_hits(generated, "docker"))  # both words, not either


def test_unknown_role_is_a_usage_error_naming_the_roles(generated: Path) -> None:
    proc = hermes("sessions", "search", "checkpoint", "--role", "foo", home_dir=generated.parent)
    (line,) = assert_error(proc, 2)
    assert "'foo'" in line
    assert all(role in line for role in ("user", "assistant", "tool"))
    assert proc.stdout == ""


def test_unknown_source_names_the_stores_sources_and_a_guess(generated: Path) -> None:
    proc = hermes(
        "sessions", "search", "checkpoint", "--source", "telgram", home_dir=generated.parent
    )
    (line,) = assert_error(proc, 2)
    assert "did you mean 'telegram'" in line
    sources = [r[0] for r in sql(generated, "SELECT DISTINCT source FROM sessions")]
    assert len(sources) == 7 and all(s in line for s in sources)
    assert "No messages match" not in proc.stdout + proc.stderr


def test_rank_sort_is_refused_for_substring_matches_and_the_default_says_newest(
    generated: Path,
) -> None:
    refused = hermes("sessions", "search", "etzal", "--sort", "rank", home_dir=generated.parent)
    lines = assert_error(refused, 2)
    assert any(line.startswith("Hint: ") and "--sort newest" in line for line in lines)
    default = hermes("sessions", "search", "etzal", "--json", home_dir=generated.parent)
    assert default.returncode == 0, default.stderr
    document = json.loads(default.stdout)
    ids = [h["id"] for h in document["hits"]]
    # The agent's substring index holds no tool rows (nor cron sessions); the search scans
    # those too, so the answer is every visible row holding the text (issue 33).
    truth = sql(
        generated,
        "SELECT m.id FROM messages m WHERE (m.content LIKE '%etzal%' "
        "OR m.tool_name LIKE '%etzal%' OR m.tool_calls LIKE '%etzal%') "
        f"AND {VISIBLE} ORDER BY m.id DESC",
    )
    assert len(ids) >= 2 and ids == [r[0] for r in truth]  # newest first
    assert document["ordering"] == "newest"
    assert default.stderr.startswith("Note: newest first")


def test_a_common_word_says_it_ranked_the_newest_2000_and_all_ranks_everything(
    generated: Path,
) -> None:
    total = len(word_hits(generated, "checkpoint"))
    assert total > 2000
    shown = hermes("sessions", "search", "checkpoint", home_dir=generated.parent)
    assert shown.returncode == 0
    assert "ranked among the newest 2,000 matches" in shown.stderr
    recent = hermes_json("sessions", "search", "checkpoint", "-n", "20", home_dir=generated.parent)
    assert (recent["ordering"], recent["ranked"], recent["partial"]) == ("rank_recent", 2000, False)
    # Without -n a machine format asks for every hit: every match is examined and ranked.
    whole = hermes_json("sessions", "search", "checkpoint", home_dir=generated.parent)
    assert (whole["ordering"], whole["ranked"], whole["complete"]) == ("rank", total, True)
    assert len(whole["hits"]) == whole["matches"] == total
    everything = hermes(
        "sessions", "search", "checkpoint", "--all", "--json", home_dir=generated.parent
    )
    assert everything.returncode == 0 and everything.stderr == ""
    assert json.loads(everything.stdout)["ordering"] == "rank"


def test_limit_zero_returns_every_match(generated: Path) -> None:
    document = hermes_json(
        "sessions", "search", "checkpoint", "--limit", "0", home_dir=generated.parent
    )
    ids = [h["id"] for h in document["hits"]]
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(word_hits(generated, "checkpoint"))


def test_a_filtered_cjk_search_equals_sql_and_repeats_exactly(generated: Path) -> None:
    # Issue 14 saw `search 会議 --source cron` give 2 hits, then 24: the same query again.
    args = ("sessions", "search", "会議", "--role", "assistant", "--sort", "newest")
    filters = ("--source", "cron", "--source", "telegram", "--source", "discord", "--limit", "0")
    first = hermes(*args, *filters, "--json", home_dir=generated.parent)
    again = hermes(*args, *filters, "--json", home_dir=generated.parent)
    assert first.returncode == 0, first.stderr
    truth = sql(
        generated,
        "SELECT m.id FROM messages m JOIN sessions s ON s.id = m.session_id "
        "WHERE (m.content LIKE ?1 OR m.tool_name LIKE ?1 OR m.tool_calls LIKE ?1) "
        f"AND {VISIBLE} AND m.role = 'assistant' "
        "AND s.source IN ('cron', 'telegram', 'discord') ORDER BY m.id DESC",
        ("%会議%",),
    )
    document = json.loads(first.stdout)
    assert len(truth) >= 10
    assert [h["id"] for h in document["hits"]] == [r[0] for r in truth]
    assert (document["ordering"], document["partial"]) == ("newest", False)
    assert again.stdout == first.stdout


# --- 2. destructive commands act only on an exact match -------------------------------------

REFACTOR = "20261122_101500_e11b20"  # "Refactor search module"
REFACTOR_2 = "20261122_113000_e11b21"  # "Refactor search module #2", its continuation


def _titles(db: Path) -> dict[str, str | None]:
    """Every session's title, by id."""
    return dict(sql(db, "SELECT id, title FROM sessions"))


def test_rename_by_exact_title_renames_exactly_that_session(hermes_home: Path) -> None:
    db = load_sample()
    before = _titles(db)
    proc = hermes("sessions", "rename", "Refactor search module", "X")
    assert proc.returncode == 0, proc.stderr
    assert REFACTOR in proc.stdout
    assert _titles(db) == {**before, REFACTOR: "X"}


# Neither names one session: a title prefix, the title in another case, two id prefixes.
INEXACT = ("Refactor search", "refactor search module", "20261122", "20261122_1")


@pytest.mark.parametrize("command", ["rename", "delete"])
def test_an_inexact_reference_is_refused_listing_candidates_and_changes_nothing(
    hermes_home: Path, command: str
) -> None:
    db = load_sample()
    sessions = sql(db, "SELECT * FROM sessions ORDER BY id")
    messages = sql(db, "SELECT * FROM messages ORDER BY id")
    tail = ["Y"] if command == "rename" else ["--yes"]
    for ref in INEXACT:
        proc = hermes("sessions", command, ref, *tail)
        error, _hint = assert_error(proc, 1)
        assert REFACTOR in error and REFACTOR_2 in error, error
    assert sql(db, "SELECT * FROM sessions ORDER BY id") == sessions
    assert sql(db, "SELECT * FROM messages ORDER BY id") == messages


def test_delete_by_exact_title_deletes_exactly_that_session(hermes_home: Path) -> None:
    db = load_sample()
    before = _titles(db)
    own = one(db, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (REFACTOR,))
    total = one(db, "SELECT COUNT(*) FROM messages")
    proc = hermes("sessions", "delete", "Refactor search module", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert _titles(db) == {k: v for k, v in before.items() if k != REFACTOR}
    assert one(db, "SELECT COUNT(*) FROM messages") == total - own


# One rule (issue 26): every command takes a title to be the session with exactly that title.
TITLE_COMMANDS = (
    ("sessions", "show", "{}", "--json"),
    ("sessions", "export", "--session-id", "{}", "--format", "json"),
    ("sessions", "rename", "{}", "Renamed"),
    ("sessions", "pin", "{}"),
    ("sessions", "delete", "{}", "--yes"),
)


@pytest.mark.parametrize("command", TITLE_COMMANDS, ids=lambda c: c[1])
@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Refactor search module", REFACTOR),
        ("Refactor search module #2", REFACTOR_2),
    ],
)
def test_every_command_resolves_a_title_to_the_session_with_exactly_that_title(
    hermes_home: Path, command: tuple[str, ...], title: str, expected: str
) -> None:
    db = load_sample()
    before = _titles(db)
    proc = hermes(*(arg.format(title) for arg in command))
    assert proc.returncode == 0, proc.stderr
    verb = command[1]
    if verb == "show":
        assert json.loads(proc.stdout)["id"] == expected
    elif verb == "export":
        assert [r["id"] for r in json.loads(proc.stdout)] == [expected]
    elif verb == "rename":
        assert _titles(db) == {**before, expected: "Renamed"}
    elif verb == "pin":
        assert one(db, "SELECT id FROM sessions WHERE pinned = 1") == expected
    else:
        assert set(_titles(db)) == set(before) - {expected}


def test_show_of_a_continued_session_names_its_continuation(hermes_home: Path) -> None:
    load_sample()
    proc = hermes("sessions", "show", "Refactor search module", "--no-pager")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].split() == ["Session:", REFACTOR]
    assert f"compression continued this session as {REFACTOR_2}" in proc.stderr


def test_every_session_argument_states_the_one_title_rule() -> None:
    for command in ("show", "rename", "delete", "pin", "archive"):
        proc = hermes("sessions", command, "--help")
        assert "exact title" in " ".join(proc.stdout.split()), command


# --- 3. backups per profile -----------------------------------------------------------------


def _archives(folder: Path, profile: str) -> dict[str, int]:
    """A profile's archives in folder: name -> mtime (ns)."""
    return {
        p.name: p.stat().st_mtime_ns
        for p in folder.iterdir()
        if p.name.startswith(f"hermes-backup-{profile}-") and p.name.endswith(".zip")
    }


def _written(proc: Any) -> str:
    """The name of the archive a backup says it wrote."""
    assert proc.returncode == 0, proc.stderr
    match = re.match(r"Wrote (.+?\.zip) \(", proc.stdout)
    assert match, proc.stdout
    return Path(match.group(1)).name


def test_profiles_sharing_an_output_folder_rotate_only_their_own_and_keep_0_keeps_all(
    hermes_home: Path, tmp_path: Path
) -> None:
    for name in ("alpha", "beta"):
        load_sample(home.create_profile(name) / "state.db")
    out = tmp_path / "shared"
    out.mkdir()
    (out / "notes.txt").write_text("not an archive\n")
    made: dict[str, list[str]] = {"alpha": [], "beta": []}
    for _ in range(4):
        for name, other in (("alpha", "beta"), ("beta", "alpha")):
            theirs = _archives(out, other)
            made[name].append(_written(hermes("-p", name, "backup", "-o", str(out), "--keep", "3")))
            assert _archives(out, other) == theirs  # the other profile's: same names, same times
    for name, names in made.items():
        assert len(set(names)) == 4
        assert sorted(_archives(out, name)) == sorted(names[1:])  # the newest 3 of 4
    assert (out / "notes.txt").read_text() == "not an archive\n"
    # --keep 0 keeps all: a fourth archive beside the three (the default keeps 3).
    theirs = _archives(out, "beta")
    fourth = _written(hermes("-p", "alpha", "backup", "-o", str(out), "--keep", "0"))
    assert sorted(_archives(out, "alpha")) == sorted([*made["alpha"][1:], fourth])
    assert _archives(out, "beta") == theirs


def test_output_to_a_missing_directory_written_with_a_slash_goes_inside_it(
    hermes_home: Path, tmp_path: Path
) -> None:
    load_sample()
    target = tmp_path / "newdir"
    name = _written(hermes("backup", "-o", f"{target}/"))
    assert target.is_dir()
    assert [p.name for p in target.iterdir()] == [name]
    assert re.fullmatch(r"hermes-backup-default-\d{8}-\d{6}(-\d+)?\.zip", name)
    assert not (tmp_path / "newdir.zip").exists()


def test_output_under_a_file_is_one_error_and_writes_nothing(
    hermes_home: Path, tmp_path: Path
) -> None:
    load_sample()
    blocker = tmp_path / "somefile"
    blocker.write_text("keep me\n")
    proc = hermes("backup", "-o", f"{blocker}/x.zip")
    lines = assert_error(proc, 1)
    assert len(lines) <= 2 and str(blocker) in lines[0]
    assert blocker.read_text() == "keep me\n"
    assert list(tmp_path.rglob("*.zip")) == []


def test_profile_delete_refuses_while_the_profile_holds_backups(hermes_home: Path) -> None:
    path = home.create_profile("alpha")
    load_sample(path / "state.db")
    _written(hermes("-p", "alpha", "backup"))
    proc = hermes("profile", "delete", "alpha", "--yes")
    error, hint = assert_error(proc, 1)
    assert "holds 1 backup(s)" in error and "--delete-backups" in hint
    assert (path / "state.db").is_file() and len(list((path / "backups").iterdir())) == 1
    gone = hermes("profile", "delete", "alpha", "--yes", "--delete-backups")
    assert gone.returncode == 0, gone.stderr
    assert not path.exists()


# --- 4. read commands never create anything -------------------------------------------------

# `sessions browse` is interactive: left out. `show 20261118` finds a sample session.
READ_COMMANDS = [
    ("sessions", "list", "--limit", "0"),
    ("sessions", "search", "docker"),
    ("sessions", "show", "20261118"),
    ("sessions", "stats"),
    ("sessions", "export"),
    ("sessions", "prune", "--dry-run", "--older-than", "1d"),
    ("db", "check"),
    ("db", "lockowners"),
    ("db", "path"),
    ("profile", "list"),
]


def tree(root: Path) -> dict[str, tuple[bool, int, int]]:
    """Every entry under root, root included: is it a directory, its size, its mtime (ns)."""
    entries = {}
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        entries[str(path.relative_to(root))] = (path.is_dir(), st.st_size, st.st_mtime_ns)
    return entries


def _run_read_commands(codes: tuple[int, ...]) -> None:
    """Run every read command once in the test's home; each must exit with one of codes."""
    for args in READ_COMMANDS:
        proc = hermes(*args)
        assert proc.returncode in codes and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_read_commands_create_nothing_in_an_empty_home(hermes_home: Path) -> None:
    before = tree(hermes_home)
    # Some fail with "No store yet": a failure, not a crash.
    _run_read_commands((0, 1))
    assert tree(hermes_home) == before


def test_read_commands_leave_a_store_and_its_folder_as_they_were(
    hermes_home: Path, sha256: Callable[[Path], str]
) -> None:
    db = load_sample()
    digest, before = sha256(db), tree(hermes_home)
    _run_read_commands((0,))
    assert tree(hermes_home) == before
    assert sorted(os.listdir(hermes_home)) == ["state.db"]
    assert sha256(db) == digest


def test_read_commands_leave_a_wal_store_folder_as_it_was(
    hermes_home: Path, wal_config: Path
) -> None:
    db = load_sample()
    # WAL, read from the header (bytes 18-19 are 2): opening the store would make its -wal/-shm.
    assert db.read_bytes()[18:20] == b"\x02\x02"
    before = tree(hermes_home)
    assert sorted(before) == [".", "config.yaml", "state.db"]
    assert hermes("sessions", "list").returncode == 0
    after = tree(hermes_home)
    # SQLite must make -wal/-shm to read a WAL store; they are gone again, so only the
    # folder's own mtime moved.
    assert {k: v for k, v in after.items() if k != "."} == {
        k: v for k, v in before.items() if k != "."
    }


# --- 5. counts ------------------------------------------------------------------------------


def test_stats_list_export_and_sql_agree_on_every_count(generated: Path) -> None:
    where = generated.parent
    stats = hermes_json("sessions", "stats", home_dir=where)
    listed = hermes_json("sessions", "list", "--limit", "0", home_dir=where)
    export = hermes("sessions", "export", home_dir=where)
    assert export.returncode == 0, export.stderr
    records = [json.loads(line) for line in export.stdout.splitlines()]
    sessions = one(generated, "SELECT COUNT(*) FROM sessions")
    live = one(generated, "SELECT COUNT(*) FROM messages WHERE active = 1")
    stored = one(generated, "SELECT COUNT(*) FROM messages")
    assert live < stored
    assert stats["message_count"] == sum(s["message_count"] for s in listed["sessions"]) == live
    assert (
        stats["stored_message_count"]
        == sum(s["stored_message_count"] for s in listed["sessions"])
        == sum(len(r["messages"]) for r in records)
        == stored
    )
    assert stats["session_count"] == listed["total"] == len(listed["sessions"]) == sessions
    assert len(records) == sessions
    assert f"({stored} stored messages" in export.stderr


def test_list_limit_zero_lists_every_session(generated: Path) -> None:
    proc = hermes("sessions", "list", "--limit", "0", home_dir=generated.parent)
    assert proc.returncode == 0, proc.stderr
    ids = [line.split()[0] for line in proc.stdout.splitlines() if SESSION_ID.match(line)]
    assert sorted(ids) == sorted(r[0] for r in sql(generated, "SELECT id FROM sessions"))
    assert "No sessions found" not in proc.stdout


def test_show_header_counts_match_the_transcript_it_prints(generated: Path) -> None:
    sid, live, shown, stored = sql(
        generated,
        "SELECT session_id, SUM(active = 1), SUM(active = 1 OR compacted = 1), COUNT(*) "
        "FROM messages GROUP BY session_id "
        "HAVING SUM(compacted) > 0 AND SUM(active = 1 OR compacted = 1) < COUNT(*) "
        "ORDER BY COUNT(*), session_id LIMIT 1",
    )[0]
    assert live < shown < stored
    entry = re.compile(r"^── .+ · \d{4}-\d{2}-\d{2} \d{2}:\d{2}")
    default = hermes("sessions", "show", sid, home_dir=generated.parent)
    every = hermes("sessions", "show", sid, "--all", home_dir=generated.parent)
    assert default.returncode == every.returncode == 0
    header = next(line for line in default.stdout.splitlines() if line.startswith("Messages:"))
    assert f"{live:,} live, {stored:,} stored" in header
    assert f"shown below: {shown:,}" in header
    assert sum(1 for line in default.stdout.splitlines() if entry.match(line)) == shown
    assert sum(1 for line in every.stdout.splitlines() if entry.match(line)) == stored


# Sessions a prune by age keeps: open or pinned ones, and compression ancestors of those.
STAYS_SQL = """
WITH RECURSIVE stays(id) AS (
    SELECT id FROM sessions WHERE ended_at IS NULL OR pinned <> 0
    UNION
    SELECT p.id FROM stays JOIN sessions c ON c.id = stays.id
    JOIN sessions p ON p.id = c.parent_session_id WHERE p.end_reason = 'compression'
)
"""


def test_prune_dry_run_counts_the_stored_messages_it_would_delete(generated: Path) -> None:
    proc = hermes("sessions", "prune", "--dry-run", "--older-than", "1d", home_dir=generated.parent)
    assert proc.returncode == 0, proc.stderr
    doomed, stored = sql(
        generated,
        STAYS_SQL + "SELECT COUNT(DISTINCT s.id), COUNT(m.id) FROM sessions s "
        "LEFT JOIN messages m ON m.session_id = s.id WHERE s.id NOT IN (SELECT id FROM stays)",
    )[0]
    kept = one(
        generated,
        STAYS_SQL + "SELECT COUNT(*) FROM stays JOIN sessions s USING (id) "
        "WHERE s.ended_at IS NOT NULL AND s.pinned = 0",
    )
    live = one(
        generated,
        STAYS_SQL + "SELECT COUNT(*) FROM messages WHERE active = 1 "
        "AND session_id NOT IN (SELECT id FROM stays)",
    )
    assert kept > 0 and live < stored
    match = re.match(r"([\d,]+) ended sessions .*: ([\d,]+) stored messages", proc.stdout)
    assert match, proc.stdout
    figures = (int(match.group(1).replace(",", "")), int(match.group(2).replace(",", "")))
    assert figures == (doomed, stored)
    assert f"Kept {kept} compression ancestor(s)" in proc.stderr
    assert proc.stdout.rstrip().endswith("Dry run: nothing deleted.")


def test_stats_database_file_is_the_files_real_size(generated: Path) -> None:
    proc = hermes("sessions", "stats", home_dir=generated.parent)
    document = hermes_json("sessions", "stats", home_dir=generated.parent)
    size = generated.stat().st_size
    assert re.search(r"^Database file:\s+(.+)$", proc.stdout, re.M).group(1) == human(size)
    assert re.search(r"^WAL file:\s+(.+)$", proc.stdout, re.M).group(1) == "—"
    assert (document["store"]["files"]["db"], document["store"]["files"]["wal"]) == (size, 0)


def test_stats_reports_the_wal_apart_from_the_database_file(
    hermes_home: Path, wal_config: Path
) -> None:
    db = load_sample()
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.execute("PRAGMA wal_autocheckpoint = 0")  # the WAL stays until this test closes
        conn.execute("UPDATE messages SET token_count = COALESCE(token_count, 0) + 1")
        db_size, wal_size = db.stat().st_size, Path(f"{db}-wal").stat().st_size
        assert wal_size > 0 and human(wal_size) != human(db_size)
        proc = hermes("sessions", "stats")
        document = hermes_json("sessions", "stats")
    finally:
        conn.close()
    assert re.search(r"^Database file:\s+(.+)$", proc.stdout, re.M).group(1) == human(db_size)
    assert re.search(r"^WAL file:\s+(.+)$", proc.stdout, re.M).group(1) == human(wal_size)
    files = document["store"]["files"]
    assert (files["db"], files["wal"]) == (db_size, wal_size)


# --- 6. restore -----------------------------------------------------------------------------


def _pre_restore_copies(folder: Path) -> list[Path]:
    """The copies restore kept of the stores it replaced (their journals left out)."""
    return [
        p
        for p in folder.glob("state.db.pre-restore-*")
        if not p.name.endswith(("-wal", "-shm", "-journal"))
    ]


def test_restore_shows_before_and_after_asks_and_keeps_the_replaced_store(
    copied: Path, hermes_home: Path, tmp_path: Path, sha256: Callable[[Path], str]
) -> None:
    small = tmp_path / "small-home"
    small.mkdir()
    load_sample(small / "state.db")
    _written(hermes("backup", "-o", f"{tmp_path / 'archives'}/", home_dir=small))
    (archive,) = (tmp_path / "archives").iterdir()
    sessions = one(copied, "SELECT COUNT(*) FROM sessions")
    old_messages = sql(copied, "SELECT * FROM messages ORDER BY id")
    messages = len(old_messages)
    digest = sha256(copied)
    plan = (
        f"state.db: now {sessions:,} sessions, {messages:,} messages, "
        f"{human(copied.stat().st_size)} -> 12 sessions, 53 messages, "
    )

    asked = hermes("restore", str(archive))  # stdin is not a terminal, and empty
    assert asked.returncode == 1
    assert plan in asked.stdout
    assert "[y/N]" in asked.stderr and asked.stderr.rstrip().endswith("Aborted")
    assert sha256(copied) == digest and _pre_restore_copies(hermes_home) == []

    done = hermes("restore", str(archive), "--yes")
    assert done.returncode == 0, done.stderr
    assert plan in done.stdout
    (kept,) = _pre_restore_copies(hermes_home)
    assert f"the replaced one is kept at {kept}" in done.stdout
    assert one(kept, "SELECT COUNT(*) FROM sessions") == sessions
    assert sql(kept, "SELECT * FROM messages ORDER BY id") == old_messages
    assert one(copied, "SELECT COUNT(*) FROM sessions") == 12

    again = hermes("restore", str(archive), "--yes")  # a copy made by the first restore stays
    assert again.returncode == 0, again.stderr
    assert "1 copy is kept by earlier restores" in again.stderr and f"  {kept}\n" in again.stderr
    assert len(_pre_restore_copies(hermes_home)) == 2


# --- 7. busy: closed pipes, locks, prune beside a writer ------------------------------------


def _biggest_session(db: Path) -> str:
    """The id of the session with the most stored messages."""
    return str(one(db, "SELECT session_id FROM messages GROUP BY 1 ORDER BY COUNT(*) DESC"))


def read_then_close(args: tuple[str, ...], home_dir: Path, first: int | None) -> Any:
    """Run hermes with stdout into a one-page pipe; read a line (or `first` bytes), close it.

    Returns the exit code, the bytes read, stderr and the pipe's capacity.
    """
    read_fd, write_fd = os.pipe()
    fcntl.fcntl(write_fd, F_SETPIPE_SZ, PIPE_BYTES)
    capacity = fcntl.fcntl(read_fd, F_GETPIPE_SZ)
    env = child_env(home_dir)
    proc = subprocess.Popen(
        [*HERMES, *args],
        stdin=subprocess.DEVNULL,
        stdout=write_fd,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(write_fd)
    got = b""
    try:
        while len(got) < first if first else not got.endswith(b"\n"):
            chunk = os.read(read_fd, 1)
            if not chunk:
                break
            got += chunk
    finally:
        os.close(read_fd)  # like `head`: take what you need, then go
    _, err = proc.communicate(timeout=60)
    return proc.returncode, got, err.decode(), capacity


@pytest.mark.parametrize(
    ("args", "first"),
    [
        pytest.param(("sessions", "list", "--limit", "0"), None, id="list"),
        pytest.param(("sessions", "export"), 100, id="export"),
        pytest.param(("sessions", "search", "checkpoint", "--limit", "0"), None, id="search"),
        pytest.param(("sessions", "show", "BIGGEST"), None, id="show"),
        pytest.param(("sessions", "stats", "--format", "jsonl"), None, id="stats"),
    ],
)
def test_a_reader_closing_the_pipe_early_is_a_quiet_success(
    generated: Path, args: tuple[str, ...], first: int | None
) -> None:
    args = tuple(_biggest_session(generated) if a == "BIGGEST" else a for a in args)
    whole = hermes(*args, home_dir=generated.parent)
    assert whole.returncode == 0, whole.stderr
    code, got, stderr, capacity = read_then_close(args, generated.parent, first)
    output = whole.stdout.encode()
    assert got and output.startswith(got)
    # More than the reader took and the pipe holds: the command was still writing when the
    # pipe closed, so it met EPIPE.
    assert len(output) > len(got) + capacity
    assert (code, stderr) == (0, "")


def test_no_wait_gives_up_at_once_naming_the_lock_holder(
    hermes_home: Path, hold_store: Callable[..., Any]
) -> None:
    db = load_sample()
    holder = hold_store(db, "lock")
    proc = hermes("--no-wait", "sessions", "rename", "20261118", "Renamed")
    still_held = holder.proc.poll() is None
    holder.release()
    lines = assert_error(proc, 75)
    assert f"PID {holder.proc.pid}" in lines[0]
    assert "Waiting" not in proc.stderr and still_held  # it did not outwait the holder
    assert one(db, "SELECT title FROM sessions WHERE id LIKE '20261118%'") == "Fix Docker build"


def test_wait_says_once_who_holds_the_lock_and_goes_on_when_it_is_released(
    hermes_home: Path, hold_store: Callable[..., Any]
) -> None:
    db = load_sample()
    holder = hold_store(db, "lock")
    proc = subprocess.Popen(
        [*HERMES, "sessions", "rename", "20261118", "Renamed", "--wait", "3"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert proc.stderr is not None
    notice = proc.stderr.readline()  # printed after a second of waiting
    holder.release()  # ...and only then does the holder let go
    out, rest = proc.communicate(timeout=60)
    assert proc.returncode == 0, notice + rest
    assert notice.startswith("Waiting for up to 3s: state.db is locked by ")
    assert f"PID {holder.proc.pid}" in notice
    assert rest == ""
    assert "renamed to: Renamed" in out
    assert one(db, "SELECT title FROM sessions WHERE id LIKE '20261118%'") == "Renamed"


# A gateway stand-in: appends messages to its own open session on its own connection until
# its stdin closes, then reports every write's completion time and every failure.
WRITER_CODE = """
import json, select, sys, time
from hermes_state.records import messages, sessions
from hermes_state.store.connection import open_store

store = open_store(sys.argv[1])
sid = sessions.create_session(store, "live-writer", "telegram")
times, errors = [], []
while not select.select([sys.stdin], [], [], 0)[0]:
    try:
        messages.append_messages(store, sid, [{"role": "user", "content": f"live {len(times)}"}])
        times.append(time.time())
    except Exception as exc:
        errors.append(repr(exc))
    if len(times) + len(errors) == 1:
        print("ready", flush=True)
    time.sleep(0.01)
store.close()
print(json.dumps({"session": sid, "times": times, "errors": errors}), flush=True)
"""


def test_prune_beside_a_live_writer_deletes_and_vacuums_and_loses_no_write(copied: Path) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER_CODE, str(copied)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert writer.stdin is not None and writer.stdout is not None
    try:
        assert writer.stdout.readline() == "ready\n"
        size_before = copied.stat().st_size
        sessions_before = one(copied, "SELECT COUNT(*) FROM sessions") - 1
        started = time.time()
        proc = hermes("sessions", "prune", "--older-than", "1d", "--yes")
        ended = time.time()
    finally:
        writer.stdin.close()
        report = json.loads(writer.stdout.readline())
        writer.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert report["errors"] == []
    assert any(started < t < ended for t in report["times"])  # it wrote while prune ran
    own = one(copied, "SELECT COUNT(*) FROM messages WHERE session_id = ?", (report["session"],))
    assert own == len(report["times"])
    pruned = re.search(
        r"^Pruned ([\d,]+) session\(s\) \(([\d,]+) stored messages\)", proc.stdout, re.M
    )
    assert pruned, proc.stdout
    left = one(copied, "SELECT COUNT(*) FROM sessions")
    # The writer's session is new.
    assert int(pruned.group(1).replace(",", "")) == sessions_before - (left - 1)
    assert "VACUUM skipped" not in proc.stderr  # a small store is vacuumed even beside others
    assert re.search(r"^Database file: .+ -> .+ \(reclaimed ", proc.stdout, re.M), proc.stdout
    assert copied.stat().st_size < size_before


# --- 8. export | import - -------------------------------------------------------------------


def _without_row_ids(text: str) -> list[dict[str, Any]]:
    """Parse an export; drop message row ids (each store numbers its own rows)."""
    records = [json.loads(line) for line in text.splitlines()]
    for record in records:
        record["messages"] = [{k: v for k, v in m.items() if k != "id"} for m in record["messages"]]
    return records


def test_export_piped_into_import_of_another_profile_round_trips(ram_home: Path) -> None:
    created = hermes("profile", "create", "other", home_dir=ram_home)
    assert created.returncode == 0, created.stderr
    env = child_env(ram_home)
    exporter = subprocess.Popen(
        [*HERMES, "sessions", "export"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    importer = subprocess.Popen(
        [*HERMES, "-p", "other", "sessions", "import", "-"],
        stdin=exporter.stdout,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert exporter.stdout is not None and exporter.stderr is not None
    exporter.stdout.close()  # the importer holds the only read end
    out, err = importer.communicate(timeout=300)
    exporter.wait(timeout=60)
    exporter.stderr.close()
    assert (exporter.returncode, importer.returncode) == (0, 0), err
    db = ram_home / "state.db"
    sessions = one(db, "SELECT COUNT(*) FROM sessions")
    stored = one(db, "SELECT COUNT(*) FROM messages")
    assert out.startswith(f"Imported {sessions} sessions ({stored} messages)")
    first = hermes("sessions", "export", home_dir=ram_home)
    second = hermes("-p", "other", "sessions", "export", home_dir=ram_home)
    assert first.returncode == second.returncode == 0
    assert len(first.stdout.splitlines()) == sessions
    assert _without_row_ids(second.stdout) == _without_row_ids(first.stdout)
