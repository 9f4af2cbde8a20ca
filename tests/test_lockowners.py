"""Lock owners: parsing /proc/locks, decoding SQLite lock bytes, naming real holders."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ask_for_wal

from hermes_state.store import lockowners
from hermes_state.store.connection import open_store
from hermes_state.store.errors import StoreLockedError
from hermes_state.store.lockowners import (
    OFD_OWNER,
    decode_range,
    lock_holders,
    log_write_lock_holders,
    parse_proc_locks,
)

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not Path("/proc/locks").exists(),
    reason="/proc/locks is Linux-only",
)

SAMPLE = """\
1: POSIX  ADVISORY  WRITE 594094 fe:01:2147030 120 120
1: -> POSIX  ADVISORY  WRITE 600000 fe:01:2147030 120 120
2: POSIX  ADVISORY  READ 594094 fe:01:2147030 124 124
3: OFDLCK ADVISORY  WRITE -1 08:10:77 0 EOF
4: FLOCK  ADVISORY  WRITE 812 00:2a:9 0 EOF
5: POSIX  ADVISORY  READ 594094 fe:01:2147028 1073741826 1073742335
garbage line
"""

HOLD_SCRIPT = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=5)
if sys.argv[2] == "write":
    conn.execute("BEGIN IMMEDIATE")
elif sys.argv[2] == "read":
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
print("ready", flush=True)
sys.stdin.read()
"""

