"""Table DDL of the store: upstream Hermes Agent's schema 31, and this package's own additions.

A store belongs to the agent that wrote it (SPEC §19): ``schema_version`` numbers mean what the
Hermes Agent releases mean by them, so a store this package creates is an upstream schema-31
store — the tables, columns, indexes and the ``message_uid`` trigger of Hermes Agent 0.22 — and
every Hermes Agent release can open it. What this package adds on top (the runtime ledger, the
ownership indexes, the CJK index of :mod:`hermes_state.store.cjk`) uses names no release defines
and is
recorded under the state_meta key ``ADDITIONS_KEY``.

The versions the releases in the field write are ``KNOWN_VERSIONS``; a store at any other number
comes from a release this code has never seen and is only browsed (read-only).
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from dataclasses import dataclass

from hermes_state.store import releases
from hermes_state.store.sql import quote

log = logging.getLogger("hermes_state")

SCHEMA_VERSION = releases.NEWEST.schema  # what this package writes: the newest family (31)
# Every schema number a release family in the field writes (see :mod:`releases`).
KNOWN_VERSIONS = releases.KNOWN_VERSIONS
RELEASES_BY_VERSION = {f.schema: f.name for f in releases.FAMILIES}
ADDITIONS_KEY = "hermes_additions"  # state_meta: version of this package's own objects
ADDITIONS_VERSION = 1

# --- upstream schema 31 ------------------------------------------------------------------------
# Column lists, types and defaults as Hermes Agent 0.22 declares them (its stores are the format).

SESSIONS_DDL = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    created_source TEXT,
    user_id TEXT,
    session_key TEXT,
    chat_id TEXT,
    chat_type TEXT,
    thread_id TEXT,
    display_name TEXT,
    origin_json TEXT,
    expiry_finalized INTEGER DEFAULT 0,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    system_prompt_hash TEXT,
    parent_session_id TEXT,
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
    cwd TEXT,
    git_branch TEXT,
    git_repo_root TEXT,
    git_metadata_generation INTEGER NOT NULL DEFAULT 0,
    billing_provider TEXT,
    billing_base_url TEXT,
    billing_mode TEXT,
    estimated_cost_usd REAL,
    actual_cost_usd REAL,
    cost_status TEXT,
    cost_source TEXT,
    pricing_version TEXT,
    title TEXT,
    title_source TEXT,
    last_activity_at REAL,
    last_activity_description TEXT,
    last_activity_provenance TEXT,
    api_call_count INTEGER DEFAULT 0,
    handoff_state TEXT,
    handoff_platform TEXT,
    handoff_error TEXT,
    compression_failure_cooldown_until REAL,
    compression_failure_error TEXT,
    compression_fallback_streak INTEGER NOT NULL DEFAULT 0,
    compression_ineffective_count INTEGER NOT NULL DEFAULT 0,
    compression_recovery_deadline REAL,
    compression_overload_streak INTEGER NOT NULL DEFAULT 0,
    profile_name TEXT,
    transport_profile TEXT,
    rewind_count INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0,
    auto_archived INTEGER NOT NULL DEFAULT 0,
    pinned INTEGER NOT NULL DEFAULT 0,
    hidden INTEGER NOT NULL DEFAULT 0,
    last_read_at REAL,
    tool_names TEXT,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id),
    FOREIGN KEY (system_prompt_hash) REFERENCES system_prompts(hash)
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
    effect_disposition TEXT,
    timestamp REAL NOT NULL,
    token_count INTEGER,
    finish_reason TEXT,
    reasoning TEXT,
    reasoning_content TEXT,
    reasoning_details TEXT,
    codex_reasoning_items TEXT,
    codex_message_items TEXT,
    platform_message_id TEXT,
    observed INTEGER DEFAULT 0,
    _compressed_summary INTEGER NOT NULL DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER NOT NULL DEFAULT 0,
    api_content TEXT,
    display_kind TEXT,
    display_metadata TEXT,
    display_identity BLOB,
    display_order INTEGER,
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

# The gateway's outbox; created on first use by whichever writer needs it first.
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

# Counters a usage report adds to a session and to its per-route usage row.
USAGE_COUNTERS = (
    "api_call_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)

SCHEMA_VERSION_DDL = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"

# Tables of schema 31, in creation order (delivery_obligations only on first use).
UPSTREAM_TABLE_DDL: dict[str, str] = {
    "schema_version": SCHEMA_VERSION_DDL,
    "system_prompts": (
        "CREATE TABLE IF NOT EXISTS system_prompts (\n"
        "    hash TEXT PRIMARY KEY,\n    prompt TEXT NOT NULL\n)"
    ),
    "sessions": SESSIONS_DDL,
    "messages": MESSAGES_DDL,
    "session_model_usage": SESSION_MODEL_USAGE_DDL,
    "state_meta": STATE_META_DDL,
    "gateway_routing": GATEWAY_ROUTING_DDL,
    "gateway_hygiene_state": (
        "CREATE TABLE IF NOT EXISTS gateway_hygiene_state (\n"
        "    session_key TEXT PRIMARY KEY,\n"
        "    failure_streak INTEGER NOT NULL DEFAULT 0\n)"
    ),
    "conversation_generations": (
        "CREATE TABLE IF NOT EXISTS conversation_generations (\n"
        "    source TEXT NOT NULL,\n    session_key TEXT NOT NULL,\n"
        "    generation INTEGER NOT NULL DEFAULT 0,\n    PRIMARY KEY (source, session_key)\n)"
    ),
    "gateway_heartbeats": (
        "CREATE TABLE IF NOT EXISTS gateway_heartbeats (\n"
        "    backend_id TEXT PRIMARY KEY,\n    pid INTEGER NOT NULL,\n"
        "    started_at REAL NOT NULL,\n    last_heartbeat REAL NOT NULL,\n"
        "    profile TEXT NOT NULL DEFAULT '',\n    host TEXT NOT NULL DEFAULT ''\n)"
    ),
    "compression_locks": COMPRESSION_LOCKS_DDL,
    "session_turn_leases": (
        "CREATE TABLE IF NOT EXISTS session_turn_leases (\n"
        "    conversation_id TEXT PRIMARY KEY,\n    holder TEXT NOT NULL,\n"
        "    acquired_at REAL NOT NULL,\n    expires_at REAL NOT NULL\n)"
    ),
    "async_delegations": ASYNC_DELEGATIONS_DDL,
}
LAZY_TABLE_DDL: dict[str, str] = {"delivery_obligations": DELIVERY_OBLIGATIONS_DDL}

TITLE_INDEX_DDL = (
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique "
    "ON sessions(title) WHERE title IS NOT NULL"
)
# Indexes of schema 31 (name -> DDL); every release creates the ones it knows with IF NOT EXISTS.
UPSTREAM_INDEX_DDL: dict[str, str] = {
    name: f"CREATE INDEX IF NOT EXISTS {name} ON {body}"
    for name, body in (
        ("idx_sessions_source", "sessions(source)"),
        ("idx_sessions_source_id", "sessions(source, id)"),
        ("idx_sessions_parent", "sessions(parent_session_id)"),
        ("idx_sessions_started", "sessions(started_at DESC)"),
        ("idx_messages_session", "messages(session_id, timestamp)"),
        ("idx_messages_session_id", "messages(session_id, id)"),
        (
            "idx_messages_assistant_calls_by_session",
            "messages(session_id) WHERE role = 'assistant' AND tool_calls IS NOT NULL",
        ),
        ("idx_compression_locks_expires", "compression_locks(expires_at)"),
        ("idx_session_turn_leases_expires", "session_turn_leases(expires_at)"),
        ("idx_session_model_usage_session", "session_model_usage(session_id)"),
        ("idx_session_model_usage_model", "session_model_usage(model)"),
        ("idx_async_delegations_delivery", "async_delegations(delivery_state, completed_at)"),
        (
            "idx_messages_platform_msg_id",
            "messages(session_id, platform_message_id) WHERE platform_message_id IS NOT NULL",
        ),
        ("idx_messages_session_active", "messages(session_id, active, timestamp)"),
        (
            "idx_messages_display_page",
            "messages(session_id, display_order, active DESC, id DESC) "
            "WHERE active = 1 OR compacted = 1",
        ),
        (
            "idx_messages_display_backfill",
            "messages(session_id) WHERE (display_order IS NULL OR display_identity IS NULL) "
            "AND (active = 1 OR compacted = 1)",
        ),
        (
            "idx_messages_display_identity",
            "messages(session_id, display_identity, display_order) "
            "WHERE display_identity IS NOT NULL AND (active = 1 OR compacted = 1)",
        ),
        ("idx_messages_active_null", "messages(active) WHERE active IS NULL"),
        ("idx_messages_session_uid", "messages(session_id, message_uid) WHERE active = 1"),
        ("idx_sessions_session_key", "sessions(session_key, started_at DESC)"),
        (
            "idx_sessions_gateway_peer",
            "sessions(source, user_id, chat_id, chat_type, thread_id, started_at DESC)",
        ),
        ("idx_sessions_handoff_state", "sessions(handoff_state, started_at)"),
        ("idx_sessions_system_prompt_hash", "sessions(system_prompt_hash)"),
        ("idx_sessions_tool_names", "sessions(tool_names)"),
        # Listing by last activity without touching messages (SPEC §18).
        (
            "idx_sessions_effective_activity",
            "sessions(COALESCE(last_activity_at, started_at) DESC, started_at DESC)",
        ),
    )
}


# --- this package's own additions --------------------------------------------------------------
# Names no release defines: the runtime ledger of the seed document and the indexes our lookups use.

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

LEDGER_TABLE_DDL: dict[str, str] = {
    "runtime_epoch": RUNTIME_EPOCH_DDL,
    "session_admissions": SESSION_ADMISSIONS_DDL,
    "worker_executions": WORKER_EXECUTIONS_DDL,
    "worker_receipts": WORKER_RECEIPTS_DDL,
}
LEDGER_TABLES = tuple(LEDGER_TABLE_DDL)

# Guarded by json_valid so the owner index never makes a non-JSON display_metadata unwritable.
OWNER_ID_EXPR = (
    "CASE WHEN json_valid(display_metadata) THEN json_extract(display_metadata, '$.owner.id') END"
)
ADDITION_INDEX_DDL: dict[str, str] = {
    # Marker lookups by id (ownership.find_owned_input); partial, so rows without metadata are free.
    "hermes_idx_messages_owner": (
        f"CREATE INDEX IF NOT EXISTS hermes_idx_messages_owner ON messages(({OWNER_ID_EXPR}))"
        " WHERE display_metadata IS NOT NULL"
    ),
    # Rows whose metadata cannot be parsed (normally none): the lookup must notice them.
    "hermes_idx_messages_bad_metadata": (
        "CREATE INDEX IF NOT EXISTS hermes_idx_messages_bad_metadata ON messages(session_id)"
        " WHERE display_metadata IS NOT NULL AND NOT json_valid(display_metadata)"
    ),
    "hermes_idx_admissions_session": (
        "CREATE INDEX IF NOT EXISTS hermes_idx_admissions_session "
        "ON session_admissions(session_id, status, seq)"
    ),
    "hermes_idx_executions_session": (
        "CREATE INDEX IF NOT EXISTS hermes_idx_executions_session "
        "ON worker_executions(session_id, status)"
    ),
}
DELIVERY_CLAIM_INDEX_DDL = (
    "CREATE INDEX IF NOT EXISTS hermes_idx_delivery_claim "
    "ON delivery_obligations(state, platform, adapter_profile)"
)

# Names of objects the layout before SPEC §19 created, replaced by the ones above on migration.
LEGACY_INDEXES = (
    "idx_sessions_activity",
    "idx_messages_owner",
    "idx_messages_bad_metadata",
    "idx_session_admissions_session",
    "idx_worker_executions_session",
    "idx_delivery_obligations_claim",
)

TABLE_DDL: dict[str, str] = {**UPSTREAM_TABLE_DDL, **LEDGER_TABLE_DDL}


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
                f"PRAGMA table_info({quote(table)})"
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
    return [r[1] for r in conn.execute(f"PRAGMA table_info({quote(table)})")]


def reconcile_columns(conn: sqlite3.Connection, tables: tuple[str, ...] | None = None) -> list[str]:
    """Add every declared column missing from an existing table; return "table.column" added."""
    added = []
    for table, cols in declared_columns().items():
        if tables is not None and table not in tables:
            continue
        live = set(live_columns(conn, table))
        if not live:
            continue
        for col in cols:
            if col.name in live:
                continue
            try:
                conn.execute(
                    f"ALTER TABLE {quote(table)} ADD COLUMN {quote(col.name)} {col.add_expr}"
                )
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc).lower():
                    raise
                continue  # a sibling process added it first
            added.append(f"{table}.{col.name}")
    if added:
        log.info("schema: added columns %s", ", ".join(added))
    return added


def stored_version_text(conn: sqlite3.Connection) -> str | None:
    """Return what schema_version holds, as text (for messages: '31x' is shown as '31x')."""
    if not conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'"
    ).fetchone():
        return None
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return None if row is None or row[0] is None else str(row[0])


def shown_version(text: str | None) -> str:
    """Say which schema a store is at, quoting a value that is not a number."""
    if text is None:
        return "no schema version"
    try:
        return f"schema {int(text)}"
    except ValueError:
        return f"schema_version {text[:40]!r} (not a number)"


def stored_version(conn: sqlite3.Connection) -> int | None:
    """Return the schema version recorded in the store, or None for a store without one."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'"
    ).fetchone()
    if row is None:
        return None
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    if row is None or row[0] is None:
        return None
    try:
        return int(row[0])
    except (TypeError, ValueError):
        return -1  # not a number: no release wrote this, so no release's rules apply


