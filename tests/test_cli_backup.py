"""`hermes backup` and `hermes restore` (CliRunner)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from clitools import load_sample, run, run_json


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
