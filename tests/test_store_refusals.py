"""Write commands refuse what they must not write, and broken stores give one line, not a
traceback (issue 13.6, 13.7, 13.3 and 13.9). Every command runs as a real `hermes` process."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_env import (
    assert_one_line_error,
    digest,
    fill,
    give_away,
    hermes,
    listing,
    small_filesystem,
)
from support.damage import zero_middle_pages
from support.stores import populate_store, settle

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sample-sessions.jsonl"
SID = "sess-1-00002"

# Every command that writes to the store, with the arguments that make it write.
WRITES: dict[str, list[str]] = {
    "rename": ["sessions", "rename", SID, "new title"],
    "pin": ["sessions", "pin", SID],
    "archive": ["sessions", "archive", SID],
    "delete": ["sessions", "delete", SID, "--yes"],
    "import": ["sessions", "import", str(SAMPLE)],
    "prune": ["sessions", "prune", "--older-than", "1d", "--yes", "--force"],
    "optimize": ["db", "optimize", "--force"],
    "migrate": ["db", "migrate", "--force"],
}
READS: dict[str, list[str]] = {
    "list": ["sessions", "list"],
    "search": ["sessions", "search", "deploy"],
    "show": ["sessions", "show", SID],
    "stats": ["sessions", "stats"],
    "export": ["sessions", "export", "-o", "-"],
    "check": ["db", "check"],
}
HOT_JOURNAL = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=DELETE")
conn.execute("PRAGMA cache_size=1")
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE messages SET content = content || 'x'")
os._exit(0)
"""


def unchanged(home: Path, args: list[str], code: int | tuple[int, ...] = 1, **kw: object) -> str:
    """Run a command that must refuse: one line, and every file in home exactly as it was."""
    files = {p: digest(p) for p in home.rglob("*") if p.is_file()}
    tree = listing(home)
    line = assert_one_line_error(hermes(*args, home=home, **kw), code)  # type: ignore[arg-type]
    assert listing(home) == tree
    assert {p: digest(p) for p in files} == files
    return line


@pytest.fixture
def store(hermes_home: Path) -> Path:
    """A settled store of 200 sessions (several pages of the sessions table)."""
    db = hermes_home / "state.db"
    populate_store(db, sessions_n=200, messages_per_session=3, content_size=400)
    settle(db)
    return db


# --- 13.6: writes where they must not -----------------------------------------------------------


@pytest.mark.parametrize("name", list(WRITES))
def test_write_command_refuses_another_applications_database(name: str, hermes_home: Path):
    db = hermes_home / "state.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE moz_cookies(id INTEGER PRIMARY KEY, host TEXT)")
    conn.execute("INSERT INTO moz_cookies(host) VALUES ('example.org')")
    conn.commit()
    conn.close()
    line = unchanged(hermes_home, WRITES[name])
    assert "Hermes" in line


@pytest.mark.parametrize("name", list(WRITES))
@pytest.mark.parametrize("kind", ["zero-byte", "bad-header"])
def test_write_command_never_replaces_a_broken_store_with_an_empty_one(
    name: str, kind: str, hermes_home: Path
) -> None:
    db = hermes_home / "state.db"
    db.write_bytes(b"" if kind == "zero-byte" else b"not a database at all" * 200)
    unchanged(hermes_home, WRITES[name])
    assert not list(hermes_home.glob("*.bak"))


@pytest.mark.parametrize("name", list(WRITES))
def test_write_command_refuses_a_corrupt_page_in_the_sessions_table(name: str, store: Path):
    zero_middle_pages(store, "sessions", 1)
    line = unchanged(store.parent, WRITES[name])
    assert "damaged" in line


REWRITES = ["delete", "import", "prune", "optimize", "migrate"]


@pytest.mark.parametrize("name", REWRITES)
def test_command_that_rewrites_refuses_a_corrupt_page_anywhere(name: str, store: Path):
    zero_middle_pages(store, "messages", 1)
    assert "damaged" in unchanged(store.parent, WRITES[name])


@pytest.mark.parametrize("name", ["rename", "pin"])
def test_one_row_edit_checks_only_the_table_it_writes(name: str, store: Path) -> None:
    # A corrupt messages page is out of reach of an edit of one sessions row (see README).
    zero_middle_pages(store, "messages", 1)
    proc = hermes(*WRITES[name], home=store.parent)
    assert proc.returncode == 0, proc.stderr


