"""The word and substring indexes over messages: recognised in every release's layout, created
in upstream's current one, rebuilt and checked.

The indexes belong to the agent's layout (SPEC §19): ``messages_fts`` (words) and
``messages_fts_trigram`` (substrings) keep the shape of whichever Hermes Agent release made them,
and this module never replaces one release's shape by another's. It recognises two layouts:

``external`` — Hermes Agent 0.21/0.22 (schema 30/31), also what this package creates for a new
store: ``messages_fts(content, tool_name, tool_calls)`` reads through the view
``messages_fts_src`` (tool rows indexed by their first 8,192 characters);
``messages_fts_trigram(content, tool_name)`` reads through ``messages_fts_trigram_src``: rows that
are not tool output, of sessions that are not cron or subagent runs nor delegate children. Six
triggers keep them in step, each gated by the rebuild window: a row is indexed only if ``id >
fts_rebuild_high_water OR id <= fts_rebuild_progress`` (state_meta; both absent = always), so a
chunked rebuild that walks ids upward and advances ``fts_rebuild_progress`` with each chunk never
indexes a row twice while writers keep appending.

``inline`` — Hermes Agent 0.19 (schema 22): both tables store their own copy of
``content || ' ' || tool_name || ' ' || tool_calls`` for every row; ungated triggers.

A store can also hold the layout this package wrote before SPEC §19 (``legacy``: triggers named
``messages_fts_ai``/``_ad``/``_au``); it is searchable as it is and replaced by ``migrations``.
CJK words of one and two characters are served by this package's own index (:mod:`cjk`).
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from hermes_state.store import meta
from hermes_state.store.errors import is_lock_error
from hermes_state.store.sql import quote

if TYPE_CHECKING:
    from hermes_state.store.connection import Store

log = logging.getLogger("hermes_state")

WORD_TABLE = "messages_fts"
TRIGRAM_TABLE = "messages_fts_trigram"
WORD_SOURCE = "messages_fts_src"
TRIGRAM_SOURCE = "messages_fts_trigram_src"
INDEX_TABLES = (WORD_TABLE, TRIGRAM_TABLE)

HIGH_WATER_KEY = "fts_rebuild_high_water"
PROGRESS_KEY = "fts_rebuild_progress"
STALE_KEY = "fts_stale"  # set by an agent that detached a damaged index (its triggers dropped)
FTS_META_KEYS = (HIGH_WATER_KEY, PROGRESS_KEY, STALE_KEY)

REBUILD_CHUNK = 2000  # ids per rebuild transaction: short enough that writers barely wait
MERGE_STEP_PAGES = 256  # index pages one 'merge' step writes (a few ms)
INLINE_REBUILD_MAX_ROWS = 20_000  # smaller stores are indexed at once, larger ones in chunks
TOOL_PREFIX_CHARS = 8192  # tool rows: the word index holds only this prefix (upstream's rule)
TRIGRAM_EXCLUDED_SOURCES = ("cron", "subagent")

Flavor = Literal["external", "inline", "legacy", "foreign"]

# --- the external layout (what a new store gets) ------------------------------------------------


def _gate(ref: str) -> str:
    """SQL predicate: the row with this id belongs to the indexed set (see module docstring)."""
    return (
        f"({ref} > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta "
        f"WHERE key = '{HIGH_WATER_KEY}'), -1)\n"
        f"   OR {ref} <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta "
        f"WHERE key = '{PROGRESS_KEY}'), -1))"
    )


def _indexed_content(alias: str) -> str:
    """SQL of what the word index holds for a row's content (tool rows: a bounded prefix)."""
    return (
        f"CASE WHEN {alias}.role = 'tool' "
        f"THEN substr(COALESCE({alias}.content, ''), 1, {TOOL_PREFIX_CHARS}) "
        f"ELSE {alias}.content END"
    )


def _trigram_session(alias: str = "") -> str:
    """SQL predicate over a sessions row: its messages belong in the substring index."""
    q = f"{alias}." if alias else ""
    excluded = ", ".join(f"'{s}'" for s in TRIGRAM_EXCLUDED_SOURCES)
    config = f"{q}model_config"
    delegate = (
        f"json_extract((CASE WHEN json_valid({config}) THEN {config} ELSE json_object() END), "
        "'$._delegate_from')"
    )
    return f"{q}source NOT IN ({excluded}) AND {delegate} IS NULL"


