"""Reading rows out of a damaged store's pages: shapes of records, and rows kept aside.

recover.py copies what SQLite can read. What it cannot — rows a damaged b-tree hides from
SQLite's cursor, leaf pages cut off from their table, tables whose schema rows are gone — is read
here from the raw pages (``pages``) and told apart by the *shape* of each record: how many fields
it has and which types they hold, against the columns of every table the store has or should
have. Rows that fit no table, or that fail the checks the rest of the tool relies on, are not
guessed into a live table: they go to a ``lost_and_found`` table in the target, with the reason.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hermes_state import pages, schema
from hermes_state.connection import Store

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
SCHEMA_TYPES = ("table", "index", "view", "trigger")
VOTERS = 8  # records of a page that vote on its table (one page holds one table's rows)
NUMERIC_AFFINITY = ("INTEGER", "REAL", "NUMERIC")

# Reasons a row is kept aside; the first group means a row of a known table was not copied.
REJECTED = "rejected by the target's constraints"
INVALID = "invalid values"
MISFIT = "found in the table's b-tree but shaped like another table's row"
BAD_ROWID = "rowid damaged (outside the range its page covers)"
DUPLICATE = "a second row with the same rowid"
UNATTACHED = "on a page no b-tree reaches (deleted, or cut off from its table)"
UNATTRIBUTED = "fits no table of the store"

# One row of PRAGMA table_info: (cid, name, declared type, notnull, default SQL, pk position).
ColumnInfo = tuple[int, str, str, int, str | None, int]


class SchemaEntry(NamedTuple):
    """One row of sqlite_master (kind is its ``type`` column)."""

    kind: str
    name: str
    tbl_name: str
    rootpage: int
    sql: str


def affinity(declared: str | None) -> str:
    """Return SQLite's column affinity for a declared type."""
    t = (declared or "").upper()
    if "INT" in t:
        return "INTEGER"
    if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if not t or "BLOB" in t:
        return "BLOB"
    if any(k in t for k in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


@dataclass
class Shape:
    """The record shape of one table: what a row of it looks like on a leaf page."""

    table: str
    columns: list[str]
    affinities: list[str]
    required: list[int]  # NOT NULL columns without a default (present and non-NULL in a row)
    alias: int | None  # INTEGER PRIMARY KEY: stored as NULL, the value is the rowid
    defaults: list[Any]
    derived: bool = False  # an index's shadow table or the runtime ledger: never copied

    @classmethod
    def from_info(cls, table: str, info: Sequence[ColumnInfo], *, derived: bool = False) -> Shape:
        """Build a shape from PRAGMA table_info rows."""
        cols = [str(r[1]) for r in info]
        pks = [r for r in info if r[5]]
        alias = (
            cols.index(pks[0][1]) if len(pks) == 1 and str(pks[0][2]).upper() == "INTEGER" else None
        )
        # Present and non-NULL in every row: NOT NULL columns without a default, and the primary
        # key (SQLite lets a NULL into a non-integer key, but no writer of a store does that).
        required = [
            i for i, r in enumerate(info) if ((r[3] and r[4] is None) or r[5]) and i != alias
        ]
        return cls(
            table,
            cols,
            [affinity(r[2]) for r in info],
            required,
            alias,
            _defaults(info),
            derived,
        )

    def fits(self, fields: Sequence[Any]) -> bool:
        """Tell whether a record could be a row of this table."""
        n = len(fields)
        if n > len(self.columns) or n == 0:
            return False
        if any(i >= n or fields[i] is None for i in self.required):
            return False
        if self.alias is not None and self.alias < n and fields[self.alias] is not None:
            return False
        for value, aff in zip(fields, self.affinities, strict=False):
            if value is None:
                continue
            if aff == "TEXT" and isinstance(value, int | float | bytes):
                return False  # a TEXT column turns numbers into text; writers bind text
            if aff in NUMERIC_AFFINITY and isinstance(value, str):
                return False  # text that reads as a number would have been stored as one
        return True

    def row(self, rowid: int, fields: Sequence[Any]) -> dict[str, Any]:
        """Return {column: value} of a record (short records take the columns' defaults)."""
        full = list(fields) + self.defaults[len(fields) : len(self.columns)]
        if self.alias is not None:
            full[self.alias] = rowid
        return dict(zip(self.columns, full, strict=True))


def _defaults(info: Sequence[ColumnInfo]) -> list[Any]:
    """Evaluate each column's declared default (for records written before a column existed)."""
    mem = sqlite3.connect(":memory:")
    try:
        out = []
        for row in info:
            dflt = row[4]
            try:
                out.append(None if dflt is None else mem.execute(f"SELECT {dflt}").fetchone()[0])
            except sqlite3.Error:
                out.append(None)
        return out
    finally:
        mem.close()


def shape_from_sql(table: str, sql: str, *, derived: bool = False) -> Shape | None:
    """Build a table's shape from its CREATE TABLE statement (None when it does not parse)."""
    mem = sqlite3.connect(":memory:")
    try:
        mem.execute(sql)
        info = mem.execute(f"PRAGMA table_info({schema.quote(table)})").fetchall()
    except sqlite3.Error:
        return None
    finally:
        mem.close()
    return Shape.from_info(table, info, derived=derived) if info else None


def derived_shapes() -> list[Shape]:
    """Return shapes of pages that are no table's rows: FTS5 shadow tables, sqlite_master."""
    data: list[ColumnInfo] = [(0, "id", "INTEGER", 0, None, 1), (1, "block", "BLOB", 0, None, 0)]
    master: list[ColumnInfo] = [
        (0, "type", "TEXT", 1, None, 0),
        (1, "name", "TEXT", 1, None, 0),
        (2, "tbl_name", "TEXT", 1, None, 0),
        (3, "rootpage", "INTEGER", 1, None, 0),
        (4, "sql", "TEXT", 0, None, 0),
    ]
    version: list[ColumnInfo] = [(0, "version", "INTEGER", 1, None, 0)]
    sequence: list[ColumnInfo] = [(0, "name", "", 0, None, 0), (1, "seq", "", 0, None, 0)]
    return [
        Shape.from_info("(search index)", data, derived=True),
        Shape.from_info("sqlite_master", master, derived=True),
        Shape.from_info("schema_version", version, derived=True),
        Shape.from_info("sqlite_sequence", sequence, derived=True),
    ]


def schema_records(raw: pages.Pages, leaves: Iterable[int]) -> dict[str, SchemaEntry]:
    """Find sqlite_master rows on table leaf pages, by name."""
    found: dict[str, SchemaEntry] = {}
    for page in leaves:
        data = raw.read(page)
        if b"CREATE " not in data and b"sqlite_autoindex" not in data:
            continue  # (the cheap test: a schema page holds CREATE statements)
        for cell in raw.leaf_cells(page):
            fields = cell.fields
            if fields is None or len(fields) != 5 or fields[0] not in SCHEMA_TYPES:
                continue
            kind, name, tbl, root, sql = fields
            if not isinstance(name, str) or not isinstance(tbl, str):
                continue
            if not isinstance(root, int) or (sql is not None and not isinstance(sql, str)):
                continue
            found.setdefault(name, SchemaEntry(kind, name, tbl, root, sql or ""))
    return found


def choose(
    shapes: Sequence[Shape],
    cells: Sequence[pages.LeafCell],
    tables: frozenset[str] = frozenset(),
) -> Shape | None:
    """Return the one shape most records of a page fit (None when no shape or a tie); tables
    (the store's table names) tell sqlite_sequence's rows from look-alikes."""
    votes: Counter[int] = Counter()
    sample = [c.fields for c in cells if c.fields is not None][:VOTERS]
    for fields in sample:
        for k, shape in enumerate(shapes):
            if shape.fits(fields):
                votes[k] += 1
    if not votes:
        return None
    top = max(votes.values())
    tied = [k for k, n in votes.items() if n == top]
    if len(tied) > 1:
        # Equal votes: prefer the tables whose column count matches the records exactly.
        widths = Counter(len(f) for f in sample)
        width = widths.most_common(1)[0][0]
        tied = [k for k in tied if len(shapes[k].columns) == width] or tied
        sequence = [k for k in tied if shapes[k].table == "sqlite_sequence"]
        names = [f[0] for f in sample if f]
        if sequence and names and all(n in tables for n in names):
            tied = sequence[:1]
    if len(tied) == 1 or all(shapes[k].derived for k in tied):
        return shapes[tied[0]]  # (all derived: an index's or SQLite's own page, not copied)
    return None


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
        preds = [(c, p.format(c=schema.quote(c))) for c, p in checks if c in have]
        if not preds:
            continue
        where = " OR ".join(f"({p})" for _c, p in preds)
        cols = store.columns(table)
        quoted = ", ".join(schema.quote(c) for c in cols)
        rows = store.conn.execute(
            f"SELECT rowid, {quoted} FROM {schema.quote(table)} WHERE {where}"
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
        delete = f"DELETE FROM {schema.quote(table)} WHERE rowid = ?"
        store.write(functools.partial(_delete_rows, delete, [(r[0],) for r in rows]))
        moved[table] = len(rows)
    return moved


def _delete_rows(delete: str, ids: list[tuple[int]], conn: sqlite3.Connection) -> None:
    """Delete the rows of one table by rowid."""
    conn.executemany(delete, ids)


def _breaks(store: Store, table: str, rowid: int, pred: str) -> bool:
    """Tell whether one row matches a validation predicate."""
    row = store.conn.execute(
        f"SELECT 1 FROM {schema.quote(table)} WHERE rowid = ? AND ({pred})", (rowid,)
    ).fetchone()
    return row is not None
