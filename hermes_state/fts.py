"""Full-text indexes over messages: words, substrings and CJK words, kept in step with the table.

Three FTS5 tables, all derived data (they can always be dropped and rebuilt from ``messages``):

``messages_fts`` — the word index: default ``unicode61`` tokenizer, external content over
``messages(content, tool_name, tool_calls)``. SQL triggers keep it in step; deletes and updates use
the FTS5 ``'delete'`` command with the old values, and the update trigger fires only when an indexed
column really changes (flipping ``active``/``compacted`` never touches FTS).

``messages_fts_trigram`` — substring search (``ocker`` finds ``docker``). Size decides its shape:
the store must stay within 2.5x the raw message text, and the messages table alone takes ~1.35x
(row overhead, uids, indexes ~0.1x more), the word index ~0.5x. A trigram index with the default
``detail=full`` stores a position list per trigram occurrence and takes ~2.5x the text it covers;
``detail='none'`` stores only which rows hold each trigram (~0.5x) and still serves
``LIKE '%…%'``: FTS5 intersects the trigram doclists and re-checks the pattern against the row, so
answers are exact (phrase MATCH and ranking are refused, which substring search does not need: its
hits are ordered newest first). It is external content (the text is not stored twice, and
triggers issue ``'delete'`` with the old value) over the view ``messages_fts_trigram_src``: the
``content`` of rows that are not ``role='tool'``. Tool output (logs, hashes, file dumps) is most of
the text and nearly every one of its trigrams is distinct; the word index still finds its words.
Measured by ``bench/fts_sizes.py`` at 1 M messages: word 0.48x, trigram 0.15x, CJK 0.04x, whole
file 2.14x the raw text (a trigram over every row's content would add ~0.3x more).

``messages_fts_cjk`` — CJK words of one and two characters (東京, 会議, 数据). ``unicode61`` keeps
a whole CJK run as one token, and trigrams need three characters, so neither finds a 2-character
word inside a sentence. This table indexes, for rows that contain CJK only, the CJK runs expanded
into overlapping bigrams plus the run's last character as a unigram (東京都 → ``東京 京都 都``),
with the ``ascii`` tokenizer (every non-ASCII character is a token character, spaces split). A
2-character word is then one token, longer words are phrases of bigrams, and a single character is
the prefix query ``"東"*`` (every occurrence starts a token). The expansion is done in Python,
so no trigger may compute it (a writer that is not this library, e.g. the ``sqlite3`` shell, must
never fail because of a missing function). Instead :func:`after_append` — called by the library
inside every append transaction — catches up every row above the high-water mark
``fts_cjk_high_water`` in ``state_meta``; rows written by foreign writers are picked up by the next
library append or :func:`catch_up_cjk`, and searched by a bounded scan until then. Plain SQL
triggers keep it consistent on delete (remove by rowid) and update (remove by rowid and queue the
row in ``messages_fts_cjk_pending`` for re-indexing); rows inserted below the high-water mark
(imports that keep their ids) are queued too.

Rebuild gating: the word and trigram triggers index a row only if ``id > fts_rebuild_high_water OR
id <= fts_rebuild_progress`` (``state_meta``; both absent = always). A chunked rebuild empties both
indexes, sets the high water to the current maximum id and walks ids upward, advancing the progress
key in the same transaction as each chunk, so writers keep appending and no row is indexed twice.
Rows in ``(progress, high_water]`` are found by search through a bounded scan.

A store flagged ``fts_stale`` (an index that cannot be trusted) has its triggers dropped so writers
never touch a damaged index; search serves it by a bounded scan, and the next writable open
(:func:`install`) or :func:`rebuild_fts` recreates and rebuilds the indexes.
"""

from __future__ import annotations

import functools
import logging
import re
import sqlite3
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hermes_state.errors import is_lock_error

if TYPE_CHECKING:
    from hermes_state.connection import Store

log = logging.getLogger("hermes_state")

WORD_TABLE = "messages_fts"
TRIGRAM_TABLE = "messages_fts_trigram"
CJK_TABLE = "messages_fts_cjk"
CJK_PENDING_TABLE = "messages_fts_cjk_pending"
TRIGRAM_SOURCE = "messages_fts_trigram_src"
INDEX_TABLES = (WORD_TABLE, TRIGRAM_TABLE, CJK_TABLE)

