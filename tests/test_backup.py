"""Backup archives: consistent snapshots, manifest, rotation, verify, and safe restore."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.children import child_env

from hermes_state.backups.archive_check import verify_backup
from hermes_state.backups.archive_format import MANIFEST, BackupError, UnsafeArchiveError
from hermes_state.backups.backup import create_backup
from hermes_state.backups.restore import restore_backup
from hermes_state.records import messages, sessions
from hermes_state.store.connection import open_store
from hermes_state.store.errors import StoreBusyError


def make_store(home: Path, n_sessions: int = 2, n_messages: int = 3) -> Path:
    """Create home/state.db with a few sessions and messages; return its path."""
    db = home / "state.db"
    store = open_store(db)
    try:
        for s in range(n_sessions):
            sid = f"s{s}"
            sessions.create_session(store, sid, "cli")
            messages.append_messages(
                store, sid, [{"role": "user", "content": f"m{s}-{i}"} for i in range(n_messages)]
            )
    finally:
        store.close()
    return db


def add_ledger_rows(db: Path) -> None:
    """Write one row into each runtime ledger table with plain SQL."""
    conn = sqlite3.connect(db)
    try:
        with conn:
            conn.execute(
                "INSERT INTO runtime_epoch(singleton, epoch, instance_id, updated_at) "
                "VALUES (1, 7, 'gw-1', 1.0)"
            )
            conn.execute(
                "INSERT INTO session_admissions(admission_id, session_id, request_id, "
                "payload_json, payload_digest, status, owner_epoch, created_at, updated_at) "
                "VALUES ('a1', 's0', 'r1', '{}', 'd1', 'started', 7, 1.0, 1.0)"
            )
            conn.execute(
                "INSERT INTO worker_executions(execution_id, session_id, kind, owner_epoch, "
                "status, created_at, updated_at) VALUES ('e1', 's0', 'cron', 7, 'running', 1, 1)"
            )
    finally:
        conn.close()


def rows(db: Path, sql: str) -> list[tuple]:
    """Run a query on a store file read-only and return its rows."""
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def listing(root: Path) -> list[str]:
    """Every path under root (files and directories), relative, sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def hostile_archive(path: Path, name: str, *, symlink: bool = False) -> Path:
    """Write an archive whose one member has the given (unsafe) name, plus a manifest."""
    with zipfile.ZipFile(path, "w") as zf:
        info = zipfile.ZipInfo(name)
        mode = (stat.S_IFLNK | 0o777) if symlink else (stat.S_IFREG | 0o600)
        info.external_attr = mode << 16
        zf.writestr(info, "/etc/passwd" if symlink else "pwned")
        zf.writestr(MANIFEST, json.dumps({"members": {name: {"size": 5, "sha256": "x"}}}))
    return path


# --- create --------------------------------------------------------------------------------


def test_backup_archives_the_store_through_a_snapshot_and_never_the_sidecars(
    hermes_home: Path,
) -> None:
    make_store(hermes_home)
    store = open_store(hermes_home / "state.db")  # keeps -wal and -shm present meanwhile
    try:
        result = create_backup(hermes_home)
    finally:
        store.close()
    names = zipfile.ZipFile(result.archive).namelist()
    assert "state.db" in names and MANIFEST in names
    assert not [n for n in names if n.endswith(("-wal", "-shm", "-journal"))]


def test_backup_skips_locks_caches_backups_symlinks_and_other_profiles(hermes_home: Path) -> None:
    make_store(hermes_home)
    (hermes_home / "config.yaml").write_text("model: x\n")
    (hermes_home / "gateway.lock").write_text("")
    for d in ("__pycache__", ".cache", "backups", "logs", "profiles/coder"):
        (hermes_home / d).mkdir(parents=True, exist_ok=True)
    (hermes_home / "__pycache__" / "x.pyc").write_bytes(b"")
    (hermes_home / ".cache" / "blob").write_bytes(b"")
    (hermes_home / "logs" / "errors.log").write_text("boom\n")
    (hermes_home / "profiles" / "coder" / "config.yaml").write_text("")
    (hermes_home / "link.yaml").symlink_to(hermes_home / "config.yaml")
    names = set(zipfile.ZipFile(create_backup(hermes_home).archive).namelist())
    assert names == {"state.db", "config.yaml", "logs/errors.log", MANIFEST}


def test_backup_with_all_profiles_archives_the_root_with_every_profile(hermes_home: Path) -> None:
    make_store(hermes_home)
    coder = hermes_home / "profiles" / "coder"
    coder.mkdir(parents=True)
    make_store(coder, n_sessions=1)
    names = zipfile.ZipFile(create_backup(coder, all_profiles=True).archive).namelist()
    assert {"state.db", "profiles/coder/state.db"} <= set(names)