OPEN_SCRIPT = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
print("ready", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def child(script: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """Run a python child that signals 'ready' and waits until its stdin closes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
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
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wal_store(tmp_path: Path) -> Path:
    """Create a small WAL-mode store file and return its path."""
    db = tmp_path / "state.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.close()
    return db


# --- pure parsing ---------------------------------------------------------------------------


def test_parse_proc_locks_skips_waiters_and_unknown_lines() -> None:
    records = parse_proc_locks(SAMPLE)
    assert [r.pid for r in records] == [594094, 594094, -1, 812, 594094]


def test_parse_proc_locks_reads_hex_device_and_decimal_inode() -> None:
    first = parse_proc_locks(SAMPLE)[0]
    assert (first.major, first.minor, first.inode) == (0xFE, 0x01, 2147030)
    assert (first.mechanism, first.access, first.start, first.end) == ("POSIX", "WRITE", 120, 120)


def test_parse_proc_locks_reads_eof_as_open_end() -> None:
    ofd = parse_proc_locks(SAMPLE)[2]
    assert ofd.mechanism == "OFDLCK" and ofd.end is None and ofd.major == 8 and ofd.minor == 16


def test_decode_range_names_every_shm_lock_byte() -> None:
    names = [decode_range("-shm", b, b)[0] for b in range(120, 129)]
    assert names == [
        "WAL write",
        "WAL checkpoint",
        "WAL recover",
        "WAL read slot 0",
        "WAL read slot 1",
        "WAL read slot 2",
        "WAL read slot 3",
        "WAL read slot 4",
        "shm dead-man switch",
    ]


def test_decode_range_splits_a_merged_shm_range() -> None:
    assert decode_range("-shm", 121, 127) == [
        "WAL checkpoint",
        "WAL recover",
        *(f"WAL read slot {n}" for n in range(5)),
    ]


def test_decode_range_names_other_shm_bytes_by_offset() -> None:
    assert decode_range("-shm", 0, 3) == ["shm bytes 0-3"]


def test_decode_range_names_rollback_locks_on_the_lock_byte_page() -> None:
    assert decode_range("", 0x40000000, 0x40000000) == ["PENDING"]
    assert decode_range("", 0x40000001, 0x40000001) == ["RESERVED"]
    assert decode_range("", 0x40000002, 0x40000002 + 509) == ["SHARED"]
    assert decode_range("", 0x40000000, 0x40000002 + 509) == ["PENDING", "RESERVED", "SHARED"]


def test_decode_range_names_other_db_bytes_by_offset() -> None:
    assert decode_range("", 0, 99) == ["db bytes 0-99"]


def test_write_holder_message_joins_several_holders() -> None:
    report = lockowners.LockReport(Path("/x/state.db"), supported=True)
    for pid in (1, 2):
        report.holders.append(
            lockowners.LockHolder(pid, f"cmd{pid}", "state.db-shm", "WAL write", "WRITE", "POSIX")
        )
    report.holders.append(
        lockowners.LockHolder(3, "reader", "state.db-shm", "WAL read slot 0", "READ", "POSIX")
    )
    text = lockowners.describe_write_holders(Path("/x/state.db"), 20.2, report)
    assert text == (
        "state.db write lock unavailable for 20s (state.db): "
        "PID 1 (cmd1) holds WAL write lock on state.db-shm | "
        "PID 2 (cmd2) holds WAL write lock on state.db-shm"
    )


# --- real processes -------------------------------------------------------------------------


@linux_only
def test_lock_holders_names_the_pid_holding_the_wal_write_lock(tmp_path: Path) -> None:
    db = wal_store(tmp_path)
    with child(HOLD_SCRIPT, str(db), "write") as proc:
        report = lock_holders(db)
    writers = [h for h in report.holders if h.pid == proc.pid and h.kind == "WAL write"]
    assert len(writers) == 1
    assert (writers[0].file, writers[0].access) == ("state.db-shm", "WRITE")


@linux_only
def test_lock_holders_reports_the_command_line_of_the_holder(tmp_path: Path) -> None:
    db = wal_store(tmp_path)
    with child(HOLD_SCRIPT, str(db), "write", "x" * 200) as proc:
        report = lock_holders(db)
    command = next(h.command for h in report.holders if h.pid == proc.pid)
    assert command.startswith("python") and "import sqlite3" in command
    assert len(command) <= 80


@linux_only
def test_lock_holders_names_a_read_slot_of_an_open_read_transaction(tmp_path: Path) -> None:
    db = wal_store(tmp_path)
    with child(HOLD_SCRIPT, str(db), "read") as proc:
        report = lock_holders(db)
    slots = [h for h in report.holders if h.pid == proc.pid and h.kind.startswith("WAL read slot")]
    assert slots and all(h.access == "READ" and h.file == "state.db-shm" for h in slots)
    assert not [h for h in report.write_holders() if h.pid == proc.pid]


@linux_only
def test_lock_holders_lists_a_process_with_the_file_open_but_no_lock(tmp_path: Path) -> None:
    db = wal_store(tmp_path)
    with child(OPEN_SCRIPT, str(db)) as proc:
        report = lock_holders(db)
    assert [(o.pid, o.file) for o in report.open_files if o.pid == proc.pid] == [
        (proc.pid, "state.db")
    ]
    assert not [h for h in report.holders if h.pid == proc.pid]


@linux_only
def test_lock_holders_reports_uninspectable_processes(tmp_path: Path) -> None:
    try:
        os.readlink(f"/proc/1/fd/{os.listdir('/proc/1/fd')[0]}")
    except PermissionError:
        pass
    except (OSError, IndexError):
        pytest.skip("pid 1 has no descriptors to inspect here")
    else:
        pytest.skip("every process is inspectable here (pid 1's fds are readable)")
    report = lock_holders(wal_store(tmp_path))
    assert 1 in report.uninspectable


@linux_only
def test_lock_holders_shows_ofd_locks_without_an_owner_pid(tmp_path: Path) -> None:
    # Plain files named like a store (no SQLite involved), so closing the fd drops nothing live.
    db = tmp_path / "state.db"
    db.write_bytes(b"")
    shm = tmp_path / "state.db-shm"
    shm.write_bytes(b"\0" * 256)
    fd = os.open(shm, os.O_RDWR)
    try:
        flock = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 120, 1, 0)
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, flock)
        report = lock_holders(db)
    finally:
        os.close(fd)
    ofd = [h for h in report.holders if h.mechanism == "OFDLCK"]
    assert [(h.pid, h.kind, h.who()) for h in ofd] == [(None, "WAL write", OFD_OWNER)]


@linux_only
def test_patience_exhaustion_logs_one_warning_naming_the_holder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "state.db"
    ask_for_wal(tmp_path)  # the WAL write lock lives in the -shm
    store = open_store(db)
    try:
        with child(HOLD_SCRIPT, str(db), "write") as proc:
            caplog.set_level(logging.WARNING, logger="hermes_state.store.lockowners")
            with pytest.raises(StoreLockedError):
                store.write(
                    lambda c: c.execute("INSERT INTO state_meta VALUES ('k', 'v')"), patience=0.5
                )
    finally:
        store.close()
    warnings = [r for r in caplog.records if r.name == "hermes_state.store.lockowners"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert f"PID {proc.pid} (" in warnings[0].getMessage()
    assert "holds WAL write lock on state.db-shm" in warnings[0].getMessage()


def test_log_write_lock_holders_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="hermes_state.store.lockowners")
    log_write_lock_holders("bad\0path/state.db", 1.0)  # os.stat raises ValueError on NUL
    messages = [r.getMessage() for r in caplog.records if r.name == "hermes_state.store.lockowners"]
    assert len(messages) == 1 and "could not be inspected" in messages[0]


@linux_only
def test_log_write_lock_holders_says_when_nobody_holds_the_lock(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hermes_state.store.lockowners")
    log_write_lock_holders(wal_store(tmp_path), 3.0)
    messages = [r.getMessage() for r in caplog.records if r.name == "hermes_state.store.lockowners"]
    assert messages == [
        "state.db write lock unavailable for 3s (state.db): " + lockowners.NO_WRITE_HOLDER
    ]


def test_lock_holders_on_other_platforms_explains_why_it_is_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lockowners.sys, "platform", "darwin")
    report = lock_holders(tmp_path / "state.db")
    assert not report.supported and not report.holders and "Linux" in report.note
