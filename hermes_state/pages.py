"""Reading SQLite files page by page, for salvage of private work copies (never a live store).

recover.py uses this where SQLite itself cannot read: to give a copy whose 100-byte header is
destroyed a plausible one, and to read table leaf pages that a damaged interior page has cut
off from their b-tree.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SQLITE_MAGIC = b"SQLite format 3\x00"
BTREE_PAGE_TYPES = (0x02, 0x05, 0x0A, 0x0D)


def looks_like_btree_page(data: bytes, base: int = 0) -> bool:
    """Tell whether a page (header at base) looks like a b-tree page."""
    if len(data) < base + 8 or data[base] not in BTREE_PAGE_TYPES:
        return False
    cells = int.from_bytes(data[base + 3 : base + 5], "big")
    content = int.from_bytes(data[base + 5 : base + 7], "big") or 65536
    return cells * 2 + base + 8 <= len(data) and base < content <= len(data)


def rewrite_header(path: Path) -> bool:
    """Give the private copy a plausible 100-byte header when its own is unreadable."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)  # the work copy: nobody else has it open
    try:
        size = os.fstat(fd).st_size
        if os.pread(fd, 16, 0) == SQLITE_MAGIC:
            return False  # the header is fine; the damage is elsewhere
        for page_size in (4096, 1024, 2048, 8192, 16384, 32768, 65536, 512):
            if size < 2 * page_size or size % page_size:
                continue
            if not looks_like_btree_page(os.pread(fd, page_size, 0), 100):
                continue
            pages = size // page_size
            sample = [os.pread(fd, page_size, n * page_size) for n in range(1, min(pages, 17))]
            if sum(looks_like_btree_page(p) for p in sample) < min(3, len(sample)):
                continue
            wal = os.path.exists(str(path) + "-wal")
            header = bytearray(100)
            header[0:16] = SQLITE_MAGIC
            header[16:18] = (1 if page_size == 65536 else page_size).to_bytes(2, "big")
            header[18] = header[19] = 2 if wal else 1
            header[21:24] = bytes((64, 32, 32))
            header[24:28] = (1).to_bytes(4, "big")
            header[28:32] = pages.to_bytes(4, "big")
            header[40:44] = (1).to_bytes(4, "big")
            header[44:48] = (4).to_bytes(4, "big")
            header[56:60] = (1).to_bytes(4, "big")
            header[92:96] = (1).to_bytes(4, "big")
            header[96:100] = (3040001).to_bytes(4, "big")
            os.pwrite(fd, bytes(header), 0)
            return True
        return False
    finally:
        os.close(fd)


# --- leaf pages cut off from their b-tree ---------------------------------------------------------
# A damaged interior page cuts its whole subtree off the table's b-tree although the leaf pages
# below it are intact. Those rows are read here straight from the pages of the work copy: table
# leaf pages that no b-tree reaches and that are not on the freelist (so deleted rows never come
# back), assigned to a damaged table by rowid (inside one of its skipped ranges) and shape.