HIGH_WATER_KEY = "fts_rebuild_high_water"
PROGRESS_KEY = "fts_rebuild_progress"
STALE_KEY = "fts_stale"
CJK_HIGH_WATER_KEY = "fts_cjk_high_water"
FTS_META_KEYS = (HIGH_WATER_KEY, PROGRESS_KEY, STALE_KEY, CJK_HIGH_WATER_KEY)

REBUILD_CHUNK = 2000  # ids per rebuild transaction: short enough that writers barely wait
INLINE_REBUILD_MAX_ROWS = 20_000  # install rebuilds smaller stores at once, larger ones in chunks
AFTER_APPEND_MAX_ROWS = 20_000  # CJK catch-up bound per append transaction
AFTER_APPEND_MAX_PENDING = 200

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
CJK_RE = re.compile(f"[{_CJK_CLASS}]")
_CJK_RUN_RE = re.compile(f"[{_CJK_CLASS}]+")
# GLOB pre-filter so catch-up only ships rows that contain CJK to Python.
_CJK_GLOB = f"*[{_CJK_CLASS}]*"


def _gate(ref: str) -> str:
    """SQL predicate: the row with this id belongs to the indexed set (see module docstring)."""
    return (
        f"({ref} > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta "
        f"WHERE key = '{HIGH_WATER_KEY}'), -1) "
        f"OR {ref} <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta "
        f"WHERE key = '{PROGRESS_KEY}'), -1))"
    )


_CJK_HW_SQL = (
    "COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta "
    f"WHERE key = '{CJK_HIGH_WATER_KEY}'), 0)"
)

TABLE_DDL: dict[str, str] = {
    # Trigram content: tool output (logs, hashes, file dumps) is left to the word index.
    TRIGRAM_SOURCE: (
        f"CREATE VIEW {TRIGRAM_SOURCE} AS SELECT id, content FROM messages WHERE role IS NOT 'tool'"
    ),
    WORD_TABLE: (
        f"CREATE VIRTUAL TABLE {WORD_TABLE} USING fts5("
        "content, tool_name, tool_calls, content='messages', content_rowid='id')"
    ),
    TRIGRAM_TABLE: (
        f"CREATE VIRTUAL TABLE {TRIGRAM_TABLE} USING fts5("
        f"content, content='{TRIGRAM_SOURCE}', content_rowid='id', "
        "tokenize='trigram', detail='none')"
    ),
    CJK_TABLE: f"CREATE VIRTUAL TABLE {CJK_TABLE} USING fts5(grams, tokenize='ascii')",
    CJK_PENDING_TABLE: f"CREATE TABLE {CJK_PENDING_TABLE} (id INTEGER PRIMARY KEY)",
}

_WORDS_CHANGED = (
    "(old.id IS NOT new.id OR old.content IS NOT new.content "
    "OR old.tool_name IS NOT new.tool_name OR old.tool_calls IS NOT new.tool_calls)"
)
_TRIGRAM_CHANGED = (
    "(old.id IS NOT new.id OR old.content IS NOT new.content OR old.role IS NOT new.role)"
)

