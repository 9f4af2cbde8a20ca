"""The rows a transcript prints: a session's messages with only the columns a reader is shown.

``sessions show`` for people prints role, tool name, time, flags, reasoning, text and tool calls
of each message. Reading every declared column and decoding every JSON field of each row (as
``messages.get_messages`` does for exports and the agent) costs about twice the SQL on the
biggest sessions; this reader selects the shown columns and decodes them the same way.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from hermes_state.shapes import values
from hermes_state.shapes.content import decode_content
from hermes_state.store.connection import Store
from hermes_state.store.schema import projection

# What a printed transcript shows of a message (hermes_cli.rendering.session_views.transcript).
TRANSCRIPT_COLUMNS = (
    "id",
    "role",
    "content",
    "tool_name",
    "tool_calls",
    "timestamp",
    "active",
    "compacted",
    "reasoning",
    "reasoning_content",
)
CHUNK = 2000  # rows a query returns at once: memory stays flat, no statement held open


def _decoded(names: list[str], row: tuple[Any, ...]) -> dict[str, Any]:
    """Return a selected row as a dict, its values cleaned and decoded as get_messages does."""
    out = dict(zip(names, row, strict=True))
    values.clean_message(out, may_hold_bytes=bytes in map(type, row))
    out["content"] = decode_content(out["content"])
    calls = out["tool_calls"]
    if calls is not None:
        if isinstance(calls, str):
            # Stored verbatim by a writer that passed plain text: kept, then shown as no call.
            with contextlib.suppress(ValueError):
                calls = json.loads(calls)
        out["tool_calls"] = calls if isinstance(calls, list) else []
    return out


def iter_transcript(store: Store, session_id: str) -> Iterator[dict[str, Any]]:
    """Yield every stored message of a session in id order (TRANSCRIPT_COLUMNS only), a bounded
    chunk at a time; the caller picks the generations and roles it prints."""
    select = projection(store.columns("messages"), TRANSCRIPT_COLUMNS)
    sql = f"SELECT {select} FROM messages WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?"
    after = 0
    while True:
        cur = store.conn.cursor()
        cur.row_factory = None
        cur.execute(sql, (session_id, after, CHUNK))
        names = [d[0] for d in cur.description]
        page = cur.fetchall()
        yield from (_decoded(names, r) for r in page)
        if len(page) < CHUNK:
            return  # the last page: no need to ask for an empty one
        after = page[-1][0]
