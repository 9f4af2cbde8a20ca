"""Restore checks what it installs, whatever the archive's manifest says (issue 13.1, 14.6).

Every test builds a real archive with `hermes backup`, edits it as an attacker would, and runs
`hermes restore` as a real process against a real home.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from clitools import pty_child
from hostile_env import (
    assert_one_line_error,
    digest,
    give_away,
    hermes,
    kill_when,
    listing,
    rewrite_archive,
    small_filesystem,
    start_hermes,
)
from support.children import child_env
from support.damage import zero_middle_pages
from support.legacy_layout import make_legacy
from support.stores import crash_with_committed_wal, populate_store, settle
from support.upstream30 import build_upstream30

from hermes_state.backups.backup import create_backup
from hermes_state.backups.restore import prepare_restore, restore_backup
from hermes_state.store import store_objects


def count(db: Path, table: str) -> int:
    """Count a table's rows read-only."""
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def dump(db: Path) -> list[tuple[object, ...]]:
    """Every session and message row of a store, in order."""
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return [
            *conn.execute("SELECT * FROM sessions ORDER BY id"),
            *conn.execute("SELECT * FROM messages ORDER BY id"),
        ]
    finally:
        conn.close()


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def source_home(tmp_path: Path) -> Path:
    """A second profile home with 12 sessions, whose archive the tests restore elsewhere."""
    home = tmp_path / "source"
    home.mkdir()
    populate_store(home / "state.db", sessions_n=12, messages_per_session=4, seed=3)
    (home / "config.yaml").write_text("model: test\n")
    return home


@pytest.fixture
def archive(source_home: Path, tmp_path: Path) -> Path:
    """A genuine archive of source_home, made by the real command."""
    out = tmp_path / "archives"
    proc = hermes("backup", "-o", f"{out}/", home=source_home)
    assert proc.returncode == 0, proc.stderr
    [path] = out.glob("*.zip")
    return path


@pytest.fixture
def live_home(hermes_home: Path) -> Path:
    """The profile being restored into: a bigger store (60 sessions) than the archive's."""
    populate_store(hermes_home / "state.db", sessions_n=60, messages_per_session=3, seed=5)
    settle(hermes_home / "state.db")
    return hermes_home


def store_bytes(archive: Path) -> bytes:
    with zipfile.ZipFile(archive) as zf:
        return zf.read("state.db")


def sqlite_file(path: Path, *statements: str) -> bytes:
    """Make an SQLite file from statements and return its bytes."""
    conn = sqlite3.connect(path)
    try:
        for sql in statements:
            conn.execute(sql)
        conn.commit()
    finally:
        conn.close()
    return path.read_bytes()


def refused_untouched(live_home: Path, archive: Path, *extra: str) -> str:
    """Restore must refuse with one line and leave the home exactly as it was."""
    db = live_home / "state.db"
    before, tree = digest(db), listing(live_home)
    proc = hermes("restore", str(archive), "--yes", *extra, home=live_home)
    line = assert_one_line_error(proc, (1, 75))
    assert digest(db) == before
    assert listing(live_home) == tree
    return line


# --- what a member is, whatever the manifest says -------------------------------------------


def test_restore_checks_a_store_the_manifest_calls_a_plain_file(
    live_home: Path, archive: Path, tmp_path: Path
) -> None:
    garbage = os.urandom(64 << 10)
    edited = rewrite_archive(
        archive, tmp_path / "garbage.zip", replace={"state.db": garbage}, kinds={"state.db": "file"}
    )
    line = refused_untouched(live_home, edited)
    assert "state.db" in line


def test_restore_refuses_a_genuine_store_whose_kind_was_edited(
    live_home: Path, archive: Path, tmp_path: Path
) -> None:
    edited = rewrite_archive(archive, tmp_path / "kind.zip", kinds={"state.db": "file"})
    line = refused_untouched(live_home, edited, "--force")
    assert "manifest calls it 'file'" in line


