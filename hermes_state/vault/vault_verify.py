"""Fingerprints and row-by-row comparison of sessions in two stores (a copy's verification)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from typing import Any

from hermes_state.store.sql import chunks, marks, quote


class _Digest:
    """An order-independent digest of rows: the sum of their hashes (mod 2**64)."""

    def __init__(self) -> None:
        self.total = 0

    def step(self, *values: Any) -> None:
        """Add one row."""
        h = hashlib.blake2b(repr(values).encode("utf-8", "surrogatepass"), digest_size=8)
        self.total = (self.total + int.from_bytes(h.digest(), "big")) % (1 << 64)

    def finalize(self) -> str:
        """Return the digest as hex."""
        return f"{self.total:016x}"


def _register(conn: sqlite3.Connection) -> None:
    try:
        conn.create_aggregate("hermes_vault_digest", -1, _Digest)  # type: ignore[arg-type]
    except sqlite3.OperationalError:
        # Already there: SQLite refuses to replace a function while a statement is pending.
        conn.execute("SELECT hermes_vault_digest(1)").fetchone()


Fingerprint = tuple[int, str, str]  # (messages, their digest, the session row's digest)


def _columns(conn: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA {schema}.table_info({quote(table)})")]


def _fingerprints(
    conn: sqlite3.Connection,
    schema: str,
    ids: Sequence[str],
    msg_cols: Sequence[str],
    session_cols: Sequence[str],
    *,
    with_ids: bool = True,
) -> dict[str, Fingerprint]:
    """Return each session's fingerprint from schema's rows (absent sessions are left out)."""
    _register(conn)
    mcols = [c for c in msg_cols if with_ids or c != "id"]
    scols = [c for c in session_cols if c != "title"]  # a title may be renamed on a clash
    out: dict[str, Fingerprint] = {}
    msgs: dict[str, tuple[int, str]] = {}
    for batch in chunks(ids):
        qs = marks(len(batch))
        for sid, n, digest in conn.execute(
            f"SELECT session_id, count(*), hermes_vault_digest({', '.join(map(quote, mcols))})"
            f" FROM {schema}.messages WHERE session_id IN ({qs}) GROUP BY session_id",
            batch,
        ):
            msgs[sid] = (int(n), str(digest))
        for sid, digest in conn.execute(
            f"SELECT id, hermes_vault_digest({', '.join(map(quote, scols))})"
            f" FROM {schema}.sessions WHERE id IN ({qs}) GROUP BY id",
            batch,
        ):
            n, mdigest = msgs.get(sid, (0, ""))
            out[sid] = (n, mdigest, str(digest))
    return out


def _differs(col: str) -> str:
    """SQL: column col of rows x and y differs, by value or storage class, byte for byte."""
    c = quote(col)
    return f"x.{c} IS NOT y.{c} COLLATE BINARY OR typeof(x.{c}) <> typeof(y.{c})"


def _mismatched(
    conn: sqlite3.Connection,
    a: str,
    b: str,
    ids: Sequence[str],
    msg_cols: Sequence[str],
    session_cols: Sequence[str],
) -> set[str]:
    """Return the sessions whose rows in schema a and schema b are not the same (compared in SQL,
    every value exactly): a session row, except its title (renamed on a clash), and the same
    set of message rows, ids included. A session absent from either side differs."""
    mdiff = " OR ".join(_differs(c) for c in msg_cols if c != "id")
    sdiff = " OR ".join(_differs(c) for c in session_cols if c not in ("id", "title"))
    out: set[str] = set()
    for batch in chunks(ids):
        qs = marks(len(batch))
        out.update(
            r[0]
            for r in conn.execute(
                f"SELECT DISTINCT x.session_id FROM {a}.messages x LEFT JOIN {b}.messages y"
                f" ON y.id = x.id WHERE x.session_id IN ({qs}) AND (y.id IS NULL OR {mdiff})",
                batch,
            )
        )
        counts = [
            dict(
                conn.execute(
                    f"SELECT session_id, count(*) FROM {side}.messages"
                    f" WHERE session_id IN ({qs}) GROUP BY session_id",
                    batch,
                ).fetchall()
            )
            for side in (a, b)
        ]
        # Every row of a has its equal in b (ids are unique): equal counts make the sets equal.
        out.update(s for s in batch if counts[0].get(s, 0) != counts[1].get(s, 0))
        present = [
            {
                r[0]
                for r in conn.execute(f"SELECT id FROM {side}.sessions WHERE id IN ({qs})", batch)
            }
            for side in (a, b)
        ]
        out.update(s for s in batch if s not in present[0] or s not in present[1])
        out.update(
            r[0]
            for r in conn.execute(
                f"SELECT x.id FROM {a}.sessions x JOIN {b}.sessions y ON y.id = x.id"
                f" WHERE x.id IN ({qs}) AND ({sdiff or '0'})",
                batch,
            )
        )
    if out:
        # A copy may hold a message under another id (a taken id was renumbered): compare those
        # sessions again by every value but the id, uid and content included.
        again = sorted(out)
        mine = _fingerprints(conn, a, again, msg_cols, session_cols, with_ids=False)
        theirs = _fingerprints(conn, b, again, msg_cols, session_cols, with_ids=False)
        out = {s for s in again if s not in mine or mine.get(s) != theirs.get(s)}
    return out
