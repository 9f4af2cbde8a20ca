"""This package's CJK index: words of one and two characters (東京, 会議, 数据), found by index.

``unicode61`` keeps a whole CJK run as one token and trigrams need three characters, so neither of
the agent's indexes finds a 2-character word inside a sentence. ``hermes_cjk`` indexes, for rows
that contain CJK only, the CJK runs expanded into overlapping bigrams plus the run's last
character as a unigram (東京都 → ``東京 京都 都``), with FTS5's built-in ``ascii`` tokenizer (every
non-ASCII character is a token character, spaces split). A 2-character word is then one token,
longer words are phrases of bigrams, and a single character is the prefix query ``"東"*``.

It is an addition of this package (SPEC §19.2): its names are ones no Hermes Agent release
defines (and outside ``messages_fts%``, which an agent's schema repair deletes), and it never
needs a native extension. No trigger computes the expansion (that needs Python): a writer that is
not this library — the agent, the ``sqlite3`` shell — must never fail because of it. Instead
:func:`after_append`, called inside every append transaction of this library, indexes every row
above the high-water mark ``hermes_cjk_high_water``; rows other writers add are picked up by the
next append or :func:`catch_up`, and searched by a bounded scan until then. Plain SQL triggers keep
the index consistent when anyone deletes a row (remove by rowid) or edits one (remove, and queue
the row in ``hermes_cjk_pending`` for re-indexing); rows inserted below the mark are queued too.
"""

from __future__ import annotations

import functools
import logging
import re
import sqlite3
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from hermes_state.store import meta

log = logging.getLogger("hermes_state")

TABLE = "hermes_cjk"
PENDING_TABLE = "hermes_cjk_pending"
HIGH_WATER_KEY = "hermes_cjk_high_water"
OFF_KEY = "hermes_cjk_off"  # set: the owner turned the index off; migrations leave it out
TRIGGERS = ("hermes_cjk_insert", "hermes_cjk_delete", "hermes_cjk_update")
AFTER_APPEND_MAX_ROWS = 20_000  # catch-up bound per append transaction
AFTER_APPEND_MAX_PENDING = 200

# Objects of this index as the layout before SPEC §19 named them (removed by migrations).
LEGACY_TABLES = ("messages_fts_cjk_pending",)
LEGACY_TRIGGERS = ("messages_fts_cjk_ai", "messages_fts_cjk_ad", "messages_fts_cjk_au")
LEGACY_HIGH_WATER_KEY = "fts_cjk_high_water"

# CJK ideographs (+ extensions A/B), CJK symbols and punctuation, kana, hangul syllables.
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x3000, 0x303F),
    (0x3040, 0x309F),
    (0x30A0, 0x30FF),
    (0xAC00, 0xD7AF),
)
_CJK_CLASS = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in CJK_RANGES)


@functools.cache
def _pattern(runs: bool) -> re.Pattern[str]:
    """Compile the CJK character (or run) pattern on first use: it takes ~6 ms, which commands
    that never meet CJK text should not pay at start-up."""
    return re.compile(f"[{_CJK_CLASS}]" + ("+" if runs else ""))


def has_cjk(text: str) -> bool:
    """Tell whether text holds a CJK character."""
    return not text.isascii() and _pattern(False).search(text) is not None


def count_cjk(text: str) -> int:
    """Count the CJK characters of text."""
    return 0 if text.isascii() else len(_pattern(False).findall(text))


# GLOB pre-filter so catch-up only ships rows that contain CJK to Python.
_CJK_GLOB = f"*[{_CJK_CLASS}]*"
_HW_SQL = (
    f"COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = '{HIGH_WATER_KEY}'), 0)"
)

