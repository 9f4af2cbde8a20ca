"""Rows of a salvaged table checked against the source's own indexes: a row whose indexed
columns disagree with what two or more of its table's indexes hold for its rowid was not read
intact (a flipped bit in the row, or the end of a long value read from a damaged page), and is
kept aside in lost_and_found instead of passed off as recovered.

One index disagreeing is not enough: the index entry may be the damaged copy, and the row
intact. Two indexes are separate b-trees on separate pages, so when both say the row held
other values, the row is what changed.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from hermes_state.recover import lost_and_found, pages
from hermes_state.recover.recover_target import TableWriter
from hermes_state.recover.salvage import SchemaEntry
from hermes_state.store.connection import Store
from hermes_state.store.sql import quote

MIN_VOTES = 2  # indexes that must disagree with a row before it is set aside


def plain_indexes(
    src: sqlite3.Connection, master: dict[str, SchemaEntry], table: str
) -> dict[str, tuple[int, list[str]]]:
    """Return the source table's indexes on plain columns (no expressions, not partial), each
    with its root page and its columns in key order."""
    out: dict[str, tuple[int, list[str]]] = {}
    try:
        listed = src.execute(f"PRAGMA index_list({quote(table)})").fetchall()
    except sqlite3.DatabaseError:
        return out
    for row in listed:
        name = str(row[1])
        rec = master.get(name)
        if rec is None or rec.rootpage <= 1 or row[4]:
            # A partial index holds only some rows, and its scan needs its WHERE clause: the
            # indexes every row is in are enough to vote.
            continue
        try:
            cols = [r[2] for r in src.execute(f"PRAGMA index_info({quote(name)})")]
        except sqlite3.DatabaseError:
            continue
        if cols and all(c is not None for c in cols):
            out[name] = (rec.rootpage, [str(c) for c in cols])
    return out


def rowid_alias(src: sqlite3.Connection, table: str) -> str | None:
    """Return the source table's INTEGER PRIMARY KEY column (its rowid), if it has one."""
    try:
        info = src.execute(f"PRAGMA table_info({quote(table)})").fetchall()
    except sqlite3.DatabaseError:
        return None
    keys = [r for r in info if r[5]]
    if len(keys) == 1 and str(keys[0][2]).upper() == "INTEGER":
        return str(keys[0][1])
    return None


def disagreements(
    src: sqlite3.Connection,
    raw: pages.Pages,
    master: dict[str, SchemaEntry],
    store: Store,
    writer: TableWriter,
) -> dict[int, list[str]]:
    """Return, per rowid of the salvaged table, the source indexes whose entry for it holds
    other values than the salvaged row (only rows at least MIN_VOTES indexes disagree with).

    An index SQLite cannot read to the end is read off its pages, so a damaged index page costs
    only its own entries; an index entry the row has no match for (a rowid the table lost, an
    entry whose rowid was damaged) is no vote either way.
    """
    table = writer.table
    if rowid_alias(src, table) not in writer.columns:
        return {}  # the target numbers such a table's rows anew: rowids do not match up
    have = set(writer.columns)
    indexes = {
        n: (root, cols)
        for n, (root, cols) in plain_indexes(src, master, table).items()
        if set(cols) <= have
    }
    if len(indexes) < MIN_VOTES:
        return {}
    wanted = sorted({c for _root, cols in indexes.values() for c in cols})
    quoted = ", ".join(quote(c) for c in wanted)
    rows: dict[int, tuple[Any, ...]] = {
        r[0]: r[1:] for r in store.conn.execute(f"SELECT rowid, {quoted} FROM {quote(table)}")
    }
    votes: dict[int, list[str]] = {}
    for name, (root, cols) in indexes.items():
        at = [wanted.index(c) for c in cols]
        width = len(cols)
        for fields in _entries(src, raw, table, name, root, cols):
            if len(fields) != width + 1 or not isinstance(fields[-1], int):
                continue
            row = rows.get(fields[-1])
            if row is None:
                continue
            # Tuple equality is SQLite's for these values: numbers by value (a real with no
            # fraction may be stored as an integer), text and blobs never equal to each other.
            if tuple(row[i] for i in at) != tuple(fields[:width]):
                votes.setdefault(fields[-1], []).append(name)
    return {r: names for r, names in votes.items() if len(set(names)) >= MIN_VOTES}


def _entries(
    src: sqlite3.Connection, raw: pages.Pages, table: str, name: str, root: int, cols: list[str]
) -> list[list[Any]]:
    """Return an index's entries (its columns, then the rowid): read through SQLite (a covering
    scan, fast), or off its pages when SQLite cannot read it to the end."""
    quoted = ", ".join(quote(c) for c in cols)
    try:
        return [
            list(r)
            for r in src.execute(
                f"SELECT {quoted}, rowid FROM {quote(table)} INDEXED BY {quote(name)}"
            )
        ]
    except sqlite3.DatabaseError:
        return list(raw.index_entries(root))  # a damaged page costs only its own entries


def set_aside_disagreeing(
    src: sqlite3.Connection,
    raw: pages.Pages,
    master: dict[str, SchemaEntry],
    store: Store,
    writer: TableWriter,
) -> int:
    """Move the salvaged rows two or more of the source's indexes disagree with into
    lost_and_found; return how many were moved."""
    table = writer.table
    try:
        found = disagreements(src, raw, master, store, writer)
    except (sqlite3.DatabaseError, OSError):
        return 0
    if not found:
        return 0
    quoted = ", ".join(quote(c) for c in writer.columns)
    select = f"SELECT rowid, {quoted} FROM {quote(table)} WHERE rowid = ?"
    moved: list[int] = []
    for rowid, names in sorted(found.items()):
        row = store.conn.execute(select, (rowid,)).fetchone()
        if row is None:
            continue
        writer.lost.add(
            table,
            lost_and_found.DAMAGED_VALUE,
            rowid,
            None,
            dict(zip(writer.columns, row[1:], strict=True)),
            f"its columns disagree with the table's indexes {', '.join(names)}",
        )
        moved.append(rowid)
    writer.lost.flush()

    def delete(conn: sqlite3.Connection) -> None:
        conn.executemany(f"DELETE FROM {quote(table)} WHERE rowid = ?", [(r,) for r in moved])

    store.write(delete)
    result = writer.result
    result.copied -= len(moved)
    result.damaged_values += len(moved)
    result.to_lost_and_found += len(moved)
    writer.copied_rowids.difference_update(moved)
    writer.diverted.update(moved)
    return len(moved)