TRIGRAM_LEFT_OUT_SESSIONS = f"SELECT id FROM sessions WHERE NOT COALESCE({_trigram_session()}, 0)"


def trigram_left_out_superset(alias: str = "m", sessions: str | None = None) -> str:
    """SQL predicate over a messages row, true for every row an agent's substring index can leave
    out (tool output; cron, subagent and delegated sessions), and cheap: a scan tests it before
    the exact check against the index's own view. ``sessions``: a SELECT of those sessions'
    ids to use in place of TRIGRAM_LEFT_OUT_SESSIONS (such as one over a list read before)."""
    ids = sessions or TRIGRAM_LEFT_OUT_SESSIONS
    return f"({alias}.role = 'tool' OR {alias}.session_id IN ({ids}))"


def _trigram_wants(row: str) -> str:
    """SQL predicate: the new/old message row belongs in the substring index."""
    return (
        f"{row}.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions "
        f"WHERE id = {row}.session_id AND {_trigram_session()})"
    )


EXTERNAL_DDL: dict[str, str] = {
    WORD_SOURCE: (
        f"CREATE VIEW {WORD_SOURCE} AS SELECT id, {_indexed_content('messages')} AS content, "
        "tool_name, tool_calls FROM messages"
    ),
    WORD_TABLE: (
        f"CREATE VIRTUAL TABLE {WORD_TABLE} USING fts5(content, tool_name, tool_calls, "
        f"content='{WORD_SOURCE}', content_rowid='id')"
    ),
    "messages_fts_insert": f"""CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
WHEN {_gate("new.id")}
BEGIN
    INSERT INTO {WORD_TABLE}(rowid, content, tool_name, tool_calls)
    VALUES (new.id, {_indexed_content("new")}, new.tool_name, new.tool_calls);
END""",
    "messages_fts_delete": f"""CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN {_gate("old.id")}
BEGIN
    INSERT INTO {WORD_TABLE}({WORD_TABLE}, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, {_indexed_content("old")}, old.tool_name, old.tool_calls);
END""",
    "messages_fts_update": f"""CREATE TRIGGER messages_fts_update
AFTER UPDATE OF content, tool_name, tool_calls, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
      OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role)
  AND {_gate("old.id")}
BEGIN
    INSERT INTO {WORD_TABLE}({WORD_TABLE}, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, {_indexed_content("old")}, old.tool_name, old.tool_calls);
    INSERT INTO {WORD_TABLE}(rowid, content, tool_name, tool_calls)
    VALUES (new.id, {_indexed_content("new")}, new.tool_name, new.tool_calls);
END""",
    TRIGRAM_SOURCE: (
        f"CREATE VIEW {TRIGRAM_SOURCE} AS SELECT m.id, m.role, m.content, m.tool_name "
        "FROM messages AS m JOIN sessions AS s ON s.id = m.session_id "
        f"WHERE m.role <> 'tool' AND {_trigram_session('s')}"
    ),
    TRIGRAM_TABLE: (
        f"CREATE VIRTUAL TABLE {TRIGRAM_TABLE} USING fts5(content, tool_name, "
        f"content='{TRIGRAM_SOURCE}', content_rowid='id', tokenize='trigram')"
    ),
    "messages_fts_trigram_insert": f"""CREATE TRIGGER messages_fts_trigram_insert
AFTER INSERT ON messages
WHEN {_trigram_wants("new")} AND {_gate("new.id")}
BEGIN
    INSERT INTO {TRIGRAM_TABLE}(rowid, content, tool_name)
    VALUES (new.id, new.content, new.tool_name);
END""",
    "messages_fts_trigram_delete": f"""CREATE TRIGGER messages_fts_trigram_delete
AFTER DELETE ON messages
WHEN {_trigram_wants("old")} AND {_gate("old.id")}
BEGIN
    INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, rowid, content, tool_name)
    VALUES ('delete', old.id, old.content, old.tool_name);
END""",
    "messages_fts_trigram_update": f"""CREATE TRIGGER messages_fts_trigram_update
AFTER UPDATE OF content, tool_name, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
      OR old.role IS NOT new.role)
  AND {_gate("old.id")}
BEGIN
    INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, rowid, content, tool_name)
    SELECT 'delete', old.id, old.content, old.tool_name WHERE {_trigram_wants("old")};
    INSERT INTO {TRIGRAM_TABLE}(rowid, content, tool_name)
    SELECT new.id, new.content, new.tool_name WHERE {_trigram_wants("new")};
END""",
}
EXTERNAL_TRIGGERS = tuple(n for n, ddl in EXTERNAL_DDL.items() if " TRIGGER " in ddl[:20])
# The names every release checks for: all six present, or it reindexes (SPEC §19 reference §3).
BASE_TRIGGERS = EXTERNAL_TRIGGERS
# Triggers of this package's layout before SPEC §19 (removed by migrations).
LEGACY_TRIGGERS = ("messages_fts_ai", "messages_fts_ad", "messages_fts_au")


