"""Deferred unindexing for bulk deletes: many messages taken out of the search indexes at once.

The agent's delete triggers send FTS5 one ``'delete'`` per message, each a statement of its own
(30-45 µs a message on the word and substring indexes). Its external layout gates those
triggers by the rebuild window (see :mod:`hermes_state.store.bulkload`): a row's triggers fire
only if ``id > fts_rebuild_high_water OR id <= fts_rebuild_progress``. A bulk delete first sends
the ``'delete'`` of every doomed message in one ``INSERT … SELECT`` per index, reading the same
projection (the index's own content view) the triggers would have sent, then closes the window,
deletes the rows (the gated triggers pass them by) and opens the window again, all inside the
caller's write transaction. No other connection ever sees the closed window, every commit leaves
the indexes exactly as the per-row triggers would have, and a crash rolls the whole transaction
back. Any other layout, or a rebuild already pending (its window is the agent's), keeps the
triggers row by row.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence

from hermes_state.store import bulkload, fts, meta
from hermes_state.store.sql import chunks, marks, quote

# The closed window (LOW, OPEN_TOP] holds every message id: no gated trigger fires inside it.
_WINDOW_LOW = -(2**62)


def _can_defer(conn: sqlite3.Connection) -> bool:
    """Tell whether the store has the agent's gated external layout with nothing pending."""
    return bulkload.gated_layout(conn, "delete")


@contextlib.contextmanager
def unindexed(conn: sqlite3.Connection, session_ids: Sequence[str]) -> Iterator[bool]:
    """Take these sessions' messages out of the word and substring indexes in bulk and close the
    window for the block, in which the caller deletes them; yield whether it did (False: the
    triggers do it row by row). Caller's write transaction; nothing else may write messages in
    the block."""
    if not session_ids or not _can_defer(conn):
        yield False
        return
    idx = fts.indexes(conn)
    saved = {t: bulkload._hashsize(conn, t) for t in fts.INDEX_TABLES}
    for table in fts.INDEX_TABLES:
        bulkload._set_hashsize(conn, table, max(bulkload.BULK_HASHSIZE, saved[table] or 0))
    for index in (idx.word, idx.trigram):
        assert index is not None and index.content is not None
        t = quote(index.table)
        cols = ", ".join(map(quote, index.columns))
        for batch in chunks(session_ids):
            conn.execute(
                f"INSERT INTO {t}({t}, rowid, {cols}) SELECT 'delete', id, {cols}"
                f" FROM {quote(index.content)} WHERE id IN (SELECT id FROM messages"
                f" WHERE session_id IN ({marks(len(batch))}))",
                batch,
            )
    for table in fts.INDEX_TABLES:
        bulkload._set_hashsize(conn, table, saved[table])
    meta.put(conn, fts.HIGH_WATER_KEY, bulkload.OPEN_TOP)
    meta.put(conn, fts.PROGRESS_KEY, _WINDOW_LOW)
    try:
        yield True
    finally:
        meta.delete(conn, fts.HIGH_WATER_KEY, fts.PROGRESS_KEY)
