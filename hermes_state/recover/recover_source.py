"""The private work copy a recovery reads, never the live store: the source's files checked and
copied, the copy opened (its header repaired from the real page layout first), and what can be
read of it without its tables' rows — the schema (from sqlite_master, or off the leaf pages
that survive), the row counts, the raw pages, and whether its WAL belongs to it."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sqlite3
import stat
from pathlib import Path

from hermes_state.recover import page_header, pages, salvage
from hermes_state.recover.recover_report import (
    RecoveryError,
    RecoveryReport,
)
from hermes_state.recover.salvage import ColumnInfo, SchemaEntry
from hermes_state.store import cjk, fts
from hermes_state.store.connection import is_open_in_process
from hermes_state.store.errors import StoreNotFoundError
from hermes_state.store.snapshot import sqlite_snapshot
from hermes_state.store.sql import (
    SIDECAR_SUFFIXES,
    SQLITE_MAGIC,
    STORE_FILE_SUFFIXES,
    companion,
    file_uri,
    quote,
)

# state_meta keys that say how far an index rebuild got: the target's indexes are rebuilt whole.
DERIVED_META_KEYS = frozenset(
    {
        fts.HIGH_WATER_KEY,
        fts.PROGRESS_KEY,
        fts.STALE_KEY,  # the target's indexes are rebuilt and their triggers restored
        "fts_cjk_rebuild_high_water",
        "fts_cjk_rebuild_progress",
        cjk.HIGH_WATER_KEY,
        cjk.LEGACY_HIGH_WATER_KEY,
    }
)


def check_paths(source: Path, target: Path, report_path: Path) -> None:
    """Refuse a missing source, a target that exists or is the source, an old report."""
    if not source.exists():
        raise StoreNotFoundError(f"No store at {source}")
    if not stat.S_ISREG(os.stat(source).st_mode):
        raise RecoveryError(f"{source} is not a regular file")
    real_source = source.resolve()
    bundle = {companion(real_source, s) for s in STORE_FILE_SUFFIXES}
    if target.resolve() in bundle:
        raise RecoveryError(
            f"The target {target} is the source store or one of its files",
            hint="Recover into a new file, e.g. --to ~/state.recovered.db",
        )
    for member in (target, *(companion(target, s) for s in SIDECAR_SUFFIXES)):
        if os.path.lexists(member):
            raise RecoveryError(
                f"{member} already exists; refusing to overwrite it",
                hint="Pick a target path that does not exist yet.",
            )
    if os.path.lexists(report_path):
        raise RecoveryError(
            f"The report {report_path} already exists; refusing to overwrite it",
            hint="Move the old report away or pass another --report path.",
        )
    if is_open_in_process(source):
        # Copying means open()/close() on the files, which would drop this process's locks.
        raise RecoveryError(
            f"This process has {source} open; close it before recovering from it",
        )


def _fingerprint(source: Path) -> dict[str, tuple[int, int]]:
    """Return (size, mtime_ns) of the main file and each sidecar that exists."""
    out = {}
    for suffix in STORE_FILE_SUFFIXES:
        member = companion(source, suffix)
        try:
            st = os.stat(member)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            out[member.name] = (st.st_size, st.st_mtime_ns)
    return out


class SourceChanging(RecoveryError):
    """The store's files changed while they were being copied (a process writes them)."""


COPY_RETRIES = 3
SNAPSHOT_NOTE = (
    "the store was being written while its files were copied: recovered from the snapshot "
    "SQLite took of it (its online backup API, one read transaction), not from its files"
)


