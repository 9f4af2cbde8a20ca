"""Giving the space back: optimize, the reclaim after a delete, and VACUUM with its checks."""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hermes_state.store import fts
from hermes_state.store.connection import Store
from hermes_state.store.errors import DiskFullError, StoreBusyError, StoreCorruptError
from hermes_state.store.patience import retry_locked
from hermes_state.upkeep.store_check import require_intact

# Beside other processes, VACUUM runs only on a store this small: rewriting it holds their
# writes for well under a second.
VACUUM_BESIDE_OTHERS_MAX_BYTES = 32 << 20
# After a delete, the file is rewritten when the deleted messages were this share, or it is this
# small (see reclaim_after_delete); the short index merge otherwise is bounded (a few ms a step).
REWRITE_AFTER_DELETE_SHARE = 0.25
REWRITE_ALWAYS_MAX_BYTES = 32 << 20
MAX_MERGE_STEPS_AFTER_DELETE = 64
MESSAGES_PER_MERGE_STEP = 2_500


@dataclass(frozen=True)
class OptimizeResult:
    """File sizes before and after a space reclaim, and what was done."""

    db_bytes_before: int
    wal_bytes_before: int
    db_bytes_after: int
    wal_bytes_after: int
    fts_optimized: bool
    fts_rebuilt: bool
    vacuumed: bool
    forced: bool
    other_processes: tuple[str, ...] = ()  # who else had the store open (when checked)
    vacuum_skipped: str = ""  # why VACUUM did not run (others had the store open), if it did not
    # After a delete: why the file was not rewritten (the freed pages stay for new rows).
    rewrite_deferred: str = ""
    free_bytes: int = 0  # free pages left inside the database file afterwards
    reindexed: bool = False  # every index was rebuilt from its table (REINDEX)
    path: str = ""
    duration_s: float = 0.0

    @property
    def bytes_before(self) -> int:
        """Database plus WAL size before."""
        return self.db_bytes_before + self.wal_bytes_before

    @property
    def bytes_after(self) -> int:
        """Database plus WAL size after."""
        return self.db_bytes_after + self.wal_bytes_after

    @property
    def reclaimed(self) -> int:
        """Bytes given back to the filesystem (negative if the files grew)."""
        return self.bytes_before - self.bytes_after

    def to_dict(self) -> dict[str, Any]:
        """Return the result as plain JSON-ready data."""
        out = asdict(self)
        out["other_processes"] = list(self.other_processes)
        out.update(
            bytes_before=self.bytes_before, bytes_after=self.bytes_after, reclaimed=self.reclaimed
        )
        out["duration_s"] = round(self.duration_s, 3)
        return out


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _sizes(db_path: Path) -> tuple[int, int]:
    return _size(db_path), _size(Path(str(db_path) + "-wal"))


def other_processes(db_path: Path) -> list[str]:
    """Name every other process holding a lock on, or having open, the store files."""
    from hermes_state.store.lockowners import OFD_OWNER, lock_holders

    report = lock_holders(db_path)
    me = os.getpid()
    names: dict[int, str] = {}
    ofd = False
    for h in report.holders:
        if h.pid is None:
            ofd = True
        elif h.pid != me:
            names.setdefault(h.pid, f"PID {h.pid} ({h.command})")
    for o in report.open_files:
        if o.pid != me:
            names.setdefault(o.pid, f"PID {o.pid} ({o.command})")
    out = [names[p] for p in sorted(names)]
    if ofd:
        out.append(OFD_OWNER)
    return out


def _vacuum(store: Store) -> None:
    """Run VACUUM outside any transaction, retrying while another writer holds the lock."""
    retry_locked(
        store.path,
        lambda: store.conn.execute("VACUUM"),
        store.waiting,
        not_done="; VACUUM was not run",
    )


VACUUM_SPACE_MARGIN_BYTES = 1 << 20


def _sqlite_temp_dir() -> Path:
    """Return the directory SQLite's unix VFS puts VACUUM's temporary copy in."""
    for candidate in (os.environ.get("SQLITE_TMPDIR"), os.environ.get("TMPDIR")):
        if candidate and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return Path(candidate)
    for candidate in ("/var/tmp", "/usr/tmp", "/tmp"):
        if os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return Path(candidate)
    return Path(".")