DDL: dict[str, str] = {
    TABLE: f"CREATE VIRTUAL TABLE {TABLE} USING fts5(grams, tokenize='ascii')",
    PENDING_TABLE: f"CREATE TABLE {PENDING_TABLE} (id INTEGER PRIMARY KEY)",
    # The triggers never compute grams (that needs Python): they only remove and queue.
    "hermes_cjk_insert": f"""CREATE TRIGGER hermes_cjk_insert AFTER INSERT ON messages
WHEN new.id <= {_HW_SQL}
BEGIN
    INSERT OR IGNORE INTO {PENDING_TABLE}(id) VALUES (new.id);
END""",
    "hermes_cjk_delete": f"""CREATE TRIGGER hermes_cjk_delete AFTER DELETE ON messages
BEGIN
    DELETE FROM {TABLE} WHERE rowid = old.id;
    DELETE FROM {PENDING_TABLE} WHERE id = old.id;
END""",
    "hermes_cjk_update": f"""CREATE TRIGGER hermes_cjk_update
AFTER UPDATE OF id, content, tool_calls ON messages
WHEN old.id IS NOT new.id OR old.content IS NOT new.content OR old.tool_calls IS NOT new.tool_calls
BEGIN
    DELETE FROM {TABLE} WHERE rowid = old.id;
    DELETE FROM {PENDING_TABLE} WHERE id = old.id AND old.id IS NOT new.id;
    INSERT OR IGNORE INTO {PENDING_TABLE}(id) SELECT new.id WHERE new.id <= {_HW_SQL};
END""",
}


# --- the projection --------------------------------------------------------------------------


def _is_word_char(ch: str) -> bool:
    """Tell whether a CJK-block character belongs to a word (not punctuation or a symbol)."""
    # Inside the CJK blocks, punctuation, spaces and symbols (、。「」・) break a run.
    return unicodedata.category(ch)[0] in "LNM"


def cjk_runs(text: str) -> list[str]:
    """Return the runs of CJK word characters in text, in order."""
    runs: list[str] = []
    if text.isascii():
        return runs
    for match in _pattern(True).finditer(text):
        current: list[str] = []
        for ch in match.group():
            if _is_word_char(ch):
                current.append(ch)
            elif current:
                runs.append("".join(current))
                current = []
        if current:
            runs.append("".join(current))
    return runs


def non_cjk_parts(text: str) -> list[str]:
    """Return the pieces of text left between its CJK characters."""
    return text.split() if text.isascii() else _pattern(True).sub(" ", text).split()


def cjk_grams(text: str) -> str:
    """Expand the CJK runs of text into the indexed form: overlapping bigrams + last unigram."""
    tokens: list[str] = []
    for run in cjk_runs(text):
        tokens.extend(run[i : i + 2] for i in range(len(run) - 1))
        tokens.append(run[-1])
    return " ".join(tokens)


def cjk_match_expr(run: str) -> str:
    """Return the hermes_cjk MATCH expression that finds the CJK word run."""
    if len(run) == 1:
        return f'"{run}"*'
    return '"' + " ".join(run[i : i + 2] for i in range(len(run) - 1)) + '"'


def _grams_for(content: object, tool_calls: object) -> str:
    """Return the CJK index text of a message (content and tool calls)."""
    # One C-level scan rejects the ~95 % of texts without CJK before the run-splitting work.
    parts = [v for v in (content, tool_calls) if isinstance(v, str) and has_cjk(v)]
    return " ".join(g for g in (cjk_grams(p) for p in parts) if g)


# --- the index ---------------------------------------------------------------------------------


def is_installed(conn: sqlite3.Connection) -> bool:
    """Tell whether the store has this index (its table, queue and triggers)."""
    names = {
        r[0]
        for r in conn.execute(
            f"SELECT name FROM sqlite_master WHERE name IN ({','.join('?' * len(DDL))})",
            tuple(DDL),
        )
    }
    return names == set(DDL)


