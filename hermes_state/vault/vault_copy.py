"""Copying session rows between the live store and a vault store (caller's transaction)."""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

from hermes_state.store import bulkload, cjk, fts, meta
from hermes_state.store.connection import Store, read_only_uri
from hermes_state.store.sql import chunks, marks, quote
from hermes_state.vault import vault_twins
from hermes_state.vault.vault import PROMPTS_TABLE
from hermes_state.vault.vault_verify import _columns


def _common(conn: sqlite3.Connection, table: str, a: str, b: str) -> list[str]:
    right = set(_columns(conn, b, table))
    return [c for c in _columns(conn, a, table) if c in right]


@contextlib.contextmanager
def _attached(store: Store, path: Path, name: str) -> Iterator[None]:
    """Attach another store read-only to this handle's connection for the block."""
    with store.lock:
        store.conn.execute(f"ATTACH DATABASE ? AS {name}", (read_only_uri(path),))
        try:
            yield
        finally:
            store.conn.execute(f"DETACH DATABASE {name}")


def _delete_copies(conn: sqlite3.Connection, schema: str, ids: Sequence[str]) -> int:
    """Delete these sessions' rows from a vault store (inside the caller's transaction)."""
    gone = 0
    for batch in chunks(ids):
        qs = marks(len(batch))
        conn.execute(f"DELETE FROM {schema}.messages WHERE session_id IN ({qs})", batch)
        if conn.execute(
            f"SELECT 1 FROM {schema}.sqlite_master WHERE name = 'session_model_usage'"
        ).fetchone():
            conn.execute(
                f"DELETE FROM {schema}.session_model_usage WHERE session_id IN ({qs})", batch
            )
        conn.execute(
            f"UPDATE {schema}.sessions SET parent_session_id = NULL"
            f" WHERE parent_session_id IN ({qs}) AND id NOT IN ({qs})",
            [*batch, *batch],
        )
        gone += conn.execute(f"DELETE FROM {schema}.sessions WHERE id IN ({qs})", batch).rowcount
    return gone


def _parents_first(conn: sqlite3.Connection, schema: str, ids: Sequence[str]) -> list[str]:
    """Order sessions so that each comes after its parent (foreign keys hold on insert)."""
    parent: dict[str, str | None] = {}
    for batch in chunks(ids):
        parent.update(
            conn.execute(
                f"SELECT id, parent_session_id FROM {schema}.sessions"
                f" WHERE id IN ({marks(len(batch))})",
                batch,
            ).fetchall()
        )
    depth: dict[str, int] = {}

    def level(sid: str) -> int:
        chain, seen = [], set()
        x: str | None = sid
        while x is not None and x in parent and x not in depth and x not in seen:
            seen.add(x)
            chain.append(x)
            x = parent[x]
        base = depth.get(x, -1) if x is not None else -1
        for node in reversed(chain):
            base += 1
            depth[node] = base
        return depth[sid]

    return sorted(parent, key=lambda s: (level(s), s))


