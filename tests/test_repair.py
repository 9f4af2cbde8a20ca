"""Healing a store whose schema SQLite cannot load (hermes_state.agent.repair)."""

from __future__ import annotations

import re
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Holder

from hermes_state.agent import repair
from hermes_state.agent.db import SessionDB

DATA_TABLES = ("sessions", "messages", "state_meta")
GARBAGE = b"SQLite format 3\x00" + b"\x00\xde\xad\xbe\xef" * 200


def make_store(path: Path, messages: int = 6) -> None:
    """Write a store with one session and some messages (CJK words among them)."""
    db = SessionDB(path)
    db.create_session("s1", "cli")
    for i in range(messages):
        db.append_message("s1", "user", f"hello pizza {i}" if i % 2 else f"東京で会議 {i}")
    db.close()


def duplicate_schema_row(path: Path, name: str = "messages_fts") -> None:
    """Copy an object's sqlite_master row: SQLite then refuses the whole schema."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) "
        "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master WHERE name = ?",
        (name,),
    )
    conn.commit()
    conn.close()


def scramble_word_index(path: Path) -> None:
    """Overwrite the word index's blocks: its table can no longer even be opened."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE messages_fts_data SET block = X'DEADBEEFDEADBEEF'")
    conn.close()


def row_counts(path: Path) -> dict[str, int]:
    """Count the rows of the data tables, reading past a malformed schema."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA writable_schema=ON")
    counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in DATA_TABLES}
    conn.close()
    return counts


def schema_names(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    return names


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    result = str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    conn.close()
    return result


def open_error(path: Path) -> sqlite3.DatabaseError:
    """Return the error the store's first statement raises."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode").fetchone()
    except sqlite3.DatabaseError as exc:
        return exc
    finally:
        conn.close()
    raise AssertionError("the store opened")


def test_healthy_store_is_reported_already_healthy(db_path: Path) -> None:
    make_store(db_path)
    report = repair.repair_state_db_schema(db_path, backup=False)
    assert report == {
        "repaired": True,
        "strategy": "already_healthy",
        "backup_path": None,
        "error": None,
    }


def test_opens_cleanly_says_why_a_duplicated_schema_row_fails(db_path: Path) -> None:
    make_store(db_path)
    assert repair.db_opens_cleanly(db_path) is None
    duplicate_schema_row(db_path)
    assert "malformed database schema" in (repair.db_opens_cleanly(db_path) or "")


def test_duplicate_schema_row_is_healed_keeping_every_row(db_path: Path) -> None:
    make_store(db_path)
    before = row_counts(db_path)
    duplicate_schema_row(db_path)

    report = repair.repair_state_db_schema(db_path)

    assert report["repaired"] is True
    assert report["strategy"] == "dedup_schema"
    assert report["error"] is None
    assert row_counts(db_path) == before
    assert integrity(db_path) == "ok"
    assert repair.db_opens_cleanly(db_path) is None


def test_backup_is_a_private_copy_of_the_damaged_file(db_path: Path) -> None:
    make_store(db_path)
    duplicate_schema_row(db_path)
    damaged = db_path.read_bytes()

    report = repair.repair_state_db_schema(db_path)

    backup = Path(report["backup_path"])
    assert re.fullmatch(r"state\.db\.malformed-backup-\d{8}-\d{6}", backup.name)
    assert backup.parent == db_path.parent
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert backup.read_bytes() == damaged