WRITER = """
import sys, time
from hermes_state.records import messages, sessions
from hermes_state.store.connection import open_store
store = open_store(sys.argv[1])
sid = f"writer-{sys.argv[2]}"
sessions.create_session(store, sid, "cli")
ack = open(sys.argv[3], "w")
print("ready", flush=True)
deadline = time.monotonic() + float(sys.argv[4])
n = 0
while time.monotonic() < deadline:
    messages.append_message(store, sid, "user", f"tok{sys.argv[2]}x{n}")
    ack.write(f"tok{sys.argv[2]}x{n}\\n"); ack.flush()
    n += 1
store.close()
"""


def test_restore_of_an_edited_archive_under_four_live_writers_loses_no_acknowledged_append(
    live_home: Path, archive: Path, tmp_path: Path
) -> None:
    edited = rewrite_archive(archive, tmp_path / "kind.zip", kinds={"state.db": "file"})
    db = live_home / "state.db"
    writers = []
    for w in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), str(w), str(tmp_path / f"ack{w}"), "3"],
            env=child_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        writers.append(proc)
    try:
        for extra in ((), ("--force",)):
            proc = hermes("restore", str(edited), "--yes", *extra, home=live_home)
            assert_one_line_error(proc, (1, 75))
    finally:
        for proc in writers:
            assert proc.wait(timeout=60) == 0
    acked = [t for w in range(4) for t in (tmp_path / f"ack{w}").read_text().split()]
    assert acked
    conn = sqlite3.connect(db)
    try:
        stored = {r[0] for r in conn.execute("SELECT content FROM messages")}
    finally:
        conn.close()
    assert not [t for t in acked if t not in stored]
    assert integrity(db) == "ok"


def test_restore_refuses_a_wal_member(live_home: Path, archive: Path, tmp_path: Path) -> None:
    edited = rewrite_archive(archive, tmp_path / "wal.zip", add={"state.db-wal": b"\0" * 4096})
    line = refused_untouched(live_home, edited)
    assert "state.db-wal" in line and "journal/WAL" in line


def test_restore_refuses_a_member_name_with_an_escape_sequence(
    live_home: Path, archive: Path, tmp_path: Path
) -> None:
    edited = rewrite_archive(archive, tmp_path / "esc.zip", add={"\x1b]52;c;eA==\x07.txt": b"x"})
    line = refused_untouched(live_home, edited)
    assert "control character" in line and "\x1b" not in line


def test_restore_refuses_another_applications_database_as_the_store(
    live_home: Path, archive: Path, tmp_path: Path
) -> None:
    foreign = sqlite_file(
        tmp_path / "other.db",
        "CREATE TABLE cookies(host, value)",
        "INSERT INTO cookies VALUES(1, 2)",
    )
    edited = rewrite_archive(archive, tmp_path / "foreign.zip", replace={"state.db": foreign})
    line = refused_untouched(live_home, edited)
    assert "not a Hermes session store" in line and "cookies" in line


def _store_with(tmp_path: Path, archive: Path, *statements: str) -> bytes:
    db = tmp_path / "crafted.db"
    db.write_bytes(store_bytes(archive))
    return sqlite_file(db, *statements)


def test_restore_refuses_a_store_with_a_trigger_that_deletes_messages(
    live_home: Path, archive: Path, tmp_path: Path
) -> None:
    crafted = _store_with(
        tmp_path,
        archive,
        "CREATE TRIGGER eat AFTER INSERT ON messages BEGIN DELETE FROM messages; END",
    )
    edited = rewrite_archive(archive, tmp_path / "trigger.zip", replace={"state.db": crafted})
    line = refused_untouched(live_home, edited)
    assert "trigger eat on messages" in line


def test_restore_refuses_a_harmful_body_under_a_known_trigger_name(
    live_home: Path, archive: Path, tmp_path: Path
) -> None:
    crafted = _store_with(
        tmp_path,
        archive,
        "DROP TRIGGER messages_fts_insert",
        "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN "
        "UPDATE messages SET content = '' WHERE session_id = new.session_id; END",
    )
    edited = rewrite_archive(archive, tmp_path / "body.zip", replace={"state.db": crafted})
    line = refused_untouched(live_home, edited)
    assert "messages_fts_insert" in line and "messages.content" in line