# --- recognising a store's indexes ---------------------------------------------------------------

_OPTION_RE = re.compile(r"(\w+)\s*=\s*'([^']*)'")


@dataclass(frozen=True)
class Index:
    """One FTS5 table as found in a store: its shape and what it holds."""

    table: str
    flavor: Flavor
    columns: tuple[str, ...]
    content: str | None  # external content table or view (None: the index stores its text)
    tokenizer: str
    detail: str

    @property
    def gated(self) -> bool:
        """Tell whether its triggers follow the rebuild window (external layouts)."""
        return self.flavor == "external"

    def covers(self, alias: str = "m") -> str | None:
        """SQL predicate: the message row is one the index holds (None: every row)."""
        if self.content in (None, "messages"):
            return None
        return f"EXISTS (SELECT 1 FROM {quote(self.content)} c WHERE c.id = {alias}.id)"


def _columns_of(sql: str) -> tuple[str, ...]:
    """Return the indexed columns of a CREATE VIRTUAL TABLE … USING fts5(…) statement."""
    inner = sql[sql.index("(") + 1 : sql.rindex(")")]
    cols = []
    for part in inner.split(","):
        part = part.strip()
        if part and "=" not in part:
            cols.append(part.split()[0].strip("\"'`[]"))
    return tuple(cols)


def parse_index(name: str, sql: str, triggers: set[str]) -> Index:
    """Describe an FTS5 table from its CREATE statement and the trigger names of the store."""
    options = {k.lower(): v for k, v in _OPTION_RE.findall(sql)}
    content = options.get("content") or None
    columns = _columns_of(sql)
    if set(LEGACY_TRIGGERS) & triggers:
        flavor: Flavor = "legacy"
    elif content is None:
        flavor = "inline"
    elif content in (WORD_SOURCE, TRIGRAM_SOURCE, "messages"):
        flavor = "external"
    else:
        flavor = "foreign"
    return Index(
        table=name,
        flavor=flavor,
        columns=columns,
        content=content,
        tokenizer=options.get("tokenize", "unicode61").split()[0],
        detail=options.get("detail", "full"),
    )


def fts5_tables(conn: sqlite3.Connection) -> dict[str, str]:
    """Return name -> CREATE statement of every FTS5 table in the store."""
    rows = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'"
    ).fetchall()
    return {n: s for n, s in rows if re.search(r"USING\s+fts5", s or "", re.IGNORECASE)}


def _trigger_names(conn: sqlite3.Connection) -> set[str]:
    return {
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"
        )
    }


@dataclass(frozen=True)
class Indexes:
    """The store's word and substring indexes (None where absent) and whether to trust them."""

    word: Index | None
    trigram: Index | None
    stale: bool  # the agent detached them (fts_stale): rows since then are not indexed
    high_water: int | None
    progress: int | None
    max_id: int

    @property
    def gap(self) -> tuple[int, int] | None:
        """Return the id window (progress, high_water] a chunked rebuild has not indexed yet."""
        if self.word is None or not self.word.gated or self.high_water is None:
            return None
        low = self.progress or 0
        return (low, self.high_water) if self.high_water > low else None


def indexes(conn: sqlite3.Connection) -> Indexes:
    """Report the store's word and substring indexes (works on read-only connections)."""
    tables = fts5_tables(conn)
    triggers = _trigger_names(conn)
    found = {n: parse_index(n, tables[n], triggers) for n in INDEX_TABLES if n in tables}
    values = meta.get_many(conn, FTS_META_KEYS)
    return Indexes(
        word=found.get(WORD_TABLE),
        trigram=found.get(TRIGRAM_TABLE),
        stale=STALE_KEY in values,
        high_water=meta.as_int(values.get(HIGH_WATER_KEY)),
        progress=meta.as_int(values.get(PROGRESS_KEY)),
        max_id=max_id(conn),
    )