def test_backup_manifest_records_schema_counts_and_member_hashes(hermes_home: Path) -> None:
    make_store(hermes_home, n_sessions=2, n_messages=3)
    result = create_backup(hermes_home)
    with zipfile.ZipFile(result.archive) as zf:
        manifest = json.loads(zf.read(MANIFEST))
        data = zf.read("state.db")
    assert manifest["databases"]["state.db"]["schema_version"] == 31
    assert manifest["databases"]["state.db"]["tables"]["messages"] == 6
    assert manifest["databases"]["state.db"]["tables"]["sessions"] == 2
    import hashlib

    entry = manifest["members"]["state.db"]
    assert entry == {
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "kind": "sqlite",
    }
    assert manifest["created_at"] and manifest["hermes_version"]


def test_backup_archive_is_private_and_leaves_no_partial_file(hermes_home: Path) -> None:
    make_store(hermes_home)
    result = create_backup(hermes_home)
    assert result.archive.parent == hermes_home / "backups"
    assert stat.S_IMODE(os.stat(result.archive).st_mode) == 0o600
    assert [p.name for p in result.archive.parent.iterdir()] == [result.archive.name]


def test_backup_keep_removes_only_our_oldest_archives(hermes_home: Path, tmp_path: Path) -> None:
    make_store(hermes_home)
    out = tmp_path / "archives"
    out.mkdir()
    (out / "hermes-backup-notes.txt").write_text("mine")
    (out / "other.zip").write_bytes(b"")
    made = []
    for _ in range(4):
        made.append(create_backup(hermes_home, out, keep=2).archive)
        time.sleep(0.01)  # distinct mtimes
    left = sorted(p.name for p in out.iterdir())
    assert left == sorted([made[2].name, made[3].name, "hermes-backup-notes.txt", "other.zip"])


def test_backup_taken_during_continuous_appends_is_a_consistent_prefix(hermes_home: Path) -> None:
    db = make_store(hermes_home, n_sessions=1, n_messages=1)
    writer = subprocess.Popen(
        [sys.executable, "-c", APPENDER, str(db), "2.0"],
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        archive = create_backup(hermes_home).archive
    finally:
        writer.wait(timeout=30)
    assert writer.returncode == 0
    out = hermes_home.parent / "extracted"
    with zipfile.ZipFile(archive) as zf:
        zf.extract("state.db", out)
    snap = out / "state.db"
    assert rows(snap, "PRAGMA integrity_check") == [("ok",)]
    ids = [r[0] for r in rows(snap, "SELECT id FROM messages ORDER BY id")]
    assert len(ids) > 1 and ids == list(range(1, len(ids) + 1))
    orphans = rows(
        snap, "SELECT count(*) FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)"
    )
    assert orphans == [(0,)]


APPENDER = """
import sys, time
from hermes_state.records import messages, sessions
from hermes_state.store.connection import open_store
store = open_store(sys.argv[1])
deadline = time.monotonic() + float(sys.argv[2])
print("ready", flush=True)
n = 0
while time.monotonic() < deadline:
    sid = f"w{n // 5}"
    if n % 5 == 0:
        sessions.create_session(store, sid, "cli")
    messages.append_messages(store, sid, [{"role": "user", "content": f"x{n}"}] * 3)
    n += 1
store.close()
"""


# --- verify --------------------------------------------------------------------------------


def test_verify_accepts_an_intact_archive(hermes_home: Path) -> None:
    make_store(hermes_home)
    (hermes_home / "config.yaml").write_text("a: 1\n")
    result = verify_backup(create_backup(hermes_home).archive)
    assert result.ok and result.databases == {"state.db": "ok"} and result.members_checked == 2


def test_verify_detects_a_tampered_member(hermes_home: Path, tmp_path: Path) -> None:
    make_store(hermes_home)
    (hermes_home / "config.yaml").write_text("a: 1\n")
    good = create_backup(hermes_home).archive
    bad = tmp_path / "tampered.zip"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"a: 2\n" if info.filename == "config.yaml" else data)
    result = verify_backup(bad)
    assert not result.ok and any("config.yaml" in p for p in result.problems)


def test_compressed_backup_is_deflated_smaller_verified_and_restorable(
    hermes_home: Path, tmp_path: Path
) -> None:
    make_store(hermes_home, n_sessions=20, n_messages=50)
    (hermes_home / "config.yaml").write_text("model: x\n" * 100)
    stored = create_backup(hermes_home, tmp_path / "stored.zip")
    packed = create_backup(hermes_home, tmp_path / "packed.zip", compress=True)
    with zipfile.ZipFile(packed.archive) as zf:
        kinds = {i.filename: i.compress_type for i in zf.infolist() if i.filename != MANIFEST}
    assert kinds == {"state.db": zipfile.ZIP_DEFLATED, "config.yaml": zipfile.ZIP_DEFLATED}
    assert packed.archive_bytes < stored.archive_bytes / 2
    assert [m.sha256 for m in packed.members] == [m.sha256 for m in stored.members]
    assert verify_backup(packed.archive).ok
    target = tmp_path / "restored"
    restore_backup(packed.archive, target)
    assert rows(target / "state.db", "SELECT count(*) FROM messages") == [(1000,)]