def test_restore_refuses_a_view_no_release_defines(
    live_home: Path, archive: Path, tmp_path: Path
) -> None:
    crafted = _store_with(tmp_path, archive, "CREATE VIEW spy AS SELECT * FROM messages")
    edited = rewrite_archive(archive, tmp_path / "view.zip", replace={"state.db": crafted})
    assert "view spy" in refused_untouched(live_home, edited)


def test_restore_refuses_a_store_of_a_schema_no_release_writes(
    live_home: Path, archive: Path, tmp_path: Path
) -> None:
    crafted = _store_with(tmp_path, archive, "UPDATE schema_version SET version = 'abc'")
    edited = rewrite_archive(archive, tmp_path / "schema.zip", replace={"state.db": crafted})
    assert "not a number" in refused_untouched(live_home, edited)


def test_restore_refuses_a_damaged_store(live_home: Path, archive: Path, tmp_path: Path) -> None:
    db = tmp_path / "damaged" / "state.db"
    populate_store(db, sessions_n=4, messages_per_session=200)
    settle(db)
    zero_middle_pages(db, "messages", 2)
    damaged = {"state.db": db.read_bytes()}
    edited = rewrite_archive(archive, tmp_path / "damaged.zip", replace=damaged)
    line = refused_untouched(live_home, edited)
    assert "state.db" in line and ("integrity_check" in line or "malformed" in line)


@pytest.mark.parametrize("layout", ["upstream30", "legacy"])
def test_stores_the_agent_and_older_hermes_wrote_carry_no_foreign_object(
    tmp_path: Path, layout: str
) -> None:
    db = tmp_path / "state.db"
    if layout == "upstream30":
        build_upstream30(db)
    else:
        populate_store(db, sessions_n=1, messages_per_session=2)
        make_legacy(db)
    conn = sqlite3.connect(db)
    try:
        assert store_objects.foreign_objects(conn) == []
    finally:
        conn.close()


def test_trigger_body_check_accepts_every_trigger_this_package_creates(hermes_home: Path) -> None:
    populate_store(hermes_home / "state.db", sessions_n=1, messages_per_session=1)
    conn = sqlite3.connect(hermes_home / "state.db")
    try:
        triggers = conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall()
        assert len(triggers) >= 7
        assert store_objects.foreign_objects(conn) == []
    finally:
        conn.close()


# --- sizes and space ----------------------------------------------------------------------------


def test_restore_refuses_a_member_that_expands_past_the_ratio_and_writes_nothing(
    live_home: Path, archive: Path, tmp_path: Path
) -> None:
    # 64 MiB of zeros deflate to ~64 KiB: the same trick turns a 2 MB archive into 2 GiB.
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(bomb, "w") as out:
        manifest = json.loads(src.read("manifest.json"))
        for info in src.infolist():
            if info.filename != "manifest.json":
                out.writestr(info, src.read(info))
        out.writestr("notes.bin", b"\0" * (64 << 20), compress_type=zipfile.ZIP_DEFLATED)
        manifest["members"]["notes.bin"] = {"size": 64 << 20, "sha256": "x", "kind": "file"}
        out.writestr("manifest.json", json.dumps(manifest))
    assert bomb.stat().st_size < 2 << 20
    line = refused_untouched(live_home, bomb)
    assert "notes.bin" in line and "expands" in line


def test_restore_checks_the_space_it_really_needs(tmp_path: Path, archive: Path) -> None:
    # The old check compared the members alone with the free space; the restore also writes a
    # copy of the replaced store and, through the journal, as much again as the larger store.
    big = tmp_path / "big" / "state.db"
    populate_store(big, sessions_n=20, messages_per_session=20, content_size=2000, seed=8)
    settle(big)
    with small_filesystem(tmp_path / "small", "8m") as small:
        home = small / "home"
        home.mkdir()
        db = home / "state.db"
        db.write_bytes(big.read_bytes())
        member = len(store_bytes(archive))
        free = shutil.disk_usage(small).free
        assert member < free < member + 2 * db.stat().st_size, (member, free)
        before, tree = digest(db), listing(home)
        proc = hermes("restore", str(archive), "--yes", home=home)
        line = assert_one_line_error(proc)
        assert "needs" in line and "free" in line
        assert digest(db) == before and listing(home) == tree


# --- all or nothing ----------------------------------------------------------------------------


