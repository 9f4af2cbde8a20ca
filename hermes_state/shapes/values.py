"""Odd values in stored rows, made usable: any writer (a plugin, the sqlite3 shell, a damaged
page) can leave text in a timestamp, bytes in a title or a NULL id. Readers of this package
return clean values instead (a timestamp that is not a number reads as None, undecodable bytes
as text) and log one WARNING per column and kind, so listing, showing and exporting never fail
on one odd row."""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

log = logging.getLogger("hermes_state.shapes.values")

# Columns the tool sorts, compares or formats as times (seconds since the epoch).
TIME_COLUMNS = frozenset(
    {
        "started_at",
        "ended_at",
        "last_activity_at",
        "last_active",
        "last_read_at",
        "timestamp",
        "first_seen",
        "last_seen",
        "session_started",
        "compression_failure_cooldown_until",
        "compression_recovery_deadline",
    }
)
# Counters and flags the tool adds up or compares as integers.
INT_COLUMNS = frozenset(
    {
        "message_count",
        "tool_call_count",
        "api_call_count",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "total_tokens",
        "token_count",
        "rewind_count",
        "active",
        "compacted",
        "observed",
        "archived",
        "auto_archived",
        "pinned",
        "hidden",
        "expiry_finalized",
    }
)
REAL_COLUMNS = frozenset({"estimated_cost_usd", "actual_cost_usd"})
BLOB_COLUMNS = frozenset({"display_identity"})
TYPED_COLUMNS = TIME_COLUMNS | INT_COLUMNS | REAL_COLUMNS

_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _warn(column: str, kind: str) -> None:
    """Log one WARNING per column and kind of odd value for the life of the process."""
    with _warned_lock:
        if (column, kind) in _warned:
            return
        _warned.add((column, kind))
    what, shown = _WHAT[kind]
    log.warning("the store holds %s in column %s; it is shown as %s", what, column, shown)


_WHAT = {
    "time": ("a value that is not a time", "empty"),
    "int": ("a value that is not a whole number", "empty"),
    "real": ("a value that is not a number", "empty"),
    "bytes": ("bytes that are not text", "text with replacement characters"),
}


def _number(value: Any) -> float | None:
    """Return value as a finite float, or None when it is not a number."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, str):
        try:
            f = float(value.strip())
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def clean_value(column: str, value: Any) -> Any:
    """Return a stored value in the type the tool expects for its column (None if it cannot)."""
    if value is None:
        return None
    if column in TIME_COLUMNS or column in REAL_COLUMNS:
        if isinstance(value, float | int) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                _warn(column, "time" if column in TIME_COLUMNS else "real")
                return None
            return value
        number = _number(value)
        if number is None:
            _warn(column, "time" if column in TIME_COLUMNS else "real")
        return number
    if column in INT_COLUMNS:
        if isinstance(value, int):
            return value
        number = _number(value)
        if number is None:
            _warn(column, "int")
            return None
        return int(number)
    if isinstance(value, bytes) and column not in BLOB_COLUMNS:
        _warn(column, "bytes")
        return value.decode("utf-8", errors="replace")
    return value


def clean_row(row: dict[str, Any]) -> dict[str, Any]:
    """Clean every value of a row in place (see clean_value) and return it."""
    for column, value in row.items():
        kind = type(value)
        if column not in TYPED_COLUMNS:
            # The common case: text (or a number) where no type is expected; only bytes change.
            if kind is bytes and column not in BLOB_COLUMNS:
                row[column] = clean_value(column, value)
            continue
        if value is None or kind is int:
            continue  # SQLite's integers are right in every typed column
        if kind is float and column in _NUMBER_COLUMNS and math.isfinite(value):
            continue
        row[column] = clean_value(column, value)
    return row


_NUMBER_COLUMNS = TIME_COLUMNS | REAL_COLUMNS


# Text columns of messages that are shown or exported as text.
MESSAGE_TEXT_COLUMNS = (
    "session_id",
    "role",
    "content",
    "tool_call_id",
    "tool_name",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "api_content",
    "display_kind",
    "platform_message_id",
    "message_uid",
    "tool_call_uid",
)


def clean_message(row: dict[str, Any], *, may_hold_bytes: bool = True) -> dict[str, Any]:
    """Clean the columns of a message row the tool relies on, in place (cheap: export runs it
    on every row). ``may_hold_bytes=False``: the caller knows no value is bytes."""
    ts = row.get("timestamp")
    if ts is not None and type(ts) is not float and type(ts) is not int:
        row["timestamp"] = clean_value("timestamp", ts)
    for column in ("token_count", "active", "compacted"):
        value = row.get(column)
        if value is not None and type(value) is not int:
            row[column] = clean_value(column, value)
    if may_hold_bytes:
        for column in MESSAGE_TEXT_COLUMNS:
            if type(row.get(column)) is bytes:
                row[column] = clean_value(column, row[column])
    return row