def take_source(source: Path, work: Path, report: RecoveryReport) -> Path:
    """Put the copy a recovery reads into work: the store's files, or a snapshot of it.

    The files themselves are copied when they hold still (a copy sees what SQLite cannot read
    of a damaged file). When a process keeps writing them (a running gateway), SQLite's own
    consistent snapshot is taken instead and the report says so; if SQLite cannot read one
    (damage), the files are tried again a few times before giving up.
    """
    try:
        return copy_bundle(source, work, report)
    except SourceChanging:
        _clear(work, source.name)
    snap = work / source.name
    try:
        sqlite_snapshot(source, snap)
    except sqlite3.Error as exc:
        _clear(work, source.name)
        for _attempt in range(COPY_RETRIES):
            try:
                return copy_bundle(source, work, report)
            except SourceChanging:
                _clear(work, source.name)
        raise RecoveryError(
            f"{source.name} kept changing while it was being copied (a process is writing "
            f"it), and SQLite could not read a snapshot of it either ({exc})",
            hint="Stop the gateway or other writers and retry.",
        ) from exc
    report.source_copy = "snapshot"
    report.source_unchanged = True
    report.source_bundle = {source.name: os.stat(snap).st_size}
    report.notes.append(SNAPSHOT_NOTE)
    return snap


def _clear(work: Path, name: str) -> None:
    """Remove a partial copy of the store's files from work."""
    for suffix in STORE_FILE_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(work / (name + suffix))


def copy_bundle(source: Path, work: Path, report: RecoveryReport) -> Path:
    """Copy the main file and its sidecars into work; refuse if they changed meanwhile."""
    before = _fingerprint(source)
    vanished = False
    for name in before:
        try:
            shutil.copyfile(source.parent / name, work / name)
        except FileNotFoundError:
            vanished = True  # a sidecar removed by its last connection closing
            break
        os.chmod(work / name, 0o600)  # our scratch copy, not the live store: private
        report.source_bundle[name] = os.stat(work / name).st_size
    after = _fingerprint(source)
    sizes = [report.source_bundle.get(n) == before[n][0] for n in before]
    if vanished or after != before or not all(sizes):
        report.source_unchanged = False
        report.source_bundle.clear()
        raise SourceChanging(
            f"{source.name} changed while it was being copied (a process is writing it)",
            hint="Stop the gateway or other writers and retry.",
        )
    report.source_fingerprint = {k: list(v) for k, v in before.items()}
    return work / source.name


def open_copy(path: Path, report: RecoveryReport) -> sqlite3.Connection | None:
    """Open the work copy for reading, repairing what stands in the way of reading it."""
    report.pages_missing = _pages_missing(path)
    repair = page_header.repair_header(path, wal=companion(path, "-wal").exists())
    report.header_fixes = list(repair.fixes)
    report.header_rewritten = bool(repair.fixes)
    conn = _connect_copy(path, report)
    if conn is None and repair.fixes:
        # The repair was judged on the pages; if SQLite still cannot read the copy, say so and
        # try the header as it was (the raw page reader still reads the repaired guess).
        report.notes.append("the repaired header did not make the copy readable")
    elif repair.fixes:
        report.notes.append("the database header was repaired: " + "; ".join(repair.fixes))
    if conn is None:
        report.source_readable = False
    return conn


def _pages_missing(path: Path) -> int:
    """Return how many pages the copy's header counts past the end of its file (cut short)."""
    with open(path, "rb") as f:  # the private copy
        header = f.read(100)
    if len(header) < 100 or header[:16] != SQLITE_MAGIC:
        return 0
    if header[92:96] != header[24:28]:
        return 0  # SQLite ignores the size field unless it was written with this change counter
    raw = int.from_bytes(header[16:18], "big")
    size = 65536 if raw == 1 else raw
    if size < 512 or size & (size - 1):
        return 0
    stated = int.from_bytes(header[28:32], "big")
    return max(0, stated - os.stat(path).st_size // size)


def _connect_copy(path: Path, report: RecoveryReport) -> sqlite3.Connection | None:
    """Connect to the work copy and read its schema (writable_schema if needed)."""
    with open(path, "rb") as f:  # the private copy
        rollback = f.read(20)[18:19] == b"\x01"  # the header's file format: not a WAL store
    # As a URI: VACUUM INTO on this connection then takes a target of any name (file_uri).
    conn = sqlite3.connect(file_uri(path), uri=True, isolation_level=None)
    # Damaged text must not hide the rest of its row: undecodable bytes become U+FFFD.
    conn.text_factory = functools.partial(bytes.decode, encoding="utf-8", errors="replace")
    try:
        # Fold the copied WAL into the copy's main file so the page-level salvage reads the
        # committed content (this writes only the private copy).
        with contextlib.suppress(sqlite3.DatabaseError):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        if rollback:
            # A -wal beside a rollback-journal file puts this connection in WAL mode, but a
            # later one may open the file in rollback mode once the WAL is empty: that one then
            # waits for an exclusive lock this WAL connection's shared lock never lets go of
            # (the search-index check hung so). Its frames are folded in: go back to rollback.
            with contextlib.suppress(sqlite3.DatabaseError):
                conn.execute("PRAGMA journal_mode=DELETE").fetchall()
        conn.execute("PRAGMA query_only=ON")
        try:
            conn.execute("SELECT name FROM sqlite_master").fetchall()
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc).lower():
                raise
            report.notes.append(f"schema unreadable ({exc}); read again with writable_schema=ON")
            conn.execute("PRAGMA writable_schema=ON")
            report.writable_schema = True
            conn.execute("SELECT name FROM sqlite_master").fetchall()
        return conn
    except sqlite3.DatabaseError as exc:
        conn.close()
        report.notes.append(f"the source copy cannot be read as an SQLite database: {exc}")
        return None


