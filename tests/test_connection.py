"""Opening the store: modes, read-only opens, damaged files, pragmas, locking and checkpoints."""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import Holder
from support.children import child_env

from hermes_state.agent.db import SessionDB
from hermes_state.store import journal
from hermes_state.store.connection import open_store, read_only_uri
from hermes_state.store.errors import (
    HermesStateError,
    StoreCorruptError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
    is_lock_error,
)
from hermes_state.store.patience import ACTIVITY_WRITE_PATIENCE_S
from hermes_state.store.schema import SCHEMA_VERSION, stored_version
from hermes_state.store.store_file import secure_store_files

SIDECARS = ("-wal", "-shm")
GARBAGE = b"this is not an SQLite database, just some text that got written here\n" * 20


def mode_of(path: Path) -> int:
    """Permission bits of path (by stat, never by opening it)."""
    return stat.S_IMODE(os.stat(path).st_mode)


def sidecar(path: Path, suffix: str) -> Path:
    """The -wal or -shm file of a store."""
    return Path(str(path) + suffix)


def header_journal_bytes(path: Path) -> bytes:
    """Bytes 18-19 of a closed store's header: 1,1 = rollback journal, 2,2 = WAL."""
    return path.read_bytes()[18:20]


@pytest.fixture
def umask_022() -> Iterator[None]:
    """Run the test under umask 022 (group/other-readable by default), restored afterwards."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def populated(db_path: Path) -> Path:
    """A closed store with one session and two messages."""
    with SessionDB(db_path) as db:
        db.create_session("s1", "cli", model="m")
        db.append_message("s1", "user", "hello there")
        db.append_message("s1", "assistant", "hi")
    return db_path


# --- file modes ------------------------------------------------------------------------------


@pytest.mark.usefixtures("umask_022", "wal_config")
def test_writable_open_creates_db_wal_and_shm_with_mode_0600(db_path: Path) -> None:
    with open_store(db_path):
        modes = {s: mode_of(sidecar(db_path, s)) for s in ("", *SIDECARS)}
    assert modes == {"": 0o600, "-wal": 0o600, "-shm": 0o600}


@pytest.mark.usefixtures("umask_022", "wal_config")
def test_writable_open_tightens_existing_0644_db_wal_and_shm(
    db_path: Path, hold_store: Callable[..., Holder]
) -> None:
    open_store(db_path).close()
    os.chmod(db_path, 0o644)
    # Another process keeps the sidecars alive; SQLite creates them with the db file's mode.
    hold_store(db_path, "open")
    files = [db_path, *(sidecar(db_path, s) for s in SIDECARS)]
    assert [mode_of(p) for p in files] == [0o644, 0o644, 0o644]
    with open_store(db_path):
        assert [mode_of(p) for p in files] == [0o600, 0o600, 0o600]


def test_secure_store_files_does_not_chmod_through_a_symlinked_sidecar(
    db_path: Path, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere.bin"
    target.write_bytes(b"x")
    os.chmod(target, 0o644)
    sidecar(db_path, "-wal").symlink_to(target)
    secure_store_files(db_path)
    assert mode_of(target) == 0o644
    assert sidecar(db_path, "-wal").is_symlink()


def test_writable_open_of_a_symlinked_store_leaves_the_target_mode_alone(
    db_path: Path, tmp_path: Path
) -> None:
    target = tmp_path / "disk2" / "real.db"
    target.parent.mkdir()
    open_store(target).close()
    os.chmod(target, 0o644)
    db_path.symlink_to(target)
    with open_store(db_path) as store:
        assert stored_version(store.conn) == SCHEMA_VERSION
    assert mode_of(target) == 0o644


# --- read-only opens ---------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["state.db", "missing-dir/state.db"])
def test_read_only_open_of_a_missing_store_raises_and_creates_nothing(
    hermes_home: Path, where: str
) -> None:
    before = sorted(hermes_home.rglob("*"))
    with pytest.raises(StoreNotFoundError) as caught:
        open_store(hermes_home / where, read_only=True)
    assert caught.value.hint
    assert sorted(hermes_home.rglob("*")) == before


def test_read_only_reads_leave_the_main_file_byte_identical_and_mtime_unchanged(
    populated: Path, sha256: Callable[[Path], str]
) -> None:
    digest, mtime = sha256(populated), os.stat(populated).st_mtime_ns
    with SessionDB(populated, read_only=True) as db:
        assert [s["id"] for s in db.list_sessions()] == ["s1"]
        assert len(db.get_messages("s1")) == 2
        assert db.get_session("s1")["model"] == "m"
        assert db.store_stats()["tables"]["messages"] == 2
    assert sha256(populated) == digest
    assert os.stat(populated).st_mtime_ns == mtime


def test_read_only_handle_refuses_writes(populated: Path, sha256: Callable[[Path], str]) -> None:
    digest = sha256(populated)
    with SessionDB(populated, read_only=True) as db:
        with pytest.raises(StoreReadOnlyError) as caught:
            db.create_session("s2", "cli")
        with pytest.raises(StoreReadOnlyError):
            db.store.write(lambda conn: conn.execute("DELETE FROM messages"))
        assert caught.value.hint
    assert sha256(populated) == digest


def test_read_only_open_works_with_question_mark_and_hash_in_the_path(hermes_home: Path) -> None:
    path = hermes_home / "odd?name#dir" / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
    assert "%3F" in read_only_uri(path) and "%23" in read_only_uri(path)
    with SessionDB(path, read_only=True) as db:
        assert [s["id"] for s in db.list_sessions()] == ["s1"]


def test_read_only_open_keeps_a_delete_mode_store_in_delete_mode(
    populated: Path, sha256: Callable[[Path], str]
) -> None:
    conn = sqlite3.connect(populated)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    digest = sha256(populated)
    with open_store(populated, read_only=True) as store:
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert sha256(populated) == digest
    assert header_journal_bytes(populated) == b"\x01\x01"


# --- damaged store files -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "kind", "wal"),
    [
        (b"", "zeroed", b""),
        (b"\x00" * 4096, "zeroed", b""),
        (GARBAGE, "notadb", b"garbage wal frames"),
    ],
    ids=["zero-byte", "all-nul", "garbage"],
)
def test_writable_open_moves_a_damaged_store_aside_and_starts_fresh(
    db_path: Path, content: bytes, kind: str, wal: bytes
) -> None:
    db_path.write_bytes(content)
    sidecar(db_path, "-wal").write_bytes(wal)
    sidecar(db_path, "-shm").write_bytes(b"stale shm")
    with open_store(db_path) as store:
        q = store.quarantine
        assert q is not None and q.kind == kind and q.original == db_path
        assert re.fullmatch(
            rf"state\.db\.{kind}-\d{{8}}-\d{{6}}-{os.getpid()}\.bak", q.moved_to.name
        )
        assert str(q.moved_to) in q.message()
        assert stored_version(store.conn) == SCHEMA_VERSION
    assert q.moved_to.read_bytes() == content
    assert sidecar(q.moved_to, "-wal").read_bytes() == wal
    assert sidecar(q.moved_to, "-shm").read_bytes() == b"stale shm"


def test_healthy_store_has_no_quarantine(db_path: Path) -> None:
    open_store(db_path).close()
    with open_store(db_path) as store:
        assert store.quarantine is None
    assert not list(db_path.parent.glob("*.bak"))


@pytest.mark.parametrize("content", [b"", GARBAGE], ids=["zero-byte", "garbage"])
def test_read_only_open_of_a_damaged_store_raises_and_leaves_it_alone(
    db_path: Path, content: bytes, sha256: Callable[[Path], str]
) -> None:
    db_path.write_bytes(content)
    before, digest = sorted(db_path.parent.iterdir()), sha256(db_path)
    with pytest.raises(StoreCorruptError) as caught:
        open_store(db_path, read_only=True)
    assert isinstance(caught.value, HermesStateError) and caught.value.hint
    assert sha256(db_path) == digest
    assert sorted(db_path.parent.iterdir()) == before


# --- journal mode and pragmas ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "vulnerable"),
    [
        ((3, 40, 1), True),
        ((3, 44, 5), True),
        ((3, 44, 6), False),
        ((3, 45, 0), True),
        ((3, 50, 6), True),
        ((3, 50, 7), False),
        ((3, 51, 2), True),
        ((3, 51, 3), False),
        ((3, 52, 0), False),
        ((3, 6, 23), False),
    ],
)
def test_wal_reset_bug_is_known_by_version(version: tuple[int, int, int], vulnerable: bool) -> None:
    assert journal.wal_reset_vulnerable(version) is vulnerable


def test_new_store_on_a_sqlite_with_the_wal_reset_bug_is_delete_mode(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal, "wal_reset_vulnerable", lambda version=None: True)
    with open_store(db_path) as store:
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert store.journal_mode == "delete"
    assert header_journal_bytes(db_path) == b"\x01\x01"


def test_new_store_on_a_fixed_sqlite_is_wal(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "wal_reset_vulnerable", lambda version=None: False)
    monkeypatch.setattr(journal, "wal_unsupported_filesystem", lambda directory: False)
    with open_store(db_path) as store:
        assert store.journal_mode == "wal"
    assert header_journal_bytes(db_path) == b"\x02\x02"


def test_new_store_on_a_cross_vm_filesystem_is_delete_mode(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal, "wal_reset_vulnerable", lambda version=None: False)
    monkeypatch.setattr(journal, "wal_unsupported_filesystem", lambda directory: True)
    with open_store(db_path) as store:
        assert store.journal_mode == "delete"


@pytest.mark.usefixtures("wal_config")
def test_configured_wal_is_honoured_for_a_new_store(db_path: Path) -> None:
    with open_store(db_path) as store:
        assert store.journal_mode == "wal"


def test_configured_delete_is_honoured_on_a_fixed_sqlite(
    hermes_home: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal, "wal_reset_vulnerable", lambda version=None: False)
    (hermes_home / "config.yaml").write_text("database:\n  journal_mode: 'delete'\n")
    with open_store(db_path) as store:
        assert store.journal_mode == "delete"


def test_config_reader_finds_only_database_journal_mode(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "journal_mode: wal\nother:\n  journal_mode: delete\ndatabase:\n"
        "  # comment\n  busy: 1\n  journal_mode: DELETE\n"
    )
    assert journal.configured_mode(tmp_path) == "delete"
    (tmp_path / "config.yaml").write_text("database:\n  journal_mode: truncate\n")
    assert journal.configured_mode(tmp_path) is None
    (tmp_path / "config.yaml").unlink()
    assert journal.configured_mode(tmp_path) is None


def test_mountinfo_names_the_filesystem_of_the_longest_matching_mount(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        f"22 1 0:21 / / rw - ext4 /dev/vda rw\n40 22 0:50 / {tmp_path} rw - virtiofs myshare rw\n"
    )
    assert journal._mount_fstype(tmp_path / "sub", info) == "virtiofs"
    assert journal._mount_fstype(Path("/usr"), info) == "ext4"


@pytest.mark.usefixtures("wal_config")
def test_wal_store_stays_wal_after_close_and_writable_reopen(db_path: Path) -> None:
    open_store(db_path).close()
    assert header_journal_bytes(db_path) == b"\x02\x02"
    with open_store(db_path) as store:
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert header_journal_bytes(db_path) == b"\x02\x02"


@pytest.mark.usefixtures("wal_config")
def test_wal_store_held_open_by_another_process_stays_wal(
    db_path: Path, hold_store: Callable[..., Holder]
) -> None:
    open_store(db_path).close()
    hold_store(db_path, "open")
    with open_store(db_path) as store:
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("role", ["agent", "edit"])
def test_a_delete_mode_store_stays_delete_mode_under_every_writable_open(
    populated: Path, wal_config: Path, monkeypatch: pytest.MonkeyPatch, role: str
) -> None:
    # Even where a new store would get WAL, an existing store keeps the mode it has.
    monkeypatch.setattr(journal, "wal_reset_vulnerable", lambda version=None: False)
    conn = sqlite3.connect(populated)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    with open_store(populated, role=role) as store:  # type: ignore[arg-type]
        store.write(lambda c: c.execute("UPDATE sessions SET title = 'T'"))
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert header_journal_bytes(populated) == b"\x01\x01"


@pytest.mark.usefixtures("wal_config")
def test_writable_connection_pragmas(db_path: Path) -> None:
    with open_store(db_path) as store:
        got = {
            p: store.conn.execute(f"PRAGMA {p}").fetchone()[0]
            for p in ("synchronous", "foreign_keys", "busy_timeout", "journal_size_limit")
        }
    assert got == {
        "synchronous": 1,
        "foreign_keys": 1,
        "busy_timeout": 5000,  # the agent's library: reads wait as a read-only open does
        "journal_size_limit": 64 * 1024 * 1024,
    }


@pytest.mark.parametrize(("wait", "want_ms"), [(None, 20_000), (3.0, 3000), (0.0, 1)])
def test_an_edit_handle_reads_with_the_commands_patience(
    db_path: Path, wait: float | None, want_ms: int
) -> None:
    from hermes_state.store.patience import Waiting

    open_store(db_path).close()
    with open_store(db_path, role="edit", waiting=Waiting(patience=wait)) as store:
        assert store.conn.execute("PRAGMA busy_timeout").fetchone()[0] == want_ms
        store.write(lambda c: c.execute("SELECT 1"))  # the write loop puts it back after
        assert store.conn.execute("PRAGMA busy_timeout").fetchone()[0] == want_ms


def test_read_only_connection_busy_timeout_is_5000_ms(populated: Path) -> None:
    with open_store(populated, read_only=True) as store:
        assert store.conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000


# --- locking -----------------------------------------------------------------------------------

WRITER_CODE = """
import sys, time
from hermes_state.agent.db import SessionDB
path, sid, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with SessionDB(path) as db:
    db.create_session(sid, "cli")
    first_write_at = time.time()
    for i in range(n):
        db.append_message(sid, "user", f"{sid} message {i}")
