"""Message rows: append (single and batch), read back, replace, uids (windows and lookups:
:mod:`message_windows`)."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import sqlite3
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from hermes_state.shapes import values
from hermes_state.shapes.content import (
    STRUCTURED_SENTINEL as STRUCTURED_SENTINEL,
    decode_content as decode_content,
    encode_content as encode_content,
)
from hermes_state.shapes.lineage import COMPRESSION_END_REASON, ancestors_in
from hermes_state.shapes.text import scrub_surrogates
from hermes_state.store.connection import Store
from hermes_state.store.errors import CompressionError, SessionNotFoundError
from hermes_state.store.patience import TRANSCRIPT_WRITE_PATIENCE_S
from hermes_state.store.schema import column_names, projection
from hermes_state.store.sql import quote

# Fields a caller passes per message (besides role and content).
APPEND_FIELDS = (
    "tool_calls",
    "tool_name",
    "tool_call_id",
    "token_count",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
    "api_content",
    "display_kind",
    "display_metadata",
    "platform_message_id",
    "effect_disposition",
    "timestamp",
    "observed",
    # Identity and generation fields: set by compaction, rotation and import, which copy them.
    "message_uid",
    "absorbed_message_uids",
    "tool_call_uids",
    "tool_call_uid",
    "active",
    "compacted",
)
JSON_FIELDS = (
    "tool_calls",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
    "display_metadata",
    "absorbed_message_uids",
    "tool_call_uids",
)
INSERT_COLUMNS = ("session_id", "role", "content", *APPEND_FIELDS)
OWNER_KEY = "owner"
_ACTIVE = INSERT_COLUMNS.index("active")
_TIMESTAMP = INSERT_COLUMNS.index("timestamp")


def new_uid() -> str:
    """Mint a message uid (32 hex digits)."""
    return uuid.uuid4().hex


def _json_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _tool_call_ids(tool_calls: Any) -> list[str]:
    if not isinstance(tool_calls, list):
        return []
    ids = []
    for call in tool_calls:
        if isinstance(call, Mapping) and isinstance(call.get("id"), str) and call["id"]:
            ids.append(call["id"])
    return ids


def _mint_tool_call_uids(tool_calls: list[Any]) -> dict[str, str]:
    """Give each distinct tool call id of one response a uid (repeats of an id share it)."""
    return {cid: new_uid() for cid in dict.fromkeys(_tool_call_ids(tool_calls))}


def _count_tool_calls(tool_calls: Any) -> int:
    if isinstance(tool_calls, list):
        return len(tool_calls)
    return 1 if tool_calls else 0


def _normalise_tool_calls(value: Any) -> list[Any] | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list):
        value = [value]
    return value or None


class _PendingUids:
    """Tool-call uids of assistant rows seen so far in this batch, for pairing tool results."""

    def __init__(self, conn: sqlite3.Connection, session_id: str, stored: bool = True) -> None:
        self.conn = conn
        self.session_id = session_id
        self.latest: dict[str, Any] = {}
        self._loaded = not stored  # a layout without the column has none to load

    def add(self, uids: Mapping[str, Any]) -> None:
        self.latest.update(uids)

    def lookup(self, call_id: str) -> str | None:
        if call_id not in self.latest and not self._loaded:
            self._load_from_store()
        value = self.latest.get(call_id)
        if isinstance(value, list):
            return value[0] if value else None
        return value

    def _load_from_store(self) -> None:
        # Only the recent assistant rows of this session: a tool result answers a recent call.
        self._loaded = True
        rows = self.conn.execute(
            "SELECT tool_call_uids FROM messages WHERE session_id = ? AND role = 'assistant'"
            " AND tool_call_uids IS NOT NULL ORDER BY id DESC LIMIT 50",
            (self.session_id,),
        ).fetchall()
        for (text,) in rows:  # newest first: the nearest preceding call wins
            try:
                mapping = json.loads(text)
            except ValueError:
                continue
            if isinstance(mapping, dict):
                for k, v in mapping.items():
                    self.latest.setdefault(k, v)


_ALLOWED_FIELDS = frozenset({"role", "content", *APPEND_FIELDS})
# Keys of the conversation shape (get_messages_as_conversation) that name a stored column: the
# agent sends its in-memory conversation back (/retry, /undo, /compress), so both shapes store.
CONVERSATION_KEYS = {
    "name": "tool_name",
    "message_id": "platform_message_id",
    "_absorbed_message_uids": "absorbed_message_uids",
    "_tool_call_uids": "tool_call_uids",
    "_tool_call_uid": "tool_call_uid",
}


def _storable(msg: Mapping[str, Any]) -> dict[str, Any]:
    """Return a message's stored fields: conversation keys renamed, other extras left out.

    Extras (``_db_persisted``, ``_row_id`` and whatever else a caller keeps on its messages)
    are the caller's; a column key wins over its conversation alias.
    """
    out = {k: v for k, v in msg.items() if k in _ALLOWED_FIELDS}
    for key, column in CONVERSATION_KEYS.items():
        if key in msg and out.get(column) is None:
            out[column] = msg[key]
    return out


_JSON_POSITIONS = tuple(INSERT_COLUMNS.index(f) for f in JSON_FIELDS)
_POS = {c: i for i, c in enumerate(INSERT_COLUMNS)}


def _prepare_row(
    session_id: str,
    msg: Mapping[str, Any],
    pending: _PendingUids,
    now: float,
    as_given: bool = False,
) -> tuple[list[Any], int]:
    """Turn one message dict into insert parameters; return them and its tool-call count.

    Missing uids are minted (a new message's identity). ``as_given`` mints only those the
    message does not name at all: an imported null stays null, as it was stored.
    """
    if not _ALLOWED_FIELDS.issuperset(msg):
        msg = _storable(msg)
    get = msg.get
    role = get("role")
    if not role or not isinstance(role, str):
        raise ValueError("every message needs a role")
    row = [session_id, role, encode_content(get("content"))]
    row.extend(get(f) for f in APPEND_FIELDS)
    tool_calls = _normalise_tool_calls(row[_POS["tool_calls"]])
    row[_POS["tool_calls"]] = tool_calls
    ts = row[_POS["timestamp"]]
    row[_POS["timestamp"]] = now if ts is None else float(ts)
    row[_POS["observed"]] = 1 if row[_POS["observed"]] else 0
    row[_POS["active"]] = 0 if get("active", 1) in (0, False) else 1
    row[_POS["compacted"]] = 1 if row[_POS["compacted"]] else 0
    if not row[_POS["message_uid"]] and not (as_given and "message_uid" in msg):
        row[_POS["message_uid"]] = new_uid()
    uids = row[_POS["tool_call_uids"]]
    if (
        role == "assistant"
        and tool_calls
        and not uids
        and not (as_given and "tool_call_uids" in msg)
    ):
        uids = row[_POS["tool_call_uids"]] = _mint_tool_call_uids(tool_calls)
    if isinstance(uids, Mapping):
        pending.add(uids)
    elif isinstance(uids, str):
        with contextlib.suppress(ValueError, TypeError):
            pending.add(json.loads(uids))
    if (
        role == "tool"
        and not row[_POS["tool_call_uid"]]
        and row[_POS["tool_call_id"]]
        and not (as_given and "tool_call_uid" in msg)
    ):
        row[_POS["tool_call_uid"]] = pending.lookup(row[_POS["tool_call_id"]])
    md = row[_POS["display_metadata"]]
    if md is not None and not isinstance(md, Mapping | str):
        raise TypeError("display_metadata must be a dict")
    for i in _JSON_POSITIONS:
        v = row[i]
        if v is not None and not isinstance(v, str):
            row[i] = json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    return row, (_count_tool_calls(tool_calls) if row[_POS["active"]] else 0)


# Rows per multi-row INSERT: FTS5 flushes its pending terms at every statement boundary, so one
# statement for many rows is ~4x cheaper than one per row (kept under SQLite's 32,766 variables).
_ROWS_PER_STATEMENT = 500
_VALUES = "(" + ", ".join("?" for _ in INSERT_COLUMNS) + ")"


@functools.cache
def _multi_insert_sql(n: int, columns: tuple[str, ...] = INSERT_COLUMNS) -> str:
    values = "(" + ", ".join("?" for _ in columns) + ")"
    return (
        f"INSERT INTO messages ({', '.join(columns)}) VALUES "
        + ", ".join([values] * n)
        + " RETURNING id"
    )


def _insert_rows(
    conn: sqlite3.Connection,
    rows: list[list[Any]],
    columns: tuple[str, ...] = INSERT_COLUMNS,
) -> list[int]:
    """Insert prepared rows (values in ``columns`` order) in order; return their ids.

    Lone surrogates are removed.
    """
    ids: list[int] = []
    for start in range(0, len(rows), _ROWS_PER_STATEMENT):
        chunk = rows[start : start + _ROWS_PER_STATEMENT]
        params = [v for row in chunk for v in row]
        sql = _multi_insert_sql(len(chunk), columns)
        try:
            got = conn.execute(sql, params).fetchall()
        except UnicodeEncodeError:  # sqlite3 cannot bind lone surrogates
            got = conn.execute(sql, [scrub_surrogates(v) for v in params]).fetchall()
        # One statement assigns ascending ids in VALUES order; RETURNING's order is unspecified.
        ids.extend(sorted(r[0] for r in got))
    return ids


_COUNT_SQL_WITHOUT_ACTIVITY = (
    "UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?,"
    " tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ?"
)
_COUNT_SQL = _COUNT_SQL_WITHOUT_ACTIVITY.replace(
    " WHERE id", ", last_activity_at = MAX(COALESCE(last_activity_at, 0), ?) WHERE id"
)


def insert_messages(
    conn: sqlite3.Connection,
    session_id: str,
    messages: Iterable[Mapping[str, Any]],
    *,
    columns: Collection[str] | None = None,
    ids: Sequence[int] | None = None,
    activity: bool = True,
    as_given: bool = False,
) -> list[int]:
    """Insert messages into a session inside the caller's transaction; return their ids.

    ``columns`` names the message columns the store has (None: all of this schema's); fields
    of the others are not written, so an import fits a layout older than ours. ``ids`` gives
    each message its row id (ascending, all free: the caller checked), as an import keeps them.
    ``activity=False`` leaves ``last_activity_at`` alone (a layout without that column).
    ``as_given`` keeps the uids a message names, null included (see _prepare_row).
    """
    pending = _PendingUids(conn, session_id, columns is None or "tool_call_uids" in columns)
    now = time.time()
    rows = []
    tool_calls = 0
    visible = 0
    newest = None
    for msg in messages:
        row, calls = _prepare_row(session_id, msg, pending, now, as_given)
        rows.append(row)
        if row[_ACTIVE]:
            visible += 1
            tool_calls += calls
        ts = row[_TIMESTAMP]
        newest = ts if newest is None else max(newest, ts)
    if not rows:
        from hermes_state.records.sessions import require_session_in

        require_session_in(conn, session_id)
        return []
    # The counter update doubles as the existence check: no separate SELECT per append.
    if activity:
        cur = conn.execute(_COUNT_SQL, (visible, tool_calls, newest, session_id))
    else:
        cur = conn.execute(_COUNT_SQL_WITHOUT_ACTIVITY, (visible, tool_calls, session_id))
    if cur.rowcount != 1:
        raise SessionNotFoundError(f"No session with id {session_id}")
    if columns is None and ids is None:
        ids = _insert_rows(conn, rows)
    else:
        keep = [i for i, c in enumerate(INSERT_COLUMNS) if columns is None or c in columns]
        names = tuple(INSERT_COLUMNS[i] for i in keep)
        written = [[r[i] for i in keep] for r in rows]
        if ids is not None:
            if len(ids) != len(rows) or any(a >= b for a, b in itertools.pairwise(ids)):
                raise ValueError("explicit message ids must be ascending, one per message")
            names = ("id", *names)
            written = [[i, *r] for i, r in zip(ids, written, strict=True)]
        ids = _insert_rows(conn, written, names)
    from hermes_state.store import cjk

    # The CJK index is fed from memory; the texts as stored (lone surrogates removed).
    content_at, calls_at = _POS["content"], _POS["tool_calls"]
    cjk.after_append(
        conn,
        [
            (i, scrub_surrogates(r[content_at]), scrub_surrogates(r[calls_at]))
            for i, r in zip(ids, rows, strict=True)
        ],
    )
    return ids


def append_messages(
    store: Store, session_id: str, messages: Iterable[Mapping[str, Any]]
) -> list[int]:
    """Append messages to a session in one transaction; return their new row ids."""
    batch = list(messages)
    return store.write(
        lambda conn: insert_messages(conn, session_id, batch),
        patience=TRANSCRIPT_WRITE_PATIENCE_S,
    )


SUMMARY_COLUMN = "_compressed_summary"  # the agent's mark of a compression summary row


def append_message(
    store: Store,
    session_id: str,
    role: str,
    content: Any = None,
    *,
    _compressed_summary: bool = False,
    **fields: Any,
) -> int:
    """Append one message to a session; return its row id (a summary row marked as such)."""
    message = {"role": role, "content": content, **fields}
    if not _compressed_summary or SUMMARY_COLUMN not in store.columns("messages"):
        return append_messages(store, session_id, [message])[0]

    def fn(conn: sqlite3.Connection) -> int:
        (row_id,) = insert_messages(conn, session_id, [message])
        conn.execute(f"UPDATE messages SET {SUMMARY_COLUMN} = 1 WHERE id = ?", (row_id,))
        return row_id

    return store.write(fn, patience=TRANSCRIPT_WRITE_PATIENCE_S)


# --- reading --------------------------------------------------------------------------------


def _decode_json_field(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value  # stored verbatim by a writer that passed plain text


def _decode_in_place(out: dict[str, Any], *, may_hold_bytes: bool = True) -> dict[str, Any]:
    # Odd values any writer may have left (text timestamps, bytes).
    values.clean_message(out, may_hold_bytes=may_hold_bytes)
    out["content"] = decode_content(out.get("content"))
    for f in JSON_FIELDS:
        value = out.get(f)
        if value is not None:  # most rows leave most JSON columns empty: skip the call
            out[f] = _decode_json_field(value)
    if out.get("tool_calls") is not None and not isinstance(out["tool_calls"], list):
        out["tool_calls"] = []
    if out.get("display_metadata") is not None and not isinstance(out["display_metadata"], dict):
        out["display_metadata"] = None
    return out


def decoded(names: Sequence[str], row: tuple[Any, ...]) -> dict[str, Any]:
    """Return a selected message row as a decoded dict (the bytes check runs in C first)."""
    return _decode_in_place(
        dict(zip(names, row, strict=True)), may_hold_bytes=bytes in map(type, row)
    )


# A binary cache of the agent's display code, recomputed when null: not part of a copy.
UNCOPIED_COLUMNS = frozenset({"session_id", "display_identity"})


SQLITE_MAX_ID = 2**63 - 1


def stored_chunk(
    store: Store,
    session_id: str,
    *,
    after_id: int = 0,
    limit: int = 2000,
    upto_id: int | None = None,
) -> list[dict[str, Any]]:
    """Return up to limit of a session's rows as stored (the store's own columns, nothing
    derived, every generation) with an id above after_id (and at most upto_id), in id order:
    one statement."""
    names = [c for c in store.columns("messages") if c not in UNCOPIED_COLUMNS]
    top = SQLITE_MAX_ID if upto_id is None else int(upto_id)
    sql = (
        f"SELECT {', '.join(quote(c) for c in names)} FROM messages"
        " WHERE session_id = ? AND id > ? AND id <= ? ORDER BY id LIMIT ?"
    )
    cur = store.conn.cursor()
    cur.row_factory = None
    rows = cur.execute(sql, (session_id, int(after_id), top, limit))
    return [decoded(names, row) for row in rows]


def iter_stored(
    store: Store,
    session_id: str,
    *,
    after_id: int = 0,
    chunk: int = 2000,
    upto_id: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield a session's rows as stored_chunk reads them, a chunk per statement.

    Each chunk is one short statement (its own read), so a long copy never holds a read
    transaction open while the agent writes, nor while its consumer is slow.
    """
    after = int(after_id)
    while True:
        rows = stored_chunk(store, session_id, after_id=after, limit=chunk, upto_id=upto_id)
        yield from rows
        if len(rows) < chunk:
            return
        after = rows[-1]["id"]


def message_select(store: Store, alias: str = "") -> str:
    """Select list of every declared message column (NULL for ones an older store lacks)."""
    return projection(store.columns("messages"), column_names("messages"), alias)


def get_messages(
    store: Store,
    session_id: str,
    include_inactive: bool = False,
    include_compacted: bool = False,
    limit: int | None = None,
    offset: int = 0,
    latest: bool = False,
    after_id: int | None = None,
    include_ancestors: bool = False,
) -> list[dict[str, Any]]:
    """Return a session's messages in id order: live rows only, unless asked for more.

    ``include_compacted`` adds the compression archive, ``include_inactive`` every generation;
    ``latest`` takes the last ``limit`` rows instead of the first; ``include_ancestors`` puts
    the rows of the sessions this one continues (compression) first, oldest first.
    """
    ids = [session_id]
    if include_ancestors:
        ids = [*reversed(ancestors_in(store.conn, session_id)), session_id]
    where = [f"session_id IN ({','.join('?' * len(ids))})"]
    params: list[Any] = list(ids)
    cols = store.columns("messages")
    if not include_inactive and "active" in cols:
        both = include_compacted and "compacted" in cols
        where.append("(active = 1 OR compacted = 1)" if both else "active = 1")
    if after_id is not None:
        where.append("id > ?")
        params.append(int(after_id))
    order = "DESC" if latest and limit is not None else "ASC"
    sql = (
        f"SELECT {message_select(store)} FROM messages WHERE {' AND '.join(where)} "
        f"ORDER BY id {order}"
    )
    if limit is not None or offset:
        sql += " LIMIT ? OFFSET ?"
        params += [-1 if limit is None else int(limit), max(0, int(offset))]
    # Plain tuples zipped with the column names: a third cheaper than sqlite3.Row -> dict.
    cur = store.conn.cursor()
    cur.row_factory = None
    cur.execute(sql, params)
    names = [d[0] for d in cur.description]
    rows = [decoded(names, r) for r in cur]
    if order == "DESC":
        rows.reverse()
    derive_tool_call_uids(rows)
    return rows


def iter_messages(
    store: Store, session_id: str, *, include_inactive: bool = True, chunk: int = 2000
) -> Iterator[dict[str, Any]]:
    """Yield a session's messages in id order, a bounded chunk at a time (memory stays flat)."""
    after = 0
    while True:
        page = get_messages(
            store, session_id, include_inactive=include_inactive, limit=chunk, after_id=after
        )
        yield from page
        if len(page) < chunk:
            return  # the last page: no need to ask for an empty one
        after = page[-1]["id"]


def derive_tool_call_uids(rows: list[dict[str, Any]]) -> None:
    """Fill tool_call_uid of tool rows stored without one, from the preceding assistant call."""
    latest: dict[str, Any] = {}
    for r in rows:
        uids = r.get("tool_call_uids")
        if r.get("role") == "assistant" and isinstance(uids, dict):
            latest.update(uids)
        elif r.get("role") == "tool" and not r.get("tool_call_uid") and r.get("tool_call_id"):
            value = latest.get(r["tool_call_id"])
            r["tool_call_uid"] = value[0] if isinstance(value, list) and value else value


def clear_messages_in(conn: sqlite3.Connection, session_id: str) -> int:
    """Delete every message of a session inside the caller's transaction; reset its counters."""
    n = conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,)).rowcount
    conn.execute(
        "UPDATE sessions SET message_count = 0, tool_call_count = 0 WHERE id = ?", (session_id,)
    )
    return n