def test_backup_goes_through_sqlite_while_this_process_has_the_store_open(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_store(db_path)
    before = row_counts(db_path)
    duplicate_schema_row(db_path)
    monkeypatch.setattr(repair, "_held_here", lambda path: True)

    def no_raw_copy(source: Path, target: Path) -> None:
        raise AssertionError(f"raw copy of {source} while it is open here")

    monkeypatch.setattr(repair, "_copy_bytes", no_raw_copy)

    report = repair.repair_state_db_schema(db_path)

    assert report["repaired"] is True
    backup = Path(report["backup_path"])
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert row_counts(backup) == before


def test_garbage_file_is_reported_unrepaired_with_a_backup(db_path: Path) -> None:
    db_path.write_bytes(GARBAGE)

    report = repair.repair_state_db_schema(db_path)

    assert report["repaired"] is False
    assert report["strategy"] is None
    assert report["error"]
    assert Path(report["backup_path"]).read_bytes() == GARBAGE
    assert db_path.read_bytes() == GARBAGE


def test_unchanged_damage_met_again_reuses_its_backup(db_path: Path) -> None:
    db_path.write_bytes(GARBAGE)
    first = repair.repair_state_db_schema(db_path)["backup_path"]
    again = repair.repair_state_db_schema(db_path)["backup_path"]
    assert again == first
    assert len(list(db_path.parent.glob("state.db.malformed-backup-*"))) == 1


def test_store_another_process_holds_is_left_unchanged(
    db_path: Path,
    hold_store: Callable[..., Holder],
    sha256: Callable[[Path], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make_store(db_path)
    duplicate_schema_row(db_path)
    digest = sha256(db_path)
    monkeypatch.setattr(repair, "GUARD_BUSY_S", 0.1)
    holder = hold_store(db_path, "lock")

    report = repair.repair_state_db_schema(db_path)

    holder.release()
    assert report["repaired"] is False
    assert "another connection" in report["error"]
    assert sha256(db_path) == digest
    assert not Path(str(db_path) + repair.SCRATCH_SUFFIX).exists()


def test_strategy_that_would_lose_rows_leaves_the_store_unchanged(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, sha256: Callable[[Path], str]
) -> None:
    make_store(db_path)
    duplicate_schema_row(db_path)
    digest = sha256(db_path)

    def lossy(path: Path) -> bool:
        repair.dedup_schema(path)
        conn = sqlite3.connect(path)
        conn.execute("DELETE FROM messages WHERE id = (SELECT min(id) FROM messages)")
        conn.commit()
        conn.close()
        return True

    monkeypatch.setattr(repair, "STRATEGIES", (("dedup_schema", lossy),))

    report = repair.repair_state_db_schema(db_path)

    assert report["repaired"] is False
    assert "lose rows" in report["error"] and "messages" in report["error"]
    assert sha256(db_path) == digest


def test_wal_store_stays_wal_after_repair(db_path: Path, wal_config: Path) -> None:
    make_store(db_path)
    duplicate_schema_row(db_path)

    report = repair.repair_state_db_schema(db_path)

    assert report["repaired"] is True
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


@pytest.fixture
def dropped_store(db_path: Path) -> tuple[Path, dict[str, object]]:
    """A store whose word index could only be healed by dropping the search objects."""
    make_store(db_path)
    scramble_word_index(db_path)
    return db_path, repair.repair_state_db_schema(db_path)


def test_last_resort_drops_only_the_search_objects(
    dropped_store: tuple[Path, dict[str, object]],
) -> None:
    path, report = dropped_store
    assert report["repaired"] is True
    assert report["strategy"] == "drop_fts_rebuild"
    names = schema_names(path)
    assert not {n for n in names if n.startswith(("messages_fts", "hermes_cjk"))}
    assert {"sessions", "messages", "state_meta", "hermes_idx_messages_owner"} <= names
    assert row_counts(path)["messages"] == 6
    assert integrity(path) == "ok"


def test_next_open_recreates_the_dropped_search_indexes(
    dropped_store: tuple[Path, dict[str, object]],
) -> None:
    path, _report = dropped_store
    with SessionDB(path) as db:
        words, cjk_words = db.search_messages("pizza"), db.search_messages("東京")
    assert (len(words), words.route) == (3, "word")
    assert (len(cjk_words), cjk_words.route) == (3, "cjk")
    names = schema_names(path)
    assert {"messages_fts", "messages_fts_trigram", "hermes_cjk", "hermes_cjk_insert"} <= names


def test_heal_on_open_repairs_once_per_process(db_path: Path) -> None:
    make_store(db_path)
    duplicate_schema_row(db_path)
    error = open_error(db_path)

    assert repair.heal_on_open(db_path, error) is True
    assert repair.db_opens_cleanly(db_path) is None

    duplicate_schema_row(db_path)
    assert repair.heal_on_open(db_path, open_error(db_path)) is False
    assert repair.db_opens_cleanly(db_path) is not None


def test_repair_attempt_is_claimed_once_per_path(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    assert repair.claim_repair_attempt(path) is True
    assert repair.claim_repair_attempt(path) is False
    assert repair.claim_repair_attempt(tmp_path / "other.db") is True


def test_heal_on_open_ignores_errors_of_other_kinds(db_path: Path) -> None:
    make_store(db_path)
    for exc in (
        sqlite3.OperationalError("database is locked"),
        sqlite3.DatabaseError("file is not a database"),
        ValueError("malformed database schema"),
    ):
        assert repair.heal_on_open(db_path, exc) is False
    assert repair.claim_repair_attempt(db_path) is True  # none of them used the attempt


def test_malformed_errors_are_told_apart_from_lock_errors() -> None:
    assert repair.is_malformed_db_error(sqlite3.DatabaseError("malformed database schema (x)"))
    assert repair.is_malformed_db_error(sqlite3.DatabaseError("database disk image is malformed"))
    assert not repair.is_malformed_db_error(sqlite3.OperationalError("database is locked"))
    assert not repair.is_malformed_db_error(sqlite3.DatabaseError("file is not a database"))
    assert not repair.is_malformed_db_error(ValueError("malformed database schema"))