# --- 13.7: one line instead of a traceback ------------------------------------------------------


@pytest.mark.parametrize("name", [*READS, "rename", "import", "backup"])
def test_a_store_path_that_is_a_directory_gives_one_line(name: str, hermes_home: Path) -> None:
    (hermes_home / "state.db").mkdir()
    args = {**READS, **WRITES, "backup": ["backup"]}[name]
    assert "directory" in unchanged(hermes_home, args)


@pytest.mark.parametrize("name", ["rename", "import", "migrate"])
def test_schema_version_holding_text_gives_one_line_for_writes(name: str, store: Path) -> None:
    conn = sqlite3.connect(store)
    conn.execute("UPDATE schema_version SET version = 'abc'")
    conn.commit()
    conn.close()
    settle(store)
    line = unchanged(store.parent, WRITES[name])
    assert "'abc'" in line and "not a number" in line and "schema -1" not in line


@pytest.mark.parametrize("name", ["list", "stats", "export"])
def test_schema_version_holding_text_still_reads(name: str, store: Path) -> None:
    conn = sqlite3.connect(store)
    conn.execute("UPDATE schema_version SET version = '31x'")
    conn.commit()
    conn.close()
    proc = hermes(*READS[name], home=store.parent)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    # Whatever the store's warning says, it shows what is there, not a made-up number.
    assert "schema -1" not in proc.stderr and "version -1" not in proc.stderr


def test_db_check_quotes_a_schema_version_that_is_not_a_number(store: Path) -> None:
    conn = sqlite3.connect(store)
    conn.execute("UPDATE schema_version SET version = '31x'")
    conn.commit()
    conn.close()
    proc = hermes("db", "check", home=store.parent)
    assert "'31x'" in proc.stdout + proc.stderr and " -1" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ["list", "search", "check", "rename"])
def test_wal_store_in_a_directory_this_user_cannot_write_gives_one_line(
    name: str, store: Path
) -> None:
    home = store.parent
    assert not Path(str(store) + "-shm").exists()
    os.chmod(home, 0o555)
    try:
        line = unchanged(home, {**READS, **WRITES}[name], unprivileged=True)
    finally:
        os.chmod(home, 0o700)
    assert "directory" in line


@pytest.mark.parametrize("name", ["list", "check", "rename", "import"])
def test_store_of_another_user_gives_one_line(name: str, store: Path) -> None:
    give_away(store)
    line = unchanged(store.parent, {**READS, **WRITES}[name], unprivileged=True)
    assert "another user" in line


@pytest.mark.parametrize("name", list(READS))
def test_hot_rollback_journal_gives_one_line_with_what_to_do(name: str, store: Path) -> None:
    conn = sqlite3.connect(store)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    subprocess.run([sys.executable, "-c", HOT_JOURNAL, str(store)], check=True)
    proc = hermes(*READS[name], home=store.parent)
    line = assert_one_line_error(proc)
    assert "unfinished transaction" in line and "rolls it back" in proc.stderr


@pytest.mark.parametrize("mode", ["wal", "delete"])
@pytest.mark.parametrize("name", ["import", "optimize", "export-file"])
def test_full_disk_gives_one_line(name: str, mode: str, tmp_path: Path) -> None:
    src = tmp_path / "src" / "state.db"
    populate_store(src, sessions_n=20, messages_per_session=20, content_size=1000)
    settle(src)
    conn = sqlite3.connect(src)
    conn.execute(f"PRAGMA journal_mode = {mode}")
    conn.close()
    with small_filesystem(tmp_path / "full", "4m") as full:
        home = full / "home"
        home.mkdir()
        (home / "state.db").write_bytes(src.read_bytes())
        args = {
            "import": ["sessions", "import", str(SAMPLE)],
            "optimize": ["db", "optimize", "--force"],
            "export-file": ["sessions", "export", "-o", str(full / "all.jsonl")],
        }[name]
        fill(full, leave=8192)
        before = digest(home / "state.db")
        proc = hermes(*args, home=home)
        line = assert_one_line_error(proc)
        assert "space" in line.lower() or "full" in line.lower()
        assert not (full / "all.jsonl").exists()
        (full / "filler.bin").unlink()
        if name != "import":  # an import that failed wrote nothing either, but may roll back
            assert digest(home / "state.db") == before
        assert hermes("db", "check", home=home).returncode == 0


