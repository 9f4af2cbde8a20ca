"""Schema version 31: table DDL, declarative column reconciliation and ordered migration steps."""

from __future__ import annotations

import functools
import logging
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("hermes_state")

SCHEMA_VERSION = 31

SESSIONS_DDL = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    user_id TEXT,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    parent_session_id TEXT REFERENCES sessions(id),
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0,
    cache_read_tokens INTEGER DEFAULT 0,
    cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0,
    billing_provider TEXT,
    billing_base_url TEXT,
    billing_mode TEXT,
    estimated_cost_usd REAL,
    actual_cost_usd REAL,
    cost_status TEXT,
    cost_source TEXT,
    pricing_version TEXT,
    title TEXT,
    api_call_count INTEGER DEFAULT 0,
    session_key TEXT,
    chat_id TEXT,
    chat_type TEXT,
    thread_id TEXT,
    display_name TEXT,
    origin_json TEXT,
    expiry_finalized INTEGER DEFAULT 0,
    cwd TEXT,
    git_branch TEXT,
    git_repo_root TEXT,
    handoff_state TEXT,
    handoff_platform TEXT,
    handoff_error TEXT,
    compression_failure_cooldown_until REAL,
    compression_failure_error TEXT,
    profile_name TEXT,
    transport_profile TEXT,
    rewind_count INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0,
    auto_archived INTEGER NOT NULL DEFAULT 0,
    pinned INTEGER NOT NULL DEFAULT 0,
    last_activity_at REAL,
    title_source TEXT
)"""

MESSAGES_DDL = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    timestamp REAL NOT NULL,
    token_count INTEGER,
    finish_reason TEXT,
    reasoning TEXT,
    reasoning_content TEXT,
    reasoning_details TEXT,
    codex_reasoning_items TEXT,
    codex_message_items TEXT,
    effect_disposition TEXT,
    platform_message_id TEXT,
    observed INTEGER DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER NOT NULL DEFAULT 0,
    api_content TEXT,
    display_kind TEXT,
    display_metadata TEXT,
    message_uid TEXT,
    absorbed_message_uids TEXT,
    tool_call_uids TEXT,
    tool_call_uid TEXT
)"""

SESSION_MODEL_USAGE_DDL = """
CREATE TABLE IF NOT EXISTS session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '',
    billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '',
    task TEXT NOT NULL DEFAULT '',
    api_call_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0,
    actual_cost_usd REAL NOT NULL DEFAULT 0,
    cost_status TEXT,
    cost_source TEXT,
    first_seen REAL,
    last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task)
)"""

STATE_META_DDL = """
CREATE TABLE IF NOT EXISTS state_meta (
    key TEXT PRIMARY KEY,
    value TEXT
)"""

GATEWAY_ROUTING_DDL = """
CREATE TABLE IF NOT EXISTS gateway_routing (
    scope TEXT NOT NULL DEFAULT '',
    session_key TEXT NOT NULL,
    entry_json TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (scope, session_key)
)"""

COMPRESSION_LOCKS_DDL = """
CREATE TABLE IF NOT EXISTS compression_locks (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
)"""

ASYNC_DELEGATIONS_DDL = """
CREATE TABLE IF NOT EXISTS async_delegations (
    delegation_id TEXT PRIMARY KEY,
    origin_session TEXT NOT NULL,
    origin_ui_session_id TEXT NOT NULL DEFAULT '',
    parent_session_id TEXT,
    state TEXT NOT NULL,
    dispatched_at REAL NOT NULL,
    completed_at REAL,
    updated_at REAL NOT NULL,
    event_json TEXT,
    result_json TEXT,
    delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    delivered_at REAL,
    owner_pid INTEGER,
    owner_started_at INTEGER,
    task_json TEXT,
    delivery_claim TEXT,
    delivery_claimed_at REAL,
    origin_session_id TEXT NOT NULL DEFAULT ''
)"""

