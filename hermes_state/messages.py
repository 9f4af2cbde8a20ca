"""Message rows: append (single and batch), read back, OpenAI-style conversations, uids."""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from hermes_state import values
from hermes_state.connection import TRANSCRIPT_WRITE_PATIENCE_S, Store
from hermes_state.errors import SessionNotFoundError
from hermes_state.schema import column_names, projection
from hermes_state.text import scrub_surrogates

# Structured (list/dict) content is stored as text behind this sentinel, as upstream does.
STRUCTURED_SENTINEL = "\x00json:"

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


def encode_content(content: Any) -> Any:
    """Turn message content into what is stored: text as is, structured content behind a marker."""
    if isinstance(content, list | dict):
        return STRUCTURED_SENTINEL + json.dumps(content, ensure_ascii=False)
    return content


def decode_content(value: Any) -> Any:
    """Turn stored content back into a string or the structured value it came from."""
    if isinstance(value, str) and value.startswith(STRUCTURED_SENTINEL):
        try:
            return json.loads(value[len(STRUCTURED_SENTINEL) :])
        except ValueError:
            return value
    return value


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


def _mint_tool_call_uids(tool_calls: list) -> dict[str, str]:
    """Give each distinct tool call id of one response a uid (repeats of an id share it)."""
    return {cid: new_uid() for cid in dict.fromkeys(_tool_call_ids(tool_calls))}


def _count_tool_calls(tool_calls: Any) -> int:
    if isinstance(tool_calls, list):
        return len(tool_calls)
    return 1 if tool_calls else 0


def _normalise_tool_calls(value: Any) -> list | None:
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

    def __init__(self, conn: sqlite3.Connection, session_id: str) -> None:
        self.conn = conn
        self.session_id = session_id
        self.latest: dict[str, Any] = {}
        self._loaded = False

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
_JSON_POSITIONS = tuple(INSERT_COLUMNS.index(f) for f in JSON_FIELDS)
_POS = {c: i for i, c in enumerate(INSERT_COLUMNS)}


def _prepare_row(
    session_id: str, msg: Mapping[str, Any], pending: _PendingUids, now: float
) -> tuple[list[Any], int]:
    """Turn one message dict into insert parameters; return them and its tool-call count."""
    if not _ALLOWED_FIELDS.issuperset(msg):
        unknown = sorted(set(msg) - _ALLOWED_FIELDS)
        raise TypeError(f"unexpected message fields: {', '.join(unknown)}")
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
    if not row[_POS["message_uid"]]:
        row[_POS["message_uid"]] = new_uid()
    uids = row[_POS["tool_call_uids"]]
    if role == "assistant" and tool_calls and not uids:
        uids = row[_POS["tool_call_uids"]] = _mint_tool_call_uids(tool_calls)
    if isinstance(uids, Mapping):
        pending.add(uids)
    elif isinstance(uids, str):
        with contextlib.suppress(ValueError, TypeError):
            pending.add(json.loads(uids))
    if role == "tool" and not row[_POS["tool_call_uid"]] and row[_POS["tool_call_id"]]:
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
def _multi_insert_sql(n: int) -> str:
    return (
        f"INSERT INTO messages ({', '.join(INSERT_COLUMNS)}) VALUES "
        + ", ".join([_VALUES] * n)
        + " RETURNING id"
    )


def _insert_rows(conn: sqlite3.Connection, rows: list[list[Any]]) -> list[int]:
    """Insert prepared rows in order; return their ids. Lone surrogates are removed."""
    ids: list[int] = []
    for start in range(0, len(rows), _ROWS_PER_STATEMENT):
        chunk = rows[start : start + _ROWS_PER_STATEMENT]
        params = [v for row in chunk for v in row]
        try:
            got = conn.execute(_multi_insert_sql(len(chunk)), params).fetchall()
        except UnicodeEncodeError:  # sqlite3 cannot bind lone surrogates
            got = conn.execute(
                _multi_insert_sql(len(chunk)), [scrub_surrogates(v) for v in params]
            ).fetchall()
        # One statement assigns ascending ids in VALUES order; RETURNING's order is unspecified.
        ids.extend(sorted(r[0] for r in got))
    return ids


def insert_messages(
    conn: sqlite3.Connection, session_id: str, messages: Iterable[Mapping[str, Any]]
) -> list[int]:
    """Insert messages into a session inside the caller's transaction; return their ids."""
    pending = _PendingUids(conn, session_id)
    now = time.time()
    rows = []
    tool_calls = 0
    visible = 0
    newest = None
    for msg in messages:
        row, calls = _prepare_row(session_id, msg, pending, now)
        rows.append(row)
        if row[_ACTIVE]:
            visible += 1
            tool_calls += calls
        ts = row[_TIMESTAMP]
        newest = ts if newest is None else max(newest, ts)
    if not rows:
        from hermes_state.sessions import require_session_in

        require_session_in(conn, session_id)
        return []
    # The counter update doubles as the existence check: no separate SELECT per append.
    cur = conn.execute(
        "UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?,"
        " tool_call_count = COALESCE(tool_call_count, 0) + ?,"
        " last_activity_at = MAX(COALESCE(last_activity_at, 0), ?) WHERE id = ?",
        (visible, tool_calls, newest, session_id),
    )
    if cur.rowcount != 1:
        raise SessionNotFoundError(f"No session with id {session_id}")
    ids = _insert_rows(conn, rows)
    from hermes_state import cjk

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