@pytest.mark.parametrize("leave", [393216, 491520, 983040])
def test_an_optimize_that_fills_the_disk_leaves_no_hot_journal(leave: int, tmp_path: Path) -> None:
    # VACUUM failing while it copies its result back leaves SQLite's pager in its error state,
    # and a plain close then leaves the journal hot for the next opener (these amounts of free
    # space did, before the store rolled it back on close).
    src = tmp_path / "src" / "state.db"
    populate_store(src, sessions_n=60, messages_per_session=20, content_size=1000)
    settle(src)
    conn = sqlite3.connect(src)
    conn.execute("PRAGMA journal_mode = delete")
    conn.close()
    with small_filesystem(tmp_path / "full", "8m") as full:
        home = full / "home"
        home.mkdir()
        (home / "state.db").write_bytes(src.read_bytes())
        before = digest(home / "state.db")
        fill(full, leave=leave)
        proc = hermes("db", "optimize", "--force", home=home)
        if proc.returncode == 0:
            pytest.skip("the optimize fitted in this much space here")
        assert_one_line_error(proc)
        assert not (home / "state.db-journal").exists()
        # Still full: the next read answers at once, and nothing changed.
        listed = hermes("sessions", "list", home=home)
        assert listed.returncode == 0, listed.stderr
        assert digest(home / "state.db") == before
        assert hermes("db", "check", home=home).returncode == 0


def test_closing_a_writable_store_rolls_back_a_journal_left_hot(store: Path) -> None:
    # What a write that failed midway leaves (SQLite's pager in its error state): the store
    # must be as it was before that write, and readable by a read-only open right away.
    from hermes_state.store.store_file import roll_back_hot_journal

    conn = sqlite3.connect(store)
    conn.execute("PRAGMA journal_mode=DELETE")
    before = conn.execute("SELECT group_concat(content, '|') FROM messages").fetchone()[0]
    conn.close()
    subprocess.run([sys.executable, "-c", HOT_JOURNAL, str(store)], check=True)
    journal = Path(str(store) + "-journal")
    assert journal.stat().st_size > 0
    roll_back_hot_journal(store)
    assert not journal.exists()
    ro = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        after = ro.execute("SELECT group_concat(content, '|') FROM messages").fetchone()[0]
    finally:
        ro.close()
    assert after == before
    assert hermes("sessions", "list", home=store.parent).returncode == 0


def test_search_of_a_thousand_one_letter_words_answers(store: Path) -> None:
    words = " ".join("abcdefghijklmnopqrstuvwxyz"[i % 26] for i in range(1000))
    proc = hermes("sessions", "search", words, home=store.parent)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_prune_source_with_undecodable_bytes_is_a_usage_error(store: Path) -> None:
    line = unchanged(store.parent, ["sessions", "prune", "--source", "\udcff\udcfe", "--yes"], 2)
    assert "\\xff\\xfe" in line and "UTF-8" in line


# --- 13.3 and 13.9: symlinks and directory modes ------------------------------------------------


def test_a_write_through_a_dangling_symlink_creates_nothing_anywhere(
    hermes_home: Path, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere" / "state.db"
    target.parent.mkdir()
    (hermes_home / "state.db").symlink_to(target)
    line = unchanged(hermes_home, ["sessions", "import", str(SAMPLE)])
    assert "does not exist" in line
    assert list(target.parent.iterdir()) == []


def test_writes_through_a_symlinked_store_keep_the_wal_beside_the_real_file(
    hermes_home: Path, tmp_path: Path
) -> None:
    real = tmp_path / "disk2" / "state.db"
    populate_store(real, sessions_n=2, messages_per_session=1)
    (hermes_home / "state.db").symlink_to(real)
    proc = hermes("sessions", "import", str(SAMPLE), home=hermes_home)
    assert proc.returncode == 0, proc.stderr
    assert not list(hermes_home.glob("state.db-*"))
    listed = hermes("sessions", "list", "--json", home=hermes_home)
    assert listed.returncode == 0 and '"total": 14' in listed.stdout


def test_an_auto_created_home_is_private_under_umask_000(tmp_path: Path) -> None:
    home = tmp_path / "new" / "home"
    proc = hermes("sessions", "import", str(SAMPLE), home=home, umask=0)
    assert proc.returncode == 0, proc.stderr
    for d in (home, home.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "state.db").stat().st_mode) == 0o600
