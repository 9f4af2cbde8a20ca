"""`hermes backup`, `hermes backup list` and `hermes restore` (CliRunner, and the real process
where the item says so)."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from clitools import child, load_sample, run, run_json
from conftest import Holder
from hostile_env import assert_one_line_error
from support.damage import table_pages, zero_pages
from support.stores import bundle_digest, count_rows, settle


@pytest.fixture
def sample(hermes_home: Path) -> Path:
    """The test profile's store, filled with the sample sessions."""
    return load_sample()


def _archives(hermes_home: Path) -> list[Path]:
    return sorted((hermes_home / "backups").glob("hermes-backup-*.zip"))


def test_backup_writes_an_archive_with_the_store(sample: Path, hermes_home: Path) -> None:
    result = run("backup")
    assert result.exit_code == 0, result.stderr
    [archive] = _archives(hermes_home)
    assert f"Wrote {archive}" in result.stdout  # outside the user's home: shown absolute
    assert "state.db: schema v31, 12 sessions, 53 messages" in result.stdout
    assert "state.db" in zipfile.ZipFile(archive).namelist()


def test_backup_to_an_existing_file_is_refused(sample: Path, tmp_path: Path) -> None:
    target = tmp_path / "mine.zip"
    target.write_bytes(b"keep")
    result = run("backup", "-o", str(target))
    assert result.exit_code == 1 and "Refusing to overwrite" in result.stderr
    assert target.read_bytes() == b"keep"


def test_backup_keep_rejects_a_negative_count_as_usage(sample: Path) -> None:
    assert run("backup", "--keep", "-1").exit_code == 2


def test_restore_brings_back_a_deleted_session(sample: Path, hermes_home: Path) -> None:
    run("backup")
    [archive] = _archives(hermes_home)
    run("sessions", "delete", "20261118_091502_a1c9e2", "--yes")
    assert run_json("sessions", "list")["total"] == 11
    result = run("restore", str(archive), "--yes")
    assert result.exit_code == 0, result.stderr
    assert "Restored 1 store(s)" in result.stdout
    assert run_json("sessions", "list")["total"] == 12


def test_restore_aborts_on_eof(sample: Path, hermes_home: Path) -> None:
    run("backup")
    [archive] = _archives(hermes_home)
    result = run("restore", str(archive), input="")
    assert result.exit_code == 1 and "Aborted" in result.stderr


