"""The target's ``lost_and_found`` table: rows a salvage keeps aside instead of guessing them
into a live table, each with the reason, and the checks of the values the tool relies on that
send a row there."""

from __future__ import annotations

import functools
import json
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hermes_state.store.sql import quote

if TYPE_CHECKING:
    from hermes_state.store.connection import Store

LOST_AND_FOUND = "lost_and_found"
LOST_AND_FOUND_DDL = (
    f"CREATE TABLE IF NOT EXISTS {LOST_AND_FOUND} (\n"
    "    id INTEGER PRIMARY KEY,\n"
    "    table_name TEXT,  -- the table the row most likely came from (NULL: none fits)\n"
    "    reason TEXT NOT NULL,\n"
    "    source_rowid INTEGER,\n"
    "    source_page INTEGER,\n"
    '    row_json TEXT NOT NULL  -- {column: value} (blobs as {"$hex": ...}), or [values]\n'
    ")"
)
# Why a row was kept aside (the reason column, and the keys of the report's counts).
REJECTED = "rejected by the target's constraints"
INVALID = "invalid values"
MISFIT = "found in the table's b-tree but shaped like another table's row"
BAD_ROWID = "rowid damaged (outside the range its page covers)"
DUPLICATE = "a second row with the same rowid"
DAMAGED_VALUE = "a value was not read intact"
UNATTACHED = "on a page no b-tree reaches (deleted, or cut off from its table)"
UNATTRIBUTED = "fits no table of the store"


def _jsonable(value: Any) -> Any:
    """Return a JSON-safe form of a column value (blobs as hex)."""
    if isinstance(value, bytes):
        return {"$hex": value.hex()}
    if isinstance(value, float) and value != value:  # NaN
        return None
    return value


# A lost_and_found row as inserted: (table_name, reason, source_rowid, source_page, row_json).
KeptRow = tuple[str | None, str, int | None, int | None, str]


@dataclass
class LostAndFound:
    """Rows kept aside in the target's lost_and_found table, with per-reason counts."""

    store: Store
    counts: Counter[str] = field(default_factory=Counter)
    pending: list[KeptRow] = field(default_factory=list)
    made: bool = False

    def add(
        self,
        table: str | None,
        reason: str,
        rowid: int | None,
        page: int | None,
        row: dict[str, Any] | Sequence[Any],
        detail: str | None = None,
    ) -> None:
        """Keep one row aside (written at the next flush)."""
        if isinstance(row, dict):
            body: Any = {k: _jsonable(v) for k, v in row.items()}
        else:
            body = [_jsonable(v) for v in row]
        text = reason if detail is None else f"{reason}: {detail}"
        self.pending.append((table, text, rowid, page, json.dumps(body, ensure_ascii=False)))
        self.counts[reason] += 1
        if len(self.pending) >= 2000:
            self.flush()

    def flush(self) -> None:
        """Write the pending rows."""
        if not self.pending:
            return
        batch, self.pending = self.pending, []

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(LOST_AND_FOUND_DDL)
            conn.executemany(
                f"INSERT INTO {LOST_AND_FOUND} (table_name, reason, source_rowid, source_page, "
                "row_json) VALUES (?, ?, ?, ?, ?)",
                batch,
            )

        self.store.write(write)
        if not self.made:
            self.made = True
            self.store.forget_columns()


# Values the rest of the tool relies on (listing sorts by them, export formats them, lookups
# join on them): a row that breaks one of these is kept aside, not put into the live table.
VALIDATION: dict[str, list[tuple[str, str]]] = {
    "sessions": [
        ("id", "{c} IS NULL OR typeof({c}) != 'text'"),
        ("source", "{c} IS NULL"),
        ("started_at", "typeof({c}) NOT IN ('integer', 'real')"),
        ("ended_at", "{c} IS NOT NULL AND typeof({c}) NOT IN ('integer', 'real')"),
        ("last_activity_at", "{c} IS NOT NULL AND typeof({c}) NOT IN ('integer', 'real')"),
        ("parent_session_id", "{c} IS NOT NULL AND typeof({c}) != 'text'"),
    ],
    "messages": [
        ("session_id", "{c} IS NULL OR typeof({c}) != 'text'"),
        ("role", "{c} IS NULL OR typeof({c}) != 'text'"),
        ("timestamp", "typeof({c}) NOT IN ('integer', 'real')"),
    ],
    "session_model_usage": [("session_id", "{c} IS NULL OR typeof({c}) != 'text'")],
}


def quarantine_invalid(store: Store, lost: LostAndFound) -> dict[str, int]:
    """Move rows of the known tables that break the tool's assumptions to lost_and_found."""
    moved: dict[str, int] = {}
    for table, checks in VALIDATION.items():
        if not store.has_table(table):
            continue
        have = set(store.columns(table))
        preds = [(c, p.format(c=quote(c))) for c, p in checks if c in have]
        if not preds:
            continue
        where = " OR ".join(f"({p})" for _c, p in preds)
        cols = store.columns(table)
        quoted = ", ".join(quote(c) for c in cols)
        rows = store.conn.execute(
            f"SELECT rowid, {quoted} FROM {quote(table)} WHERE {where}"
        ).fetchall()
        if not rows:
            continue
        for row in rows:
            bad = [c for c, p in preds if _breaks(store, table, row[0], p)]
            lost.add(
                table,
                INVALID,
                row[0],
                None,
                dict(zip(cols, row[1:], strict=True)),
                "bad " + ", ".join(bad),
            )
        lost.flush()
        delete = f"DELETE FROM {quote(table)} WHERE rowid = ?"
        store.write(functools.partial(_delete_rows, delete, [(r[0],) for r in rows]))
        moved[table] = len(rows)
    return moved


def _delete_rows(delete: str, ids: list[tuple[int]], conn: sqlite3.Connection) -> None:
    """Delete the rows of one table by rowid."""
    conn.executemany(delete, ids)


def _breaks(store: Store, table: str, rowid: int, pred: str) -> bool:
    """Tell whether one row matches a validation predicate."""
    row = store.conn.execute(
        f"SELECT 1 FROM {quote(table)} WHERE rowid = ? AND ({pred})", (rowid,)
    ).fetchone()
    return row is not None