TRIGGER_DDL: dict[str, str] = {
    "messages_fts_ai": f"""CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages
WHEN {_gate("new.id")}
BEGIN
    INSERT INTO {WORD_TABLE}(rowid, content, tool_name, tool_calls)
        VALUES (new.id, new.content, new.tool_name, new.tool_calls);
    INSERT INTO {TRIGRAM_TABLE}(rowid, content)
        SELECT new.id, new.content WHERE new.role IS NOT 'tool';
END""",
    "messages_fts_ad": f"""CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages
WHEN {_gate("old.id")}
BEGIN
    INSERT INTO {WORD_TABLE}({WORD_TABLE}, rowid, content, tool_name, tool_calls)
        VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
    INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, rowid, content)
        SELECT 'delete', old.id, old.content WHERE old.role IS NOT 'tool';
END""",
    # Each statement carries its own gate: an id change moves a row across the gate.
    "messages_fts_au": f"""CREATE TRIGGER messages_fts_au
AFTER UPDATE OF id, role, content, tool_name, tool_calls ON messages
WHEN {_WORDS_CHANGED} OR {_TRIGRAM_CHANGED}
BEGIN
    INSERT INTO {WORD_TABLE}({WORD_TABLE}, rowid, content, tool_name, tool_calls)
        SELECT 'delete', old.id, old.content, old.tool_name, old.tool_calls
        WHERE {_WORDS_CHANGED} AND {_gate("old.id")};
    INSERT INTO {WORD_TABLE}(rowid, content, tool_name, tool_calls)
        SELECT new.id, new.content, new.tool_name, new.tool_calls
        WHERE {_WORDS_CHANGED} AND {_gate("new.id")};
    INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, rowid, content)
        SELECT 'delete', old.id, old.content
        WHERE {_TRIGRAM_CHANGED} AND old.role IS NOT 'tool' AND {_gate("old.id")};
    INSERT INTO {TRIGRAM_TABLE}(rowid, content)
        SELECT new.id, new.content
        WHERE {_TRIGRAM_CHANGED} AND new.role IS NOT 'tool' AND {_gate("new.id")};
END""",
    # CJK triggers never compute grams (that needs Python): they only remove and queue.
    "messages_fts_cjk_ai": f"""CREATE TRIGGER messages_fts_cjk_ai AFTER INSERT ON messages
WHEN new.id <= {_CJK_HW_SQL}
BEGIN
    INSERT OR IGNORE INTO {CJK_PENDING_TABLE}(id) VALUES (new.id);
END""",
    "messages_fts_cjk_ad": f"""CREATE TRIGGER messages_fts_cjk_ad AFTER DELETE ON messages
BEGIN
    DELETE FROM {CJK_TABLE} WHERE rowid = old.id;
    DELETE FROM {CJK_PENDING_TABLE} WHERE id = old.id;
END""",
    "messages_fts_cjk_au": f"""CREATE TRIGGER messages_fts_cjk_au
AFTER UPDATE OF id, content, tool_calls ON messages
WHEN old.id IS NOT new.id OR old.content IS NOT new.content OR old.tool_calls IS NOT new.tool_calls
BEGIN
    DELETE FROM {CJK_TABLE} WHERE rowid = old.id;
    DELETE FROM {CJK_PENDING_TABLE} WHERE id = old.id AND old.id IS NOT new.id;
    INSERT OR IGNORE INTO {CJK_PENDING_TABLE}(id) SELECT new.id WHERE new.id <= {_CJK_HW_SQL};
END""",
}


# --- layout --------------------------------------------------------------------------------


@functools.cache
def _reference_objects() -> dict[str, tuple[str, str]]:
    """Return name -> (type, sql) of every schema object our layout creates (shadow tables too)."""
    from hermes_state import schema

    mem = sqlite3.connect(":memory:")
    try:
        mem.execute(schema.MESSAGES_DDL)
        mem.execute(schema.STATE_META_DDL)
        before = {r[0] for r in mem.execute("SELECT name FROM sqlite_master")}
        for ddl in (*TABLE_DDL.values(), *TRIGGER_DDL.values()):
            mem.execute(ddl)
        return {
            name: (typ, sql)
            for typ, name, sql in mem.execute("SELECT type, name, sql FROM sqlite_master")
            if name not in before
        }
    finally:
        mem.close()


def _live_objects(conn: sqlite3.Connection) -> dict[str, tuple[str, str]]:
    """Return name -> (type, sql) of every FTS-related object in the store (ours or foreign)."""
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master "
        "WHERE name LIKE 'messages\\_fts%' ESCAPE '\\' OR (type = 'trigger' "
        "AND tbl_name = 'messages' AND sql LIKE '%messages\\_fts%' ESCAPE '\\')"
    ).fetchall()
    return {r[1]: (r[0], r[2]) for r in rows}


def layout_is_current(conn: sqlite3.Connection) -> bool:
    """Tell whether the store's FTS tables and triggers are exactly ours (nothing foreign)."""
    return _live_objects(conn) == _reference_objects()


def is_installed(conn: sqlite3.Connection) -> bool:
    """Tell cheaply whether our FTS layout is in place and not flagged stale."""
    return layout_is_current(conn) and _meta(conn, STALE_KEY) is None


def install(conn: sqlite3.Connection) -> None:
    """Put our FTS layout in place inside the caller's write transaction, replacing foreign ones.

    Indexes that had to be (re)created are rebuilt at once on small stores and scheduled for a
    chunked rebuild (:func:`rebuild_fts`) on large ones.
    """
    if is_installed(conn):
        return
    words, cjk = _replace_layout(conn)
    _schedule_rebuild(conn, words=words, cjk=cjk)