def message_count(store: Store, session_id: str | None = None, *, live_only: bool = False) -> int:
    """Count the messages of one session, or of the whole store (every generation, or the live
    rows only)."""
    live = " AND active = 1" if live_only and "active" in store.columns("messages") else ""
    if session_id is None:
        sql = f"SELECT count(*) FROM messages WHERE 1{live}"
        return int(store.conn.execute(sql).fetchone()[0])
    row = store.conn.execute(
        f"SELECT count(*) FROM messages WHERE session_id = ?{live}", (session_id,)
    )
    return int(row.fetchone()[0])


def append_messages_batch(
    store: Store,
    session_id: str,
    messages: list[Mapping[str, Any]],
    chunk_rows: int | None = None,
) -> int:
    """Append messages in one transaction (or chunks of chunk_rows); return how many."""
    if not messages:
        return 0
    size = len(messages) if not chunk_rows or chunk_rows <= 0 else int(chunk_rows)
    added = 0
    for start in range(0, len(messages), size):
        added += len(append_messages(store, session_id, messages[start : start + size]))
    return added


_IDENTITY = ("role", "content", "tool_call_id", "tool_name", "tool_calls")


def _same_message(row: Mapping[str, Any], msg: Mapping[str, Any]) -> bool:
    """Tell whether a stored live row is the given message (role, content and tool identity)."""
    want = dict(msg)
    want["content"] = msg.get("content")
    want["tool_calls"] = _normalise_tool_calls(msg.get("tool_calls"))
    return all(row.get(k) == want.get(k) for k in _IDENTITY)