def install(conn: sqlite3.Connection) -> bool:
    """Create the index's missing objects (caller's write transaction); tell whether it did.

    A freshly created index starts empty at mark 0: catch-up then walks every message.
    """
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    missing = [name for name in DDL if name not in have]
    if not missing:
        return False
    if TABLE in missing or PENDING_TABLE in missing:
        # Rows written while any piece was missing may be absent: start over from the first row.
        for name in (*TRIGGERS, TABLE, PENDING_TABLE):
            if name in have:
                kind = "TRIGGER" if name in TRIGGERS else "TABLE"
                conn.execute(f"DROP {kind} IF EXISTS {name}")
        for ddl in DDL.values():
            conn.execute(ddl)
    else:
        for name in missing:
            conn.execute(DDL[name])
    meta.put(conn, HIGH_WATER_KEY, 0)
    return True


def is_off(conn: sqlite3.Connection) -> bool:
    """Tell whether the store's owner turned this index off (`hermes db cjk-index off`)."""
    return bool(meta.get_int(conn, OFF_KEY))


def uninstall(conn: sqlite3.Connection) -> bool:
    """Drop the index, its queue and triggers, and mark it off so no migration brings it back
    (caller's write transaction); tell whether there was anything to drop."""
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    for name in TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
    conn.execute(f"DROP TABLE IF EXISTS {PENDING_TABLE}")
    meta.delete(conn, HIGH_WATER_KEY)
    meta.put(conn, OFF_KEY, 1)
    return bool(have & set(DDL))


def turn_on(conn: sqlite3.Connection) -> bool:
    """Clear the off mark and create the index, empty (caller's write transaction; catch-up
    fills it); tell whether anything was created."""
    meta.delete(conn, OFF_KEY)
    return install(conn)


def remove_legacy(conn: sqlite3.Connection) -> bool:
    """Drop this index's objects under the names used before SPEC §19; tell whether any were."""
    from hermes_state.store import fts

    found = False
    for name in LEGACY_TRIGGERS:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone():
            conn.execute(f"DROP TRIGGER IF EXISTS {name}")
            found = True
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages_fts_cjk'").fetchone()
    if row is not None and "grams" in (row[0] or ""):
        fts.drop_table(conn, "messages_fts_cjk")  # ours: an agent's CJK table has no "grams"
        found = True
    for name in LEGACY_TABLES:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone():
            conn.execute(f"DROP TABLE IF EXISTS {name}")
            found = True
    meta.delete(conn, LEGACY_HIGH_WATER_KEY)
    return found


def reset(conn: sqlite3.Connection) -> None:
    """Empty the index and its queue; catch-up then starts from the first message."""
    conn.execute(f"DELETE FROM {TABLE}")
    conn.execute(f"DELETE FROM {PENDING_TABLE}")
    meta.put(conn, HIGH_WATER_KEY, 0)


def _max_id(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0])


def catch_up(
    conn: sqlite3.Connection,
    *,
    max_rows: int | None = None,
    max_pending: int | None = None,
    high_water: int | None = None,
) -> int:
    """Index rows above the high-water mark and queued rows (caller's transaction).

    Returns how many rows were added. ``max_rows`` bounds how many rows above the mark are
    examined (None = all); ``high_water`` saves a read when the caller has it.
    """
    if high_water is None:
        high_water = meta.get_int(conn, HIGH_WATER_KEY) or 0
    top = _max_id(conn)
    indexed = 0
    if top > high_water:
        hi = top
        if max_rows is not None and top - high_water > max_rows:
            row = conn.execute(
                "SELECT id FROM messages WHERE id > ? ORDER BY id LIMIT 1 OFFSET ?",
                (high_water, max(0, max_rows - 1)),
            ).fetchone()
            if row is not None:
                hi = int(row[0])
        rows = conn.execute(
            "SELECT id, content, tool_calls FROM messages WHERE id > ? AND id <= ? "
            "AND (content GLOB ? OR tool_calls GLOB ?)",
            (high_water, hi, _CJK_GLOB, _CJK_GLOB),
        ).fetchall()
        # Rows above the mark are never in the index (every reset empties it): insert only.
        docs = [(rid, g) for rid, content, calls in rows if (g := _grams_for(content, calls))]
        conn.executemany(f"INSERT INTO {TABLE}(rowid, grams) VALUES (?, ?)", docs)
        indexed += len(docs)
        meta.put(conn, HIGH_WATER_KEY, hi)
    return indexed + _drain_pending(conn, max_pending)