LEAF_TABLE, INTERIOR_TABLE, LEAF_INDEX, INTERIOR_INDEX = 0x0D, 0x05, 0x0A, 0x02
LOCK_BYTE_OFFSET = 0x40000000


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode an SQLite varint at pos; return (value, next position)."""
    value = 0
    for i in range(8):
        byte = buf[pos + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos + i + 1
    return (value << 8) | buf[pos + 8], pos + 9


def signed(value: int) -> int:
    """Turn a 64-bit varint into the signed rowid it stores."""
    return value - (1 << 64) if value >= 1 << 63 else value


class Pages:
    """Raw pages of the private work copy (never of a live store)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        header = os.pread(fd, 100, 0)
        raw_size = int.from_bytes(header[16:18], "big")
        self.page_size = 65536 if raw_size == 1 else raw_size
        if self.page_size < 512 or self.page_size & (self.page_size - 1):
            raise ValueError("implausible page size")
        self.usable = self.page_size - header[20]
        self.count = size // self.page_size
        self.freelist_trunk = int.from_bytes(header[32:36], "big")
        self.encoding = {2: "utf-16-le", 3: "utf-16-be"}.get(
            int.from_bytes(header[56:60], "big"), "utf-8"
        )
        self.lock_page = LOCK_BYTE_OFFSET // self.page_size + 1

    def read(self, page: int) -> bytes:
        """Return one page (empty for page numbers outside the file)."""
        if not 1 <= page <= self.count:
            return b""
        return os.pread(self.fd, self.page_size, (page - 1) * self.page_size)

    def freelist(self) -> set[int]:
        """Return every page on the freelist (trunks and leaves)."""
        found: set[int] = set()
        trunk = self.freelist_trunk
        while trunk and trunk not in found and trunk <= self.count:
            found.add(trunk)
            data = self.read(trunk)
            n = int.from_bytes(data[4:8], "big")
            for i in range(min(n, (self.usable - 8) // 4)):
                found.add(int.from_bytes(data[8 + 4 * i : 12 + 4 * i], "big"))
            trunk = int.from_bytes(data[0:4], "big")
        return found

    def reachable(self, roots: set[int]) -> set[int]:
        """Return the b-tree pages reachable from the roots (descent stops at damaged pages)."""
        seen: set[int] = set()
        stack = sorted(roots)
        while stack:
            page = stack.pop()
            if page in seen or not 1 <= page <= self.count:
                continue
            seen.add(page)
            data = self.read(page)
            base = 100 if page == 1 else 0
            kind = data[base] if len(data) > base else 0
            if kind not in (INTERIOR_TABLE, INTERIOR_INDEX):
                continue
            cells = int.from_bytes(data[base + 3 : base + 5], "big")
            stack.append(int.from_bytes(data[base + 8 : base + 12], "big"))
            for i in range(cells):
                off = int.from_bytes(data[base + 12 + 2 * i : base + 14 + 2 * i], "big")
                if off + 4 <= len(data):
                    stack.append(int.from_bytes(data[off : off + 4], "big"))
        return seen

    def _payload(self, data: bytes, pos: int, size: int) -> bytes:
        """Return a cell's payload, following its overflow chain."""
        max_local = self.usable - 35
        if size <= max_local:
            return data[pos : pos + size]
        min_local = (self.usable - 12) * 32 // 255 - 23
        local = min_local + (size - min_local) % (self.usable - 4)
        if local > max_local:
            local = min_local
        out = bytearray(data[pos : pos + local])
        page = int.from_bytes(data[pos + local : pos + local + 4], "big")
        seen: set[int] = set()
        while page and len(out) < size:
            if page in seen or not 1 <= page <= self.count:
                raise ValueError("broken overflow chain")
            seen.add(page)
            chunk = self.read(page)
            out += chunk[4 : self.usable]
            page = int.from_bytes(chunk[0:4], "big")
        if len(out) < size:
            raise ValueError("short overflow chain")
        return bytes(out[:size])

    def _record(self, payload: bytes) -> list[Any]:
        """Decode a record into its field values."""
        header_size, pos = varint(payload, 0)
        types = []
        while pos < header_size:
            serial, pos = varint(payload, pos)
            types.append(serial)
        body = header_size
        fields: list[Any] = []
        widths = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}
        for serial in types:
            if serial == 0:
                fields.append(None)
            elif serial in widths:
                n = widths[serial]
                fields.append(int.from_bytes(payload[body : body + n], "big", signed=True))
                body += n
            elif serial == 7:
                fields.append(struct.unpack(">d", payload[body : body + 8])[0])
                body += 8
            elif serial in (8, 9):
                fields.append(serial - 8)
            elif serial >= 12:
                n = (serial - 12) // 2
                raw = payload[body : body + n]
                fields.append(raw.decode(self.encoding, "replace") if serial % 2 else raw)
                body += n
            else:
                raise ValueError("reserved serial type")
        if body > len(payload):
            raise ValueError("record runs past its payload")
        return fields

    def orphan_rows(self, roots: set[int]) -> Iterator[tuple[int, list[Any]]]:
        """Yield (rowid, fields) of every row on a table leaf page that no b-tree reaches."""
        skip = self.reachable(roots) | self.freelist() | {1, self.lock_page}
        for page in range(2, self.count + 1):
            if page in skip:
                continue
            data = self.read(page)
            if not data or data[0] != LEAF_TABLE:
                continue
            cells = int.from_bytes(data[3:5], "big")
            if not 0 < cells <= (self.usable - 8) // 4:
                continue
            for i in range(cells):
                try:
                    off = int.from_bytes(data[8 + 2 * i : 10 + 2 * i], "big")
                    size, pos = varint(data, off)
                    rowid, pos = varint(data, pos)
                    fields = self._record(self._payload(data, pos, size))
                except (ValueError, IndexError, struct.error):
                    continue  # a damaged cell: the others on the page may still be fine
                yield signed(rowid), fields