def _require_vacuum_space(store: Store) -> None:
    """Refuse before anything is written when the disk cannot hold what VACUUM writes.

    VACUUM writes the live pages twice: a temporary copy (in SQLite's temp directory) and then
    over the file, keeping the old pages in the journal (or the WAL) beside the store. Running
    out midway fails the command after the index merge has already rewritten segments, so it is
    cheaper, and leaves the store untouched, to say so first.
    """
    conn = store.conn
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    free_pages = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    live = (pages - free_pages) * page_size
    beside = store.path.parent
    need = {beside: live + VACUUM_SPACE_MARGIN_BYTES}
    in_memory = int(conn.execute("PRAGMA temp_store").fetchone()[0]) == 2
    if not in_memory:
        temp = _sqlite_temp_dir()
        try:
            same = os.stat(temp).st_dev == os.stat(beside).st_dev
        except OSError:
            same = True
        if same:
            need[beside] += live
        else:
            need[temp] = live + VACUUM_SPACE_MARGIN_BYTES
    for where, bytes_needed in need.items():
        try:
            free = shutil.disk_usage(where).free
        except OSError:
            continue
        if free < bytes_needed:
            raise DiskFullError(
                f"Not enough space to VACUUM {store.path.name}: it writes about "
                f"{_size_text(bytes_needed)} in {where} and {_size_text(free)} is free there; "
                "nothing was changed"
            )


def _refuse_if_shared(store: Store, force: bool, what: str) -> list[str]:
    """Raise StoreBusyError when other processes have the store open (unless forced)."""
    others = other_processes(store.path)
    if others and not force:
        raise StoreBusyError(
            f"{store.path.name} is open in other processes: {', '.join(others)}; "
            f"refusing to {what} under them"
        )
    return others


def _catch_up_cjk(store: Store, on_progress: Callable[[int], None] | None = None) -> None:
    """Index every row the CJK index has not seen yet, in bounded transactions (on_progress:
    how many are left, before each)."""
    from hermes_state.store import cjk

    while left := store.write(lambda conn: cjk.status(conn).behind):
        if on_progress is not None:
            on_progress(left)
        store.write(
            lambda conn: cjk.catch_up(
                conn, max_rows=fts.REBUILD_CHUNK, max_pending=fts.REBUILD_CHUNK
            )
        )


def optimize(
    store: Store,
    *,
    vacuum: bool = True,
    force: bool = False,
    rebuild_fts: bool = False,
    reindex: bool = False,
) -> OptimizeResult:
    """Give space back: merge every search index, then VACUUM (and truncate a WAL).

    Works within the store's layout: the agent's indexes are merged (or rebuilt, for
    ``rebuild_fts``) in the shape they have, never replaced. Beside other processes (a live
    gateway: readers and writers through SQLite) it does only what cannot hold up their writes
    for long: the index merge runs in short transactions, and VACUUM, which holds the write
    lock for the whole rewrite of the file, runs only on a store of at most
    ``VACUUM_BESIDE_OTHERS_MAX_BYTES``; otherwise it is skipped and ``vacuum_skipped`` says
    why. ``force`` does the full work anyway. ``reindex`` first rebuilds every index from its
    table (REINDEX) and the search indexes from the messages: what repairs indexes that
    disagree with their tables (`db check` says when). A rebuild refuses with StoreBusyError
    beside other processes unless forced.
    """
    from hermes_state.store import cjk

    started = time.monotonic()
    require_intact(store)
    db_before, wal_before = _sizes(store.path)
    others = other_processes(store.path)
    shared = bool(others) and not force
    rebuild_fts = rebuild_fts or reindex
    if rebuild_fts and shared:
        what = "rebuild its indexes" if reindex else "rebuild its search indexes"
        _refuse_if_shared(store, force, what)
    if reindex:
        _reindex(store)
    if vacuum and not (shared and db_before > VACUUM_BESIDE_OTHERS_MAX_BYTES):
        _require_vacuum_space(store)
    idx = fts.indexes(store.conn)
    if rebuild_fts:
        tables = tuple(i.table for i in (idx.word, idx.trigram) if i and i.flavor != "foreign")
        store.write(lambda conn: fts.rebuild_now(conn, tables))
        if cjk.is_installed(store.conn):
            store.write(cjk.reset)
    elif fts.rebuild_pending(store.conn) and idx.word is not None and idx.word.gated:
        fts.finish_rebuild(store)  # a migration left the indexes to a chunked rebuild
    if cjk.is_installed(store.conn):
        _catch_up_cjk(store)
    # Merging segments drops the tombstones that deleted rows leave in the indexes.
    if shared:
        start = True
        while store.write(functools.partial(fts.merge_step, start=start)):
            start = False
    else:
        store.write(fts.optimize)
    skipped = ""
    with store.lock:
        store.checkpoint_passive()
        if vacuum and shared and db_before > VACUUM_BESIDE_OTHERS_MAX_BYTES:
            skipped = _vacuum_skipped(store, others, db_before)
        elif vacuum:
            _vacuum(store)
            if store.journal_mode == "wal" and not others:
                # Explicit maintenance only: the normal write path never truncates the live
                # WAL, and a TRUNCATE checkpoint would stall other processes' writes meanwhile.
                store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    db_after, wal_after = _sizes(store.path)
    return OptimizeResult(
        db_bytes_before=db_before,
        wal_bytes_before=wal_before,
        db_bytes_after=db_after,
        wal_bytes_after=wal_after,
        fts_optimized=True,
        fts_rebuilt=rebuild_fts,
        vacuumed=vacuum and not skipped,
        forced=bool(force and others),
        other_processes=tuple(others),
        vacuum_skipped=skipped,
        reindexed=reindex,
        path=str(store.path),
        duration_s=time.monotonic() - started,
    )


