"""A SQLite file's 100-byte header, repaired from the file's real page layout.

Salvage of a private work copy (never a live store): the page size and reserved bytes the
pages are really laid out with, the database size, payload fractions, text encoding and a
freelist pointer that points nowhere are read off the pages (see :mod:`hermes_state.recover.pages`).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hermes_state.recover.pages import (
    INTERIOR_TABLE,
    PAGE_SIZES,
    SAMPLE_PAGES,
    looks_like_btree_page,
    looks_like_trunk,
    u16,
    u32,
    varint,
)
from hermes_state.store.sql import SQLITE_MAGIC


@dataclass(frozen=True)
class Layout:
    """Page size and reserved bytes per page, as read off the pages themselves."""

    page_size: int
    reserved: int
    share: float  # of sampled pages that look like b-tree pages at this size


def _sample(npages: int) -> list[int]:
    """Return up to SAMPLE_PAGES page numbers spread over 2..npages."""
    if npages < 2:
        return []
    step = max(1, (npages - 1) // SAMPLE_PAGES)
    return list(range(2, npages + 1, step))[:SAMPLE_PAGES]


def _share(fd: int, size: int, page_size: int) -> float:
    """Return the share of sampled pages that look like b-tree pages at this page size."""
    npages = size // page_size
    sample = _sample(npages)
    if not sample:
        return 0.0
    ok = sum(
        looks_like_btree_page(os.pread(fd, page_size, (n - 1) * page_size), 0, page_size, npages)
        for n in sample
    )
    return ok / len(sample)


def _top_of_cells(data: bytes, page_size: int) -> int | None:
    """Return where the highest cell of a table page ends (None when no cell tells exactly)."""
    kind = data[0]
    cells = u16(data, 3)
    header_end = 12 if kind == INTERIOR_TABLE else 8
    top = None
    for i in range(cells):
        ptr = u16(data, header_end + 2 * i)
        try:
            if kind == INTERIOR_TABLE:
                _, end = varint(data, ptr + 4)
            else:
                payload, pos = varint(data, ptr)
                _, pos = varint(data, pos)
                if payload > page_size - 290:
                    continue  # may spill to overflow pages: its local size depends on the answer
                end = pos + payload
        except IndexError:
            return None
        top = end if top is None else max(top, end)
    return top


def guess_layout(fd: int, size: int, stated: int | None = None) -> Layout | None:
    """Find the page size and reserved bytes the file's pages are really laid out with.

    ``stated`` (the header's page size): when the pages bear it out, only it and smaller sizes
    are tried (a multiple of the real size would look as good).
    """
    sizes = [p for p in PAGE_SIZES if size >= 2 * p]
    shares: dict[int, float] = {}
    if stated in sizes:
        shares[stated] = _share(fd, size, stated)
        if shares[stated] >= 0.5:
            sizes = [p for p in sizes if p < stated]
    shares.update({p: _share(fd, size, p) for p in sizes if p not in shares})
    if not shares or max(shares.values()) < 0.05:
        return None
    best = max(shares.values())
    # A multiple of the real size also lands on page starts; the smallest good size is the real one.
    page_size = min(p for p, s in shares.items() if s >= 0.75 * best)
    gaps: Counter[int] = Counter()
    npages = size // page_size
    for n in _sample(npages):
        data = os.pread(fd, page_size, (n - 1) * page_size)
        if data[:1] in (b"\x05", b"\x0d") and looks_like_btree_page(data, 0, page_size, npages):
            top = _top_of_cells(data, page_size)
            if top is not None and 0 <= page_size - top <= 255:
                gaps[page_size - top] += 1
    reserved = gaps.most_common(1)[0][0] if gaps else 0
    return Layout(page_size, reserved, shares[page_size])


def _encoding_of(fd: int, page_size: int) -> int:
    """Guess the text encoding (1 UTF-8, 2 UTF-16le, 3 UTF-16be) from the schema's own text."""
    head = os.pread(fd, page_size * 4, 0)
    if b"CREATE TABLE" in head or b"CREATE INDEX" in head:
        return 1
    if "CREATE TABLE".encode("utf-16-le") in head:
        return 2
    if "CREATE TABLE".encode("utf-16-be") in head:
        return 3
    return 1


@dataclass
class HeaderRepair:
    """What repair_header changed in the copy's header."""

    fixes: list[str] = field(default_factory=list)


def repair_header(path: Path, *, wal: bool = False) -> HeaderRepair:
    """Make every header field SQLite needs agree with the copy's real pages (the copy only)."""
    out = HeaderRepair()
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)  # the work copy: nobody else has it open
    try:
        size = os.fstat(fd).st_size
        header = bytearray(os.pread(fd, 100, 0).ljust(100, b"\0"))
        raw = u16(header, 16)
        layout = guess_layout(fd, size, 65536 if raw == 1 else raw)
        if layout is None:
            return out
        fixes = out.fixes
        fresh = header[0:16] != SQLITE_MAGIC
        if fresh:
            fixes.append("magic string")
            header[0:16] = SQLITE_MAGIC
        raw = u16(header, 16)
        stated = 65536 if raw == 1 else raw
        if stated != layout.page_size:
            share = _share(fd, size, stated) if stated in PAGE_SIZES and size >= 2 * stated else 0
            if share < 0.5 * layout.share:
                fixes.append(f"page size {stated} -> {layout.page_size}")
                header[16:18] = (1 if layout.page_size == 65536 else layout.page_size).to_bytes(
                    2, "big"
                )
        page_size = 65536 if u16(header, 16) == 1 else u16(header, 16)
        if page_size == layout.page_size and header[20] != layout.reserved:
            fixes.append(f"reserved bytes {header[20]} -> {layout.reserved}")
            header[20] = layout.reserved
        for pos in (18, 19):
            if header[pos] not in (1, 2):
                fixes.append(f"file format byte {pos}")
                header[pos] = 2 if wal else 1
        if bytes(header[21:24]) != bytes((64, 32, 32)):
            fixes.append("payload fractions")
            header[21:24] = bytes((64, 32, 32))
        npages = size // page_size
        usable = page_size - header[20]
        if not 0 < u32(header, 28) <= npages:
            fixes.append(f"database size {u32(header, 28)} -> {npages} pages")
            header[28:32] = npages.to_bytes(4, "big")
            header[92:96] = header[24:28]
        trunk, free = u32(header, 32), u32(header, 36)
        if trunk or free:
            good = 2 <= trunk <= npages and free < npages
            if good:
                good = looks_like_trunk(
                    os.pread(fd, page_size, (trunk - 1) * page_size), usable, npages
                )
            if not good:
                fixes.append("freelist pointer (free pages are found by their shape instead)")
                header[32:40] = bytes(8)
        if not 1 <= u32(header, 44) <= 4:
            fixes.append("schema format")
            header[44:48] = (4).to_bytes(4, "big")
        if u32(header, 52) > npages:
            fixes.append("auto-vacuum root")
            header[52:56] = bytes(4)
            header[64:68] = bytes(4)
        if u32(header, 56) not in (1, 2, 3):
            fixes.append("text encoding")
            header[56:60] = _encoding_of(fd, page_size).to_bytes(4, "big")
        if fresh:
            header[24:28] = (1).to_bytes(4, "big")
            header[40:44] = (1).to_bytes(4, "big")
            header[92:96] = (1).to_bytes(4, "big")
            header[96:100] = (3040001).to_bytes(4, "big")
        if fixes:
            os.pwrite(fd, bytes(header), 0)
        return out
    finally:
        os.close(fd)


# --- b-trees, cells and records -----------------------------------------------------------------