def _replace_layout(conn: sqlite3.Connection) -> tuple[bool, bool]:
    """Drop foreign or damaged FTS objects and create ours; return (words, cjk) recreated."""
    stale = _meta(conn, STALE_KEY) is not None
    expected = _reference_objects()
    live = _live_objects(conn)
    recreate: set[str] = set()
    # Triggers and views first: they reference the tables dropped below.
    for name, (typ, sql) in live.items():
        if typ == "trigger" and (stale or expected.get(name) != (typ, sql)):
            conn.execute(f'DROP TRIGGER IF EXISTS "{name}"')
        elif typ == "view" and expected.get(name) != (typ, sql):
            conn.execute(f'DROP VIEW IF EXISTS "{name}"')
            recreate.add(TRIGRAM_TABLE)  # its content source changes
    for table in INDEX_TABLES:
        if stale or live.get(table) != expected[table] or table in recreate:
            recreate.add(table)
            if table in live:
                _drop_virtual_table(conn, table)
    # Rows written while a sync trigger was missing are absent from its index: rebuild that too.
    for name in TRIGGER_DDL:
        if live.get(name) != expected[name]:
            recreate.add(CJK_TABLE if name.startswith(CJK_TABLE) else WORD_TABLE)
    # Leftovers: shadow tables of foreign tables, tables of older layouts, a foreign pending table.
    for name, (typ, sql) in _live_objects(conn).items():
        virtual = (sql or "").upper().startswith("CREATE VIRTUAL")
        if typ == "table" and expected.get(name) != (typ, sql) and not virtual:
            conn.execute(f'DROP TABLE IF EXISTS "{name}"')
    have = set(_live_objects(conn))
    for name, ddl in (*TABLE_DDL.items(), *TRIGGER_DDL.items()):
        if name not in have:
            conn.execute(ddl)
    if recreate:
        log.info("fts: (re)created %s; rebuilding", ", ".join(sorted(recreate)))
    _delete_meta(conn, STALE_KEY)
    return bool(recreate & {WORD_TABLE, TRIGRAM_TABLE}), CJK_TABLE in recreate


def _drop_virtual_table(conn: sqlite3.Connection, name: str) -> None:
    """Drop an FTS table, even one whose tokenizer or module cannot be loaded in this process."""
    try:
        conn.execute(f'DROP TABLE IF EXISTS "{name}"')
        return
    except sqlite3.OperationalError as exc:
        if is_lock_error(exc):
            raise
        # e.g. upstream's cjk_unicode61 tokenizer: DROP must construct the table and cannot.
        log.warning("fts: removing %s through the schema table (%s)", name, exc)
    cookie = conn.execute("PRAGMA schema_version").fetchone()[0]
    conn.execute("PRAGMA writable_schema = ON")
    try:
        conn.execute("DELETE FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        # The schema really changed: a new cookie makes every connection (this one too) reload it.
        conn.execute(f"PRAGMA schema_version = {int(cookie) + 1}")
    finally:
        conn.execute("PRAGMA writable_schema = OFF")
    # The shadow tables are ordinary tables now; dropping them frees their pages.
    for suffix in ("data", "idx", "content", "docsize", "config"):
        conn.execute(f'DROP TABLE IF EXISTS "{name}_{suffix}"')


def drop_foreign_triggers(conn: sqlite3.Connection) -> None:
    """Drop FTS triggers on messages that are not ours (before migrations touch messages).

    Another layout's triggers may write to a table this process cannot load (upstream's
    ``cjk_unicode61`` tokenizer), which would make every later UPDATE of messages fail;
    :func:`install` then sees the missing triggers and rebuilds the indexes they fed.
    """
    expected = _reference_objects()
    for name, (typ, sql) in _live_objects(conn).items():
        if typ == "trigger" and expected.get(name) != (typ, sql):
            conn.execute(f'DROP TRIGGER IF EXISTS "{name}"')


def drop_triggers(conn: sqlite3.Connection) -> None:
    """Drop every FTS sync trigger on messages (ours or foreign)."""
    for name, (typ, _sql) in _live_objects(conn).items():
        if typ == "trigger":
            conn.execute(f'DROP TRIGGER IF EXISTS "{name}"')


def mark_stale(conn: sqlite3.Connection, reason: str = "1") -> None:
    """Flag the indexes as untrustworthy: drop the triggers; search scans until a rebuild."""
    _set_meta(conn, STALE_KEY, reason)
    drop_triggers(conn)


# --- state_meta helpers --------------------------------------------------------------------


def _meta(conn: sqlite3.Connection, key: str) -> str | None:
    """Return a state_meta value (None when absent, or when the table does not exist)."""
    try:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return None if row is None else row[0]


def _metas(conn: sqlite3.Connection, keys: Sequence[str]) -> dict[str, str]:
    """Return the state_meta values of keys that are present, in one statement."""
    try:
        rows = conn.execute(
            f"SELECT key, value FROM state_meta WHERE key IN ({', '.join('?' * len(keys))})",
            tuple(keys),
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return {}
        raise
    return {k: v for k, v in rows}


def _as_int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _meta_int(conn: sqlite3.Connection, key: str) -> int | None:
    """Return a state_meta value as an integer (None when absent or not a number)."""
    return _as_int(_meta(conn, key))


def _set_meta(conn: sqlite3.Connection, key: str, value: object) -> None:
    """Set a state_meta value."""
    conn.execute(
        "INSERT INTO state_meta(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, str(value)),
    )


def _delete_meta(conn: sqlite3.Connection, *keys: str) -> None:
    """Remove state_meta keys."""
    conn.executemany("DELETE FROM state_meta WHERE key = ?", [(k,) for k in keys])


def _max_id(conn: sqlite3.Connection) -> int:
    """Return the highest message id (0 for an empty store)."""
    return int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0])


