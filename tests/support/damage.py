"""Damaging store files on purpose: zeroed, cut, scrambled pages and headers, stale WALs.

Every damaging function works on a store that no connection of this process has open (the
helpers settle the WAL into the main file first, so the damage is not masked by WAL frames).
"""

from __future__ import annotations

import os
import random
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from support.stores import crash_with_committed_wal, drop_sidecars, settle


def page_size(path: Path) -> int:
    """Return the page size recorded in the database header."""
    with open(path, "rb") as f:
        header = f.read(100)
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


def table_pages(path: Path, table: str, pagetype: str = "leaf") -> list[int]:
    """Return the page numbers of one table's btree pages of a type, in key order."""
    settle(path)
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = ? ORDER BY path",
            (table, pagetype),
        ).fetchall()
    finally:
        conn.close()
    return [r[0] for r in rows]


def zero_pages(path: Path, pages: Iterable[int]) -> None:
    """Overwrite whole pages (1-based page numbers) with zero bytes."""
    size = page_size(path)
    fd = os.open(path, os.O_WRONLY)
    try:
        for page in pages:
            os.pwrite(fd, b"\0" * size, (page - 1) * size)
        os.fsync(fd)
    finally:
        os.close(fd)


def zero_middle_pages(
    path: Path, table: str = "messages", count: int = 2, gap: int = 0
) -> list[int]:
    """Zero count leaf pages in the middle of a table's btree (gap leaves apart); return them."""
    leaves = table_pages(path, table, "leaf")
    if len(leaves) < (count - 1) * (gap + 1) + 1:
        raise ValueError(f"{table} has only {len(leaves)} leaf pages")
    middle = (len(leaves) - (count - 1) * (gap + 1)) // 2
    chosen = [leaves[middle + i * (gap + 1)] for i in range(count)]
    zero_pages(path, chosen)
    return chosen


def zero_interior_page(path: Path, table: str = "messages") -> int:
    """Zero one interior page of a table's b-tree (below the root when there is such a level).

    Every leaf below it is cut off from the table although the leaves themselves are intact.
    """
    settle(path)
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT pageno, path FROM dbstat WHERE name = ? AND pagetype = 'internal' "
            "ORDER BY path",
            (table,),
        ).fetchall()
    finally:
        conn.close()
    if not rows:
        raise ValueError(f"{table} has no interior pages")
    deeper = [page for page, p in rows if p != "/"] or [rows[0][0]]  # "/" is the root
    page = deeper[len(deeper) // 2]
    zero_pages(path, [page])
    return page


def truncate_store(path: Path, fraction: float = 0.5) -> int:
    """Cut the main file to a fraction of its size (whole pages); return the new size."""
    settle(path)
    size = page_size(path)
    keep = max(1, int(os.path.getsize(path) * fraction) // size) * size
    os.truncate(path, keep)
    return keep


def garbage_header(path: Path, nbytes: int = 100, seed: int = 7) -> None:
    """Overwrite the first nbytes (the 100-byte database header by default) with random bytes."""
    settle(path)
    rng = random.Random(seed)
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(rng.randrange(256) for _ in range(nbytes)), 0)
    finally:
        os.close(fd)


DAMAGE_KINDS = ("zero-byte", "garbage", "truncated", "header", "btree", "stale-wal")
# A writable open moves these aside and starts fresh (SPEC §3): their header is not SQLite's.
QUARANTINED_KINDS = ("zero-byte", "garbage")


def write_garbage(path: Path, size: int = 8192, seed: int = 1) -> None:
    """Replace the whole file with random bytes (no SQLite header at all)."""
    os.truncate(path, 0)
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, random.Random(seed).randbytes(size), 0)
    finally:
        os.close(fd)


def damage_header_fields(path: Path, seed: int = 2) -> None:
    """Scramble bytes 16–99 of the header (page size, counters…) but keep the magic string."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, random.Random(seed).randbytes(84), 16)
    finally:
        os.close(fd)


def attach_stale_wal(path: Path) -> None:
    """Leave a WAL of an older generation of the file next to a newer (vacuumed) main file.

    The WAL's committed frames were written for the page layout before the VACUUM; SQLite
    replays them onto the new layout, which is what a torn snapshot + stale sidecar looks like.
    """
    conn = sqlite3.connect(path)
    try:
        sid = conn.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
    finally:
        conn.close()
    crash_with_committed_wal(path, sid, 30)
    wal = Path(str(path) + "-wal")
    frames = wal.read_bytes()  # the writer is dead: nothing holds this file
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("DELETE FROM messages WHERE id % 3 = 0")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    settle(path)
    drop_sidecars(path)
    wal.write_bytes(frames)


def damage(path: Path, kind: str) -> None:
    """Damage a closed, settled store file in place in one of DAMAGE_KINDS."""
    settle(path)
    drop_sidecars(path)
    if kind == "zero-byte":
        os.truncate(path, 0)
    elif kind == "garbage":
        write_garbage(path)
    elif kind == "truncated":
        truncate_store(path, 0.3)
    elif kind == "header":
        damage_header_fields(path)
    elif kind == "btree":
        # Every command reads sessions: zero its leaf pages so all of them meet the damage.
        zero_pages(path, table_pages(path, "sessions", "leaf"))
    elif kind == "stale-wal":
        attach_stale_wal(path)
    else:
        raise ValueError(f"unknown damage kind {kind!r}")
    if kind != "stale-wal":
        drop_sidecars(path)