DELIVERY_OBLIGATIONS_DDL = """
CREATE TABLE IF NOT EXISTS delivery_obligations (
    obligation_id TEXT PRIMARY KEY,
    session_key TEXT NOT NULL,
    platform TEXT NOT NULL,
    chat_id TEXT NOT NULL,
    thread_id TEXT,
    content TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    owner_pid INTEGER,
    owner_started_at INTEGER,
    last_error TEXT,
    adapter_profile TEXT,
    delivery_fence INTEGER NOT NULL DEFAULT 0,
    owner_installation_id TEXT,
    owner_host TEXT,
    owner_generation TEXT,
    lease_expires_at REAL
)"""

RUNTIME_EPOCH_DDL = """
CREATE TABLE IF NOT EXISTS runtime_epoch (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    epoch INTEGER NOT NULL DEFAULT 0,
    instance_id TEXT,
    updated_at REAL
)"""

SESSION_ADMISSIONS_DDL = """
CREATE TABLE IF NOT EXISTS session_admissions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    admission_id TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE RESTRICT,
    request_id TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    payload_digest TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'started', 'unknown', 'terminal')),
    outcome TEXT,
    owner_epoch INTEGER,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE (session_id, request_id)
)"""

WORKER_EXECUTIONS_DDL = """
CREATE TABLE IF NOT EXISTS worker_executions (
    execution_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE RESTRICT,
    kind TEXT NOT NULL CHECK (kind IN ('cron', 'child', 'compute', 'kanban')),
    owner_epoch INTEGER,
    status TEXT NOT NULL DEFAULT 'registered'
        CHECK (status IN ('registered', 'running', 'unknown', 'terminal')),
    last_sequence INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
)"""

WORKER_RECEIPTS_DDL = """
CREATE TABLE IF NOT EXISTS worker_receipts (
    execution_id TEXT NOT NULL REFERENCES worker_executions(execution_id) ON DELETE RESTRICT,
    sequence INTEGER NOT NULL,
    payload_digest TEXT NOT NULL,
    result_json TEXT,
    created_at REAL NOT NULL,
    PRIMARY KEY (execution_id, sequence)
)"""

SCHEMA_VERSION_DDL = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"

# Created on every writable open, in this order (delivery_obligations only on first use).
TABLE_DDL: dict[str, str] = {
    "schema_version": SCHEMA_VERSION_DDL,
    "sessions": SESSIONS_DDL,
    "messages": MESSAGES_DDL,
    "session_model_usage": SESSION_MODEL_USAGE_DDL,
    "state_meta": STATE_META_DDL,
    "gateway_routing": GATEWAY_ROUTING_DDL,
    "compression_locks": COMPRESSION_LOCKS_DDL,
    "async_delegations": ASYNC_DELEGATIONS_DDL,
    "runtime_epoch": RUNTIME_EPOCH_DDL,
    "session_admissions": SESSION_ADMISSIONS_DDL,
    "worker_executions": WORKER_EXECUTIONS_DDL,
    "worker_receipts": WORKER_RECEIPTS_DDL,
}
LAZY_TABLE_DDL: dict[str, str] = {"delivery_obligations": DELIVERY_OBLIGATIONS_DDL}

LEDGER_TABLES = ("runtime_epoch", "session_admissions", "worker_executions", "worker_receipts")

# Guarded by json_valid so the owner index never makes a non-JSON display_metadata unwritable.
OWNER_ID_EXPR = (
    "CASE WHEN json_valid(display_metadata) THEN json_extract(display_metadata, '$.owner.id') END"
)
OWNER_INDEX_DDL = (
    # Marker lookups by id (ownership.find_owned_input); partial, so rows without metadata are free.
    f"CREATE INDEX IF NOT EXISTS idx_messages_owner ON messages(({OWNER_ID_EXPR}))"
    " WHERE display_metadata IS NOT NULL",
    # Rows whose metadata cannot be parsed (normally none): the lookup must notice them.
    "CREATE INDEX IF NOT EXISTS idx_messages_bad_metadata ON messages(session_id)"
    " WHERE display_metadata IS NOT NULL AND NOT json_valid(display_metadata)",
)

