"""Recover never passes off a row whose values it could not read intact.

A zeroed overflow page at the end of a long value's chain passes SQLite's quick_check, and
SQLite reads its zeros as the value's last part without an error: such a row used to be copied
with wrong content and the salvage called complete. A row whose columns the table's own indexes
say held other values is the same: read, but not as it was written. Each store here is built
through the library, settled and closed; the damage is plain writes to a copy of its file; the
salvage is the real ``hermes sessions recover`` process.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support import damage, stores
from test_recover_hang import (
    hard_time_limit,  # noqa: F401 (autouse: no test runs unbounded)
    recover_child,
)

from hermes_state.recover import pages
from hermes_state.recover.lost_and_found import DAMAGED_VALUE


def ro(db: Path) -> sqlite3.Connection:
    """Open a closed, healthy store file read-only."""
    return sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)


def messages_of(db: Path) -> dict[int, tuple[Any, ...]]:
    """Return every row of messages, by rowid."""
    conn = ro(db)
    try:
        return {r[0]: tuple(r) for r in conn.execute("SELECT * FROM messages")}
    finally:
        conn.close()


def kept_aside(db: Path) -> dict[int, str]:
    """Return the messages rows in lost_and_found: rowid -> reason."""
    conn = ro(db)
    try:
        rows = conn.execute(
            "SELECT source_rowid, reason FROM lost_and_found WHERE table_name = 'messages'"
        ).fetchall()
    finally:
        conn.close()
    return {int(r[0]): str(r[1]) for r in rows}


def raw_pages(db: Path) -> tuple[int, pages.Pages]:
    """Open a closed store file's pages (the caller closes the fd)."""
    fd = os.open(db, os.O_RDONLY)
    return fd, pages.Pages(fd, os.fstat(fd).st_size)


def messages_root(db: Path) -> int:
    """Return the root page of the messages table."""
    conn = ro(db)
    try:
        return int(
            conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
        )
    finally:
        conn.close()


def overflow_chains(db: Path) -> dict[int, list[int]]:
    """Return the overflow pages of each message's value, by rowid (values that spill only)."""
    fd, raw = raw_pages(db)
    try:
        scan = raw.walk_table(messages_root(db))
        found = {r: raw.overflow_pages(ref) for r, ref in sorted(scan.cells.items())}
    finally:
        os.close(fd)
    return {r: chain for r, chain in found.items() if chain}