def test_restore_of_a_non_archive_fails_cleanly(sample: Path, tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.zip"
    bogus.write_text("not a zip", encoding="utf-8")
    result = run("restore", str(bogus), "--yes")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and "Traceback" not in result.output


def test_backup_compress_writes_a_smaller_deflated_archive(sample: Path, hermes_home: Path) -> None:
    assert run("backup", "--keep", "0").exit_code == 0
    result = run("backup", "--compress", "--keep", "0")
    assert result.exit_code == 0, result.stderr
    kinds = {}
    for archive in _archives(hermes_home):  # two names made in one second: order not by time
        with zipfile.ZipFile(archive) as zf:
            kinds[zf.getinfo("state.db").compress_type] = archive.stat().st_size
    assert sorted(kinds) == [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]
    assert kinds[zipfile.ZIP_DEFLATED] < kinds[zipfile.ZIP_STORED]


def test_backup_compress_refuses_a_member_restore_would_refuse(
    sample: Path, hermes_home: Path
) -> None:
    (hermes_home / "zeros.bin").write_bytes(bytes(4 << 20))
    result = run("backup", "--compress")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: zeros.bin deflates more than 200 times")
    assert "without --compress" in result.stderr and "Traceback" not in result.stderr
    assert _archives(hermes_home) == []


# --- output directories: only the last component is made --------------------------------------


def test_backup_to_a_folder_on_a_drive_that_is_not_mounted_creates_nothing(
    sample: Path, tmp_path: Path
) -> None:
    target = tmp_path / "mnt" / "usb" / "hermes"
    proc = child("backup", "-o", f"{target}/")
    line = assert_one_line_error(proc)
    assert f"{tmp_path / 'mnt' / 'usb'} does not exist" in line and "nothing was created" in line
    assert "mounted" in proc.stderr
    assert not (tmp_path / "mnt").exists()


def test_backup_into_a_new_last_directory_makes_it_private(sample: Path, tmp_path: Path) -> None:
    proc = child("backup", "-o", f"{tmp_path}/usb/")
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE((tmp_path / "usb").stat().st_mode) == 0o700
    assert len(list((tmp_path / "usb").glob("hermes-backup-*.zip"))) == 1


def test_backup_to_an_archive_name_in_a_missing_directory_is_refused(
    sample: Path, tmp_path: Path
) -> None:
    proc = child("backup", "-o", str(tmp_path / "missing" / "before-upgrade.zip"))
    line = assert_one_line_error(proc)
    assert f"{tmp_path / 'missing'} does not exist" in line
    assert not (tmp_path / "missing").exists()


# --- --json ------------------------------------------------------------------------------------


def test_backup_json_prints_what_was_written(sample: Path, hermes_home: Path) -> None:
    proc = child("backup", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    [archive] = _archives(hermes_home)
    assert data["archive"] == str(archive) and data["complete"] is True
    assert data["archive_bytes"] == archive.stat().st_size and data["duration_s"] >= 0
    assert data["databases"]["state.db"]["tables"]["messages"] == 53
    assert [m["name"] for m in data["members"]] == ["state.db"]


def test_db_optimize_json_prints_sizes_and_duration(sample: Path) -> None:
    proc = child("db", "optimize", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["path"] == str(sample) and data["vacuumed"] is True
    assert data["db_bytes_after"] == sample.stat().st_size
    assert data["reclaimed"] == data["bytes_before"] - data["bytes_after"]
    assert isinstance(data["duration_s"], float) and data["reindexed"] is False


def test_restore_json_keeps_stdout_for_the_result(sample: Path, hermes_home: Path) -> None:
    assert run("backup").exit_code == 0
    [archive] = _archives(hermes_home)
    proc = child("restore", str(archive), "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # the plan went to stderr
    assert data["databases"] == ["state.db"] and data["plan"]["source"] == "archive"
    assert data["changes"][0]["after"]["sessions"] == 12
    assert Path(data["pre_restore"]["state.db"]).exists()
    assert "Restore into" in proc.stderr


# --- backup list -------------------------------------------------------------------------------


def test_backup_list_shows_the_archives_newest_first_with_what_they_hold(
    sample: Path, hermes_home: Path
) -> None:
    assert child("backup").returncode == 0
    assert child("sessions", "delete", "20261118_091502_a1c9e2", "--yes").returncode == 0
    assert child("backup", "--keep", "0").returncode == 0
    proc = child("backup", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["folder"] == str(hermes_home / "backups")
    newest, oldest = data["archives"]
    assert (newest["sessions"], oldest["sessions"]) == (11, 12)
    assert newest["created_at"] >= oldest["created_at"]
    assert newest["bytes"] == Path(newest["path"]).stat().st_size
    assert newest["profile"] == "default" and newest["complete"] is True
    text = child("backup", "list")
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    assert Path(newest["path"]).name in lines[2] and Path(oldest["path"]).name in lines[3]


def test_backup_list_of_another_folder_and_of_none(sample: Path, tmp_path: Path) -> None:
    assert child("backup", "-o", f"{tmp_path}/usb/").returncode == 0
    (tmp_path / "usb" / "holiday.zip").write_bytes(b"PK not ours")
    data = json.loads(child("backup", "list", str(tmp_path / "usb"), "--json").stdout)
    assert [Path(a["path"]).parent for a in data["archives"]] == [tmp_path / "usb"]
    empty = child("backup", "list")
    assert empty.returncode == 0 and "No backup archives in" in empty.stdout


def test_backup_list_refuses_the_options_of_making_a_backup(sample: Path) -> None:
    result = run("backup", "-o", "/tmp/x/", "list")
    assert result.exit_code == 2 and "--output" in result.stderr


# --- restoring a recovered store file ----------------------------------------------------------


@pytest.fixture
def recovered(sample: Path, tmp_path: Path) -> Path:
    """A copy `hermes sessions recover` made of the sample store (an intact source)."""
    target = tmp_path / "recovered" / "state-recovered.db"
    proc = child("sessions", "recover", "--to", str(target))
    assert proc.returncode == 0, proc.stderr
    return target


def test_restore_installs_a_recovered_store_and_keeps_the_current_one(
    sample: Path, hermes_home: Path, recovered: Path
) -> None:
    assert child("sessions", "delete", "20261118_091502_a1c9e2", "--yes").returncode == 0
    proc = child("restore", str(recovered), input="y\n")
    assert proc.returncode == 0, proc.stderr
    assert f"Store file: {recovered}" in proc.stdout and "Replace it with this file?" in proc.stderr
    assert "now 11 sessions" in proc.stdout and "-> 12 sessions" in proc.stdout
    assert count_rows(sample, "sessions") == 12
    [kept] = hermes_home.glob("state.db.pre-restore-*")
    assert count_rows(kept, "sessions") == 11
    assert child("db", "check").returncode == 0


def test_restore_of_a_store_file_refuses_while_the_agent_has_the_store_open(
    sample: Path, recovered: Path, hold_store: Callable[..., Holder]
) -> None:
    holder = hold_store(sample, "open")
    before = bundle_digest(sample)
    proc = child("restore", str(recovered), "--yes")
    line = assert_one_line_error(proc, 75)
    assert f"PID {holder.proc.pid}" in line
    assert bundle_digest(sample) == before


def test_restore_of_a_damaged_store_file_is_refused(sample: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.db"
    broken.write_bytes(sample.read_bytes())  # a closed copy
    zero_pages(broken, table_pages(broken, "messages", "leaf")[1:2])
    before = bundle_digest(sample)
    proc = child("restore", str(broken), "--yes")
    line = assert_one_line_error(proc)
    assert "failed verification" in line and "integrity_check" in line
    assert bundle_digest(sample) == before


def test_restore_of_a_store_file_with_a_broken_search_index_is_refused(
    sample: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken-index.db"
    broken.write_bytes(sample.read_bytes())
    conn = sqlite3.connect(broken)
    conn.execute("DELETE FROM messages_fts_docsize WHERE id = (SELECT min(id) FROM messages)")
    conn.commit()
    conn.close()
    proc = child("restore", str(broken), "--yes")
    line = assert_one_line_error(proc)
    assert "search indexes" in line and "messages_fts" in line


def test_restore_of_the_live_store_itself_is_refused(sample: Path) -> None:
    before = bundle_digest(sample)
    proc = child("restore", str(sample), "--yes")
    line = assert_one_line_error(proc)
    assert "is the store a restore would replace" in line
    assert bundle_digest(sample) == before


def test_restore_of_another_application_database_is_refused(sample: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t(x)")
    conn.close()
    proc = child("restore", str(other), "--yes")
    assert "not a Hermes session store" in assert_one_line_error(proc)


def test_restore_of_a_file_that_is_neither_says_what_it_takes(sample: Path, tmp_path: Path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("hello", encoding="utf-8")
    proc = child("restore", str(junk), "--yes")
    line = assert_one_line_error(proc)
    assert "neither a readable backup archive" in line and "hermes backup list" in proc.stderr


def test_restore_of_a_partial_recovery_says_so_in_the_plan(sample: Path, tmp_path: Path) -> None:
    settle(sample)
    zero_pages(sample, table_pages(sample, "messages", "leaf")[1:2])
    target = tmp_path / "partial.db"
    made = child("sessions", "recover", "--to", str(target))
    assert target.exists(), made.stderr
    proc = child("restore", str(target), input="n\n")
    assert proc.returncode == 1 and "the recovery that wrote it was partial" in proc.stdout
    assert os.path.exists(sample)


def test_recover_says_how_to_install_the_copy_with_restore(sample: Path, tmp_path: Path) -> None:
    target = tmp_path / "copy.db"
    result = run("sessions", "recover", "--to", str(target))
    assert result.exit_code == 0, result.stderr
    assert f"hermes restore {target}" in result.stdout