def source_tables(conn: sqlite3.Connection) -> dict[str, str]:
    """Return {table name: create sql} of the source, best effort."""
    try:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    except sqlite3.DatabaseError:
        return {}
    return {name: sql or "" for name, sql in rows}


# Tables a virtual table keeps its data in (FTS5, R-tree): created again with the table itself.
SHADOW_SUFFIXES = ("_data", "_idx", "_content", "_docsize", "_config", "_node", "_parent", "_rowid")


def shadow_of(name: str, virtual: set[str] | list[str]) -> bool:
    """Tell whether a table is a shadow table of one of the virtual tables."""
    return any(name == v + suffix for v in virtual for suffix in SHADOW_SUFFIXES)


def is_derived(name: str, tables: dict[str, str]) -> bool:
    """Tell whether a table is an FTS index, an FTS shadow table or SQLite's own."""
    if name.startswith("sqlite_") or name == "schema_version":
        return True
    if name in (cjk.PENDING_TABLE, *cjk.LEGACY_TABLES):
        return True  # the CJK index's queue: rebuilt, not copied
    virtual = [n for n, sql in tables.items() if sql.upper().startswith("CREATE VIRTUAL TABLE")]
    return name in virtual or shadow_of(name, virtual)


def count_rows(conn: sqlite3.Connection, table: str) -> int | None:
    """Count a source table's rows (None when even that cannot be read)."""
    # state_meta's rebuild markers are not copied, so they are not counted as source rows either.
    where = ""
    params: tuple[str, ...] = ()
    if table == "state_meta":
        where = f" WHERE key NOT IN ({', '.join('?' * len(DERIVED_META_KEYS))})"
        params = tuple(sorted(DERIVED_META_KEYS))
    try:
        return int(
            conn.execute(f"SELECT count(*) FROM {quote(table)}{where}", params).fetchone()[0]
        )
    except sqlite3.DatabaseError:
        return None


def read_schema(src: sqlite3.Connection) -> list[SchemaEntry] | None:
    """Return the source's schema rows in their order, None when unreadable."""
    try:
        rows = src.execute(
            "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master ORDER BY rowid"
        ).fetchall()
    except sqlite3.DatabaseError:
        return None
    # A damaged schema row may hold anything in rootpage: a non-integer names no page.
    return [
        SchemaEntry(str(t), str(n), str(tb), r if isinstance(r, int) else 0, sql or "")
        for t, n, tb, r, sql in rows
    ]


def master_entries(src: sqlite3.Connection | None) -> dict[str, SchemaEntry]:
    """Return the source's schema rows by name, best effort."""
    rows = read_schema(src) if src is not None else None
    return {} if rows is None else {e.name: e for e in rows}


def source_info(conn: sqlite3.Connection, table: str) -> list[ColumnInfo]:
    """Return PRAGMA table_info rows of a source table (empty when unreadable)."""
    try:
        return [tuple(r) for r in conn.execute(f"PRAGMA table_info({quote(table)})")]
    except sqlite3.DatabaseError:
        return []


