"""The fast path for a healthy copy: SQLite's quick_check passes, so the copy is written into the
target whole with VACUUM INTO (minus the runtime ledger) while FTS5 checks its search indexes on
the other core, instead of being read row by row."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from hermes_state.recover import pages
from hermes_state.recover.recover_report import (
    Progress,
    RecoveryReport,
    TableResult,
)
from hermes_state.recover.recover_source import (
    count_rows,
    is_derived,
    source_tables,
)
from hermes_state.recover.recover_target import (
    FIRST_TABLES,
    remove_target,
)
from hermes_state.recover.recover_verify import IndexCheck
from hermes_state.store import fts, schema
from hermes_state.store.connection import Store, create_bare_store
from hermes_state.store.diagnosis import is_litestream_table
from hermes_state.store.sql import file_uri, quote

# Keys an index rebuild in progress leaves: a source that has one is not copied whole.
REBUILD_META_KEYS = frozenset(
    {
        fts.HIGH_WATER_KEY,
        fts.PROGRESS_KEY,
        fts.STALE_KEY,
        "fts_cjk_rebuild_high_water",
        "fts_cjk_rebuild_progress",
    }
)


def healthy(src: sqlite3.Connection, report: RecoveryReport) -> bool:
    """Tell whether the copy may be copied whole: intact header and schema, no index rebuild in
    progress (its b-trees are checked by copy_healthy before the copy)."""
    if report.writable_schema:
        return False  # (a repaired header is fine: the b-trees are checked during the copy)
    try:
        tables = source_tables(src)
        if not {"sessions", "messages", "schema_version"} <= set(tables):
            return False
        if "state_meta" in tables:
            marks = ", ".join("?" * len(REBUILD_META_KEYS))
            if src.execute(
                f"SELECT 1 FROM state_meta WHERE key IN ({marks}) LIMIT 1",
                tuple(sorted(REBUILD_META_KEYS)),
            ).fetchone():
                return False
    except sqlite3.DatabaseError:
        return False
    return True


def _quick_check(copy: Path) -> bool:
    """Tell whether SQLite's quick_check passes on the copy (every page read, every b-tree's
    order checked): the condition for copying it whole."""
    conn = sqlite3.connect(f"{copy.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("PRAGMA quick_check")] == ["ok"]
    except sqlite3.DatabaseError:
        return False
    finally:
        conn.close()


def zeroed_pages(copy: Path) -> list[int]:
    """Return the pages of the copy that are all zeros but not free.

    After quick_check passes every page is in use — a b-tree's, an overflow chain's or the
    freelist's — and a zeroed b-tree page fails it; a zeroed page off the freelist is then the
    last page of an overflow chain, which SQLite reads as the end of a value without complaint.
    """
    fd = os.open(copy, os.O_RDONLY | os.O_CLOEXEC)  # the private work copy
    try:
        raw = pages.Pages(fd, os.fstat(fd).st_size)
        size = raw.page_size
        zero = bytes(size)
        found: list[int] = []
        step = max(1, (1 << 22) // size)  # read 4 MiB at a time
        for first in range(1, raw.count + 1, step):
            chunk = os.pread(fd, step * size, (first - 1) * size)
            for i in range(len(chunk) // size):
                if chunk[i * size : (i + 1) * size] == zero:
                    found.append(first + i)
        if not found:
            return []
        free = raw.freelist() | {raw.lock_page}
        return [n for n in found if n not in free and n != 1]
    except (OSError, ValueError):
        return []
    finally:
        os.close(fd)


def copy_healthy(
    copy: Path,
    src: sqlite3.Connection,
    target: Path,
    report: RecoveryReport,
    progress: Progress | None,
) -> tuple[Store, IndexCheck] | None:
    """Copy a healthy source into the target with VACUUM INTO, minus the runtime ledger, with
    the search indexes' checks running meanwhile; None (and no target) when the copy's b-trees
    turn out damaged."""
    try:
        mode = str(src.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    except sqlite3.DatabaseError:
        mode = "delete"
    # The largest index is checked on the copy from the start, on the other core; the others
    # on the target once it is written (FTS5 checks are write statements: one per file at once).
    largest = {fts.TRIGRAM_TABLE} & set(fts.fts5_tables(src))
    check = IndexCheck(copy, largest or None)
    if not _quick_check(copy):  # a damaged copy is salvaged instead of copied whole
        check.cancel()
        return None
    zeroed = zeroed_pages(copy)
    if zeroed:
        check.cancel()
        shown = ", ".join(str(n) for n in zeroed[:5]) + (" …" if len(zeroed) > 5 else "")
        report.notes.append(
            f"{len(zeroed)} pages in use are zeroed ({shown}), which quick_check does not see "
            "at the end of a long value's overflow chain: the source was read row by row"
        )
        return None
    store = create_bare_store(target, journal_mode="delete")  # empty file: VACUUM INTO fills it
    try:
        try:
            src.execute("PRAGMA query_only=OFF")  # VACUUM INTO writes only the new file
            src.execute("VACUUM INTO ?", (file_uri(target),))
            src.execute("PRAGMA query_only=ON")
        except sqlite3.DatabaseError:
            check.cancel()  # damage quick_check does not see: salvage instead
            store.close()
            remove_target(target)
            return None
        tables = source_tables(src)
        report.method = "copy"
        report.search_indexes = "copied"
        for name in schema.LEDGER_TABLES:
            report.excluded[name] = count_rows(src, name) if name in tables else None
        litestream = [t for t in tables if is_litestream_table(t)]
        for name in litestream:  # Litestream's bookkeeping of the source: dropped below
            report.excluded[name] = count_rows(src, name)
        for name in (*[t for t in FIRST_TABLES if t in tables], *tables):
            if name in report.tables or name in schema.LEDGER_TABLES or name in litestream:
                continue
            if is_derived(name, tables) and name != "schema_version":
                continue  # schema_version is the source's own row: listed as a salvage lists it
            n = count_rows(src, name)
            report.tables[name] = TableResult(
                name, n, copied=n or 0, status="copied" if n else "empty"
            )
            if progress is not None:
                progress(name, n or 0, n)

        def drop_ledger(conn: sqlite3.Connection) -> None:
            conn.execute("PRAGMA secure_delete=ON")  # excluded rows must not linger in free pages
            for name in schema.LEDGER_TABLES:
                if name in tables:
                    conn.execute(f"DELETE FROM {quote(name)}")
            if "sqlite_sequence" in tables:
                conn.executemany(
                    "DELETE FROM sqlite_sequence WHERE name = ?",
                    [(n,) for n in schema.LEDGER_TABLES],
                )
            for name in litestream:
                conn.execute(f"DROP TABLE {quote(name)}")

        store.write(drop_ledger)
        store.forget_columns()
        if mode == "wal":
            store.conn.execute("PRAGMA journal_mode=WAL")
            store.journal_mode = "wal"
    except BaseException:
        check.cancel()
        store.close()
        remove_target(target)
        raise
    return store, check