def _copy_rows(
    conn: sqlite3.Connection,
    src: str,
    dst: str,
    ids: Sequence[str],
    *,
    keep_ids: bool = True,
    catch_up: bool = True,
) -> int:
    """Copy these sessions' rows from schema src to schema dst (caller's transaction); return
    how many messages got new ids (their ids were taken in dst)."""
    ordered = _parents_first(conn, src, ids)
    cols = _common(conn, "sessions", src, dst)
    names = ", ".join(map(quote, cols))
    # Titles are unique in every layout: one the other side already uses gets the id appended.
    values = ", ".join(
        f"CASE WHEN EXISTS (SELECT 1 FROM {dst}.sessions t WHERE t.title = s.title)"
        " THEN s.title || ' [' || s.id || ']' ELSE s.title END"
        if c == "title"
        else f"s.{quote(c)}"
        for c in cols
    )
    if (
        _has(conn, src, PROMPTS_TABLE)
        and _has(conn, dst, PROMPTS_TABLE)
        and ("system_prompt_hash" in cols)
    ):
        # Before the sessions: R30/R31 declare sessions.system_prompt_hash REFERENCES it.
        pcols = ", ".join(map(quote, _common(conn, PROMPTS_TABLE, src, dst)))
        for batch in chunks(ids):
            conn.execute(
                f"INSERT OR IGNORE INTO {dst}.{PROMPTS_TABLE} ({pcols}) SELECT {pcols}"
                f" FROM {src}.{PROMPTS_TABLE} WHERE hash IN (SELECT system_prompt_hash FROM"
                f" {src}.sessions WHERE id IN ({marks(len(batch))}))",
                batch,
            )
    for batch in chunks(ordered, 1):  # parents first, one statement each keeps the order
        conn.execute(
            f"INSERT INTO {dst}.sessions ({names}) SELECT {values} FROM {src}.sessions s"
            " WHERE s.id = ?",
            batch,
        )
    mcols = _common(conn, "messages", src, dst)
    written = _insert_written(conn, dst, mcols)
    renumbered = 0
    for batch in chunks(ids):
        qs = marks(len(batch))
        taken: list[int] = []
        if keep_ids:
            taken = [
                r[0]
                for r in conn.execute(
                    f"SELECT m.id FROM {src}.messages m JOIN {dst}.messages t ON t.id = m.id"
                    f" WHERE m.session_id IN ({qs})",
                    batch,
                )
            ]
        names = ", ".join(map(quote, mcols))
        conn.execute(
            f"INSERT INTO {dst}.messages ({names}) SELECT {names} FROM {src}.messages"
            f" WHERE session_id IN ({qs}) AND id NOT IN (SELECT value FROM json_each(?))"
            " ORDER BY id",
            [*batch, _json_ints(taken)],
        )
        pairs: list[tuple[int, int]] = []
        if taken:
            rest = [c for c in mcols if c != "id"]
            names = ", ".join(map(quote, rest))
            top = conn.execute(f"SELECT coalesce(max(id), 0) FROM {dst}.messages").fetchone()[0]
            conn.execute(
                f"INSERT INTO {dst}.messages ({names}) SELECT {names} FROM {src}.messages"
                " WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id",
                [_json_ints(taken)],
            )
            new_ids = [
                r[0]
                for r in conn.execute(
                    f"SELECT id FROM {dst}.messages WHERE id > ? ORDER BY id", (top,)
                )
            ]
            pairs = list(zip(sorted(taken), new_ids, strict=True))
            renumbered += len(taken)
        _restore_written(conn, src, dst, written, batch, pairs)
        if _has(conn, src, "session_model_usage") and _has(conn, dst, "session_model_usage"):
            ucols = ", ".join(map(quote, _common(conn, "session_model_usage", src, dst)))
            conn.execute(
                f"INSERT OR IGNORE INTO {dst}.session_model_usage ({ucols}) SELECT {ucols}"
                f" FROM {src}.session_model_usage WHERE session_id IN ({qs})",
                batch,
            )
    if catch_up and dst == "main" and meta.get(conn, cjk.HIGH_WATER_KEY) is not None:
        cjk.catch_up(conn)  # our CJK index is filled by the library, not by triggers
    return renumbered


_WINDOW_LOW = -(2**62)


def _defer_indexing(conn: sqlite3.Connection) -> bool:
    """Close the rebuild window of the vault store's word and substring indexes, so the rows
    this transaction copies are indexed in bulk by :func:`_index_copied`; tell whether it did.

    Only the agent's gated external layout can defer (see :mod:`bulkload`); any other layout,
    or a rebuild already pending, keeps its per-row triggers. No other connection ever sees the
    closed window: :func:`_index_copied` reopens it in the same transaction.
    """
    if not bulkload.gated_layout(conn, "insert"):
        return False
    # Ids in (_WINDOW_LOW, OPEN_TOP] are left to _index_copied; the triggers index any other.
    meta.put(conn, fts.HIGH_WATER_KEY, bulkload.OPEN_TOP)
    meta.put(conn, fts.PROGRESS_KEY, _WINDOW_LOW)
    return True


