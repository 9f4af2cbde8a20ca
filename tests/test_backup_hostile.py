"""`hermes backup` when the store is hard to read, the output path is odd, several profiles
share a folder, and runs get killed (issue 13.3, 13.4, 13.8, 13.9; issue 14.3)."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hostile_env import (
    assert_one_line_error,
    give_away,
    hermes,
    kill_when,
    listing,
    remount_read_only,
    small_filesystem,
    start_hermes,
)
from support.stores import crash_with_committed_wal, populate_store, settle

from hermes_state.store.home import create_profile

HOT_JOURNAL = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=DELETE")
conn.execute("PRAGMA cache_size=1")  # spill pages to the file mid-transaction
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE messages SET content = content || 'x'")
os._exit(0)  # die with the rollback journal hot
"""


def archives(folder: Path) -> list[Path]:
    return sorted(folder.glob("hermes-backup-*.zip"))


def members(archive: Path) -> list[str]:
    with zipfile.ZipFile(archive) as zf:
        return sorted(zf.namelist())


def rows_in_archive(archive: Path, tmp_path: Path, table: str = "messages") -> int:
    out = tmp_path / f"x-{archive.stem}"
    with zipfile.ZipFile(archive) as zf:
        zf.extract("state.db", out)
    conn = sqlite3.connect(out / "state.db")
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def home(hermes_home: Path) -> Path:
    """A profile home with a small, settled store and a config file."""
    populate_store(hermes_home / "state.db", sessions_n=3, messages_per_session=4)
    settle(hermes_home / "state.db")
    (hermes_home / "config.yaml").write_text("model: test\n")
    return hermes_home


# --- a store that cannot be read in full fails the backup ---------------------------------------


def test_backup_follows_a_symlinked_store_and_its_wal(home: Path, tmp_path: Path) -> None:
    real = tmp_path / "disk2" / "real.db"
    real.parent.mkdir()
    (home / "state.db").rename(real)
    (home / "state.db").symlink_to(real)
    crash_with_committed_wal(real, "sess-1-00000", 30)  # 30 acknowledged rows only in the WAL
    assert Path(str(real) + "-wal").stat().st_size > 0
    proc = hermes("backup", home=home)
    assert proc.returncode == 0, proc.stderr
    [archive] = archives(home / "backups")
    assert "state.db" in members(archive)
    assert rows_in_archive(archive, tmp_path) == 12 + 30


def test_backup_refuses_a_dangling_store_symlink(home: Path, tmp_path: Path) -> None:
    (home / "state.db").unlink()
    (home / "state.db").symlink_to(tmp_path / "gone.db")
    line = assert_one_line_error(hermes("backup", home=home))
    assert "does not exist" in line and "no archive was written" in line
    assert not archives(home / "backups") if (home / "backups").exists() else True
    assert not (tmp_path / "gone.db").exists()


def test_backup_refuses_a_store_path_that_is_a_directory(hermes_home: Path) -> None:
    (hermes_home / "state.db").mkdir()
    line = assert_one_line_error(hermes("backup", home=hermes_home))
    assert "directory" in line
    assert not (hermes_home / "backups").exists()


def test_backup_fails_when_the_store_belongs_to_another_user(home: Path) -> None:
    give_away(home / "state.db")
    proc = hermes("backup", home=home, unprivileged=True)
    line = assert_one_line_error(proc)
    assert "another user" in line and "no archive was written" in line
    assert not archives(home / "backups")


def test_backup_fails_on_a_hot_rollback_journal_with_what_to_do(home: Path) -> None:
    db = home / "state.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    subprocess.run([sys.executable, "-c", HOT_JOURNAL, str(db)], check=True)
    assert Path(str(db) + "-journal").stat().st_size > 0
    proc = hermes("backup", home=home)
    line = assert_one_line_error(proc)
    assert "unfinished transaction" in line
    assert "Hint:" in proc.stderr and "rolls it back" in proc.stderr
    assert not archives(home / "backups")