INDEX_DDL = (
    "CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source)",
    "CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id)",
    "CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC)",
    # Listing by last activity without touching messages (SPEC §18).
    "CREATE INDEX IF NOT EXISTS idx_sessions_activity "
    "ON sessions(COALESCE(last_activity_at, started_at) DESC)",
    "CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp)",
    "CREATE INDEX IF NOT EXISTS idx_messages_session_id ON messages(session_id, id)",
    "CREATE INDEX IF NOT EXISTS idx_session_model_usage_session ON session_model_usage(session_id)",
    "CREATE INDEX IF NOT EXISTS idx_compression_locks_expires ON compression_locks(expires_at)",
    "CREATE INDEX IF NOT EXISTS idx_session_admissions_session "
    "ON session_admissions(session_id, status, seq)",
    "CREATE INDEX IF NOT EXISTS idx_worker_executions_session "
    "ON worker_executions(session_id, status)",
    *OWNER_INDEX_DDL,
)
TITLE_INDEX_DDL = (
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique "
    "ON sessions(title) WHERE title IS NOT NULL"
)


@dataclass(frozen=True)
class DeclaredColumn:
    """A column as the schema declares it, with the expression ALTER TABLE ADD COLUMN needs."""

    name: str
    add_expr: str


@functools.cache
def declared_columns() -> dict[str, tuple[DeclaredColumn, ...]]:
    """Return every declared table's columns, read by running the DDL in an in-memory database."""
    mem = sqlite3.connect(":memory:")
    try:
        out: dict[str, tuple[DeclaredColumn, ...]] = {}
        for table, ddl in {**TABLE_DDL, **LAZY_TABLE_DDL}.items():
            mem.execute(ddl)
            cols = []
            for _cid, name, ctype, notnull, default, pk in mem.execute(
                f'PRAGMA table_info("{table}")'
            ):
                expr = ctype or ""
                # ADD COLUMN cannot add NOT NULL without a default, nor a PRIMARY KEY.
                if notnull and not pk and default is not None:
                    expr += " NOT NULL"
                if default is not None:
                    expr += f" DEFAULT {default}"
                cols.append(DeclaredColumn(name, expr.strip()))
            out[table] = tuple(cols)
        return out
    finally:
        mem.close()


def column_names(table: str) -> tuple[str, ...]:
    """Return the declared column names of table, in order."""
    return tuple(c.name for c in declared_columns()[table])


def live_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """Return the column names table has in this store (empty when it does not exist)."""
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]


def reconcile_columns(conn: sqlite3.Connection) -> list[str]:
    """Add every declared column missing from an existing table; return "table.column" added."""
    added = []
    for table, cols in declared_columns().items():
        live = set(live_columns(conn, table))
        if not live:
            continue
        for col in cols:
            if col.name in live:
                continue
            try:
                conn.execute(f'ALTER TABLE "{table}" ADD COLUMN "{col.name}" {col.add_expr}')
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc).lower():
                    raise
                continue  # a sibling process added it first
            added.append(f"{table}.{col.name}")
    if added:
        log.info("schema: added columns %s", ", ".join(added))
    return added