def _index_row(conn: sqlite3.Connection, row_id: int, content: object, tool_calls: object) -> bool:
    """Replace a message's entry; tell whether it has CJK words."""
    conn.execute(f"DELETE FROM {TABLE} WHERE rowid = ?", (row_id,))
    grams = _grams_for(content, tool_calls)
    if not grams:
        return False
    conn.execute(f"INSERT INTO {TABLE}(rowid, grams) VALUES (?, ?)", (row_id, grams))
    return True


def _drain_pending(conn: sqlite3.Connection, max_pending: int | None) -> int:
    """Re-index queued rows (changed by writers other than this library); return how many."""
    indexed = 0
    limit = -1 if max_pending is None else max_pending
    queued = conn.execute(
        f"SELECT p.id, m.content, m.tool_calls FROM {PENDING_TABLE} p "
        "LEFT JOIN messages m ON m.id = p.id ORDER BY p.id LIMIT ?",
        (limit,),
    ).fetchall()
    for row_id, content, tool_calls in queued:
        indexed += _index_row(conn, row_id, content, tool_calls)
        conn.execute(f"DELETE FROM {PENDING_TABLE} WHERE id = ?", (row_id,))
    return indexed


def after_append(
    conn: sqlite3.Connection, new_rows: Sequence[tuple[int, object, object]] | None = None
) -> None:
    """Bring the index up to date inside an append transaction (bounded catch-up).

    new_rows, when given, are the (id, content, tool_calls) just inserted, in id order: if they
    sit right above the high-water mark they are indexed from memory, without re-reading them.
    A store without the index (an agent's store this package has not migrated) is left alone.
    """
    try:
        value = meta.get(conn, HIGH_WATER_KEY)
        if value is None:
            return  # not installed in this store
        high_water = meta.as_int(value) or 0
        if new_rows and new_rows[0][0] == high_water + 1:
            docs = [(r, g) for r, content, calls in new_rows if (g := _grams_for(content, calls))]
            if docs:
                conn.executemany(f"INSERT INTO {TABLE}(rowid, grams) VALUES (?, ?)", docs)
            meta.put(conn, HIGH_WATER_KEY, new_rows[-1][0])
            _drain_pending(conn, AFTER_APPEND_MAX_PENDING)
            return
        catch_up(
            conn,
            max_rows=AFTER_APPEND_MAX_ROWS,
            max_pending=AFTER_APPEND_MAX_PENDING,
            high_water=high_water,
        )
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        log.debug("cjk: catch-up skipped: %s", exc)


@dataclass(frozen=True)
class Status:
    """Where the index stands: installed, its high-water mark and queue."""

    installed: bool
    high_water: int
    pending: int
    max_id: int

    @property
    def behind(self) -> int:
        """Return how many rows are not in the index yet (above the mark, or queued)."""
        if not self.installed:
            return 0
        return max(0, self.max_id - self.high_water) + self.pending


def status(conn: sqlite3.Connection) -> Status:
    """Report the index's state (works on read-only connections)."""
    installed = is_installed(conn)
    top = _max_id(conn) if installed else 0
    pending = 0
    if installed:
        pending = int(conn.execute(f"SELECT count(*) FROM {PENDING_TABLE}").fetchone()[0])
    return Status(
        installed=installed,
        high_water=(meta.get_int(conn, HIGH_WATER_KEY) or 0) if installed else 0,
        pending=pending,
        max_id=top,
    )


def integrity_problems(conn: sqlite3.Connection) -> list[str]:
    """Check the index against messages: no entry for a message that is gone."""
    if not is_installed(conn):
        return []
    orphans = conn.execute(
        f"SELECT count(*) FROM {TABLE} c LEFT JOIN messages m ON m.id = c.rowid WHERE m.id IS NULL"
    ).fetchone()[0]
    return [f"{TABLE}: {orphans} indexed rows whose message is gone"] if orphans else []
