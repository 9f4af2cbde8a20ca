"""Bulk import (portability + bulkload): batches indexed at once, killed imports and resumption.

An import writes whole sessions in batches, each one transaction with its word and substring
indexing deferred to the end of the batch (hermes_state.store.bulkload). These tests kill a real
`hermes sessions import` child with SIGKILL while it writes, then check that the store holds
whole sessions only, that every index matches the rows and that running the import again
completes it.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.children import child_env

from hermes_state.search import search
from hermes_state.store import bulkload, fts
from hermes_state.store.connection import open_store
from hermes_state.transfer import portability

REPO_ROOT = Path(__file__).resolve().parents[1]
SESSIONS = 120
PER_SESSION = 150  # 18,000 messages: several batches of IMPORT_BATCH_MESSAGES


def _session(i: int) -> dict[str, Any]:
    """Return one export record whose messages each carry a unique searchable token."""
    msgs = []
    for j in range(PER_SESSION):
        role = ("user", "assistant", "tool")[j % 3]
        msgs.append(
            {
                "role": role,
                "content": f"zqi{i:04d}m{j:04d} checkpoint of the import test, 会議 {j}",
                "timestamp": 1_700_000_000.0 + i * 1000 + j,
                "tool_call_id": "call_x" if role == "tool" else None,
            }
        )
    return {
        "id": f"imp{i:04d}",
        "source": "cron" if i % 7 == 0 else "cli",
        "started_at": 1_700_000_000.0 + i * 1000,
        "messages": msgs,
    }


@pytest.fixture
def export_file(tmp_path: Path) -> Path:
    """An export of SESSIONS sessions of PER_SESSION messages each."""
    path = tmp_path / "export.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        for i in range(SESSIONS):
            fh.write(json.dumps(_session(i), ensure_ascii=False) + "\n")
    return path


def _config_rows(conn: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {
        t: [tuple(r) for r in conn.execute(f'SELECT k, v FROM "{t}_config" ORDER BY k')]
        for t in fts.INDEX_TABLES
    }


def _check_whole(db: Path) -> tuple[int, int]:
    """Check the store after an import: integrity, indexes, whole sessions; return counts."""
    with open_store(db) as store:
        conn = store.conn
        assert [r[0] for r in conn.execute("PRAGMA integrity_check")] == ["ok"]
        assert fts.integrity_check(conn) == []
        # No rebuild window left open, and the FTS settings as a new store has them.
        assert fts.indexes(conn).high_water is None
        assert fts.indexes(conn).progress is None
        assert all(rows == [("version", 4)] for rows in _config_rows(conn).values())
        sizes = conn.execute(
            "SELECT s.id, s.message_count, COUNT(m.id) FROM sessions s"
            " LEFT JOIN messages m ON m.session_id = s.id GROUP BY s.id"
        ).fetchall()
        for sid, counted, stored in sizes:
            assert stored == PER_SESSION, f"{sid} holds {stored} of {PER_SESSION} messages"
            assert counted == PER_SESSION
        messages = sum(s[2] for s in sizes)
        return len(sizes), messages


def _spawn_import(home: Path, export: Path) -> subprocess.Popen[str]:
    env = child_env(home)
    return subprocess.Popen(
        [sys.executable, "-m", "hermes_cli", "sessions", "import", str(export)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _committed_sessions(db: Path) -> int:
    """Return how many sessions a reader sees (0 while the store is locked or missing)."""
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.05)
        try:
            return int(conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.OperationalError:
        return 0


def test_import_killed_with_sigkill_leaves_whole_sessions_and_a_rerun_completes_it(
    hermes_home: Path, export_file: Path
) -> None:
    db = hermes_home / "state.db"
    proc = _spawn_import(hermes_home, export_file)
    deadline = time.monotonic() + 120
    while _committed_sessions(db) == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    # Killed after its first batch committed, while it writes the next one.
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the import ended before it could be killed"

    sessions_after_kill, _ = _check_whole(db)
    assert 0 < sessions_after_kill < SESSIONS  # a partial import: the kill came mid-way

    again = _spawn_import(hermes_home, export_file)
    _out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    sessions, messages = _check_whole(db)
    assert (sessions, messages) == (SESSIONS, SESSIONS * PER_SESSION)
    with open_store(db, read_only=True) as store:
        # Word, substring and CJK routes find rows of the last batch, which the kill cut short.
        assert [h["session_id"] for h in search.search_messages(store, "zqi0118m0149")] == [
            "imp0118"
        ]
        # m0140..m0149: six from the substring index, and the four tool rows (j % 3 == 2) it
        # leaves out from the scan of exactly those rows.
        assert len(search.search_messages(store, "i0118m014", limit=50)) == 10
        assert search.search_messages(store, "会議", limit=5)


def test_bulk_import_indexes_exactly_what_row_by_row_triggers_would(
    hermes_home: Path, export_file: Path, tmp_path: Path
) -> None:
    bulk = hermes_home / "state.db"
    with open_store(bulk) as store:
        result = portability.import_sessions(store, export_file)
    assert (result.imported, result.messages, result.errors) == (
        SESSIONS,
        SESSIONS * PER_SESSION,
        [],
    )
    single = tmp_path / "single" / "state.db"
    with open_store(single) as store:
        # One record at a time from an iterable: batches too small to defer their indexing.
        for line in export_file.read_text(encoding="utf-8").splitlines():
            portability.import_sessions(store, [json.loads(line)])

    def indexed(db: Path) -> dict[str, list[tuple[Any, ...]]]:
        with open_store(db, read_only=True) as store:
            conn = store.conn
            return {
                "word": conn.execute(
                    "SELECT m.session_id, count(*) FROM messages_fts f"
                    " JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH 'checkpoint'"
                    " GROUP BY 1 ORDER BY 1"
                ).fetchall(),
                "trigram": conn.execute(
                    "SELECT m.session_id, count(*) FROM messages_fts_trigram f"
                    " JOIN messages m ON m.id = f.rowid"
                    " WHERE messages_fts_trigram MATCH 'eckpoin' GROUP BY 1 ORDER BY 1"
                ).fetchall(),
            }

    got, want = indexed(bulk), indexed(single)
    assert got == want
    # Cron sessions and tool rows stay out of the substring index, as the triggers keep them.
    assert all(not sid.endswith(("0000", "0007")) for sid, _ in got["trigram"])
    assert {n for _, n in got["trigram"]} == {PER_SESSION * 2 // 3}
    _check_whole(bulk)


def test_a_refused_session_in_a_bulk_batch_writes_nothing_and_the_rest_import(
    hermes_home: Path, tmp_path: Path
) -> None:
    export = tmp_path / "mixed.jsonl"
    records = [_session(i) for i in range(6)]
    # The store refuses it while writing it (its session row is already inserted then).
    records[3]["messages"][120]["display_metadata"] = 5
    export.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with open_store(hermes_home / "state.db") as store:
        result = portability.import_sessions(store, export)
        assert result.imported == 5
        assert [(e.line, e.session_id) for e in result.errors] == [(4, "imp0003")]
        conn = store.conn
        left = conn.execute(
            "SELECT (SELECT COUNT(*) FROM sessions WHERE id = 'imp0003'),"
            " (SELECT COUNT(*) FROM messages WHERE session_id = 'imp0003')"
        ).fetchone()
        assert tuple(left) == (0, 0)
        assert fts.integrity_check(conn) == []


def test_defer_indexing_declines_while_a_chunked_rebuild_is_pending(hermes_home: Path) -> None:
    with open_store(hermes_home / "state.db") as store:
        conn = store.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO state_meta(key, value) VALUES (?, '5'), (?, '0')",
                (fts.HIGH_WATER_KEY, fts.PROGRESS_KEY),
            )
            assert bulkload.defer_indexing(conn) is None
        finally:
            conn.execute("ROLLBACK")
