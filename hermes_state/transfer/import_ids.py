"""Which message row ids an import keeps and which new ones it gives, across a profile's stores.

A profile is several stores (the live ``state.db`` and the vault's year stores); a message id
used in any of them is never used again by an import. The rule: an exported id is kept only
when it is above every id the profile's stores had when the import started (``floor``) and
is still free (so into an empty profile every id is kept, and a round trip is exact); the
messages of a session replaced by its own export may also keep the ids they had. Any other
message gets a new id above every store's ids and above every id in the import file, so a
renumbered session never takes ids a later session of the same file keeps (no cascade), and
every imported message lands above the high-water mark of any change feed read before it.
"""

from __future__ import annotations

import os
import re
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from hermes_state.store.sql import chunks, marks
from hermes_state.transfer.import_target import Fitting

# A JSON key "id" with a whole-number value. Inside a JSON string a quote is always escaped,
# so text never matches: only real "id" keys do (message ids; a nested object's integer id
# only raises the bound, which is harmless).
_ID_KEY = re.compile(r'"id"\s*:\s*(\d{1,19})(?!\d)')
# The same, over the file's bytes: no decoding, and JSON's whitespace is ASCII.
_ID_KEY_BYTES = re.compile(rb'"id"\s*:\s*(\d{1,19})(?!\d)')
_SCAN_CHUNK = 1 << 20
_CARRY = 64  # characters kept between chunks so a match across their border is found
SQLITE_INT_MAX = 2**63 - 1


@dataclass(frozen=True)
class OtherStores:
    """The profile's stores besides the one an import writes (its vault): the highest message
    id among them, and which of some session ids they hold (id -> where, e.g. "vault 2025")."""

    high_id: int = 0
    where: Callable[[Sequence[str]], dict[str, str]] = field(default=lambda _ids: {})


NO_OTHER_STORES = OtherStores()


def store_high_id(conn: sqlite3.Connection) -> int:
    """Return the highest message id a store has used: its rows' and AUTOINCREMENT's counter."""
    top = conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0]
    seq = 0
    has_seq = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'"
    ).fetchone()
    if has_seq is not None:
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchone()
        seq = int(row[0] or 0) if row is not None else 0
    return max(int(top), seq)


def _highest(found: Sequence[str | bytes]) -> int:
    """Return the highest of the matched digits that SQLite can hold as a row id (0: none)."""
    high = max(map(int, found), default=0)
    if high > SQLITE_INT_MAX:
        high = max((v for v in map(int, found) if v <= SQLITE_INT_MAX), default=0)
    return high


def _scan(text_chunks: Iterable[str], sink: IO[str] | None = None) -> int:
    """Return the highest whole-number "id" value in JSON text given in chunks (0: none);
    each chunk is also written to sink when one is given."""
    high = 0
    carry = ""
    for chunk in text_chunks:
        if sink is not None:
            sink.write(chunk)
        text = carry + chunk
        high = max(high, _highest(_ID_KEY.findall(text)))
        carry = text[-_CARRY:]
    return high


def _scan_bytes(fp: IO[bytes]) -> int:
    """Return the highest whole-number "id" value in a JSON file read as bytes (0: none)."""
    high = 0
    carry = b""
    while chunk := fp.read(_SCAN_CHUNK):
        data = carry + chunk
        high = max(high, _highest(_ID_KEY_BYTES.findall(data)))
        carry = data[-_CARRY:]
    return high


def _chunks_of(fp: IO[str]) -> Iterable[str]:
    while chunk := fp.read(_SCAN_CHUNK):
        yield chunk


def file_high_id(path: str | os.PathLike[str]) -> int:
    """Return the highest message id an export file names (0 for none or an unreadable file;
    reading it properly, and saying what is wrong, is the import's job)."""
    try:
        # Bytes: four times faster than decoding first, and an id key is ASCII either way.
        with open(path, "rb") as fp:
            return _scan_bytes(fp)
    except OSError:
        return 0


def spool(stream: IO[str], directory: Path) -> tuple[IO[str], int]:
    """Copy a stream that cannot be read twice (stdin) into an anonymous temporary file in
    directory; return it, rewound, and the highest message id it names. The file is gone
    when closed, or when the process dies."""
    tmp = tempfile.TemporaryFile(  # noqa: SIM115 - returned open; the caller closes it
        mode="w+", encoding="utf-8", newline="", dir=directory
    )
    try:
        high = _scan(_chunks_of(stream), tmp)
        tmp.seek(0)
    except BaseException:
        tmp.close()
        raise
    return tmp, high


def records_high_id(records: Sequence[Any]) -> int:
    """Return the highest message id of export records held in memory (0 for none)."""
    high = 0
    for record in records:
        msgs = record.get("messages") if isinstance(record, Mapping) else None
        if not isinstance(msgs, list):
            continue
        for msg in msgs:
            value = msg.get("id") if isinstance(msg, Mapping) else None
            if isinstance(value, bool) or not isinstance(value, int):
                continue
            if high < value <= SQLITE_INT_MAX:
                high = value
    return high


class IdPlan:
    """Gives an import's messages their row ids (see the module docstring for the rule)."""

    def __init__(self, others: OtherStores = NO_OTHER_STORES, file_high: int = 0) -> None:
        self.others_high = others.high_id
        self.file_high = file_high
        self.floor: int | None = None  # set by the import's first transaction, before it writes

    def start(self, conn: sqlite3.Connection) -> None:
        """Note every id the profile's stores hold now (once: later, the import's own count)."""
        if self.floor is None:
            self.floor = max(store_high_id(conn), self.others_high)

    def ids_for(
        self,
        conn: sqlite3.Connection,
        given: Sequence[int] | None,
        n: int,
        fitting: Fitting,
        *,
        own: frozenset[int] = frozenset(),
        above: int = 0,
    ) -> list[int] | None:
        """Return the row ids for n messages in order: the exported ones (``given``) when they
        may be kept, else new ones above every store's and the file's ids; None when n is 0.

        ``own`` are ids the session itself held here before a replace emptied it; messages
        appended to a session keep theirs only when all come after its last one (``above``),
        which keeps the conversation's order.
        """
        if n == 0:
            return None
        self.start(conn)
        floor = self.floor or 0
        if given is not None and len(given) == n:
            if (
                given[0] > above
                and (given[0] > floor or all(i > floor or i in own for i in given))
                and self._free(conn, given)
            ):
                fitting.kept_ids += n
                return list(given)
            fitting.renumbered += n
        base = max(store_high_id(conn), self.others_high, self.file_high, floor)
        if base + n > SQLITE_INT_MAX:
            raise OverflowError("no message ids left above the ones this profile and file use")
        return list(range(base + 1, base + n + 1))

    @staticmethod
    def _free(conn: sqlite3.Connection, ids: Sequence[int]) -> bool:
        """Tell whether no message of the store has any of these ids (a concurrent writer's
        new rows have ids above the floor too)."""
        # The ids ascend: no row anywhere between the first and the last (one range probe, the
        # usual case of an import into a store that lacks them) means none of them is taken.
        inside = conn.execute(
            "SELECT 1 FROM messages WHERE id BETWEEN ? AND ? LIMIT 1", (min(ids), max(ids))
        ).fetchone()
        if inside is None:
            return True
        for part in chunks(list(ids), 500):
            taken = conn.execute(
                f"SELECT 1 FROM messages WHERE id IN ({marks(len(part))}) LIMIT 1", part
            ).fetchone()
            if taken is not None:
                return False
        return True