def layout_of(conn: sqlite3.Connection) -> Flavor | None:
    """Return the flavor of the store's word/substring layout (None when it has none)."""
    idx = indexes(conn)
    flavors = {i.flavor for i in (idx.word, idx.trigram) if i is not None}
    if not flavors:
        return None
    for flavor in ("legacy", "foreign", "inline", "external"):
        if flavor in flavors:
            return flavor
    return None


# --- creating and rebuilding ---------------------------------------------------------------------


def create_external(conn: sqlite3.Connection) -> list[str]:
    """Create the missing objects of the external layout (caller's write transaction)."""
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    created = []
    for name, ddl in EXTERNAL_DDL.items():
        if name not in have:
            conn.execute(ddl)
            created.append(name)
    return created


def max_id(conn: sqlite3.Connection) -> int:
    """Return the highest message id (0 for an empty store or one without messages)."""
    try:
        return int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0])
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return 0
        raise


def rebuild_now(conn: sqlite3.Connection, tables: tuple[str, ...] = INDEX_TABLES) -> None:
    """Rebuild external-content indexes completely from their content (caller's transaction)."""
    meta.delete(conn, HIGH_WATER_KEY, PROGRESS_KEY)
    for table in tables:
        conn.execute(f"INSERT INTO {quote(table)}({quote(table)}) VALUES ('rebuild')")


def rebuild_all(conn: sqlite3.Connection) -> list[str]:
    """Rebuild each of the agent's indexes the store has from its content; return which."""
    present = {
        r[0]
        for r in conn.execute(
            f"SELECT name FROM sqlite_master WHERE name IN ({', '.join('?' * len(INDEX_TABLES))})",
            INDEX_TABLES,
        )
    }
    done = [t for t in INDEX_TABLES if t in present]
    rebuild_now(conn, tuple(done))
    return done


def start_chunked_rebuild(conn: sqlite3.Connection) -> None:
    """Empty the external indexes and open the (0, max id] window for :func:`rebuild_step`."""
    for table in INDEX_TABLES:
        conn.execute(f"INSERT INTO {quote(table)}({quote(table)}) VALUES ('delete-all')")
    top = max_id(conn)
    if top == 0:
        meta.delete(conn, HIGH_WATER_KEY, PROGRESS_KEY)
        return
    meta.put(conn, HIGH_WATER_KEY, top)
    meta.put(conn, PROGRESS_KEY, 0)


def schedule_rebuild(conn: sqlite3.Connection) -> bool:
    """Rebuild the external indexes now (small store) or start a chunked rebuild; tell which.

    Returns True when rows are left for :func:`rebuild_step`.
    """
    if max_id(conn) <= INLINE_REBUILD_MAX_ROWS:
        rebuild_now(conn)
        return False
    start_chunked_rebuild(conn)
    return rebuild_pending(conn)


def rebuild_pending(conn: sqlite3.Connection) -> bool:
    """Tell whether a chunked rebuild has rows left to index."""
    return meta.get(conn, HIGH_WATER_KEY) is not None


@dataclass(frozen=True)
class RebuildProgress:
    """Where a chunked rebuild stands after a step."""

    progress: int
    high_water: int
    done: bool


def rebuild_step(conn: sqlite3.Connection, chunk: int = REBUILD_CHUNK) -> RebuildProgress:
    """Index the next chunk of a pending rebuild of the external indexes (caller's transaction)."""
    high_water = meta.get_int(conn, HIGH_WATER_KEY)
    progress = meta.get_int(conn, PROGRESS_KEY) or 0
    if high_water is None:
        return RebuildProgress(progress, progress, True)
    hi = min(progress + max(1, chunk), high_water)
    window = (progress, hi)
    conn.execute(
        f"INSERT INTO {WORD_TABLE}(rowid, content, tool_name, tool_calls) "
        f"SELECT id, content, tool_name, tool_calls FROM {WORD_SOURCE} WHERE id > ? AND id <= ?",
        window,
    )
    conn.execute(
        f"INSERT INTO {TRIGRAM_TABLE}(rowid, content, tool_name) "
        f"SELECT id, content, tool_name FROM {TRIGRAM_SOURCE} WHERE id > ? AND id <= ?",
        window,
    )
    if hi >= high_water:
        meta.delete(conn, HIGH_WATER_KEY, PROGRESS_KEY)
        return RebuildProgress(hi, high_water, True)
    meta.put(conn, PROGRESS_KEY, hi)
    return RebuildProgress(hi, high_water, False)