@dataclass(frozen=True)
class FtsStatus:
    """Where the indexes stand: layout, stale flag, rebuild window and CJK catch-up."""

    installed: bool
    stale: bool
    high_water: int | None
    progress: int | None
    cjk_high_water: int | None
    cjk_pending: int
    max_id: int

    @property
    def rebuild_pending(self) -> bool:
        """Tell whether a chunked rebuild has rows left to index."""
        return self.high_water is not None

    @property
    def cjk_behind(self) -> int:
        """Return how many ids above the CJK high-water mark are not yet in the CJK index."""
        return max(0, self.max_id - (self.cjk_high_water or 0)) + self.cjk_pending


def status(conn: sqlite3.Connection) -> FtsStatus:
    """Report the FTS state of the store (works on read-only connections)."""
    current = layout_is_current(conn)
    pending = 0
    if current:
        pending = int(conn.execute(f"SELECT count(*) FROM {CJK_PENDING_TABLE}").fetchone()[0])
    meta = _metas(conn, (STALE_KEY, HIGH_WATER_KEY, PROGRESS_KEY, CJK_HIGH_WATER_KEY))
    return FtsStatus(
        installed=current,
        stale=meta.get(STALE_KEY) is not None,
        high_water=_as_int(meta.get(HIGH_WATER_KEY)),
        progress=_as_int(meta.get(PROGRESS_KEY)),
        cjk_high_water=_as_int(meta.get(CJK_HIGH_WATER_KEY)),
        cjk_pending=pending,
        max_id=_max_id(conn),
    )


def rebuild_pending(conn: sqlite3.Connection) -> bool:
    """Tell whether a chunked rebuild of the word/trigram indexes is under way."""
    return _meta(conn, HIGH_WATER_KEY) is not None


# --- rebuilds ------------------------------------------------------------------------------


def _schedule_rebuild(conn: sqlite3.Connection, *, words: bool, cjk: bool) -> None:
    """Empty the named indexes and rebuild them now (small store) or mark them for chunking."""
    max_id = _max_id(conn)
    small = max_id <= INLINE_REBUILD_MAX_ROWS
    if words:
        if small:
            _rebuild_words(conn)
        else:
            _start_chunked_rebuild(conn, max_id)
    if cjk or _meta(conn, CJK_HIGH_WATER_KEY) is None:
        # Without a mark nothing is known to be indexed: catch up from the start (idempotent).
        _reset_cjk(conn)
        if small:
            catch_up_cjk(conn)


def _reset_cjk(conn: sqlite3.Connection) -> None:
    """Empty the CJK index and its queue; catch-up then starts from the first message."""
    conn.execute(f"DELETE FROM {CJK_TABLE}")
    conn.execute(f"DELETE FROM {CJK_PENDING_TABLE}")
    _set_meta(conn, CJK_HIGH_WATER_KEY, 0)


def _rebuild_words(conn: sqlite3.Connection) -> None:
    """Rebuild the word and trigram indexes completely from messages (caller's transaction)."""
    _delete_meta(conn, HIGH_WATER_KEY, PROGRESS_KEY)
    conn.execute(f"INSERT INTO {WORD_TABLE}({WORD_TABLE}) VALUES ('rebuild')")
    conn.execute(f"INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}) VALUES ('rebuild')")


def _start_chunked_rebuild(conn: sqlite3.Connection, max_id: int) -> None:
    """Empty the word and trigram indexes and open the (0, max_id] rebuild window."""
    conn.execute(f"INSERT INTO {WORD_TABLE}({WORD_TABLE}) VALUES ('delete-all')")
    conn.execute(f"INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}) VALUES ('delete-all')")
    if max_id == 0:
        _delete_meta(conn, HIGH_WATER_KEY, PROGRESS_KEY)
        return
    _set_meta(conn, HIGH_WATER_KEY, max_id)
    _set_meta(conn, PROGRESS_KEY, 0)