def pwrite(db: Path, offset: int, data: bytes) -> None:
    """Overwrite bytes of a closed store's copy in place."""
    fd = os.open(db, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def long_values(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A settled store of 3,000 messages whose contents spill onto two or three overflow pages."""
    db = tmp_path_factory.mktemp("values") / "base" / "state.db"
    stores.populate_store(db, sessions_n=30, messages_per_session=100, content_size=9000)
    stores.settle(db)
    stores.drop_sidecars(db)
    return db


@pytest.fixture(scope="module")
def short_values(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A settled store of 3,000 messages that fit on their leaf pages."""
    db = tmp_path_factory.mktemp("values-short") / "base" / "state.db"
    stores.populate_store(db, sessions_n=30, messages_per_session=100, content_size=200)
    stores.settle(db)
    stores.drop_sidecars(db)
    return db


def zero_five_overflow_pages(db: Path) -> tuple[list[int], list[int]]:
    """Zero the last overflow page of three messages (read back as zeros without an error) and
    the first of two two-page chains (the chain ends early); return (silent, noticed) rowids."""
    chains = overflow_chains(db)
    assert len(chains) >= 1000, "the store's values must spill onto overflow pages"
    longer = [r for r, c in chains.items() if len(c) > 1]
    rowids = sorted(chains)
    silent = [rowids[len(rowids) * k // 4] for k in (1, 2, 3)]
    noticed = [r for r in longer if r not in silent][:: max(1, len(longer) // 3)][:2]
    assert len(noticed) == 2
    damage.zero_pages(db, [chains[r][-1] for r in silent] + [chains[r][0] for r in noticed])
    return silent, noticed


def test_recover_keeps_aside_rows_whose_overflow_pages_were_zeroed(
    long_values: Path, tmp_path: Path
) -> None:
    src = tmp_path / "src" / "state.db"
    stores.copy_bundle(long_values, src)
    before = messages_of(src)
    silent, noticed = zero_five_overflow_pages(src)
    target = tmp_path / "out" / "state.db"

    got = recover_child(src, target)

    assert got.returncode == 1, got.stdout + got.stderr
    first = got.stdout.splitlines()[0]
    assert first.startswith("PARTIAL: lost 5 of "), got.stdout
    assert "Complete" not in got.stdout
    after = messages_of(target)
    # No row in messages carries content other than what was written.
    assert all(before[r] == row for r, row in after.items())
    assert set(before) - set(after) == set(silent) | set(noticed)
    aside = kept_aside(target)
    for rowid in silent:
        assert aside[rowid].startswith(DAMAGED_VALUE), aside
        assert "zeroed" in aside[rowid]
    report = json.loads(Path(str(target) + ".recovery.json").read_text(encoding="utf-8"))
    table = report["tables"]["messages"]
    assert (table["expected"], table["recovered"], table["lost"]) == (3000, 2995, 5)
    assert table["damaged_values"] == 3
    assert report["complete"] is False and report["accepted"] is False


def test_recover_allow_partial_says_what_was_kept_aside(long_values: Path, tmp_path: Path) -> None:
    src = tmp_path / "src" / "state.db"
    stores.copy_bundle(long_values, src)
    zero_five_overflow_pages(src)

    got = recover_child(src, tmp_path / "out" / "state.db", "--allow-partial")

    assert got.returncode == 0, got.stdout + got.stderr
    lines = got.stdout.splitlines()
    assert lines[0].startswith("PARTIAL: lost 5 of "), got.stdout
    assert "not read intact" in got.stdout


WIDTHS = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8, 7: 8}  # bytes of a record field, by serial type


def flip_timestamp(db: Path, rowid: int) -> None:
    """Flip a bit of one message's timestamp on its leaf page (its indexes keep the value that
    was written)."""
    fd, raw = raw_pages(db)
    try:
        ref = raw.walk_table(messages_root(db)).cells[rowid]
        data = raw.read(ref.page)
        _size, pos = pages.varint(data, pages.u16(data, 8 + 2 * ref.slot))
        _rowid, pos = pages.varint(data, pos)
        header_size, at = pages.varint(data, pos)
        serials = []
        while at < pos + header_size:
            serial, at = pages.varint(data, at)
            serials.append(serial)
        conn = ro(db)
        try:
            names = [r[1] for r in conn.execute("PRAGMA table_info(messages)")]
        finally:
            conn.close()
        body = pos + header_size
        for name, serial in zip(names, serials, strict=False):
            if name == "timestamp":
                width = WIDTHS[serial]  # a number: a real, or an integer when it has no fraction
                break
            body += WIDTHS.get(serial, 0) if serial < 12 else (serial - 12) // 2
    finally:
        os.close(fd)
    # Its last byte: a small change, the rest of the row as it was.
    at = body + width - 1
    pwrite(db, (ref.page - 1) * raw.page_size + at, bytes([data[at] ^ 0x10]))


def test_recover_keeps_aside_a_row_its_indexes_disagree_with(
    short_values: Path, tmp_path: Path
) -> None:
    src = tmp_path / "src" / "state.db"
    stores.copy_bundle(short_values, src)
    before = messages_of(src)
    rowid = sorted(before)[len(before) // 2]
    flip_timestamp(src, rowid)
    target = tmp_path / "out" / "state.db"

    got = recover_child(src, target)

    assert got.returncode == 1, got.stdout + got.stderr
    assert got.stdout.startswith("PARTIAL: lost 1 of "), got.stdout
    after = messages_of(target)
    assert rowid not in after
    assert all(before[r] == row for r, row in after.items())
    assert len(after) == len(before) - 1
    reason = kept_aside(target)[rowid]
    assert reason.startswith(DAMAGED_VALUE) and "indexes" in reason, reason


def test_recover_reads_a_leaf_whose_cell_count_has_a_flipped_bit(
    short_values: Path, tmp_path: Path
) -> None:
    src = tmp_path / "src" / "state.db"
    stores.copy_bundle(short_values, src)
    before = messages_of(src)
    leaves = damage.table_pages(src, "messages", "leaf")
    stores.drop_sidecars(src)
    leaf = leaves[len(leaves) // 2]
    size = damage.page_size(src)
    with open(src, "rb") as f:  # a closed copy, no connection open
        f.seek((leaf - 1) * size + 3)
        high = f.read(1)[0]
    # SQLite refuses the page (more cells than fit), so its rows are unreadable to a cursor.
    pwrite(src, (leaf - 1) * size + 3, bytes([high ^ 0x40]))
    target = tmp_path / "out" / "state.db"

    got = recover_child(src, target)

    assert got.returncode in (0, 1), got.stderr
    assert messages_of(target) == before


def test_recover_keeps_aside_a_row_whose_last_overflow_page_is_garbage(
    long_values: Path, tmp_path: Path
) -> None:
    src = tmp_path / "src" / "state.db"
    stores.copy_bundle(long_values, src)
    before = messages_of(src)
    chains = overflow_chains(src)
    rowid = sorted(chains)[len(chains) // 2]
    size = damage.page_size(src)
    garbage = random.Random(5).randbytes(size)
    pwrite(src, (chains[rowid][-1] - 1) * size, garbage)
    target = tmp_path / "out" / "state.db"

    got = recover_child(src, target)

    assert got.returncode == 1, got.stdout + got.stderr
    assert got.stdout.startswith("PARTIAL: lost 1 of "), got.stdout
    after = messages_of(target)
    assert rowid not in after
    assert all(before[r] == row for r, row in after.items())
    assert kept_aside(target)[rowid].startswith(DAMAGED_VALUE)