def finish_rebuild(
    store: Store,
    *,
    chunk: int = REBUILD_CHUNK,
    on_progress: Callable[[RebuildProgress], None] | None = None,
) -> RebuildProgress:
    """Run a pending chunked rebuild to the end, each chunk its own write transaction."""
    while True:
        step = store.write(lambda conn: rebuild_step(conn, chunk))
        if on_progress is not None:
            on_progress(step)
        if step.done:
            return step


def optimize(conn: sqlite3.Connection) -> list[str]:
    """Merge each loadable FTS5 index's segments into one; return the tables optimised."""
    done = []
    for table in fts5_tables(conn):
        try:
            conn.execute(f"INSERT INTO {quote(table)}({quote(table)}) VALUES ('optimize')")
        except sqlite3.OperationalError as exc:
            if is_lock_error(exc) or not conn.in_transaction:
                raise  # a lock, or an error (a full disk) after which SQLite rolled back
            # e.g. an agent's CJK table whose tokenizer this process cannot load
            log.info("fts: cannot optimise %s: %s", table, exc)
            continue
        done.append(table)
    return done


def merge_step(
    conn: sqlite3.Connection, *, start: bool = False, pages: int = MERGE_STEP_PAGES
) -> bool:
    """Write about ``pages`` pages of segment merging in each loadable FTS5 index.

    The first call (``start=True``) puts every segment on one level, as 'optimize' would;
    later calls continue that merge. Returns whether any index did work: call it in short
    transactions until it returns False, so a live gateway's writes are never held up for
    long (``optimize`` does the same merge in one long transaction).
    """
    worked = False
    for table in fts5_tables(conn):
        before = conn.total_changes
        try:
            conn.execute(
                f"INSERT INTO {quote(table)}({quote(table)}, rank) VALUES ('merge', ?)",
                (-int(pages) if start else int(pages),),
            )
        except sqlite3.OperationalError as exc:
            if is_lock_error(exc) or not conn.in_transaction:
                raise
            log.info("fts: cannot merge %s: %s", table, exc)
            continue
        # FTS5 documents total_changes() as the way to tell whether a 'merge' did any work.
        worked = worked or conn.total_changes - before > 1
    return worked


def drop_table(conn: sqlite3.Connection, name: str) -> None:
    """Drop an FTS table, even one whose tokenizer or module this process cannot load."""
    try:
        conn.execute(f"DROP TABLE IF EXISTS {quote(name)}")
        return
    except sqlite3.OperationalError as exc:
        if is_lock_error(exc):
            raise
        log.warning("fts: removing %s through the schema table (%s)", name, exc)
    cookie = conn.execute("PRAGMA schema_version").fetchone()[0]
    conn.execute("PRAGMA writable_schema = ON")
    try:
        conn.execute("DELETE FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        # The schema really changed: a new cookie makes every connection reload it.
        conn.execute(f"PRAGMA schema_version = {int(cookie) + 1}")
    finally:
        conn.execute("PRAGMA writable_schema = OFF")
    for suffix in ("data", "idx", "content", "docsize", "config"):
        conn.execute(f"DROP TABLE IF EXISTS {quote(f'{name}_{suffix}')}")


# --- verification --------------------------------------------------------------------------------


def _expected_rows(index: Index, window: tuple[int, int] | None) -> tuple[str, tuple[int, ...]]:
    """SQL selecting the message ids the index should hold, with its parameters."""
    base = "SELECT m.id FROM messages m"
    cover = index.covers("m")
    where = [cover] if cover else []
    params: tuple[int, ...] = ()
    if window is not None and index.gated:
        where.append("NOT (m.id > ? AND m.id <= ?)")
        params = window
    return base + (" WHERE " + " AND ".join(where) if where else ""), params


def _row_set_problems(
    conn: sqlite3.Connection, index: Index, window: tuple[int, int] | None
) -> list[str]:
    """Compare the rowids an index holds with the messages it should hold."""
    docsize = f"{index.table}_docsize"
    has_docsize = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (docsize,)
    ).fetchone()
    if has_docsize is None:
        return []
    expected, params = _expected_rows(index, window)
    orphans = conn.execute(
        f"SELECT count(*) FROM {quote(docsize)} d WHERE d.id NOT IN ({expected})", params
    ).fetchone()[0]
    absent = conn.execute(
        f"SELECT count(*) FROM ({expected}) e WHERE e.id NOT IN (SELECT id FROM {quote(docsize)})",
        params,
    ).fetchone()[0]
    problems = []
    if orphans:
        problems.append(f"{index.table}: {orphans} indexed rows that should not be there")
    if absent:
        problems.append(f"{index.table}: {absent} messages missing from the index")
    return problems


