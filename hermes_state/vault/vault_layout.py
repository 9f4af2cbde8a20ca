"""Vault stores in the live store's layout: created aside, and kept in step with its columns."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Any

from hermes_state.recover.recover_source import DERIVED_META_KEYS, shadow_of
from hermes_state.store import cjk, meta
from hermes_state.store.connection import Store, create_bare_store
from hermes_state.store.diagnosis import is_litestream_table
from hermes_state.store.home import ensure_private_dir
from hermes_state.store.sql import marks, quote
from hermes_state.vault.vault import COPIED_TABLES, PROMPTS_TABLE, _step

# state_meta keys that describe one file, not the layout: never carried into a vault store.
_FILE_META_KEYS = frozenset(
    {
        *DERIVED_META_KEYS,
        "fts_cjk_stale",
        "fts_rebuild_deferral",
        "store_instance_id",
        "store_created_at_utc",
        "last_auto_prune",
        "last_vacuum",
        "last_auto_archive",
    }
)
_FILE_META_PREFIXES = ("goal:", "loop:", "heartbeat:")


def _shadow_tables(conn: sqlite3.Connection, schema: str = "main") -> set[str]:
    """Return the names of the FTS shadow tables (made by their virtual tables themselves)."""
    try:
        return {r[1] for r in conn.execute(f"PRAGMA {schema}.table_list") if str(r[2]) == "shadow"}
    except sqlite3.DatabaseError:  # SQLite before 3.37: by name
        rows = conn.execute(f"SELECT name, sql FROM {schema}.sqlite_master WHERE type='table'")
        tables = {n: s or "" for n, s in rows}
        virtual = {n for n, s in tables.items() if s.upper().startswith("CREATE VIRTUAL")}
        return {n for n in tables if shadow_of(n, virtual)}


def _schema_rows(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """Return (type, name, sql) of the store's own objects, in creation order."""
    shadow = _shadow_tables(conn)
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY rowid").fetchall()
    out = [
        (str(t), str(n), str(s))
        for t, n, s in rows
        if s
        and not str(n).startswith("sqlite_")
        and n not in shadow
        and not is_litestream_table(str(n))  # Litestream's, in a replicated store
    ]
    rank = {"table": 0, "index": 2, "view": 3, "trigger": 4}

    def order(row: tuple[str, str, str]) -> int:
        virtual = row[0] == "table" and row[2].upper().startswith("CREATE VIRTUAL")
        return 1 if virtual else rank.get(row[0], 5)

    return sorted(out, key=order)  # stable: creation order within each kind


def _carried_meta(conn: sqlite3.Connection) -> list[tuple[str, Any]]:
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'state_meta'").fetchone():
        return []
    return [
        (k, v)
        for k, v in conn.execute("SELECT key, value FROM state_meta")
        if k not in _FILE_META_KEYS and not str(k).startswith(_FILE_META_PREFIXES)
    ]


def create_vault_store(live: Store, path: Path) -> None:
    """Create a vault store in the live store's layout at path (atomically: built aside)."""
    ensure_private_dir(path.parent)
    temp = path.with_name(f".{path.name}.new-{os.getpid()}")
    # Half-made files of killed runs (the vault lock says no other run is making one): never
    # visible as a store, never anyone's live file.
    for leftover in path.parent.glob(f".{path.name}.new-*"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
    with live.snapshot() as conn:
        rows = _schema_rows(conn)
        versions = conn.execute("SELECT * FROM schema_version").fetchall()
        carried = _carried_meta(conn)
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        header = {k: int(conn.execute(f"PRAGMA {k}").fetchone()[0]) for k in ("application_id",)}
    store = create_bare_store(temp, page_size=page_size, journal_mode="delete")
    try:

        def lay_out(conn: sqlite3.Connection) -> None:
            for _kind, _name, sql in rows:
                conn.execute(sql)
            if versions:
                conn.executemany(
                    f"INSERT INTO schema_version VALUES ({marks(len(versions[0]))})",
                    [tuple(r) for r in versions],
                )
            if carried:
                conn.executemany(
                    "INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", carried
                )
            if cjk.is_installed(conn):
                meta.put(conn, cjk.HIGH_WATER_KEY, 0)

        store.write(lay_out)
        for key, value in header.items():
            if value:
                store.conn.execute(f"PRAGMA {key} = {value}")
    finally:
        store.close()
    _step("created")
    os.replace(temp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a crash
    finally:
        os.close(fd)


def _column_def(row: sqlite3.Row | tuple[Any, ...]) -> str | None:
    """Return an ADD COLUMN definition for a PRAGMA table_info row (None: cannot be added)."""
    _cid, name, kind, notnull, default, _pk = tuple(row)[:6]
    text = quote(str(name)) + (f" {kind}" if kind else "")
    if default is not None:
        text += f" DEFAULT {default}"
    if notnull:
        if default is None:
            return None
        text += " NOT NULL"
    return text


def _align_columns(vault: Store, live: Store) -> None:
    """Give the vault store every column (and copied table) the live store has gained."""

    def fn(conn: sqlite3.Connection) -> None:
        for table in (*COPIED_TABLES, PROMPTS_TABLE):
            live_info = live.conn.execute(f"PRAGMA table_info({quote(table)})").fetchall()
            if not live_info:
                continue
            have = {r[1] for r in conn.execute(f"PRAGMA table_info({quote(table)})")}
            if not have:
                row = live.conn.execute(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
                ).fetchone()
                if row is not None and row[0]:
                    conn.execute(row[0])
                continue
            for info in live_info:
                if info[1] not in have and (ddl := _column_def(info)) is not None:
                    conn.execute(f"ALTER TABLE {quote(table)} ADD COLUMN {ddl}")

    vault.write(fn)
    vault.forget_columns()