print(first_write_at, flush=True)
"""


def test_two_writer_processes_land_every_write_while_a_third_holds_the_lock_for_3s(
    db_path: Path, hold_store: Callable[..., Holder]
) -> None:
    open_store(db_path).close()
    holder = hold_store(db_path, "lock", seconds=3.0)
    writers = {
        sid: subprocess.Popen(
            [sys.executable, "-c", WRITER_CODE, str(db_path), sid, "50"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for sid in ("w1", "w2")
    }
    results = {sid: p.communicate(timeout=60) for sid, p in writers.items()}
    holder.release()
    for sid, (out, err) in results.items():
        assert writers[sid].returncode == 0, err
        # Each writer's first write had to wait for the held lock (3 s), and none gave up.
        assert float(out) >= holder.ready_at + 2.5
    with open_store(db_path) as store:
        conn = store.conn
        for sid in writers:
            rows = conn.execute("SELECT content FROM messages WHERE session_id = ?", (sid,))
            assert sorted(r[0] for r in rows) == sorted(f"{sid} message {i}" for i in range(50))
            count = conn.execute("SELECT message_count FROM sessions WHERE id = ?", (sid,))
            assert count.fetchone()[0] == 50
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_activity_write_against_a_held_lock_fails_fast_as_locked(
    db_path: Path, hold_store: Callable[..., Holder]
) -> None:
    store = open_store(db_path)
    try:
        holder = hold_store(db_path, "lock")
        start = time.monotonic()
        with pytest.raises(StoreLockedError) as caught:
            store.write(
                lambda conn: conn.execute("INSERT INTO state_meta VALUES ('k', 'v')"),
                patience=ACTIVITY_WRITE_PATIENCE_S,
            )
        elapsed = time.monotonic() - start
        holder.release()
        assert elapsed < 1.5
        assert caught.value.failure_reason == "session_persistence_failed:locked"
        assert caught.value.cause == "locked"
        assert caught.value.hint
        assert (
            store.conn.execute("SELECT COUNT(*) FROM state_meta WHERE key = 'k'").fetchone()[0] == 0
        )
    finally:
        store.close()


def test_is_lock_error_recognises_a_real_busy_error_by_its_result_code(
    db_path: Path, hold_store: Callable[..., Holder]
) -> None:
    open_store(db_path).close()
    hold_store(db_path, "lock")
    conn = sqlite3.connect(db_path, timeout=0, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError) as caught:
            conn.execute("BEGIN IMMEDIATE")
    finally:
        conn.close()
    assert caught.value.sqlite_errorcode & 0xFF == 5  # SQLITE_BUSY
    assert is_lock_error(caught.value)


def test_is_lock_error_rejects_a_non_lock_error_whose_text_says_locked(db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    try:
        with pytest.raises(sqlite3.OperationalError) as caught:
            conn.execute("SELECT * FROM locked_busy_table")
    finally:
        conn.close()
    assert "locked" in str(caught.value)
    assert not is_lock_error(caught.value)


def test_a_non_lock_operational_error_is_raised_at_once_without_replay(db_path: Path) -> None:
    calls: list[float] = []

    def fn(conn: sqlite3.Connection) -> None:
        calls.append(time.monotonic())
        conn.execute("SELECT * FROM locked_busy_table")

    with open_store(db_path) as store:
        start = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            store.write(fn, patience=5.0)
        assert time.monotonic() - start < 0.5
    assert len(calls) == 1


# --- checkpoints ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("wal_config")
def test_every_50_writes_a_passive_checkpoint_lets_the_wal_restart(db_path: Path) -> None:
    wal = sidecar(db_path, "-wal")
    with open_store(db_path) as store:
        # Only the library's checkpoints may reset the WAL in this test, not SQLite's automatic one.
        store.conn.execute("PRAGMA wal_autocheckpoint=0")
        store.write(lambda conn: conn.execute("CREATE TABLE scratch (v TEXT)"))
        sizes = [os.stat(wal).st_size]
        for _ in range(150):
            store.write(lambda conn: conn.execute("INSERT INTO scratch VALUES (?)", ("x" * 100,)))
            sizes.append(os.stat(wal).st_size)
    grew = [i for i in range(1, len(sizes)) if sizes[i] > sizes[i - 1]]
    # Every write appends frames until the first checkpoint (within 50 writes); after it the
    # WAL is rewritten from the start and never grows again, because checkpoints keep coming.
    assert len(grew) >= 40
    assert max(grew) <= 50


def test_creating_a_store_leaves_no_file_but_the_store_and_its_journal(db_path: Path) -> None:
    with open_store(db_path) as store:
        store.write(lambda c: c.execute("INSERT INTO state_meta(key, value) VALUES ('k', 'v')"))
    left = {p.name for p in db_path.parent.iterdir()}
    assert "state.db" in left
    assert left <= {"state.db", "state.db-wal", "state.db-shm", "state.db-journal"}, left


# --- read snapshots --------------------------------------------------------------------------


@pytest.mark.usefixtures("wal_config")
def test_snapshot_reads_one_committed_state_and_ends_with_the_block(populated: Path) -> None:
    def count(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])

    with open_store(populated, read_only=True) as reader, SessionDB(populated) as writer:
        with reader.snapshot() as conn:
            assert count(conn) == 2
            writer.append_message("s1", "user", "written meanwhile")  # a WAL writer goes on
            assert count(conn) == 2  # the block still sees the state it started from
            assert conn.in_transaction
        assert not reader.conn.in_transaction
        assert count(reader.conn) == 3


def test_snapshot_inside_a_transaction_joins_it(populated: Path) -> None:
    with open_store(populated) as store:
        store.conn.execute("BEGIN")
        with store.snapshot() as conn:
            conn.execute("DELETE FROM messages WHERE role = 'assistant'")
        assert store.conn.in_transaction  # not committed by the snapshot
        store.conn.execute("ROLLBACK")
        assert store.conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 2