def _reindex(store: Store) -> None:
    """Rebuild every index from its table (never the schema: the same indexes, rebuilt)."""
    try:
        store.write(lambda conn: conn.execute("REINDEX"))
    except sqlite3.IntegrityError as exc:
        # A unique index over rows that are no longer unique: the table itself is at fault.
        raise StoreCorruptError(
            f"{store.path} cannot be reindexed in place ({exc}): a table holds rows its unique "
            "index forbids; nothing was changed"
        ) from exc


def reclaim_after_delete(
    store: Store, deleted_messages: int, *, compact: bool = False, force: bool = False
) -> OptimizeResult:
    """Tidy up after deleting sessions in time that grows with what was deleted, not the store.

    Rewriting the file (every index merged whole, then VACUUM) takes time in proportion to the
    whole store: at 1 M messages about 23 s + 28 s, against about 9 s to delete a tenth of it.
    So the file is rewritten (``optimize``) only when that is worth it: the deleted messages
    were at least ``REWRITE_AFTER_DELETE_SHARE`` of all, the file is small, or ``compact`` asks
    (a rewrite then costs a bounded multiple of the delete). Otherwise the indexes get a short
    merge in proportion to the delete and the freed pages stay in the file, where new rows
    reuse them; ``rewrite_deferred`` says so.
    """
    if store.verified_at is None:
        require_intact(store)  # else this handle checked the file before its own deletes
    db_before, wal_before = _sizes(store.path)
    small = db_before <= REWRITE_ALWAYS_MAX_BYTES
    left = int(store.conn.execute("SELECT count(*) FROM messages").fetchone()[0])
    share = deleted_messages / max(deleted_messages + left, 1)
    if compact or small or share >= REWRITE_AFTER_DELETE_SHARE:
        result = optimize(store, vacuum=True, force=force)
        return dataclasses.replace(result, free_bytes=_free_bytes(store))
    # The deletes' tombstones are merged in steps in proportion to them.
    steps = min(MAX_MERGE_STEPS_AFTER_DELETE, 1 + deleted_messages // MESSAGES_PER_MERGE_STEP)
    for _step in range(steps):
        if not store.write(functools.partial(fts.merge_step, start=False)):
            break
    with store.lock:
        store.checkpoint_passive()
    db_after, wal_after = _sizes(store.path)
    free_bytes = _free_bytes(store)
    return OptimizeResult(
        db_bytes_before=db_before,
        wal_bytes_before=wal_before,
        db_bytes_after=db_after,
        wal_bytes_after=wal_after,
        fts_optimized=False,
        fts_rebuilt=False,
        vacuumed=False,
        forced=False,
        free_bytes=free_bytes,
        rewrite_deferred=(
            f"{share:.0%} of the messages were deleted: the {_size_text(free_bytes)} of pages "
            "freed so far stay in the file and are reused for new rows (rewriting "
            f"{_size_text(db_after)} to give space back to the disk takes time in proportion to "
            "the whole store)"
        ),
    )


def _free_bytes(store: Store) -> int:
    """Return the bytes of free pages inside the database file."""
    conn = store.conn
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    return int(conn.execute("PRAGMA freelist_count").fetchone()[0]) * page_size


def _vacuum_skipped(store: Store, others: Sequence[str], size: int) -> str:
    """Say why VACUUM did not run beside other processes, and what the free space does."""
    free = _free_bytes(store)
    return (
        f"VACUUM skipped: {', '.join(others)} has the store open, and VACUUM would hold the "
        f"write lock for the whole rewrite of {_size_text(size)} (its writes would wait). The "
        f"{_size_text(free)} of free pages stay in the file and are reused for new rows."
    )


def _size_text(n: int) -> str:
    """Return a byte count for a message in the CLI's units: 512 B, 3.4 KiB, 1.2 MiB, 2.0 GiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def vacuum(store: Store) -> int:
    """Merge the search indexes and VACUUM, as the agent's own vacuum does; return how many
    indexes were merged. Run it while no other process writes (VACUUM takes an exclusive lock)."""
    require_intact(store)
    merged = store.write(fts.optimize)
    with store.lock:
        store.checkpoint_passive()
        _vacuum(store)
        if store.journal_mode == "wal":
            store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return len(merged)