def pragma_int(src: sqlite3.Connection, name: str) -> int | None:
    try:
        row = src.execute(f"PRAGMA {name}").fetchone()
    except sqlite3.DatabaseError:
        return None
    return None if row is None else int(row[0])


def schema_from_pages(copy: Path) -> list[SchemaEntry] | None:
    """Return schema rows read off sqlite_master's surviving leaf pages (page 1 unreadable)."""
    fd = os.open(copy, os.O_RDONLY | os.O_CLOEXEC)  # the private copy
    try:
        raw = pages.Pages(fd, os.fstat(fd).st_size)
        found = salvage.schema_records(raw, raw.table_leaves(set()))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    order = {"table": 0, "index": 1, "view": 2, "trigger": 3}
    return sorted(found.values(), key=lambda entry: (order[entry.kind], entry.rootpage))


def raw_pages(copy: Path, report: RecoveryReport) -> pages.Pages | None:
    """Open the work copy's raw pages (the caller closes .fd); None when they cannot be read."""
    fd = os.open(copy, os.O_RDONLY | os.O_CLOEXEC)  # the private copy: no live locks to lose
    try:
        return pages.Pages(fd, os.fstat(fd).st_size)
    except (OSError, ValueError) as exc:
        os.close(fd)
        report.notes.append(f"page-level salvage skipped: {exc}")
        return None


def wal_doubts(copy: Path) -> list[str]:
    """Return reasons to doubt that the copied WAL belongs to the copied main file."""
    wal = companion(copy, "-wal")
    doubts: list[str] = []
    with open(wal, "rb") as f:  # the private copy
        head = f.read(32)
    with open(copy, "rb") as f:
        main = f.read(100)
    if len(head) < 32 or int.from_bytes(head[0:4], "big") not in (0x377F0682, 0x377F0683):
        return ["its header is not a WAL header (SQLite ignores it)"]
    wal_page = int.from_bytes(head[8:12], "big")
    raw = int.from_bytes(main[16:18], "big")
    if main[:16] == SQLITE_MAGIC and wal_page != (65536 if raw == 1 else raw):
        doubts.append(f"its page size {wal_page} is not the main file's")
    frames = _wal_frames(wal, head)
    if frames is not None:
        db_pages, counter = frames
        main_pages = copy.stat().st_size // max(512, wal_page)
        main_counter = int.from_bytes(main[24:28], "big")
        newer_wal = counter is not None and counter > main_counter  # e.g. a VACUUM's WAL
        if counter is not None and main_counter > counter:
            doubts.append("stale: the main file was changed after the WAL's last commit")
        elif db_pages and main_pages > db_pages and not newer_wal:
            doubts.append(
                f"stale: the main file has {main_pages} pages, more than the WAL's last "
                f"commit leaves ({db_pages})"
            )
    shm = companion(copy, "-shm")
    if shm.exists() and shm.stat().st_size >= 136:
        with open(shm, "rb") as f:
            index = f.read(48)
        # The wal-index header repeats the salts of the WAL it indexes.
        if int.from_bytes(index[12:16], "little") == 1 and index[40:48] != head[16:24]:
            doubts.append("its salts are not the ones the shared-memory index records")
    return doubts


def _wal_frames(wal: Path, head: bytes) -> tuple[int, int | None] | None:
    """Return (database pages after the WAL's last commit, its page 1 change counter)."""
    page_size = int.from_bytes(head[8:12], "big")
    if page_size < 512 or page_size & (page_size - 1):
        return None
    salts = head[16:24]
    db_pages = 0
    counter: int | None = None
    pending: int | None = None
    with open(wal, "rb") as f:  # the private copy
        f.seek(32)
        while True:
            frame = f.read(24 + page_size)
            if len(frame) < 24 + page_size or frame[8:16] != salts:
                break  # the end of the frames this WAL header vouches for
            page = int.from_bytes(frame[0:4], "big")
            if page == 1:
                pending = int.from_bytes(frame[24 + 24 : 24 + 28], "big")
            commit = int.from_bytes(frame[4:8], "big")
            if commit:
                db_pages = commit
                if pending is not None:
                    counter = pending
    return db_pages, counter