def replace_messages(
    store: Store,
    session_id: str,
    messages: Sequence[Mapping[str, Any]],
    active_only: bool = False,
    archive_dropped: bool = False,
) -> None:
    """Replace a session's messages with the given ones, in one transaction.

    By default every row is deleted (with ``active_only``, the live rows only, sparing
    compression archives). With ``archive_dropped`` nothing is deleted: live rows that match the
    new list's beginning stay as they are, the rest of the live rows are marked taken back
    (``active=0, compacted=0``, readable with include_inactive) and the remaining new messages
    are appended — what a rewind, edit or regenerate must do so no turn is lost. A message's
    ``message_uid`` is kept when it carries one. A session ended by compression is refused:
    its continuation is where the conversation goes on.
    """

    def fn(conn: sqlite3.Connection) -> None:
        row = conn.execute("SELECT end_reason FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            raise SessionNotFoundError(f"No session with id {session_id}")
        if row[0] == COMPRESSION_END_REASON:
            raise CompressionError(
                f"Session {session_id} was continued by compression; write to its successor"
            )
        new = list(messages)
        if archive_dropped:
            live = [
                _decode_in_place(dict(r))
                for r in conn.execute(
                    f"SELECT {', '.join(('id', *_IDENTITY))} FROM messages "
                    "WHERE session_id = ? AND active = 1 ORDER BY id",
                    (session_id,),
                )
            ]
            kept = 0
            while kept < min(len(live), len(new)) and _same_message(live[kept], new[kept]):
                kept += 1
            if kept < len(live):
                conn.execute(
                    "UPDATE messages SET active = 0, compacted = 0 "
                    "WHERE session_id = ? AND active = 1 AND id >= ?",
                    (session_id, live[kept]["id"]),
                )
            new = new[kept:]
        elif active_only:
            conn.execute("DELETE FROM messages WHERE session_id = ? AND active = 1", (session_id,))
        else:
            conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
        if new:
            insert_messages(conn, session_id, new)
        recount_in(conn, session_id)

    store.write(fn, patience=TRANSCRIPT_WRITE_PATIENCE_S)


def recount_in(conn: sqlite3.Connection, session_id: str) -> None:
    """Set a session's message_count and tool_call_count from its live rows."""
    n = calls = 0
    for (text,) in conn.execute(
        "SELECT tool_calls FROM messages WHERE session_id = ? AND active = 1", (session_id,)
    ):
        n += 1
        with contextlib.suppress(ValueError, TypeError):
            calls += _count_tool_calls(_normalise_tool_calls(text))
    conn.execute(
        "UPDATE sessions SET message_count = ?, tool_call_count = ? WHERE id = ?",
        (n, calls, session_id),
    )