def test_restore_puts_the_first_store_back_when_the_second_cannot_be_written(
    hermes_home: Path, tmp_path: Path
) -> None:
    root = hermes_home
    populate_store(root / "state.db", sessions_n=3, messages_per_session=2, seed=1)
    coder = root / "profiles" / "coder"
    coder.mkdir(parents=True)
    populate_store(coder / "state.db", sessions_n=2, messages_per_session=2, seed=2)
    made = hermes("backup", "--all-profiles", "-o", f"{tmp_path}/a/", home=root)
    assert made.returncode == 0, made.stderr
    [archive] = (tmp_path / "a").glob("*.zip")
    populate_store(root / "state.db", sessions_n=5, messages_per_session=2, seed=9)
    settle(root / "state.db")
    settle(coder / "state.db")
    give_away(coder / "state.db")
    os.chmod(coder / "state.db", 0o644)  # readable (the plan is made), not writable
    rows_before = dump(root / "state.db")
    coder_before = digest(coder / "state.db")
    proc = hermes("restore", str(archive), "--yes", home=root, unprivileged=True)
    line = assert_one_line_error(proc)
    assert "nothing was changed" in line
    # The first store was written, then put back through SQLite: same rows, not same bytes.
    assert dump(root / "state.db") == rows_before and count(root / "state.db", "sessions") == 8
    assert integrity(root / "state.db") == "ok"
    assert digest(coder / "state.db") == coder_before
    assert not list(root.rglob("*.pre-restore-*"))


def test_restore_over_a_store_of_another_page_size(hermes_home: Path, tmp_path: Path) -> None:
    src = tmp_path / "big-pages"
    src.mkdir()
    conn = sqlite3.connect(src / "state.db")
    conn.execute("PRAGMA page_size = 8192")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    populate_store(src / "state.db", sessions_n=5, messages_per_session=3, seed=4)
    made = hermes("backup", "-o", f"{tmp_path}/a/", home=src)
    assert made.returncode == 0, made.stderr
    [archive] = (tmp_path / "a").glob("*.zip")
    populate_store(hermes_home / "state.db", sessions_n=2, messages_per_session=2, seed=6)
    proc = hermes("restore", str(archive), "--yes", home=hermes_home)
    assert proc.returncode == 0, proc.stderr
    assert "page size 8192" in proc.stdout
    db = hermes_home / "state.db"
    assert integrity(db) == "ok" and count(db, "sessions") == 5


def test_restore_keeps_the_store_in_its_journal_mode(hermes_home: Path, tmp_path: Path) -> None:
    src = tmp_path / "wal-src"
    populate_store(src / "state.db", sessions_n=2, messages_per_session=2)  # a WAL store
    made = hermes("backup", "-o", f"{tmp_path}/a/", home=src)
    [archive] = (tmp_path / "a").glob("*.zip")
    assert made.returncode == 0
    db = hermes_home / "state.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    populate_store(db, sessions_n=1, messages_per_session=1, seed=2)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    proc = hermes("restore", str(archive), "--yes", home=hermes_home)
    assert proc.returncode == 0, proc.stderr
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        conn.close()


# --- what the user is shown and what is kept ---------------------------------------------------


def test_restore_shows_before_and_after_asks_and_keeps_the_replaced_store(
    live_home: Path, archive: Path
) -> None:
    db = live_home / "state.db"
    declined = pty_child("restore", str(archive), input="n\n", env={"HERMES_HOME": str(live_home)})
    assert declined.returncode == 1
    shown = " ".join(declined.output.split())  # lines are wrapped to the terminal
    assert "state.db: now 60 sessions, 180 messages" in shown
    assert "-> 12 sessions, 48 messages" in shown
    assert "Replace them with the archive's? [y/N]" in declined.output
    assert count(db, "sessions") == 60 and not list(live_home.glob("*.pre-restore-*"))
    accepted = pty_child("restore", str(archive), input="y\n", env={"HERMES_HOME": str(live_home)})
    assert accepted.returncode == 0, accepted.output
    assert count(db, "sessions") == 12
    [copy] = live_home.glob("state.db.pre-restore-*")
    assert count(copy, "sessions") == 60 and integrity(copy) == "ok"
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert f"kept at {copy}" in " ".join(accepted.output.split())