def stored_version(conn: sqlite3.Connection) -> int | None:
    """Return the schema version recorded in the store, or None for a store without one."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'"
    ).fetchone()
    if row is None:
        return None
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _set_version(conn: sqlite3.Connection, version: int) -> None:
    conn.execute("DELETE FROM schema_version")
    conn.execute("INSERT INTO schema_version(version) VALUES (?)", (version,))


# --- migration steps ------------------------------------------------------------------------
# Each step is idempotent and runs only on stores older than its version; versions that just add
# columns need no step (reconcile_columns does it). Reading this list tells the store's history.


@dataclass(frozen=True)
class Migration:
    """One ordered, version-gated data/index/FTS step."""

    version: int
    name: str
    apply: Callable[[sqlite3.Connection], None]


MIGRATIONS: list[Migration] = []


def migration(version: int) -> Callable[[Callable[[sqlite3.Connection], None]], Callable]:
    """Register fn as the migration step that brings a store up to version."""

    def register(fn: Callable[[sqlite3.Connection], None]) -> Callable[[sqlite3.Connection], None]:
        MIGRATIONS.append(Migration(version, fn.__name__, fn))
        MIGRATIONS.sort(key=lambda m: m.version)
        return fn

    return register


@migration(31)
def v31_runtime_ledger_session_ids(conn: sqlite3.Connection) -> None:
    """Fill session_id of ledger rows written by layouts that named it target_session_id."""
    cols = set(live_columns(conn, "session_admissions"))
    if "target_session_id" in cols:
        conn.execute(
            "UPDATE session_admissions SET session_id = target_session_id "
            "WHERE session_id IS NULL AND target_session_id IS NOT NULL"
        )


@migration(31)
def v31_message_uids(conn: sqlite3.Connection) -> None:
    """Give every message without a message_uid a fresh one (older layouts had none)."""
    conn.execute(
        "UPDATE messages SET message_uid = lower(hex(randomblob(16))) "
        "WHERE message_uid IS NULL OR message_uid = ''"
    )


def _ensure_title_index(conn: sqlite3.Connection) -> None:
    try:
        conn.execute(TITLE_INDEX_DDL)
    except sqlite3.IntegrityError:
        # Legacy duplicates: the newest holder keeps the title, older ones give it up.
        cur = conn.execute(
            "UPDATE sessions SET title = NULL WHERE title IS NOT NULL AND rowid NOT IN "
            "(SELECT MAX(rowid) FROM sessions WHERE title IS NOT NULL GROUP BY title)"
        )
        log.warning("schema: cleared %d duplicate session titles", cur.rowcount)
        conn.execute(TITLE_INDEX_DDL)


def init_schema(conn: sqlite3.Connection) -> int | None:
    """Create or upgrade the schema inside the caller's write transaction; return the old version.

    A store newer than this code is left untouched (the caller then refuses writes).
    """
    before = stored_version(conn)
    if before is not None and before > SCHEMA_VERSION:
        return before
    if before == SCHEMA_VERSION and is_current(conn):
        return before
    for ddl in TABLE_DDL.values():
        conn.execute(ddl)
    from hermes_state import fts

    # Another layout's triggers may feed tables we cannot load (an upstream CJK tokenizer):
    # they must go before any migration step touches messages.
    fts.drop_foreign_triggers(conn)
    reconcile_columns(conn)
    for ddl in INDEX_DDL:
        conn.execute(ddl)
    _ensure_title_index(conn)
    if before is not None:
        for step in MIGRATIONS:
            if before < step.version:
                log.info("schema: running migration %s", step.name)
                step.apply(conn)
    fts.install(conn)
    _set_version(conn, SCHEMA_VERSION)
    return before


def is_current(conn: sqlite3.Connection) -> bool:
    """Tell cheaply whether a store is at SCHEMA_VERSION with every table, column and index."""
    if stored_version(conn) != SCHEMA_VERSION:
        return False
    live: dict[str, set[str]] = {}
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"):
        live[name] = set()
    for table, cols in declared_columns().items():
        if table not in live:
            if table in LAZY_TABLE_DDL:
                continue
            return False
        have = set(live_columns(conn, table))
        if any(c.name not in have for c in cols):
            return False
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    if not _declared_index_names() <= indexes:
        return False
    from hermes_state import fts

    return fts.is_installed(conn)


@functools.cache
def _declared_index_names() -> frozenset[str]:
    names = {re.search(r"EXISTS (\w+)", ddl).group(1) for ddl in (*INDEX_DDL, TITLE_INDEX_DDL)}
    return frozenset(names)


def ensure_delivery_obligations(conn: sqlite3.Connection) -> None:
    """Create the delivery_obligations table on first use (inside a write transaction)."""
    conn.execute(DELIVERY_OBLIGATIONS_DDL)
    reconcile_columns(conn)
    conn.execute(
        "CREATE INDEX IF NOT EXISTS idx_delivery_obligations_claim "
        "ON delivery_obligations(state, platform, adapter_profile)"
    )


def projection(live: tuple[str, ...] | list[str], wanted: tuple[str, ...], alias: str = "") -> str:
    """Build a select list of wanted columns, reading missing ones as NULL (older stores)."""
    have = set(live)
    prefix = f"{alias}." if alias else ""
    parts = [f'{prefix}"{c}"' if c in have else f'NULL AS "{c}"' for c in wanted]
    return ", ".join(parts)