def fts5_integrity(conn: sqlite3.Connection, table: str, *, deep: bool = False) -> str | None:
    """Run FTS5 'integrity-check' on one table; return the problem (None = ok or read-only).

    ``deep`` also compares an external-content index with its content (rank = 1).
    """
    try:
        conn.execute(
            f"INSERT INTO {quote(table)}({quote(table)}, rank) VALUES ('integrity-check', ?)",
            (1 if deep else 0,),
        )
    except sqlite3.DatabaseError as exc:
        text = str(exc).lower()
        if "readonly" in text or "read-only" in text:
            return None  # read-only connection: the row-set checks are all we can do
        if is_lock_error(exc):
            raise
        return f"{table}: FTS5 integrity-check failed: {exc}"
    return None


def integrity_check(
    conn: sqlite3.Connection,
    *,
    tables: Collection[str] | None = None,
    row_sets: bool = True,
) -> list[str]:
    """Check the word and substring indexes; return the problems found (empty list = ok).

    Always compares each index's rows with the messages it should hold (read-only safe); on a
    writable connection also runs FTS5 'integrity-check' on every FTS5 table of the store.
    ``tables`` limits the FTS5 checks to those tables and ``row_sets=False`` skips the row
    comparison, so a caller can spread the checks over several connections (recover does).
    """
    idx = indexes(conn)
    problems: list[str] = []
    if idx.stale:
        return [
            "search indexes are detached (fts_stale): the agent rebuilds them at its next start"
        ]
    for index in (idx.word, idx.trigram):
        if row_sets and index is not None and index.flavor != "foreign":
            problems.extend(_row_set_problems(conn, index, idx.gap))
    external = {i.table for i in (idx.word, idx.trigram) if i is not None and i.content}
    for table in fts5_tables(conn):
        if tables is not None and table not in tables:
            continue
        problem = fts5_integrity(conn, table, deep=table in external and idx.gap is None)
        if problem and "no such tokenizer" not in problem:
            problems.append(problem)
    return problems


def iter_fts_objects(conn: sqlite3.Connection) -> Iterator[tuple[str, str, str]]:
    """Yield (type, name, sql) of every object named like the agent's FTS family."""
    yield from conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE name LIKE 'messages\\_fts%' ESCAPE '\\'"
    )


def is_fts5_unavailable_error(exc: BaseException) -> bool:
    """Tell whether an error means this SQLite cannot run an FTS5 index (module or trigram)."""
    text = str(exc).lower()
    return ("no such module" in text and "fts5" in text) or is_trigram_unavailable_error(exc)


def is_trigram_unavailable_error(exc: BaseException) -> bool:
    """Tell whether an error means this SQLite has no trigram tokenizer (before 3.34)."""
    return "no such tokenizer: trigram" in str(exc).lower()


def usable(conn: sqlite3.Connection, table: str) -> bool:
    """Tell whether an FTS5 table exists and this connection can read it."""
    if not conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone():
        return False
    try:
        conn.execute(f"SELECT * FROM {quote(table)} LIMIT 0").fetchall()
    except sqlite3.OperationalError as exc:
        return is_lock_error(exc)  # locked: present, and readable once the writer is done
    return True


# The agent's module-level DDL scripts, as its callers import them (``hermes_state.FTS_SQL``).
FTS_SQL = ";\n".join(ddl for name, ddl in EXTERNAL_DDL.items() if "trigram" not in name) + ";\n"
FTS_TRIGRAM_SQL = ";\n".join(ddl for name, ddl in EXTERNAL_DDL.items() if "trigram" in name) + ";\n"