def test_backup_of_a_wal_store_on_a_read_only_mount_fails_cleanly(tmp_path: Path) -> None:
    src = tmp_path / "src" / "state.db"
    populate_store(src, sessions_n=2, messages_per_session=2)
    settle(src)
    with small_filesystem(tmp_path / "ro", "16m") as mount:
        home = mount / "home"
        home.mkdir()
        (home / "state.db").write_bytes(src.read_bytes())  # WAL header, no -shm beside it
        remount_read_only(mount)
        out = tmp_path / "out"
        proc = hermes("backup", "-o", f"{out}/", home=home)
        line = assert_one_line_error(proc)
        assert "state.db" in line and "no archive was written" in line
        assert not archives(out) if out.exists() else True


def test_backup_with_an_unreadable_config_is_incomplete_and_keeps_older_archives(
    home: Path,
) -> None:
    for _ in range(2):
        assert hermes("backup", "--keep", "1", home=home).returncode == 0
    [older] = archives(home / "backups")
    give_away(home / "config.yaml")
    proc = hermes("backup", "--keep", "1", home=home, unprivileged=True)
    line = assert_one_line_error(proc)
    assert "Backup incomplete" in line and "config.yaml" in line
    assert older in archives(home / "backups") and len(archives(home / "backups")) == 2
    newest = max(archives(home / "backups"), key=lambda p: p.stat().st_mtime_ns)
    with zipfile.ZipFile(newest) as zf:
        manifest = json.loads(zf.read("manifest.json"))
    assert manifest["complete"] is False and manifest["skipped"] == ["config.yaml"]


def test_backup_on_a_full_disk_fails_in_one_line_and_leaves_nothing(home: Path, tmp_path: Path):
    with small_filesystem(tmp_path / "full", "512k") as full:
        proc = hermes("backup", "-o", f"{full}/", home=home)
        line = assert_one_line_error(proc)
        assert "No space left" in line
        assert listing(full) == {}


# --- per-profile archives and rotation ----------------------------------------------------------


def test_two_profiles_backed_up_into_one_folder_keep_their_own_archives(
    hermes_home: Path, tmp_path: Path
) -> None:
    out = tmp_path / "shared"
    homes = {name: create_profile(name) for name in ("alpha", "beta")}
    for h in homes.values():
        populate_store(h / "state.db", sessions_n=1, messages_per_session=1)
    (out).mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "hermes-backup-20260101-000000.zip").write_bytes(b"not ours")  # no manifest
    hermes("backup", "-o", str(out), home=homes["beta"])
    for _ in range(4):
        proc = hermes("backup", "-o", str(out), "--keep", "3", home=homes["alpha"])
        assert proc.returncode == 0, proc.stderr
    alpha = [p for p in archives(out) if "-alpha-" in p.name]
    beta = [p for p in archives(out) if "-beta-" in p.name]
    assert len(alpha) == 3 and len(beta) == 1
    assert (out / "notes.txt").exists() and (out / "hermes-backup-20260101-000000.zip").exists()


def test_keep_zero_keeps_every_archive(home: Path) -> None:
    for _ in range(5):
        assert hermes("backup", "--keep", "0", home=home).returncode == 0
    assert len(archives(home / "backups")) == 5


def test_rotation_also_removes_older_unlabelled_archives_of_the_same_home(home: Path) -> None:
    first = hermes("backup", home=home)
    assert first.returncode == 0
    [old] = archives(home / "backups")
    unlabelled = old.with_name("hermes-backup-20200101-000000.zip")  # the name older releases used
    old.rename(unlabelled)
    os.utime(unlabelled, (1, 1))
    for _ in range(2):
        assert hermes("backup", "--keep", "2", home=home).returncode == 0
    names = [p.name for p in archives(home / "backups")]
    assert unlabelled.name not in names and len(names) == 2


def test_output_with_a_trailing_slash_is_a_new_private_directory(home: Path, tmp_path: Path):
    proc = hermes("backup", "-o", f"{tmp_path}/newdir/", home=home, umask=0)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "newdir").is_dir()
    assert stat.S_IMODE((tmp_path / "newdir").stat().st_mode) == 0o700
    [archive] = archives(tmp_path / "newdir")
    assert archive.name.startswith("hermes-backup-default-")