def rebuild_all(conn: sqlite3.Connection) -> None:
    """Rebuild every FTS index completely inside the caller's write transaction."""
    if not is_installed(conn):
        _replace_layout(conn)
    _rebuild_words(conn)
    _reset_cjk(conn)
    catch_up_cjk(conn)


@dataclass(frozen=True)
class RebuildProgress:
    """Where a chunked rebuild stands after a step."""

    progress: int
    high_water: int
    cjk_high_water: int
    done: bool


def rebuild_fts_step(
    target: sqlite3.Connection | Store, chunk: int = REBUILD_CHUNK
) -> RebuildProgress:
    """Index the next chunk of a pending rebuild (and of CJK catch-up) in one transaction.

    With a Store the step runs in its own write transaction; with a connection it runs inside the
    caller's transaction.
    """
    if isinstance(target, sqlite3.Connection):
        return _rebuild_step(target, chunk)
    return target.write(lambda conn: _rebuild_step(conn, chunk))


def _rebuild_step(conn: sqlite3.Connection, chunk: int) -> RebuildProgress:
    """Index one chunk of the rebuild window and of CJK catch-up (caller's transaction)."""
    high_water = _meta_int(conn, HIGH_WATER_KEY)
    progress = _meta_int(conn, PROGRESS_KEY) or 0
    if high_water is not None:
        hi = min(progress + max(1, chunk), high_water)
        params = (progress, hi)
        conn.execute(
            f"INSERT INTO {WORD_TABLE}(rowid, content, tool_name, tool_calls) "
            "SELECT id, content, tool_name, tool_calls FROM messages WHERE id > ? AND id <= ?",
            params,
        )
        conn.execute(
            f"INSERT INTO {TRIGRAM_TABLE}(rowid, content) SELECT id, content FROM messages "
            "WHERE id > ? AND id <= ? AND role IS NOT 'tool'",
            params,
        )
        if hi >= high_water:
            _delete_meta(conn, HIGH_WATER_KEY, PROGRESS_KEY)
        else:
            _set_meta(conn, PROGRESS_KEY, hi)
        progress = hi
    catch_up_cjk(conn, max_rows=chunk, max_pending=chunk)
    cjk_hw = _meta_int(conn, CJK_HIGH_WATER_KEY) or 0
    pending = conn.execute(f"SELECT 1 FROM {CJK_PENDING_TABLE} LIMIT 1").fetchone()
    words_done = _meta(conn, HIGH_WATER_KEY) is None
    return RebuildProgress(
        progress=progress,
        high_water=high_water if high_water is not None else progress,
        cjk_high_water=cjk_hw,
        done=words_done and cjk_hw >= _max_id(conn) and pending is None,
    )


def start_rebuild(conn: sqlite3.Connection) -> None:
    """Begin a fresh chunked rebuild of every index (caller's write transaction)."""
    if not is_installed(conn):
        _replace_layout(conn)  # recreate damaged or foreign tables and triggers first
    _start_chunked_rebuild(conn, _max_id(conn))
    _reset_cjk(conn)


def rebuild_fts(
    store: Store,
    *,
    chunk: int = REBUILD_CHUNK,
    on_progress: Callable[[RebuildProgress], None] | None = None,
) -> RebuildProgress:
    """Rebuild every index in chunks, each its own write transaction (resumes a pending rebuild)."""

    def begin(conn: sqlite3.Connection) -> None:
        """Start a fresh rebuild unless one is pending."""
        if _meta(conn, HIGH_WATER_KEY) is None:
            start_rebuild(conn)

    store.write(begin)
    while True:
        step = rebuild_fts_step(store, chunk)
        if on_progress is not None:
            on_progress(step)
        if step.done:
            return step


def optimize(conn: sqlite3.Connection) -> None:
    """Merge each index's segments into one (gives space back after large deletes)."""
    for table in INDEX_TABLES:
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")


# --- CJK projection ------------------------------------------------------------------------


def _is_word_char(ch: str) -> bool:
    """Tell whether a CJK-block character belongs to a word (not punctuation or a symbol)."""
    # Inside the CJK blocks, punctuation, spaces and symbols (、。「」・) break a run.
    return unicodedata.category(ch)[0] in "LNM"


