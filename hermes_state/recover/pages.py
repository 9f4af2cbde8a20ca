"""Reading SQLite files page by page, for salvage of private work copies (never a live store).

The recover modules use this where SQLite itself cannot be trusted: to repair a copy's 100-byte
header from the file's real page layout, to walk a table's b-tree and count the cells its leaf
pages hold (so a copy that stopped early shows), to read the rows SQLite's cursor did not
return, and to find and read table leaf pages when the schema itself is gone.
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

BTREE_PAGE_TYPES = (0x02, 0x05, 0x0A, 0x0D)
LEAF_TABLE, INTERIOR_TABLE, LEAF_INDEX, INTERIOR_INDEX = 0x0D, 0x05, 0x0A, 0x02
LOCK_BYTE_OFFSET = 0x40000000
PAGE_SIZES = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
MIN_ROWID, MAX_ROWID = -(2**63), 2**63 - 1
SAMPLE_PAGES = 128


def u16(data: bytes | bytearray, pos: int) -> int:
    """Read a big-endian 2-byte integer."""
    return int.from_bytes(data[pos : pos + 2], "big")


def u32(data: bytes | bytearray, pos: int) -> int:
    """Read a big-endian 4-byte integer."""
    return int.from_bytes(data[pos : pos + 4], "big")


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


def looks_like_btree_page(
    data: bytes, base: int = 0, page_size: int | None = None, npages: int | None = None
) -> bool:
    """Tell whether a page (header at base) is laid out like a b-tree page of that size."""
    size = len(data) if page_size is None else page_size
    if len(data) < base + 8 or data[base] not in BTREE_PAGE_TYPES:
        return False
    interior = data[base] in (INTERIOR_TABLE, INTERIOR_INDEX)
    header_end = base + (12 if interior else 8)
    cells = u16(data, base + 3)
    content = u16(data, base + 5) or 65536
    if header_end + 2 * cells > content or content > size or data[base + 7] > 60:
        return False
    freeblock = u16(data, base + 1)
    if freeblock and not header_end + 2 * cells <= freeblock < size:
        return False
    if cells == 0:
        return content == size and not interior
    for i in range(min(cells, 64)):
        ptr = u16(data, header_end + 2 * i)
        if not content <= ptr < size:
            return False
    return not (interior and npages is not None and not 1 <= u32(data, base + 8) <= npages)


# --- the page layout and the header ------------------------------------------------------------


def looks_like_trunk(data: bytes, usable: int, npages: int) -> bool:
    """Tell whether a page is laid out like a freelist trunk page."""
    if len(data) < 8:
        return False
    nxt, count = u32(data, 0), u32(data, 4)
    if nxt > npages or count > (usable - 8) // 4:
        return False
    leaves = [u32(data, 8 + 4 * i) for i in range(count)]
    return all(2 <= p <= npages for p in leaves) and len(set(leaves)) == len(leaves)


class CellRef(NamedTuple):
    """Where a cell sits: its table leaf page and its slot (cell number) on that page."""

    page: int
    slot: int


class Duplicate(NamedTuple):
    """A second cell claiming a rowid another cell of the same b-tree holds."""

    rowid: int
    page: int
    slot: int


class LeafCell(NamedTuple):
    """One cell of a table leaf page: its slot, rowid and record (None when undecodable)."""

    slot: int
    rowid: int
    fields: list[Any] | None


@dataclass
class TreeScan:
    """What the leaf pages of one table b-tree hold, walked from its root page."""

    cells: dict[int, CellRef] = field(default_factory=dict)  # rowid -> where its cell is
    pages: set[int] = field(default_factory=set)  # every page of the tree that was read
    holes: list[tuple[int, int]] = field(default_factory=list)  # (lo, hi]: rowids under bad pages
    # Cells whose rowid lies outside the range their parents give (a damaged rowid).
    strays: set[CellRef] = field(default_factory=set)
    duplicates: list[Duplicate] = field(default_factory=list)
    bad_cells: int = 0  # cells whose rowid could not even be read
    # Cells whose value spills into an overflow chain that is broken (a page zeroed, cut short,
    # run on, or shared): what SQLite reads for them is not what was written. Ref -> why.
    damaged: dict[CellRef, str] = field(default_factory=dict)
    # Pages whose header was damaged (a cell count, a freeblock) but whose cell pointers were
    # read one by one up to the first that points nowhere.
    mended: set[int] = field(default_factory=set)

    @property
    def count(self) -> int:
        """Return how many cells the walk found."""
        return len(self.cells) + len(self.duplicates) + self.bad_cells

    def in_hole(self, rowid: int) -> bool:
        """Tell whether a rowid lies in a key range the walk could not read."""
        return any(lo < rowid <= hi for lo, hi in self.holes)


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

    def free_by_shape(self, candidates: set[int]) -> set[int]:
        """Return the pages among candidates (pages no b-tree reaches) that a freelist trunk
        lists, the trunks included (for a file whose freelist pointer is lost)."""
        found: set[int] = set()
        for page in sorted(candidates):
            data = self.read(page)
            if data[:1] in (b"\x02", b"\x05", b"\x0a", b"\x0d"):
                continue  # a b-tree page (a trunk's first byte is a page number's top byte)
            if u32(data, 4) and looks_like_trunk(data, self.usable, self.count):
                leaves = {u32(data, 8 + 4 * i) for i in range(u32(data, 4))}
                if leaves <= candidates:
                    found |= leaves | {page}
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
            stack.append(u32(data, base + 8))
            for off in self.slots(data, base):  # a damaged cell count does not read past them
                if off and off + 4 <= len(data):
                    stack.append(u32(data, off))
        return seen

    def walk_table(self, root: int) -> TreeScan:
        """Walk a table b-tree from its root, noting each leaf cell and each unreadable subtree."""
        scan = TreeScan()
        chains: dict[int, CellRef] = {}  # overflow page -> the cell whose chain holds it
        stack = [(root, MIN_ROWID - 1, MAX_ROWID)]
        while stack:
            page, lo, hi = stack.pop()
            if page in scan.pages or not 1 <= page <= self.count or page == self.lock_page:
                scan.holes.append((lo, hi))
                continue
            data = self.read(page)
            base = 100 if page == 1 else 0
            kind = data[base] if len(data) > base else 0
            if kind not in (INTERIOR_TABLE, LEAF_TABLE):
                scan.holes.append((lo, hi))
                continue
            slots = self.slots(data, base)
            if not looks_like_btree_page(data, base, self.page_size, self.count):
                if not slots:
                    scan.holes.append((lo, hi))
                    continue
                scan.mended.add(page)
            scan.pages.add(page)
            if kind == INTERIOR_TABLE:
                prev = lo
                children = []
                for off in slots:
                    if not off:
                        continue
                    try:
                        child = u32(data, off)
                        key, _ = varint(data, off + 4)
                    except IndexError:
                        continue
                    key = signed(key)
                    children.append((child, prev, key))
                    prev = key
                children.append((u32(data, base + 8), prev, hi))
                stack.extend(reversed(children))
                continue
            found: list[tuple[CellRef, int]] = []
            for i, off in enumerate(slots):
                try:
                    if not off:
                        raise IndexError("a cell pointer points nowhere")
                    size, pos = varint(data, off)
                    rowid, pos = varint(data, pos)
                except IndexError:
                    scan.bad_cells += 1
                    continue
                ref = CellRef(page, i)
                found.append((ref, signed(rowid)))
                if size > self.usable - 35:
                    why = self._chain_damage(data, pos, size, ref, chains)
                    if why is not None:
                        scan.damaged[ref] = why
            outside = sum(1 for _ref, rowid in found if not lo < rowid <= hi)
            ordered = all(a[1] < b[1] for a, b in itertools.pairwise(found))
            # Several cells of one page outside its range, in order with the page's others:
            # the parent's key (the range) is what was damaged, not each of their rowids.
            trust_range = outside < 2 or not ordered
            for ref, rowid in found:
                stray = trust_range and not lo < rowid <= hi
                if stray:
                    scan.strays.add(ref)
                held = scan.cells.get(rowid)
                if held is None:
                    scan.cells[rowid] = ref
                elif held in scan.strays and not stray:
                    # Two cells claim one rowid: the one in its page's range is the row itself.
                    scan.duplicates.append(Duplicate(rowid, *held))
                    scan.cells[rowid] = ref
                else:
                    scan.duplicates.append(Duplicate(rowid, *ref))
        for page in scan.pages & chains.keys():
            scan.damaged.setdefault(chains[page], f"its overflow page {page} is a b-tree page")
        return scan

    def index_entries(self, root: int) -> Iterator[list[Any]]:
        """Yield the record of every readable cell of an index b-tree (its key columns, then
        the rowid), walked from its root; damaged pages and cells are passed over."""
        seen: set[int] = set()
        stack = [root]
        while stack:
            page = stack.pop()
            if page in seen or not 1 <= page <= self.count or page == self.lock_page:
                continue
            seen.add(page)
            data = self.read(page)
            base = 100 if page == 1 else 0
            kind = data[base] if len(data) > base else 0
            if kind not in (LEAF_INDEX, INTERIOR_INDEX):
                continue
            if not looks_like_btree_page(data, base, self.page_size, self.count):
                continue
            interior = kind == INTERIOR_INDEX
            start = base + (12 if interior else 8)
            if interior:
                stack.append(u32(data, base + 8))
            for i in range(u16(data, base + 3)):
                off = u16(data, start + 2 * i)
                try:
                    if interior:
                        stack.append(u32(data, off))
                        off += 4
                    size, pos = varint(data, off)
                    yield self._record(self._payload(data, pos, size, index=True))
                except (ValueError, IndexError, struct.error):
                    continue

    def slots(self, data: bytes, base: int) -> list[int]:
        """Return the cell offsets of a table b-tree page, in slot order.

        When the page's header is damaged (a flipped bit in its cell count or free-space
        fields), the pointers are read one by one: all the header counts when that count is
        possible (an offset of 0 for each one that points nowhere), else up to the first one
        that points nowhere (the free space after the array is zeros or old bytes).
        """
        kind = data[base] if len(data) > base else 0
        if looks_like_btree_page(data, base, self.page_size, self.count):
            start = base + (12 if kind in (INTERIOR_TABLE, INTERIOR_INDEX) else 8)
            return [u16(data, start + 2 * i) for i in range(u16(data, base + 3))]
        if kind not in (INTERIOR_TABLE, LEAF_TABLE):
            return []
        start = base + (12 if kind == INTERIOR_TABLE else 8)
        if kind == INTERIOR_TABLE and not 2 <= u32(data, base + 8) <= self.count:
            return []  # the right child is gone too: nothing says where the subtree is
        most = (self.usable - start) // 6  # a cell takes 2 bytes of pointer and 4 at least
        declared = u16(data, base + 3)
        out: list[int] = []
        seen: set[int] = set()
        for i in range(declared if declared <= most else most):
            ptr = u16(data, start + 2 * i)
            good = start + 2 * (i + 1) <= ptr <= self.usable - 4 and ptr not in seen
            if good and kind == INTERIOR_TABLE:
                good = 2 <= u32(data, ptr) <= self.count
            if not good:
                if declared > most:
                    break
                out.append(0)
                continue
            seen.add(ptr)
            out.append(ptr)
        return out if any(out) else []

    def overflow_pages(self, ref: CellRef) -> list[int]:
        """Return the overflow pages of a table leaf cell's value, in chain order."""
        data = self.read(ref.page)
        base = 100 if ref.page == 1 else 0
        size, pos = varint(data, u16(data, base + 8 + 2 * ref.slot))
        _, pos = varint(data, pos)
        if size <= self.usable - 35:
            return []
        page = u32(data, pos + self._local(size))
        out: list[int] = []
        while page and page not in out and 1 <= page <= self.count:
            out.append(page)
            page = u32(self.read(page), 0)
        return out

    def _chain_damage(
        self, data: bytes, pos: int, size: int, ref: CellRef, chains: dict[int, CellRef]
    ) -> str | None:
        """Follow a cell's overflow chain; return why it is broken, or None when it is sound.

        Checked the way SQLite's integrity_check does (length, page numbers, no page used
        twice) and beyond it: a page of zeros, which SQLite reads as the value's last part
        without complaint when it is the chain's last page.
        """
        local = self._local(size)
        at = pos + local
        if at + 4 > self.usable:
            return "its cell runs past the page"
        page = u32(data, at)
        need = -(-(size - local) // (self.usable - 4))
        zero = bytes(self.page_size)
        for n in range(need):
            if not 2 <= page <= self.count or page == self.lock_page:
                return f"its overflow chain points to page {page}, outside the file"
            owner = chains.setdefault(page, ref)
            if owner != ref:
                return f"its overflow page {page} belongs to another value's chain too"
            chunk = self.read(page)
            if chunk == zero:
                return f"its overflow page {page} is zeroed"
            page = u32(chunk, 0)
            if n < need - 1 and page == 0:
                return f"its overflow chain ends after {n + 1} of {need} pages"
        if page != 0:
            return f"its overflow chain runs on past its {need} pages"
        return None

    def _local(self, size: int, max_local: int | None = None) -> int:
        """Return how many bytes of a cell's payload of this size sit on its page (max_local:
        the most a cell of its kind keeps there; a table leaf's by default)."""
        max_local = self.usable - 35 if max_local is None else max_local
        if size <= max_local:
            return size
        min_local = (self.usable - 12) * 32 // 255 - 23
        local = min_local + (size - min_local) % (self.usable - 4)
        return min_local if local > max_local else local

    def cell(self, page: int, index: int) -> tuple[int, list[Any]]:
        """Return (rowid, fields) of one cell of a table leaf page."""
        data = self.read(page)
        base = 100 if page == 1 else 0
        off = u16(data, base + 8 + 2 * index)
        size, pos = varint(data, off)
        rowid, pos = varint(data, pos)
        return signed(rowid), self._fields(data, pos, size)

    def _fields(self, data: bytes, pos: int, size: int) -> list[Any]:
        """Decode a table leaf cell's record.

        A cell whose payload fits its page and runs on past the record its header describes
        is read by the header: a flipped bit in the cell's size, the record itself intact (as
        SQLite's .recover reads it). A record that then reads other values than were written
        (its header's field sizes damaged) shifts the columns after it, which the indexes of
        the table show (recover_crosscheck).
        """
        try:
            return self._record(self._payload(data, pos, size))
        except ValueError:
            if size > self.usable - 35 or pos + size > self.usable:
                raise
            return self._record(data[pos : pos + size], tolerant=True)

    def leaf_cells(self, page: int) -> Iterator[LeafCell]:
        """Yield the cells of a table leaf page (fields None where a record is undecodable)."""
        data = self.read(page)
        base = 100 if page == 1 else 0
        if len(data) <= base or data[base] != LEAF_TABLE:
            return
        for i, off in enumerate(self.slots(data, base)):
            try:
                if not off:
                    continue
                size, pos = varint(data, off)
                rowid, pos = varint(data, pos)
            except IndexError:
                continue
            try:
                fields: list[Any] | None = self._fields(data, pos, size)
            except (ValueError, IndexError, struct.error):
                fields = None  # a damaged cell: the others on the page may still be fine
            yield LeafCell(i, signed(rowid), fields)

    def _payload(self, data: bytes, pos: int, size: int, *, index: bool = False) -> bytes:
        """Return a cell's payload (a table leaf's, or an index b-tree's), following its
        overflow chain."""
        max_local = (self.usable - 12) * 64 // 255 - 23 if index else self.usable - 35
        if size <= max_local:
            if pos + size > self.usable:
                raise ValueError("cell runs past the page")
            return data[pos : pos + size]
        local = self._local(size, max_local)
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

    def _record(self, payload: bytes, *, tolerant: bool = False) -> list[Any]:
        """Decode a record into its field values (tolerant: a payload longer than the record
        its header describes is accepted, its tail ignored)."""
        header_size, pos = varint(payload, 0)
        if header_size > len(payload):
            raise ValueError("record header runs past its payload")
        types = []
        while pos < header_size:
            byte = payload[pos]
            if byte < 0x80:  # most serial types fit one byte
                types.append(byte)
                pos += 1
            else:
                serial, pos = varint(payload, pos)
                types.append(serial)
        body = header_size
        fields: list[Any] = []
        widths = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}
        for serial in types:
            if serial >= 12:
                n = (serial - 12) >> 1
                raw = payload[body : body + n]
                fields.append(raw.decode(self.encoding, "replace") if serial & 1 else raw)
                body += n
            elif serial == 0:
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
            else:
                raise ValueError("reserved serial type")
        if body > len(payload) or (body < len(payload) and not tolerant):
            raise ValueError("record and payload sizes disagree")
        return fields

    def table_leaves(self, skip: set[int]) -> Iterator[int]:
        """Yield every table leaf page of the file that is not in skip."""
        for page in range(2, self.count + 1):
            if page in skip or page == self.lock_page:
                continue
            head = os.pread(self.fd, 8, (page - 1) * self.page_size)
            if head[:1] == b"\x0d":
                yield page
