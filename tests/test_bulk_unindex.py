"""Bulk unindexing: messages taken out of the agent's indexes in one statement per index."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_state.agent.db import SessionDB
from hermes_state.records.messages import append_messages
from hermes_state.records.sessions import create_session
from hermes_state.store import fts, meta
from hermes_state.store.connection import Store
from hermes_state.upkeep.bulk_unindex import unindexed
from hermes_state.upkeep.deletion import delete_sessions_in


@pytest.fixture
def store(db: SessionDB) -> Store:
    """The open store of this test's SessionDB."""
    return db.store


def _filled(store: Store) -> None:
    for sid, source in (("a", "cli"), ("b", "cron"), ("c", "cli")):
        create_session(store, sid, source)
        append_messages(
            store,
            sid,
            [
                {"role": "user", "content": f"{sid} deploy grafana"},
                {"role": "tool", "content": f"{sid} grafana says ok " * 40},
            ],
        )


def _checked(conn: sqlite3.Connection) -> None:
    for table in fts.INDEX_TABLES:
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")


def test_a_bulk_delete_leaves_the_indexes_as_the_triggers_would(store: Store) -> None:
    _filled(store)
    gone = store.write(lambda c: delete_sessions_in(c, ["a", "b"], bulk_unindex=True))
    assert gone.messages == 4
    _checked(store.conn)
    hits = store.conn.execute(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'grafana'"
    ).fetchall()
    assert {r[0] for r in hits} == {
        r[0] for r in store.conn.execute("SELECT id FROM messages WHERE session_id = 'c'")
    }
    assert meta.get(store.conn, fts.HIGH_WATER_KEY) is None
    assert meta.get(store.conn, fts.PROGRESS_KEY) is None


def test_a_pending_rebuild_keeps_the_triggers_row_by_row(store: Store) -> None:
    _filled(store)

    def pending(conn: sqlite3.Connection) -> bool:
        # A chunked rebuild's window (the agent's): left as it is, the triggers do the work.
        meta.put(conn, fts.HIGH_WATER_KEY, 0)
        meta.put(conn, fts.PROGRESS_KEY, 0)
        with unindexed(conn, ["a"]) as did:
            return did

    assert store.write(pending) is False
    assert meta.get(store.conn, fts.HIGH_WATER_KEY) == "0"