def set_version(conn: sqlite3.Connection, version: int) -> None:
    """Record the schema version (one row), inside the caller's write transaction."""
    conn.execute("DELETE FROM schema_version")
    conn.execute("INSERT INTO schema_version(version) VALUES (?)", (version,))


def ensure_title_index(conn: sqlite3.Connection) -> int:
    """Create the unique-title index, clearing older duplicate titles first; return how many."""
    try:
        conn.execute(TITLE_INDEX_DDL)
        return 0
    except sqlite3.IntegrityError:
        # Legacy duplicates: the newest holder keeps the title, older ones give it up.
        cur = conn.execute(
            "UPDATE sessions SET title = NULL WHERE title IS NOT NULL AND rowid NOT IN "
            "(SELECT MAX(rowid) FROM sessions WHERE title IS NOT NULL GROUP BY title)"
        )
        log.warning("schema: cleared %d duplicate session titles", cur.rowcount)
        conn.execute(TITLE_INDEX_DDL)
        return cur.rowcount


def ensure_delivery_obligations(conn: sqlite3.Connection) -> None:
    """Create the delivery_obligations table on first use (inside a write transaction)."""
    conn.execute(DELIVERY_OBLIGATIONS_DDL)
    reconcile_columns(conn, ("delivery_obligations",))
    conn.execute(DELIVERY_CLAIM_INDEX_DDL)