def _index_copied(conn: sqlite3.Connection, ids: Sequence[str]) -> None:
    """Index these sessions' messages in the vault store's word and substring indexes in one
    statement per index, and reopen the window (same transaction)."""
    idx = fts.indexes(conn)
    saved = {t: bulkload._hashsize(conn, t) for t in fts.INDEX_TABLES}
    for table in fts.INDEX_TABLES:
        bulkload._set_hashsize(conn, table, max(bulkload.BULK_HASHSIZE, saved[table] or 0))
    for index in (idx.word, idx.trigram):
        assert index is not None and index.content is not None
        cols = ", ".join(map(quote, index.columns))
        for batch in chunks(ids):
            conn.execute(
                f"INSERT INTO main.{quote(index.table)}(rowid, {cols}) SELECT id, {cols}"
                f" FROM main.{quote(index.content)} WHERE id IN (SELECT id FROM main.messages"
                f" WHERE session_id IN ({marks(len(batch))}) AND id > ? AND id <= ?)",
                [*batch, _WINDOW_LOW, bulkload.OPEN_TOP],
            )
    for table in fts.INDEX_TABLES:
        bulkload._set_hashsize(conn, table, saved[table])
    meta.delete(conn, fts.HIGH_WATER_KEY, fts.PROGRESS_KEY)


def _cjk_current(conn: sqlite3.Connection) -> bool:
    """Tell whether the vault store's CJK index holds every message (mark at the top, no queue)."""
    hw = meta.get_int(conn, cjk.HIGH_WATER_KEY)
    if hw is None or hw < fts.max_id(conn):
        return False
    return conn.execute(f"SELECT 1 FROM main.{cjk.PENDING_TABLE} LIMIT 1").fetchone() is None


def _cjk_index_copied(conn: sqlite3.Connection, ids: Sequence[str]) -> None:
    """Index the copied messages in the CJK index, which held every other row before the copy
    (see :func:`_cjk_current`), and move its mark to the top (same transaction)."""
    for batch in chunks(ids):
        qs = marks(len(batch))
        # CJK text is never ASCII: a byte count above the character count finds every candidate
        # row in C; _grams_for then decides, exactly as catch-up does.
        rows = conn.execute(
            "SELECT id, content, tool_calls FROM main.messages"
            f" WHERE session_id IN ({qs}) AND (length(CAST(content AS BLOB)) > length(content)"
            " OR length(CAST(tool_calls AS BLOB)) > length(tool_calls))",
            batch,
        ).fetchall()
        docs = [(rid, g) for rid, content, calls in rows if (g := cjk._grams_for(content, calls))]
        conn.executemany(f"INSERT INTO main.{cjk.TABLE}(rowid, grams) VALUES (?, ?)", docs)
        # Copied rows at or below the mark were queued by the insert trigger: indexed now.
        conn.execute(
            f"DELETE FROM main.{cjk.PENDING_TABLE} WHERE id IN"
            f" (SELECT id FROM main.messages WHERE session_id IN ({qs}))",
            batch,
        )
    meta.put(conn, cjk.HIGH_WATER_KEY, fts.max_id(conn))


_ASSIGNED = re.compile(r'"?(\w+)"?\s*=')


def _insert_written(conn: sqlite3.Connection, schema: str, cols: Sequence[str]) -> list[str]:
    """Return the message columns that schema's AFTER INSERT triggers on messages may rewrite
    (R30/R31 fill display_order, R31 mints message_uid), over-approximated from their SQL."""
    found: set[str] = set()
    for (sql,) in conn.execute(
        f"SELECT sql FROM {schema}.sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"
    ):
        text = str(sql or "")
        if re.search(r"\bAFTER\s+INSERT\b", text, re.I) and re.search(
            r"\bUPDATE\s+\"?messages\"?\s", text, re.I
        ):
            found.update(_ASSIGNED.findall(text))
    return [c for c in cols if c in found and c != "id"]


