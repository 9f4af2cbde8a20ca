"""Deferred indexing for bulk writes: many rows inserted in one transaction, indexed once.

The agent's word and substring indexes are kept by triggers, one row at a time, and FTS5 writes
its pending terms out at every statement (and savepoint) of the transaction: loading thousands of
messages session by session costs several times what indexing them in one statement does. The
triggers of the agent's external layout are gated by its rebuild window (see :mod:`fts`): a row is
indexed only if ``id > fts_rebuild_high_water OR id <= fts_rebuild_progress``. A bulk writer
opens that window just above the store's last row, inserts, then indexes the window with one
``INSERT … SELECT`` per index (what ``fts.rebuild_step`` does) and closes the window, all inside
the same write transaction. No other connection can see the open window, so every commit leaves
the store exactly as the per-row triggers would have, and a crash rolls the whole transaction
back. (The CJK index has no such trigger: ``messages.insert_messages`` feeds it from memory.)

FTS5 writes its pending terms out as a new segment whenever they pass its ``hashsize`` (1 MB by
default) and merges those segments as they pile up: a batch's substring index alone overflows
it several times. For the length of the batch the window's index statements run with a larger
hash (one segment per index per batch, about half the trigram time here); the setting is a row
of the index's ``_config`` table, put back as it was before the transaction commits.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from hermes_state.store import fts, meta

# Far above any row id: the window (start, OPEN_TOP] holds every row the transaction inserts.
OPEN_TOP = 2**62
# FTS5's in-memory term buffer while a window is indexed (its default is 1 MB).
BULK_HASHSIZE = 64 * 1024 * 1024
_FTS5_DEFAULT_HASHSIZE = 1024 * 1024


@dataclass(frozen=True)
class Deferred:
    """An open window: rows with an id above ``start`` are indexed by :func:`finish`."""

    start: int


def _gated(conn: sqlite3.Connection, trigger: str) -> bool:
    """Tell whether an insert trigger follows the rebuild window (both keys in its body)."""
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?", (trigger,)
    ).fetchone()
    body = (row[0] or "") if row is not None else ""
    return fts.HIGH_WATER_KEY in body and fts.PROGRESS_KEY in body


def gated_layout(conn: sqlite3.Connection, event: str) -> bool:
    """Tell whether the store has the agent's gated external layout with no rebuild pending,
    its ``event`` ("insert" or "delete") triggers following the rebuild window."""
    idx = fts.indexes(conn)
    if idx.stale or idx.high_water is not None or idx.progress is not None:
        return False
    expected = ((idx.word, fts.WORD_SOURCE), (idx.trigram, fts.TRIGRAM_SOURCE))
    for index, source in expected:
        if index is None or index.flavor != "external" or index.content != source:
            return False
    return all(_gated(conn, f"{t}_{event}") for t in fts.INDEX_TABLES)


def _holds_above(conn: sqlite3.Connection, table: str, start: int) -> bool:
    """Tell whether an FTS index already holds a row above start (its docsize table says)."""
    return (
        conn.execute(f'SELECT 1 FROM "{table}_docsize" WHERE id > ? LIMIT 1', (start,)).fetchone()
        is not None
    )


def defer_indexing(conn: sqlite3.Connection) -> Deferred | None:
    """Open the rebuild window above the last row (caller's write transaction).

    Returns None, changing nothing, when the store cannot defer: not the agent's gated external
    layout, indexes detached or missing, or a chunked rebuild already pending (its window is the
    agent's). The caller then simply inserts, and the triggers index row by row.
    """
    if not gated_layout(conn, "insert"):
        return None
    start = fts.indexes(conn).max_id
    if any(_holds_above(conn, t, start) for t in fts.INDEX_TABLES):
        return None  # entries above the last row: not a state this code understands
    meta.put(conn, fts.HIGH_WATER_KEY, OPEN_TOP)
    meta.put(conn, fts.PROGRESS_KEY, start)
    return Deferred(start)


def _hashsize(conn: sqlite3.Connection, table: str) -> int | None:
    """Return the hashsize an FTS5 index's _config table sets, or None (the default)."""
    row = conn.execute(f"SELECT v FROM \"{table}_config\" WHERE k = 'hashsize'").fetchone()
    return None if row is None else int(row[0])


def _set_hashsize(conn: sqlite3.Connection, table: str, value: int | None) -> None:
    """Set an FTS5 index's hashsize (None: back to no row, the default)."""
    # Through the index's own command, so this connection's cached setting changes too.
    size = _FTS5_DEFAULT_HASHSIZE if value is None else value
    conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('hashsize', ?)", (size,))
    if value is None:
        conn.execute(f"DELETE FROM \"{table}_config\" WHERE k = 'hashsize'")


def finish(conn: sqlite3.Connection, deferred: Deferred) -> None:
    """Index every row above the window's start and close the window (same transaction)."""
    window = (deferred.start,)
    saved = {t: _hashsize(conn, t) for t in fts.INDEX_TABLES}
    for table in fts.INDEX_TABLES:
        _set_hashsize(conn, table, max(BULK_HASHSIZE, saved[table] or 0))
    conn.execute(
        f"INSERT INTO {fts.WORD_TABLE}(rowid, content, tool_name, tool_calls) "
        f"SELECT id, content, tool_name, tool_calls FROM {fts.WORD_SOURCE} WHERE id > ?",
        window,
    )
    conn.execute(
        f"INSERT INTO {fts.TRIGRAM_TABLE}(rowid, content, tool_name) "
        f"SELECT id, content, tool_name FROM {fts.TRIGRAM_SOURCE} WHERE id > ?",
        window,
    )
    for table in fts.INDEX_TABLES:
        _set_hashsize(conn, table, saved[table])
    meta.delete(conn, fts.HIGH_WATER_KEY, fts.PROGRESS_KEY)