def projection(live: tuple[str, ...] | list[str], wanted: tuple[str, ...], alias: str = "") -> str:
    """Build a select list of wanted columns, reading missing ones as NULL (older stores)."""
    return _projection(tuple(live), tuple(wanted), alias)


# A layout without a message flag reads every row the way its release does (schema 11/13 have no
# ``active``: every message is live; none is a compression archive).
_ABSENT_READS_AS = {"active": "1", "compacted": "0"}


@functools.lru_cache(maxsize=256)
def _projection(live: tuple[str, ...], wanted: tuple[str, ...], alias: str) -> str:
    """Build projection's select list (kept: readers build the same few again and again)."""
    have = set(live)
    prefix = f"{alias}." if alias else ""
    parts = [
        f"{prefix}{quote(c)}" if c in have else f"{_ABSENT_READS_AS.get(c, 'NULL')} AS {quote(c)}"
        for c in wanted
    ]
    return ", ".join(parts)


# The agent's module-level schema script (``hermes_state.SCHEMA_SQL``): the tables and indexes of
# schema 31, runnable with executescript on an empty database.
SCHEMA_SQL = (
    ";\n".join([*UPSTREAM_TABLE_DDL.values(), *UPSTREAM_INDEX_DDL.values(), TITLE_INDEX_DDL])
    + ";\n"
)


def parse_schema_columns(schema_sql: str) -> dict[str, dict[str, str]]:
    """Return {table: {column: declared type}} of every CREATE TABLE in a schema script."""
    mem = sqlite3.connect(":memory:")
    try:
        mem.executescript(schema_sql)
        tables = [
            r[0]
            for r in mem.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {
            t: {r[1]: r[2] or "" for r in mem.execute(f"PRAGMA table_info({quote(t)})")}
            for t in tables
        }
    finally:
        mem.close()
