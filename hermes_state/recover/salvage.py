"""Telling what a record on a damaged store's page is: the shape of each table's rows, the
table a leaf page belongs to, and the schema rows that survive on sqlite_master's leaves.

SQLite's cursor cannot reach every row of a damaged file — rows a damaged b-tree hides, leaf
pages cut off from their table, tables whose schema rows are gone. ``pages`` reads those records
off the raw pages; this module tells them apart by their *shape*: how many fields a record has
and which types they hold, against the columns of every table the store has or should have.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from hermes_state.recover import pages
from hermes_state.store.sql import quote

SCHEMA_TYPES = ("table", "index", "view", "trigger")
VOTERS = 8  # records of a page that vote on its table (one page holds one table's rows)
NUMERIC_AFFINITY = ("INTEGER", "REAL", "NUMERIC")

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
        info = mem.execute(f"PRAGMA table_info({quote(table)})").fetchall()
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
