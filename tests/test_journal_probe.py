"""The agent's connection set-up: journal.apply_wal_with_fallback (probe, policy, fallback)."""

from __future__ import annotations

import logging
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from hermes_state.store import journal


class Traced(sqlite3.Connection):
    """A connection that records every statement; set ``fail`` to make some of them raise."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.executed: list[str] = []
        self.fail: dict[str, str] = {}  # statement prefix -> error text

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self.executed.append(sql)
        for prefix, text in self.fail.items():
            if sql.replace(" ", "").upper().startswith(prefix):
                raise sqlite3.OperationalError(text)
        return super().execute(sql, *args)

    def sets_mode(self) -> bool:
        """Tell whether a statement set the journal mode."""
        return any("journal_mode=" in s.replace(" ", "") for s in self.executed)


def traced(path: Path) -> Traced:
    return sqlite3.connect(path, factory=Traced, isolation_level=None)


def make_wal(path: Path) -> None:
    seed = sqlite3.connect(path)
    seed.execute("PRAGMA journal_mode=WAL")
    seed.execute("CREATE TABLE t (x)")
    seed.close()


def ask_for(home: Path, mode: str) -> None:
    (home / "config.yaml").write_text(f"database:\n  journal_mode: {mode}\n", encoding="utf-8")


def test_wal_store_stays_wal_without_setting_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    make_wal(path)
    conn = traced(path)
    assert journal.apply_wal_with_fallback(conn) == "wal"
    conn.close()
    assert "PRAGMA journal_mode" in conn.executed
    assert not conn.sets_mode()


def test_wal_store_stays_wal_when_the_config_asks_for_delete(hermes_home: Path) -> None:
    path = hermes_home / "state.db"
    make_wal(path)
    ask_for(hermes_home, "delete")
    conn = traced(path)
    assert journal.apply_wal_with_fallback(conn) == "wal"
    conn.close()
    assert journal.current_mode(sqlite3.connect(path)) == "wal"


def test_new_store_gets_the_mode_the_package_chooses(hermes_home: Path) -> None:
    path = hermes_home / "state.db"
    conn = traced(path)
    got = journal.apply_wal_with_fallback(conn)
    conn.close()
    assert got == journal.choose_for_new_store(path).mode


def test_config_asking_for_wal_gives_a_new_store_wal(hermes_home: Path) -> None:
    ask_for(hermes_home, "wal")
    conn = traced(hermes_home / "state.db")
    assert journal.apply_wal_with_fallback(conn) == "wal"
    conn.close()
    assert "PRAGMA journal_mode=WAL" in conn.executed


def test_store_with_pages_keeps_its_rollback_mode(hermes_home: Path) -> None:
    path = hermes_home / "state.db"
    seed = sqlite3.connect(path)
    seed.execute("CREATE TABLE t (x)")
    seed.close()
    ask_for(hermes_home, "wal")
    conn = traced(path)
    assert journal.apply_wal_with_fallback(conn) == "delete"
    conn.close()
    assert not conn.sets_mode()


def test_filesystem_refusing_wal_falls_back_to_delete_with_one_warning(
    hermes_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ask_for(hermes_home, "wal")
    with caplog.at_level(logging.WARNING, logger="hermes_state"):
        for _ in range(2):
            conn = traced(hermes_home / "state.db")
            conn.fail["PRAGMAJOURNAL_MODE=WAL"] = "locking protocol"
            assert journal.apply_wal_with_fallback(conn, db_label="nfs-test.db") == "delete"
            conn.close()
    warnings = [r.getMessage() for r in caplog.records if "nfs-test.db" in r.getMessage()]
    assert [r.levelno for r in caplog.records if "nfs-test.db" in r.getMessage()] == [
        logging.WARNING
    ]
    assert "journal_mode=DELETE" in warnings[0]
    assert "locking protocol" in warnings[0]


def test_other_errors_setting_wal_propagate(hermes_home: Path) -> None:
    ask_for(hermes_home, "wal")
    conn = traced(hermes_home / "state.db")
    conn.fail["PRAGMAJOURNAL_MODE=WAL"] = "disk I/O error"
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        journal.apply_wal_with_fallback(conn)
    conn.close()


def test_unreadable_mode_is_left_alone(tmp_path: Path) -> None:
    conn = traced(tmp_path / "busy.db")
    conn.fail["PRAGMAJOURNAL_MODE"] = "database is locked"
    assert journal.apply_wal_with_fallback(conn) == "wal"
    conn.close()
    assert conn.executed == ["PRAGMA journal_mode"]


@pytest.mark.parametrize("store", ["wal", "new"])
def test_darwin_gets_the_full_fsync_barriers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    path = tmp_path / "mac.db"
    if store == "wal":
        make_wal(path)
    monkeypatch.setattr(sys, "platform", "darwin")
    conn = traced(path)
    journal.apply_wal_with_fallback(conn)
    conn.close()
    assert "PRAGMA checkpoint_fullfsync=1" in conn.executed
    assert "PRAGMA synchronous=FULL" in conn.executed


@pytest.mark.parametrize("store", ["wal", "new"])
def test_no_barriers_off_darwin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    path = tmp_path / "linux.db"
    if store == "wal":
        make_wal(path)
    monkeypatch.setattr(sys, "platform", "linux")
    conn = traced(path)
    journal.apply_wal_with_fallback(conn)
    conn.close()
    assert not [s for s in conn.executed if "fullfsync" in s or "synchronous" in s]