def test_output_under_a_file_is_refused_in_one_line(home: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    line = assert_one_line_error(hermes("backup", "-o", f"{tmp_path}/afile/x.zip", home=home))
    assert "is a file, not a directory" in line
    assert (tmp_path / "afile").read_text() == "x"


def test_output_without_zip_suffix_gets_one(home: Path, tmp_path: Path) -> None:
    assert hermes("backup", "-o", str(tmp_path / "snap"), home=home).returncode == 0
    assert (tmp_path / "snap.zip").is_file() and not (tmp_path / "snap").exists()


def test_backups_folder_is_created_private_under_umask_000(home: Path) -> None:
    assert hermes("backup", home=home, umask=0).returncode == 0
    assert stat.S_IMODE((home / "backups").stat().st_mode) == 0o700


# --- killed runs --------------------------------------------------------------------------------


def test_leftovers_of_killed_backups_are_removed_by_the_next_run(
    hermes_home: Path, tmp_path: Path
) -> None:
    populate_store(
        hermes_home / "state.db", sessions_n=30, messages_per_session=200, content_size=1500
    )
    settle(hermes_home / "state.db")
    out = tmp_path / "out"
    out.mkdir()
    killed = 0
    for _ in range(5):
        proc = start_hermes("backup", "-o", str(out), "--keep", "2", home=hermes_home)
        copying = lambda: any(p.stat().st_size > 0 for p in out.glob(".hermes-backup-*/*"))  # noqa: E731
        killed += kill_when(proc, copying)
        assert not archives(out)  # a killed run is never an archive
    assert killed == 5
    # Each run removed the one killed before it: one leftover at a time, never five copies.
    assert len(list(out.glob(".hermes-backup-*"))) == 1
    proc = hermes("backup", "-o", str(out), "--keep", "2", home=hermes_home)
    assert proc.returncode == 0, proc.stderr
    assert "left by a backup that was killed" in proc.stdout
    assert [p.name for p in out.iterdir()] == [archives(out)[0].name]


# --- profile delete and the backups a profile holds ---------------------------------------------


def test_profile_delete_refuses_while_the_profile_holds_backups(hermes_home: Path) -> None:
    coder = create_profile("coder")
    populate_store(coder / "state.db", sessions_n=1, messages_per_session=1)
    assert hermes("-p", "coder", "backup", home=hermes_home).returncode == 0
    proc = hermes("profile", "delete", "coder", "--yes", home=hermes_home)
    line = assert_one_line_error(proc)
    assert "holds 1 backup(s)" in line and "--delete-backups" in proc.stderr
    assert (coder / "state.db").exists() and len(archives(coder / "backups")) == 1


def test_profile_delete_refuses_while_the_profile_holds_a_pre_restore_copy(
    hermes_home: Path,
) -> None:
    coder = create_profile("coder")
    populate_store(coder / "state.db", sessions_n=1, messages_per_session=1)
    (coder / "state.db.pre-restore-20260101-000000").write_bytes(b"copy")
    assert_one_line_error(hermes("profile", "delete", "coder", "--yes", home=hermes_home))
    assert coder.exists()


def test_profile_delete_with_delete_backups_deletes_them_too(hermes_home: Path) -> None:
    coder = create_profile("coder")
    populate_store(coder / "state.db", sessions_n=1, messages_per_session=1)
    assert hermes("-p", "coder", "backup", home=hermes_home).returncode == 0
    proc = hermes("profile", "delete", "coder", "--delete-backups", "--yes", home=hermes_home)
    assert proc.returncode == 0, proc.stderr
    assert not coder.exists()


def test_profile_delete_without_backups_still_just_asks(hermes_home: Path) -> None:
    coder = create_profile("coder")
    proc = hermes("profile", "delete", "coder", home=hermes_home, input="y\n")
    assert proc.returncode == 0, proc.stderr
    assert not coder.exists()


def test_leftovers_of_backups_killed_under_older_releases_are_removed(
    home: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)  # a process that has exited
    partial = out / f".hermes-backup-20260101-000000.zip.{pid}.partial"
    partial.write_bytes(b"half an archive")
    scratch = out / ".hermes-backup-k2x9q1"  # no lock file: made before there were locks
    scratch.mkdir()
    (scratch / "0.db").write_bytes(b"a full copy of the store")
    os.utime(scratch, (1, 1))
    alive = out / f".hermes-backup-20260101-000000.zip.{os.getpid()}.partial"
    alive.write_bytes(b"someone is still writing this")
    proc = hermes("backup", "-o", str(out), home=home)
    assert proc.returncode == 0, proc.stderr
    assert not partial.exists() and not scratch.exists() and alive.exists()