def _restore_written(
    conn: sqlite3.Connection,
    src: str,
    dst: str,
    written: Sequence[str],
    batch: Sequence[str],
    pairs: Sequence[tuple[int, int]],
) -> None:
    """Put back the source's values where dst's insert triggers rewrote a copied row: a copy is
    exact, or verification rightly refuses it (a NULL display_order would come back filled)."""
    qs = marks(len(batch))
    renumbered = _json_ints([new for _old, new in pairs])
    for col in map(quote, written):
        theirs = f"(SELECT s.{col} FROM {src}.messages s WHERE s.id = messages.id)"
        conn.execute(
            f"UPDATE {dst}.messages SET {col} = {theirs} WHERE session_id IN ({qs})"
            f" AND id NOT IN (SELECT value FROM json_each(?)) AND {col} IS NOT {theirs}",
            [*batch, renumbered],
        )
        for old, new in pairs:  # renumbered rows: matched by the order they were inserted in
            conn.execute(
                f"UPDATE {dst}.messages SET {col} = (SELECT {col} FROM {src}.messages"
                " WHERE id = ?) WHERE id = ?",
                (old, new),
            )


def _json_ints(values: Sequence[int]) -> str:
    return "[" + ",".join(str(int(v)) for v in values) + "]"


def _has(conn: sqlite3.Connection, schema: str, table: str) -> bool:
    row = conn.execute(
        f"SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    return row is not None


def _in_both(live: Store, vault: Store) -> list[str]:
    """Return the session ids the vault store holds that the live store has too."""
    ids = [r[0] for r in vault.conn.execute("SELECT id FROM sessions")]
    there: list[str] = []
    for batch in chunks(ids):
        there += [
            r[0]
            for r in live.conn.execute(
                f"SELECT id FROM sessions WHERE id IN ({marks(len(batch))})", batch
            )
        ]
    return there


def _drop_held_copies(vault: Store, live_path: Path, ids: Sequence[str]) -> tuple[int, list[str]]:
    """Delete the vault copies of these sessions whose every message the live store holds;
    return (sessions dropped, sessions kept because the vault holds history live lacks).

    Checked inside the vault's delete transaction against the live store attached: no copy
    whose content is not in the live store is ever deleted (a resumed session keeps its part).
    """
    if not ids:
        return 0, []
    with _attached(vault, live_path, "live"):

        def drop(conn: sqlite3.Connection) -> tuple[int, list[str]]:
            lacking = vault_twins.unmatched_in(conn, "main", "live", ids)
            held = [s for s in ids if s not in lacking]
            present = {
                r[0]
                for batch in chunks(held)
                for r in conn.execute(
                    f"SELECT id FROM live.sessions WHERE id IN ({marks(len(batch))})", batch
                )
            }
            gone = [s for s in held if s in present]
            return _delete_copies(conn, "main", gone), sorted(lacking)

        result: tuple[int, list[str]] = vault.write(drop)
        return result


def _title_clashes(conn: sqlite3.Connection, src: str, dst: str, ids: Sequence[str]) -> int:
    """Count the titles of these src sessions that dst already uses (renamed on the copy)."""
    count = 0
    for batch in chunks(ids):
        count += int(
            conn.execute(
                f"SELECT count(*) FROM {src}.sessions s WHERE s.id IN ({marks(len(batch))})"
                f" AND s.title IS NOT NULL AND EXISTS (SELECT 1 FROM {dst}.sessions t"
                " WHERE t.title = s.title)",
                batch,
            ).fetchone()[0]
        )
    return count
