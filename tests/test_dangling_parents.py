"""Sessions whose parent another tool removed with a raw DELETE: delete and prune handle them.

The agent's store enforces its parent link only when a connection turns foreign keys on; a
tool that deletes a row without (sqlite3's default) leaves children pointing at nothing. Our
deletes then clear such a dangling reference, as the agent does, instead of failing on it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from clitools import child

from hermes_state.records.messages import append_messages
from hermes_state.records.sessions import create_session
from hermes_state.store.connection import open_store

OLD = 1_600_000_000.0  # 2020: older than any prune cutoff below


def _chain(home: Path) -> None:
    """Store with root -> mid -> leaf (old, ended), then root removed by a raw DELETE."""
    with open_store(home / "state.db") as store:
        for sid, parent in (("root", None), ("mid", "root"), ("leaf", "mid")):
            create_session(store, sid, "cli", parent_session_id=parent, started_at=OLD)
            append_messages(
                store, sid, [{"role": "user", "content": f"hi {sid}", "timestamp": OLD}]
            )
        store.write(lambda c: c.execute("UPDATE sessions SET ended_at = ?", (OLD + 60,)))
    conn = sqlite3.connect(home / "state.db")  # foreign keys off: sqlite3's default
    conn.execute("DELETE FROM messages WHERE session_id = 'root'")
    conn.execute("DELETE FROM sessions WHERE id = 'root'")
    conn.commit()
    conn.close()


def _rows(home: Path) -> dict[str, str | None]:
    conn = sqlite3.connect(home / "state.db")
    try:
        return dict(conn.execute("SELECT id, parent_session_id FROM sessions").fetchall())
    finally:
        conn.close()


def _fk_problems(home: Path) -> list[tuple]:
    conn = sqlite3.connect(home / "state.db")
    try:
        return conn.execute("PRAGMA foreign_key_check").fetchall()
    finally:
        conn.close()


def test_delete_of_a_session_whose_parent_is_gone_clears_the_link(hermes_home: Path) -> None:
    _chain(hermes_home)
    assert _rows(hermes_home)["mid"] == "root"  # dangling
    done = child("sessions", "delete", "mid", "--yes")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    rows = _rows(hermes_home)
    assert "mid" not in rows and rows["leaf"] is None  # not re-pointed at the missing root
    assert _fk_problems(hermes_home) == []


def test_delete_of_the_leaf_under_a_dangling_parent_works(hermes_home: Path) -> None:
    _chain(hermes_home)
    assert child("sessions", "delete", "leaf", "--yes").returncode == 0
    assert "leaf" not in _rows(hermes_home)


def test_prune_takes_sessions_whose_parent_is_gone(hermes_home: Path) -> None:
    _chain(hermes_home)
    done = child("sessions", "prune", "--older-than", "30d", "--yes")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert _rows(hermes_home) == {}
    assert _fk_problems(hermes_home) == []