def cjk_runs(text: str) -> list[str]:
    """Return the runs of CJK word characters in text, in order."""
    runs = []
    for match in _CJK_RUN_RE.finditer(text):
        current = []
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
    return _CJK_RUN_RE.sub(" ", text).split()


def cjk_grams(text: str) -> str:
    """Expand the CJK runs of text into the indexed form: overlapping bigrams + last unigram."""
    tokens: list[str] = []
    for run in cjk_runs(text):
        tokens.extend(run[i : i + 2] for i in range(len(run) - 1))
        tokens.append(run[-1])
    return " ".join(tokens)


def cjk_match_expr(run: str) -> str:
    """Return the messages_fts_cjk MATCH expression that finds the CJK word run."""
    if len(run) == 1:
        return f'"{run}"*'
    return '"' + " ".join(run[i : i + 2] for i in range(len(run) - 1)) + '"'


def _grams_for(content: object, tool_calls: object) -> str:
    """Return the CJK index text of a message (content and tool calls)."""
    parts = [v for v in (content, tool_calls) if isinstance(v, str) and v]
    return " ".join(g for g in (cjk_grams(p) for p in parts) if g)


def _index_cjk_row(
    conn: sqlite3.Connection, row_id: int, content: object, tool_calls: object
) -> bool:
    """Replace a message's CJK index entry; tell whether it has CJK words."""
    conn.execute(f"DELETE FROM {CJK_TABLE} WHERE rowid = ?", (row_id,))
    grams = _grams_for(content, tool_calls)
    if not grams:
        return False
    conn.execute(f"INSERT INTO {CJK_TABLE}(rowid, grams) VALUES (?, ?)", (row_id, grams))
    return True


def catch_up_cjk(
    conn: sqlite3.Connection,
    *,
    max_rows: int | None = None,
    max_pending: int | None = None,
    high_water: int | None = None,
) -> int:
    """Index rows above the CJK high-water mark and queued rows (caller's transaction).

    Returns how many rows were added to the CJK index. ``max_rows`` bounds how many rows above
    the mark are examined (None = all); ``high_water`` saves a read when the caller has it.
    """
    if high_water is None:
        high_water = _meta_int(conn, CJK_HIGH_WATER_KEY) or 0
    max_id = _max_id(conn)
    indexed = 0
    if max_id > high_water:
        hi = max_id
        if max_rows is not None and max_id - high_water > max_rows:
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
        docs = [(row_id, _grams_for(content, calls)) for row_id, content, calls in rows]
        docs = [(row_id, grams) for row_id, grams in docs if grams]
        conn.executemany(f"INSERT INTO {CJK_TABLE}(rowid, grams) VALUES (?, ?)", docs)
        indexed += len(docs)
        _set_meta(conn, CJK_HIGH_WATER_KEY, hi)
    return indexed + _drain_pending(conn, max_pending)


def _index_new_rows(conn: sqlite3.Connection, rows: Sequence[tuple[int, object, object]]) -> None:
    """Index rows that directly follow the high-water mark, then drain the queue."""
    docs = [
        (row_id, grams) for row_id, content, calls in rows if (grams := _grams_for(content, calls))
    ]
    if docs:
        conn.executemany(f"INSERT INTO {CJK_TABLE}(rowid, grams) VALUES (?, ?)", docs)
    _set_meta(conn, CJK_HIGH_WATER_KEY, rows[-1][0])
    _drain_pending(conn, AFTER_APPEND_MAX_PENDING)


def _drain_pending(conn: sqlite3.Connection, max_pending: int | None) -> int:
    """Re-index queued rows (changed by writers other than this library); return how many."""
    indexed = 0
    limit = -1 if max_pending is None else max_pending
    queued = conn.execute(
        f"SELECT p.id, m.content, m.tool_calls FROM {CJK_PENDING_TABLE} p "
        "LEFT JOIN messages m ON m.id = p.id ORDER BY p.id LIMIT ?",
        (limit,),
    ).fetchall()
    for row_id, content, tool_calls in queued:
        indexed += _index_cjk_row(conn, row_id, content, tool_calls)
        conn.execute(f"DELETE FROM {CJK_PENDING_TABLE} WHERE id = ?", (row_id,))
    return indexed


