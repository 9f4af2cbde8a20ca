"""Windows onto a session's messages: the transcript window, the rows around one message, the
anchored view, and the agent's small lookups (archived rows, platform ids, the latest user row)."""

from __future__ import annotations

import sqlite3
from typing import Any

from hermes_state.records.messages import decoded, derive_tool_call_uids, message_select
from hermes_state.shapes.content import encode_content
from hermes_state.shapes.text import scrub_surrogates
from hermes_state.store.connection import Store


def _select_rows(store: Store, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    """Run a SELECT of message_select() columns and return decoded rows."""
    cur = store.conn.cursor()
    cur.row_factory = None
    cur.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [decoded(names, r) for r in cur]


def message_window(
    store: Store,
    session_id: str,
    around_id: int | None = None,
    *,
    before: int = 3,
    after: int = 3,
) -> list[dict[str, Any]]:
    """Return up to before/after transcript messages around one message, in id order.

    Transcript messages are the live rows and the compression archive (as `sessions show`
    prints them); the message around_id is included whatever its state. Without around_id the
    window is the session's first before + after + 1 messages.
    """
    cols = set(store.columns("messages"))
    visible = (
        "(active = 1 OR compacted = 1)"
        if {"active", "compacted"} <= cols
        else ("active = 1" if "active" in cols else "1")
    )
    select = f"SELECT {message_select(store)} FROM messages WHERE session_id = ?"
    if around_id is None:
        rows = _select_rows(
            store,
            f"{select} AND {visible} ORDER BY id LIMIT ?",
            [session_id, max(0, before) + max(0, after) + 1],
        )
        derive_tool_call_uids(rows)
        return rows
    pivot = int(around_id)
    earlier = _select_rows(
        store,
        f"{select} AND id < ? AND {visible} ORDER BY id DESC LIMIT ?",
        [session_id, pivot, max(0, before)],
    )
    rest = _select_rows(
        store,
        f"{select} AND (id = ? OR (id > ? AND {visible})) ORDER BY id LIMIT ?",
        [session_id, pivot, pivot, max(0, after) + 1],
    )
    rows = earlier[::-1] + rest
    derive_tool_call_uids(rows)
    return rows


def has_archived_messages(store: Store, session_id: str) -> bool:
    """Tell whether a session has rows outside its live generation (archived or taken back)."""
    row = store.conn.execute(
        "SELECT 1 FROM messages WHERE session_id = ? AND active = 0 LIMIT 1", (session_id,)
    ).fetchone()
    return row is not None


def has_platform_message_id(store: Store, session_id: str, platform_message_id: str) -> bool:
    """Tell whether a session already stored the platform message with this id (a retry)."""
    row = store.conn.execute(
        "SELECT 1 FROM messages WHERE session_id = ? AND platform_message_id = ? LIMIT 1",
        (session_id, scrub_surrogates(platform_message_id)),
    ).fetchone()
    return row is not None


def set_latest_user_api_content(
    store: Store, session_id: str, content: Any, api_content: str
) -> int:
    """Attach the text sent to the provider to the newest live user row, if it is that message.

    The row is written only when its content is ``content`` (a guard against a racing rewrite);
    returns how many rows were updated (0 or 1).
    """
    encoded = scrub_surrogates(encode_content(content))

    def fn(conn: sqlite3.Connection) -> int:
        cur = conn.execute(
            "UPDATE messages SET api_content = ? WHERE id = (SELECT id FROM messages "
            "WHERE session_id = ? AND role = 'user' AND active = 1 ORDER BY id DESC LIMIT 1) "
            "AND content IS ?",
            (scrub_surrogates(api_content), session_id, encoded),
        )
        return cur.rowcount

    return store.write(fn)


def messages_around(
    store: Store, session_id: str, around_message_id: int, window: int = 5
) -> dict[str, Any]:
    """Return the rows around one message: {window, messages_before, messages_after}.

    ``window`` holds up to ``window`` rows before the anchor, the anchor and up to ``window``
    after, in id order (every generation: an anchor may be a search hit in an archived one);
    the counts are how many of them lie on each side, so a count below ``window`` means the
    session ends there. An anchor that is not in the session gives an empty window.
    """
    size = max(0, int(window))
    select = f"SELECT {message_select(store)} FROM messages WHERE session_id = ?"
    if not store.conn.execute(
        "SELECT 1 FROM messages WHERE id = ? AND session_id = ?", (around_message_id, session_id)
    ).fetchone():
        return {"window": [], "messages_before": 0, "messages_after": 0}
    before = _select_rows(
        store,
        f"{select} AND id <= ? ORDER BY id DESC LIMIT ?",
        [session_id, around_message_id, size + 1],
    )
    after = _select_rows(
        store, f"{select} AND id > ? ORDER BY id LIMIT ?", [session_id, around_message_id, size]
    )
    rows = before[::-1] + after
    derive_tool_call_uids(rows)
    return {
        "window": rows,
        "messages_before": max(0, len(before) - 1),
        "messages_after": len(after),
    }


def anchored_view(
    store: Store,
    session_id: str,
    around_message_id: int,
    window: int = 5,
    bookend: int = 3,
    keep_roles: tuple[str, ...] | None = ("user", "assistant"),
) -> dict[str, Any]:
    """Return the rows around a message and the session's opening and closing exchanges.

    Adds ``bookend_start``/``bookend_end`` to :func:`messages_around`: the first and last
    ``bookend`` messages with text (of ``keep_roles``, None for all) outside the window. The
    window keeps only ``keep_roles`` too, except the anchor itself.
    """
    base = messages_around(store, session_id, around_message_id, window)
    rows = base["window"]
    empty: dict[str, Any] = {**base, "bookend_start": [], "bookend_end": []}
    if not rows:
        return empty
    if keep_roles is not None:
        keep = set(keep_roles)
        base["window"] = [r for r in rows if r["id"] == around_message_id or r["role"] in keep]
    count = max(0, int(bookend))
    if not count:
        return {**base, "bookend_start": [], "bookend_end": []}
    roles = ""
    params: list[Any] = []
    if keep_roles is not None:
        roles = f" AND role IN ({', '.join('?' for _ in keep_roles)})"
        params = list(keep_roles)
    select = (
        f"SELECT {message_select(store)} FROM messages WHERE session_id = ?{roles}"
        " AND length(content) > 0"
    )
    start = _select_rows(
        store,
        f"{select} AND id < ? ORDER BY id LIMIT ?",
        [session_id, *params, rows[0]["id"], count],
    )
    end = _select_rows(
        store,
        f"{select} AND id > ? ORDER BY id DESC LIMIT ?",
        [session_id, *params, rows[-1]["id"], count],
    )
    return {**base, "bookend_start": start, "bookend_end": end[::-1]}