def append_message(
    store: Store, session_id: str, role: str, content: Any = None, **fields: Any
) -> int:
    """Append one message to a session; return its row id."""
    return append_messages(store, session_id, [{"role": role, "content": content, **fields}])[0]


# --- reading --------------------------------------------------------------------------------


def _decode_json_field(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value  # stored verbatim by a writer that passed plain text


def decode_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Turn a stored message row into a dict with JSON fields and content decoded."""
    return _decode_in_place(dict(row))


def _decode_in_place(out: dict[str, Any]) -> dict[str, Any]:
    values.clean_message(out)  # odd values any writer may have left (text timestamps, bytes)
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


def message_select(store: Store, alias: str = "") -> str:
    """Select list of every declared message column (NULL for ones an older store lacks)."""
    return projection(store.columns("messages"), column_names("messages"), alias)


def get_messages(
    store: Store,
    session_id: str,
    *,
    include_inactive: bool = False,
    limit: int | None = None,
    after_id: int | None = None,
) -> list[dict[str, Any]]:
    """Return a session's messages in id order (live rows only unless include_inactive)."""
    where = ["session_id = ?"]
    params: list[Any] = [session_id]
    if not include_inactive and "active" in store.columns("messages"):
        where.append("active = 1")
    if after_id is not None:
        where.append("id > ?")
        params.append(int(after_id))
    sql = f"SELECT {message_select(store)} FROM messages WHERE {' AND '.join(where)} ORDER BY id"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(int(limit))
    # Plain tuples zipped with the column names: a third cheaper than sqlite3.Row -> dict.
    cur = store.conn.cursor()
    cur.row_factory = None
    cur.execute(sql, params)
    names = [d[0] for d in cur.description]
    rows = [_decode_in_place(dict(zip(names, r, strict=True))) for r in cur]
    _derive_tool_call_uids(rows)
    return rows


def iter_messages(
    store: Store, session_id: str, *, include_inactive: bool = True, chunk: int = 2000
):
    """Yield a session's messages in id order, a bounded chunk at a time (memory stays flat)."""
    after = 0
    while True:
        page = get_messages(
            store, session_id, include_inactive=include_inactive, limit=chunk, after_id=after
        )
        if not page:
            return
        yield from page
        after = page[-1]["id"]


def _derive_tool_call_uids(rows: list[dict[str, Any]]) -> None:
    """Fill tool_call_uid of tool rows stored without one, from the preceding assistant call."""
    latest: dict[str, Any] = {}
    for r in rows:
        uids = r.get("tool_call_uids")
        if r.get("role") == "assistant" and isinstance(uids, dict):
            latest.update(uids)
        elif r.get("role") == "tool" and not r.get("tool_call_uid") and r.get("tool_call_id"):
            value = latest.get(r["tool_call_id"])
            r["tool_call_uid"] = value[0] if isinstance(value, list) and value else value


def strip_owner(metadata: Any) -> Any:
    """Return display metadata without the ownership marker (never sent to providers)."""
    if isinstance(metadata, dict) and OWNER_KEY in metadata:
        metadata = {k: v for k, v in metadata.items() if k != OWNER_KEY}
        return metadata or None
    return metadata


_ASSISTANT_EXTRAS = (
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
)


def to_conversation_message(r: Mapping[str, Any]) -> dict[str, Any]:
    """Shape one decoded row as an OpenAI-style message with its uid fields."""
    msg: dict[str, Any] = {
        "role": r["role"],
        "content": r["content"] if r["content"] is not None else "",
    }
    if r.get("tool_calls"):
        msg["tool_calls"] = r["tool_calls"]
    if r.get("tool_call_id"):
        msg["tool_call_id"] = r["tool_call_id"]
    if r.get("tool_name"):
        msg["name"] = r["tool_name"]
    if r.get("api_content") is not None:
        msg["api_content"] = r["api_content"]
    if r["role"] == "assistant":
        for f in _ASSISTANT_EXTRAS:
            if r.get(f) is not None:
                msg[f] = r[f]
    if r.get("display_kind"):
        msg["display_kind"] = r["display_kind"]
    md = strip_owner(r.get("display_metadata"))
    if md:
        msg["display_metadata"] = md
    if r.get("platform_message_id"):
        msg["message_id"] = r["platform_message_id"]
    msg["timestamp"] = r["timestamp"]
    # uid fields travel with the message for context engines; the provider layer drops them.
    if r.get("message_uid"):
        msg["message_uid"] = r["message_uid"]
    if r.get("absorbed_message_uids"):
        msg["_absorbed_message_uids"] = r["absorbed_message_uids"]
    if r.get("tool_call_uids"):
        msg["_tool_call_uids"] = r["tool_call_uids"]
    if r.get("tool_call_uid"):
        msg["_tool_call_uid"] = r["tool_call_uid"]
    return msg


def get_messages_as_conversation(store: Store, session_id: str) -> list[dict[str, Any]]:
    """Return a session's live messages as OpenAI-style dicts, ownership markers removed."""
    return [to_conversation_message(r) for r in get_messages(store, session_id)]


def clear_messages_in(conn: sqlite3.Connection, session_id: str) -> int:
    """Delete every message of a session inside the caller's transaction; reset its counters."""
    n = conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,)).rowcount
    conn.execute(
        "UPDATE sessions SET message_count = 0, tool_call_count = 0 WHERE id = ?", (session_id,)
    )
    return n