def after_append(
    conn: sqlite3.Connection, new_rows: Sequence[tuple[int, object, object]] | None = None
) -> None:
    """Bring the CJK index up to date inside an append transaction (bounded catch-up).

    new_rows, when given, are the (id, content, tool_calls) just inserted, in id order: if they
    sit right above the high-water mark they are indexed from memory, without re-reading them.
    """
    try:
        meta = dict(
            conn.execute(
                "SELECT key, value FROM state_meta WHERE key IN (?, ?)",
                (STALE_KEY, CJK_HIGH_WATER_KEY),
            ).fetchall()
        )
        if STALE_KEY in meta:
            return  # a stale index is not touched until it is rebuilt
        try:
            high_water = int(meta.get(CJK_HIGH_WATER_KEY) or 0)
        except ValueError:
            high_water = 0
        if new_rows and new_rows[0][0] == high_water + 1:
            _index_new_rows(conn, new_rows)
            return
        catch_up_cjk(
            conn,
            max_rows=AFTER_APPEND_MAX_ROWS,
            max_pending=AFTER_APPEND_MAX_PENDING,
            high_water=high_water,
        )
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        # A store whose layout is missing (never installed) must still accept appends.
        log.debug("fts: CJK catch-up skipped: %s", exc)


# --- verification --------------------------------------------------------------------------


def integrity_check(conn: sqlite3.Connection) -> list[str]:
    """Check every FTS index; return the problems found (empty list = ok).

    Always checks that each message is indexed exactly once (read-only safe, through the FTS5
    docsize tables); on a writable connection also runs FTS5 'integrity-check' on each index,
    comparing the word and trigram indexes against the messages they index.
    """
    problems: list[str] = []
    live = _live_objects(conn)
    expected = _reference_objects()
    missing = [n for n in (*TABLE_DDL, *TRIGGER_DDL) if live.get(n) != expected[n]]
    foreign = [n for n in live if n not in expected]
    if _meta(conn, STALE_KEY) is not None:
        problems.append("FTS indexes are flagged stale (fts_stale); a rebuild is needed")
    if missing or foreign:
        problems.append(
            "FTS layout is not current: "
            + ", ".join(
                [f"missing/different {n}" for n in missing] + [f"foreign {n}" for n in foreign]
            )
        )
    if any(t in missing for t in INDEX_TABLES):
        return problems
    high_water = _meta_int(conn, HIGH_WATER_KEY)
    progress = _meta_int(conn, PROGRESS_KEY) or 0
    problems.extend(_check_row_sets(conn, high_water, progress))
    deep = high_water is None
    for table in INDEX_TABLES:
        problems.extend(_fts5_integrity(conn, table, deep=deep and table != CJK_TABLE))
    return problems


def _check_row_sets(conn: sqlite3.Connection, high_water: int | None, progress: int) -> list[str]:
    """Compare each index's set of rowids with the messages it should hold."""
    problems = []
    if high_water is None:
        indexed = "1"
        params: tuple[int, ...] = ()
    else:
        indexed = "(m.id > ? OR m.id <= ?)"
        params = (high_water, progress)
    for table, scope in ((WORD_TABLE, ""), (TRIGRAM_TABLE, " AND m.role IS NOT 'tool'")):
        docsize = f"{table}_docsize"
        orphans = conn.execute(
            f"SELECT count(*) FROM {docsize} d LEFT JOIN messages m ON m.id = d.id "
            f"WHERE m.id IS NULL OR NOT ({indexed}{scope})",
            params,
        ).fetchone()[0]
        absent = conn.execute(
            f"SELECT count(*) FROM messages m LEFT JOIN {docsize} d ON d.id = m.id "
            f"WHERE d.id IS NULL AND {indexed}{scope}",
            params,
        ).fetchone()[0]
        if orphans:
            problems.append(f"{table}: {orphans} indexed rows that should not be there")
        if absent:
            problems.append(f"{table}: {absent} messages missing from the index")
    orphans = conn.execute(
        f"SELECT count(*) FROM {CJK_TABLE} c LEFT JOIN messages m ON m.id = c.rowid "
        "WHERE m.id IS NULL"
    ).fetchone()[0]
    if orphans:
        problems.append(f"{CJK_TABLE}: {orphans} indexed rows whose message is gone")
    return problems


def _fts5_integrity(conn: sqlite3.Connection, table: str, *, deep: bool) -> list[str]:
    """Run FTS5 'integrity-check' (deep = also against the content); needs a writable connection."""
    try:
        conn.execute(
            f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', ?)", (1 if deep else 0,)
        )
    except sqlite3.DatabaseError as exc:
        if "readonly" in str(exc).lower():
            return []  # read-only connection: the row-set checks are all we can do
        if is_lock_error(exc):
            raise
        return [f"{table}: FTS5 integrity-check failed: {exc}"]
    return []
