"""The gateway's old session index, ``<home>/sessions/sessions.json``: what the agent's schema-18
data step copies from it into the session rows of stores that predate those columns."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hermes_state.shapes.text import scrub_surrogates

log = logging.getLogger("hermes_state")

SESSIONS_JSON = Path("sessions") / "sessions.json"


def _json_scalar(value: Any) -> str | None:
    """Return a sessions.json value as text to store (numbers as text; anything else None)."""
    if isinstance(value, str):
        return scrub_surrogates(value) or None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _fills(entry: Mapping[str, Any], key: str) -> dict[str, Any]:
    """Return the session columns one sessions.json entry knows (values None when it does not)."""
    origin = entry.get("origin")
    origin = origin if isinstance(origin, dict) else None
    return {
        "session_key": _json_scalar(entry.get("session_key")) or _json_scalar(key),
        "chat_id": _json_scalar(origin.get("chat_id")) if origin else None,
        "chat_type": _json_scalar(entry.get("chat_type")),
        "thread_id": _json_scalar(origin.get("thread_id")) if origin else None,
        "display_name": _json_scalar(entry.get("display_name")),
        "origin_json": (
            scrub_surrogates(json.dumps(origin, ensure_ascii=False, default=str))
            if origin
            else None
        ),
        "expiry_finalized": (
            1 if entry.get("expiry_finalized") or entry.get("memory_flushed") else None
        ),
    }


def _read_sessions_json(path: Path) -> dict[str, Any] | None:
    """Return the gateway's old index as a dict, or None when missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:  # garbage: nothing to learn from it
        log.debug("gateway backfill: %s unreadable: %s", path, exc)
        return None
    return data if isinstance(data, dict) else None


def _fill_sessions(conn: sqlite3.Connection, data: Mapping[str, Any]) -> int:
    """Fill the empty gateway columns the index's entries know; return how many sessions changed."""
    live = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
    changed = 0
    for key, entry in data.items():
        if str(key).startswith("_") or not isinstance(entry, dict):
            continue  # "_README" and the like are notes, not entries
        session_id = _json_scalar(entry.get("session_id"))
        if not session_id:
            continue
        fills = {c: v for c, v in _fills(entry, str(key)).items() if c in live}
        row = conn.execute(
            f"SELECT {', '.join(fills)} FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None:
            continue
        # Empty is NULL or '' (text) or 0 (the flag): only those are filled.
        todo = {
            c: v
            for (c, v), have in zip(fills.items(), tuple(row), strict=True)
            if v is not None and not have
        }
        if todo:
            conn.execute(
                f"UPDATE sessions SET {', '.join(f'{c} = ?' for c in todo)} WHERE id = ?",
                [*todo.values(), session_id],
            )
            changed += 1
    return changed


def backfill_from_sessions_json(conn: sqlite3.Connection, home: Path) -> int:
    """Fill empty gateway columns of sessions from ``<home>/sessions/sessions.json``; return how
    many sessions changed.

    The step the agent runs when a store's schema is older than 18. Only empty (NULL or '')
    columns are filled, so nothing a newer writer stored is overwritten; expiry_finalized is only
    ever set. Runs in the caller's transaction under a savepoint and never raises: a missing or
    garbled file, or a failing statement, changes nothing.
    """
    data = _read_sessions_json(Path(home) / SESSIONS_JSON)
    if not data:
        return 0
    try:
        conn.execute("SAVEPOINT hermes_gateway_backfill")
    except sqlite3.Error as exc:
        log.debug("gateway backfill skipped: %s", exc)
        return 0
    try:
        changed = _fill_sessions(conn, data)
        conn.execute("RELEASE hermes_gateway_backfill")
        return changed
    except Exception as exc:  # a data step of the open must never fail the open
        log.warning("gateway backfill from sessions.json skipped: %s", exc)
        try:
            conn.execute("ROLLBACK TO hermes_gateway_backfill")
            conn.execute("RELEASE hermes_gateway_backfill")
        except sqlite3.Error:
            pass
        return 0
