"""The store's key/value table ``state_meta``: read, write and delete keys."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence


def get(conn: sqlite3.Connection, key: str) -> str | None:
    """Return a state_meta value (None when absent, or when the table does not exist)."""
    try:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return None if row is None else row[0]


def get_many(conn: sqlite3.Connection, keys: Sequence[str]) -> dict[str, str]:
    """Return the state_meta values of the keys that are present, in one statement."""
    if not keys:
        return {}
    try:
        rows = conn.execute(
            f"SELECT key, value FROM state_meta WHERE key IN ({', '.join('?' * len(keys))})",
            tuple(keys),
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return {}
        raise
    return {k: v for k, v in rows}


def as_int(value: object) -> int | None:
    """Return a stored value as an integer (None when absent or not a number)."""
    try:
        return None if value is None else int(str(value))
    except ValueError:
        return None


def get_int(conn: sqlite3.Connection, key: str) -> int | None:
    """Return a state_meta value as an integer (None when absent or not a number)."""
    return as_int(get(conn, key))


def put(conn: sqlite3.Connection, key: str, value: object) -> None:
    """Set a state_meta value (caller's write transaction)."""
    conn.execute(
        "INSERT INTO state_meta(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, str(value)),
    )


def delete(conn: sqlite3.Connection, *keys: str) -> None:
    """Remove state_meta keys (caller's write transaction)."""
    conn.executemany("DELETE FROM state_meta WHERE key = ?", [(k,) for k in keys])