def test_restore_into_a_new_home_creates_it_private_under_umask_000(
    archive: Path, tmp_path: Path
) -> None:
    home = tmp_path / "fresh" / "home"
    proc = hermes("restore", str(archive), "--yes", home=home, umask=0)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "state.db").stat().st_mode) == 0o600
    assert count(home / "state.db", "sessions") == 12


def test_restore_through_a_symlinked_store_writes_the_target(
    hermes_home: Path, archive: Path, tmp_path: Path
) -> None:
    real = tmp_path / "disk2" / "real.db"
    populate_store(real, sessions_n=2, messages_per_session=1)
    (hermes_home / "state.db").symlink_to(real)
    proc = hermes("restore", str(archive), "--yes", home=hermes_home)
    assert proc.returncode == 0, proc.stderr
    assert (hermes_home / "state.db").is_symlink()
    assert count(real, "sessions") == 12


def test_restore_of_a_backup_of_a_crashed_store_keeps_the_wal_only_rows(
    hermes_home: Path, tmp_path: Path
) -> None:
    src = tmp_path / "crashed"
    populate_store(src / "state.db", sessions_n=1, messages_per_session=2, seed=1)
    crash_with_committed_wal(src / "state.db", "sess-1-00000", 30)
    made = hermes("backup", "-o", f"{tmp_path}/a/", home=src)
    assert made.returncode == 0, made.stderr
    [archive] = (tmp_path / "a").glob("*.zip")
    assert restore_backup(archive, hermes_home).databases == ["state.db"]
    assert count(hermes_home / "state.db", "messages") == 32


# --- killed runs --------------------------------------------------------------------------------


def test_restore_removes_the_staging_a_killed_restore_left(live_home: Path, tmp_path: Path) -> None:
    big = tmp_path / "big"
    populate_store(big / "state.db", sessions_n=30, messages_per_session=200, content_size=1500)
    made = hermes("backup", "-o", f"{tmp_path}/a/", home=big)
    [archive] = (tmp_path / "a").glob("*.zip")
    assert made.returncode == 0
    before = digest(live_home / "state.db")
    killed = 0
    for _ in range(3):
        proc = start_hermes("restore", str(archive), "--yes", home=live_home)
        staged = lambda: any(  # noqa: E731
            p.stat().st_size > 0 for p in live_home.glob(".hermes-restore-*/*.member")
        )
        killed += kill_when(proc, staged)
        # Each run removed the staging of the run killed before it: one leftover at a time.
        assert len(list(live_home.glob(".hermes-restore-*"))) == 1
    assert killed == 3
    assert digest(live_home / "state.db") == before  # killed while staging: nothing replaced
    with prepare_restore(archive, live_home) as ready:
        assert len(ready.plan.cleaned) == 1
    assert not list(live_home.glob(".hermes-restore-*"))


def test_a_running_restore_s_staging_is_not_taken_for_a_leftover(
    live_home: Path, archive: Path
) -> None:
    with prepare_restore(archive, live_home) as first:
        with prepare_restore(archive, live_home) as second:
            assert second.plan.cleaned == []
        assert first.apply().databases == ["state.db"]
    time.sleep(0)  # both scratch directories are gone
    assert not list(live_home.glob(".hermes-restore-*"))


def test_library_restore_writes_a_pre_restore_copy_and_reports_the_change(
    live_home: Path, archive: Path
) -> None:
    result = restore_backup(archive, live_home)
    [change] = result.changes
    assert change.before is not None and change.before.sessions == 60
    assert change.after.sessions == 12 and change.shrinks
    assert result.pre_restore["state.db"].exists()
    assert any("fewer sessions" in w for w in result.warnings)


def test_restore_of_the_agent_release_layout_is_accepted(hermes_home: Path, tmp_path: Path) -> None:
    src = tmp_path / "upstream"
    src.mkdir()
    build_upstream30(src / "state.db")
    archive = create_backup(src, tmp_path / "up.zip", keep=None).archive
    result = restore_backup(archive, hermes_home)
    assert result.databases == ["state.db"]
    assert integrity(hermes_home / "state.db") == "ok"