def test_compress_refuses_an_archive_that_restore_would_take_for_a_zip_bomb(
    hermes_home: Path, tmp_path: Path
) -> None:
    make_store(hermes_home)
    (hermes_home / "zeros.bin").write_bytes(bytes(4 << 20))  # deflates about 1,000 times
    out = tmp_path / "archives"
    out.mkdir()
    with pytest.raises(BackupError, match="deflates more than 200 times"):
        create_backup(hermes_home, out / "bomb.zip", compress=True)
    assert list(out.iterdir()) == []  # no archive, no partial file, no work directory


# --- restore -------------------------------------------------------------------------------


def test_restore_round_trip_keeps_the_runtime_ledger(hermes_home: Path, tmp_path: Path) -> None:
    db = make_store(hermes_home)
    add_ledger_rows(db)
    (hermes_home / "config.yaml").write_text("model: x\n")
    archive = create_backup(hermes_home).archive
    target = tmp_path / "restored"
    result = restore_backup(archive, target)
    restored = target / "state.db"
    assert result.databases == ["state.db"] and result.files == ["config.yaml"]
    assert rows(restored, "SELECT epoch, instance_id FROM runtime_epoch") == [(7, "gw-1")]
    assert rows(restored, "SELECT admission_id, status FROM session_admissions") == [
        ("a1", "started")
    ]
    assert rows(restored, "SELECT execution_id, status FROM worker_executions") == [
        ("e1", "running")
    ]
    assert rows(restored, "SELECT count(*) FROM messages") == [(6,)]
    assert (target / "config.yaml").read_text() == "model: x\n"
    assert stat.S_IMODE(os.stat(restored).st_mode) == 0o600


def test_restore_writes_into_the_existing_store_without_swapping_its_inode(
    hermes_home: Path,
) -> None:
    db = make_store(hermes_home, n_sessions=1)
    archive = create_backup(hermes_home).archive
    make_store(hermes_home, n_sessions=3)  # more sessions after the backup
    inode = os.stat(db).st_ino
    result = restore_backup(archive, hermes_home)
    assert os.stat(db).st_ino == inode
    assert rows(db, "SELECT count(*) FROM sessions") == [(1,)]
    assert any("fewer sessions/messages" in w for w in result.warnings)


@pytest.mark.parametrize(
    ("name", "symlink"),
    [("../evil", False), ("/tmp/hermes-evil-absolute", False), ("link", True)],
    ids=["zip-slip", "absolute", "symlink"],
)
def test_restore_refuses_a_hostile_member_and_writes_nothing(
    tmp_path: Path, name: str, symlink: bool
) -> None:
    archive = hostile_archive(tmp_path / "evil.zip", name, symlink=symlink)
    target = tmp_path / "home"
    target.mkdir()
    (target / "keep.txt").write_text("x")
    before = listing(tmp_path)
    with pytest.raises(UnsafeArchiveError):
        restore_backup(archive, target)
    assert listing(tmp_path) == before
    assert not Path("/tmp/hermes-evil-absolute").exists()


def test_restore_refuses_duplicate_member_names(tmp_path: Path) -> None:
    archive = tmp_path / "dup.zip"
    with zipfile.ZipFile(archive, "w") as zf, pytest.warns(UserWarning):
        zf.writestr("config.yaml", "a")
        zf.writestr("config.yaml", "b")
        zf.writestr(MANIFEST, json.dumps({"members": {}}))
    with pytest.raises(UnsafeArchiveError, match="duplicate"):
        restore_backup(archive, tmp_path / "home")
    assert not (tmp_path / "home").exists()


def test_restore_refuses_a_member_over_the_size_cap(hermes_home: Path, tmp_path: Path) -> None:
    make_store(hermes_home)
    archive = create_backup(hermes_home).archive
    with pytest.raises(UnsafeArchiveError, match="member limit"):
        restore_backup(archive, tmp_path / "home", max_member_bytes=1024)


def test_restore_refuses_an_archive_that_fails_verification(
    hermes_home: Path, tmp_path: Path
) -> None:
    make_store(hermes_home)
    (hermes_home / "config.yaml").write_text("a: 1\n")
    good = create_backup(hermes_home).archive
    bad = tmp_path / "tampered.zip"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"a: 2\n" if info.filename == "config.yaml" else data)
    with pytest.raises(BackupError, match="verification"):
        restore_backup(bad, tmp_path / "home")
    assert not (tmp_path / "home" / "state.db").exists()


HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("SELECT count(*) FROM sessions").fetchall()
print("ready", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def store_holder(db: Path) -> Iterator[subprocess.Popen[str]]:
    """A child process that keeps the store open (idle, no transaction)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="holders are read from /proc")
def test_restore_refuses_while_another_process_has_the_store_open(hermes_home: Path) -> None:
    db = make_store(hermes_home)
    archive = create_backup(hermes_home).archive
    with store_holder(db) as proc, pytest.raises(StoreBusyError, match=f"PID {proc.pid}"):
        restore_backup(archive, hermes_home)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="holders are read from /proc")
def test_restore_with_force_proceeds_and_names_the_holder(hermes_home: Path) -> None:
    db = make_store(hermes_home)
    archive = create_backup(hermes_home).archive
    with store_holder(db) as proc:
        result = restore_backup(archive, hermes_home, force=True)
    assert result.forced and f"PID {proc.pid}" in result.holders
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]
