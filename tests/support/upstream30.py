"""Build a store with the upstream Hermes schema-30 layout (digest §1.4-§1.6), without FTS.

The sessions and messages tables carry exactly the upstream columns, including the ones this
package does not declare (created_source, system_prompt_hash, display_identity BLOB, …), so tests
can prove that opening and migrating such a store keeps every row and every value.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SENTINEL = "\x00json:"

# (name, declaration) in the upstream order; "newest" marks columns only the newest v30 has.
SESSION_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "TEXT PRIMARY KEY"),
    ("source", "TEXT NOT NULL"),
    ("created_source", "TEXT"),
    ("user_id", "TEXT"),
    ("session_key", "TEXT"),
    ("chat_id", "TEXT"),
    ("chat_type", "TEXT"),
    ("thread_id", "TEXT"),
    ("display_name", "TEXT"),
    ("origin_json", "TEXT"),
    ("expiry_finalized", "INTEGER DEFAULT 0"),
    ("model", "TEXT"),
    ("model_config", "TEXT"),
    ("system_prompt", "TEXT"),
    ("system_prompt_hash", "TEXT"),
    ("parent_session_id", "TEXT"),
    ("started_at", "REAL NOT NULL"),
    ("ended_at", "REAL"),
    ("end_reason", "TEXT"),
    ("message_count", "INTEGER DEFAULT 0"),
    ("tool_call_count", "INTEGER DEFAULT 0"),
    ("input_tokens", "INTEGER DEFAULT 0"),
    ("output_tokens", "INTEGER DEFAULT 0"),
    ("cache_read_tokens", "INTEGER DEFAULT 0"),
    ("cache_write_tokens", "INTEGER DEFAULT 0"),
    ("reasoning_tokens", "INTEGER DEFAULT 0"),
    ("cwd", "TEXT"),
    ("git_branch", "TEXT"),
    ("git_repo_root", "TEXT"),
    ("git_metadata_generation", "INTEGER NOT NULL DEFAULT 0"),
    ("billing_provider", "TEXT"),
    ("billing_base_url", "TEXT"),
    ("billing_mode", "TEXT"),
    ("estimated_cost_usd", "REAL"),
    ("actual_cost_usd", "REAL"),
    ("cost_status", "TEXT"),
    ("cost_source", "TEXT"),
    ("pricing_version", "TEXT"),
    ("title", "TEXT"),
    ("title_source", "TEXT"),
    ("last_activity_at", "REAL"),
    ("last_activity_description", "TEXT"),
    ("last_activity_provenance", "TEXT"),
    ("api_call_count", "INTEGER DEFAULT 0"),
    ("handoff_state", "TEXT"),
    ("handoff_platform", "TEXT"),
    ("handoff_error", "TEXT"),
    ("compression_failure_cooldown_until", "REAL"),
    ("compression_failure_error", "TEXT"),
    ("compression_fallback_streak", "INTEGER NOT NULL DEFAULT 0"),
    ("compression_ineffective_count", "INTEGER NOT NULL DEFAULT 0"),
    ("compression_recovery_deadline", "REAL"),
    ("compression_overload_streak", "INTEGER NOT NULL DEFAULT 0"),
    ("profile_name", "TEXT"),
    ("transport_profile", "TEXT"),
    ("rewind_count", "INTEGER NOT NULL DEFAULT 0"),
    ("archived", "INTEGER NOT NULL DEFAULT 0"),
    ("auto_archived", "INTEGER NOT NULL DEFAULT 0"),
    ("pinned", "INTEGER NOT NULL DEFAULT 0"),
    ("hidden", "INTEGER NOT NULL DEFAULT 0"),
    ("last_read_at", "REAL"),
    ("tool_names", "TEXT"),
)

MESSAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "INTEGER PRIMARY KEY AUTOINCREMENT"),
    ("session_id", "TEXT NOT NULL REFERENCES sessions(id)"),
    ("role", "TEXT NOT NULL"),
    ("content", "TEXT"),
    ("tool_call_id", "TEXT"),
    ("tool_calls", "TEXT"),
    ("tool_name", "TEXT"),
    ("effect_disposition", "TEXT"),
    ("timestamp", "REAL NOT NULL"),
    ("token_count", "INTEGER"),
    ("finish_reason", "TEXT"),
    ("reasoning", "TEXT"),
    ("reasoning_content", "TEXT"),
    ("reasoning_details", "TEXT"),
    ("codex_reasoning_items", "TEXT"),
    ("codex_message_items", "TEXT"),
    ("platform_message_id", "TEXT"),
    ("observed", "INTEGER DEFAULT 0"),
    ("_compressed_summary", "INTEGER NOT NULL DEFAULT 0"),
    ("active", "INTEGER NOT NULL DEFAULT 1"),
    ("compacted", "INTEGER NOT NULL DEFAULT 0"),
    ("api_content", "TEXT"),
    ("display_kind", "TEXT"),
    ("display_metadata", "TEXT"),
    ("display_identity", "BLOB"),
    ("display_order", "INTEGER"),
    ("message_uid", "TEXT"),
    ("absorbed_message_uids", "TEXT"),
    ("tool_call_uids", "TEXT"),
    ("tool_call_uid", "TEXT"),
)

# Columns an older schema-30 store lacks ("newest schema" / "newest extract" in the digest).
NEWEST_ONLY = {
    "sessions": ("auto_archived",),
    "messages": ("message_uid", "absorbed_message_uids", "tool_call_uids", "tool_call_uid"),
}

OTHER_TABLES_DDL = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    "CREATE TABLE system_prompts (hash TEXT PRIMARY KEY, prompt TEXT NOT NULL)",
    """CREATE TABLE session_model_usage (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        model TEXT NOT NULL, billing_provider TEXT NOT NULL DEFAULT '',
        billing_base_url TEXT NOT NULL DEFAULT '', billing_mode TEXT NOT NULL DEFAULT '',
        task TEXT NOT NULL DEFAULT '',
        api_call_count INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0, cache_read_tokens INTEGER NOT NULL DEFAULT 0,
        cache_write_tokens INTEGER NOT NULL DEFAULT 0, reasoning_tokens INTEGER NOT NULL DEFAULT 0,
        estimated_cost_usd REAL NOT NULL DEFAULT 0, actual_cost_usd REAL NOT NULL DEFAULT 0,
        cost_status TEXT, cost_source TEXT, first_seen REAL, last_seen REAL,
        PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task))""",
    "CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT)",
    """CREATE TABLE gateway_routing (scope TEXT NOT NULL DEFAULT '', session_key TEXT NOT NULL,
        entry_json TEXT NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (scope, session_key))""",
    """CREATE TABLE gateway_hygiene_state (session_key TEXT PRIMARY KEY,
        failure_streak INTEGER NOT NULL DEFAULT 0)""",
    """CREATE TABLE conversation_generations (source TEXT NOT NULL, session_key TEXT NOT NULL,
        generation INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (source, session_key))""",
    """CREATE TABLE gateway_heartbeats (backend_id TEXT PRIMARY KEY, pid INTEGER NOT NULL,
        started_at REAL NOT NULL, last_heartbeat REAL NOT NULL,
        profile TEXT NOT NULL DEFAULT '', host TEXT NOT NULL DEFAULT '')""",
    """CREATE TABLE compression_locks (session_id TEXT PRIMARY KEY, holder TEXT NOT NULL,
        acquired_at REAL NOT NULL, expires_at REAL NOT NULL)""",
    """CREATE TABLE session_turn_leases (conversation_id TEXT PRIMARY KEY, holder TEXT NOT NULL,
        acquired_at REAL NOT NULL, expires_at REAL NOT NULL)""",
    """CREATE TABLE async_delegations (delegation_id TEXT PRIMARY KEY,
        origin_session TEXT NOT NULL, origin_ui_session_id TEXT NOT NULL DEFAULT '',
        parent_session_id TEXT, state TEXT NOT NULL, dispatched_at REAL NOT NULL,
        completed_at REAL, updated_at REAL NOT NULL, event_json TEXT, result_json TEXT,
        delivery_state TEXT NOT NULL DEFAULT 'pending',
        delivery_attempts INTEGER NOT NULL DEFAULT 0, delivered_at REAL, owner_pid INTEGER,
        owner_started_at INTEGER, task_json TEXT, delivery_claim TEXT,
        delivery_claimed_at REAL, origin_session_id TEXT NOT NULL DEFAULT '')""",
)

INDEX_DDL = (
    "CREATE INDEX idx_sessions_source ON sessions(source)",
    "CREATE INDEX idx_sessions_source_id ON sessions(source, id)",
    "CREATE INDEX idx_sessions_parent ON sessions(parent_session_id)",
    "CREATE INDEX idx_sessions_started ON sessions(started_at DESC)",
    "CREATE INDEX idx_messages_session ON messages(session_id, timestamp)",
    "CREATE INDEX idx_messages_session_id ON messages(session_id, id)",
    "CREATE INDEX idx_messages_assistant_calls_by_session ON messages(session_id) "
    "WHERE role='assistant' AND tool_calls IS NOT NULL",
    "CREATE INDEX idx_messages_session_active ON messages(session_id, active, timestamp)",
    "CREATE INDEX idx_sessions_system_prompt_hash ON sessions(system_prompt_hash)",
    "CREATE INDEX idx_sessions_effective_activity "
    "ON sessions(COALESCE(last_activity_at, started_at) DESC, started_at DESC)",
    "CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions(title) WHERE title IS NOT NULL",
)

# Tables the fixture creates beyond those this package declares (they must survive migration).
EXTRA_TABLES = (
    "system_prompts",
    "gateway_hygiene_state",
    "conversation_generations",
    "gateway_heartbeats",
    "session_turn_leases",
)

PROMPT = "You are Hermes, a careful engineering agent."
PROMPT_HASH = hashlib.sha256(PROMPT.encode("utf-8")).hexdigest()
ROOT_ID = "20250101_090000_root01"
CHILD_ID = "20250101_100000_child1"
TELEGRAM_ID = "20250102_080000_tg0001"
T0 = 1735722000.0


@dataclass(frozen=True)
class Upstream30:
    """What build_upstream30 wrote, for tests to compare against."""

    path: Path
    tables: tuple[str, ...]
    session_columns: tuple[str, ...]
    message_columns: tuple[str, ...]
    structured_content: list[dict[str, Any]]
    uid_of_first_message: str | None


def _columns(table: str, spec: tuple[tuple[str, str], ...], newest: bool) -> list[tuple[str, str]]:
    skip = () if newest else NEWEST_ONLY[table]
    return [(n, d) for n, d in spec if n not in skip]


def _insert(conn: sqlite3.Connection, table: str, live: set[str], row: dict[str, Any]) -> None:
    cols = [c for c in row if c in live]
    names = ", ".join(f'"{c}"' for c in cols)
    marks = ", ".join("?" for _ in cols)
    conn.execute(f'INSERT INTO "{table}" ({names}) VALUES ({marks})', [row[c] for c in cols])


def _identity(n: int) -> bytes:
    return hashlib.sha256(f"display-{n}".encode()).digest()


def _sessions() -> list[dict[str, Any]]:
    return [
        {
            "id": ROOT_ID,
            "source": "cli",
            "created_source": "cli",
            "user_id": "basic:alice",
            "model": "anthropic/claude-sonnet-4.6",
            "model_config": json.dumps({"provider": "anthropic", "yolo_mode": False}),
            "system_prompt": None,
            "system_prompt_hash": PROMPT_HASH,
            "started_at": T0,
            "ended_at": T0 + 600.0,
            "end_reason": "compression",
            "message_count": 5,
            "tool_call_count": 1,
            "input_tokens": 1200,
            "output_tokens": 340,
            "cache_read_tokens": 800,
            "reasoning_tokens": 55,
            "cwd": "/home/alice/proj",
            "git_branch": "main",
            "git_repo_root": "/home/alice/proj",
            "git_metadata_generation": 3,
            "estimated_cost_usd": 0.0123,
            "title": "Fix Docker Build",
            "title_source": "user",
            "last_activity_at": T0 + 590.0,
            "last_activity_description": "ran the test suite",
            "last_activity_provenance": "tool",
            "api_call_count": 4,
            "compression_fallback_streak": 2,
            "compression_overload_streak": 1,
            "profile_name": "default",
            "rewind_count": 1,
            "auto_archived": 0,
            "pinned": 1,
            "hidden": 0,
            "last_read_at": T0 + 595.5,
            "tool_names": json.dumps(["terminal", "read_file"]),
        },
        {
            "id": CHILD_ID,
            "source": "cli",
            "created_source": "cli",
            "user_id": "basic:alice",
            "model": "anthropic/claude-sonnet-4.6",
            "system_prompt_hash": PROMPT_HASH,
            "parent_session_id": ROOT_ID,
            "started_at": T0 + 601.0,
            "message_count": 2,
            "cwd": "/home/alice/proj",
            "git_branch": "main",
            "title": "Fix Docker Build #2",
            "title_source": "derived",
            "compression_recovery_deadline": T0 + 9000.0,
            "profile_name": "default",
            "tool_names": json.dumps(["terminal"]),
        },
        {
            "id": TELEGRAM_ID,
            "source": "telegram",
            "created_source": "telegram",
            "user_id": "42",
            "session_key": "agent:main:telegram:dm:42",
            "chat_id": "42",
            "chat_type": "dm",
            "display_name": "Alice",
            "origin_json": json.dumps({"platform": "telegram", "chat_id": "42"}),
            "expiry_finalized": 1,
            "model": "openai/gpt-5",
            "system_prompt": "Legacy inline prompt",
            "started_at": T0 + 86400.0,
            "ended_at": T0 + 86500.0,
            "end_reason": "idle",
            "message_count": 1,
            "handoff_state": "failed",
            "handoff_platform": "telegram",
            "handoff_error": "chat gone",
            "compression_ineffective_count": 2,
            "archived": 1,
            "hidden": 1,
            "last_read_at": 0.0,
        },
    ]


def _messages(structured: list[dict[str, Any]], uid: str) -> list[dict[str, Any]]:
    call = [
        {"id": "call_1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}
    ]
    return [
        {
            "session_id": ROOT_ID,
            "role": "user",
            "content": "Docker build fails with exit code 137\nplease help",
            "timestamp": T0 + 1.0,
            "display_identity": _identity(1),
            "display_order": 1,
            "message_uid": uid,
        },
        {
            "session_id": ROOT_ID,
            "role": "assistant",
            "content": "",
            "tool_calls": json.dumps(call),
            "timestamp": T0 + 2.0,
            "token_count": 40,
            "finish_reason": "tool_calls",
            "reasoning": "Check memory limits first.",
            "reasoning_details": json.dumps([{"type": "reasoning.text", "text": "mem"}]),
            "display_identity": _identity(2),
            "display_order": 2,
        },
        {
            "session_id": ROOT_ID,
            "role": "tool",
            "content": "Killed (OOM)",
            "tool_call_id": "call_1",
            "tool_name": "terminal",
            "effect_disposition": "completed",
            "timestamp": T0 + 3.0,
            "display_identity": _identity(3),
            "display_order": 3,
        },
        {
            "session_id": ROOT_ID,
            "role": "assistant",
            "content": SENTINEL + json.dumps(structured),
            "timestamp": T0 + 4.0,
            "finish_reason": "stop",
            "api_content": "Raise the memory limit.",
            "codex_message_items": json.dumps([{"type": "message", "id": "msg_1"}]),
            "display_identity": _identity(4),
            "display_order": 4,
        },
        {
            "session_id": ROOT_ID,
            "role": "user",
            "content": "[summary of the earlier turns]",
            "timestamp": T0 + 5.0,
            "_compressed_summary": 1,
            "active": 0,
            "compacted": 1,
            "display_order": 5,
        },
        {
            "session_id": ROOT_ID,
            "role": "user",
            "content": "an undone turn",
            "timestamp": T0 + 6.0,
            "active": 0,
            "compacted": 0,
            "observed": 1,
        },
        {
            "session_id": CHILD_ID,
            "role": "user",
            "content": "continue after compression",
            "timestamp": T0 + 602.0,
            "message_uid": "0123456789abcdef0123456789abcdef",
        },
        {
            "session_id": CHILD_ID,
            "role": "assistant",
            "content": "Done: the build passes.",
            "timestamp": T0 + 603.0,
            "finish_reason": "stop",
            "absorbed_message_uids": json.dumps(["fedcba9876543210fedcba9876543210"]),
        },
        {
            "session_id": TELEGRAM_ID,
            "role": "user",
            "content": "hello from telegram",
            "timestamp": T0 + 86401.0,
            "platform_message_id": "9001",
            "display_kind": "steer",
            "display_metadata": json.dumps({"reactions": ["+1"]}),
        },
    ]


def _other_rows() -> dict[str, list[dict[str, Any]]]:
    return {
        "schema_version": [{"version": 30}],
        "system_prompts": [{"hash": PROMPT_HASH, "prompt": PROMPT}],
        "session_model_usage": [
            {
                "session_id": ROOT_ID,
                "model": "anthropic/claude-sonnet-4.6",
                "api_call_count": 4,
                "input_tokens": 1200,
                "output_tokens": 340,
                "estimated_cost_usd": 0.0123,
                "first_seen": T0,
                "last_seen": T0 + 590.0,
            }
        ],
        "state_meta": [{"key": "db_file_generation", "value": "5f0c2a9e" * 4}],
        "gateway_routing": [
            {
                "scope": "",
                "session_key": "agent:main:telegram:dm:42",
                "entry_json": "{}",
                "updated_at": T0 + 86400.0,
            }
        ],
        "gateway_hygiene_state": [
            {"session_key": "agent:main:telegram:dm:42", "failure_streak": 2}
        ],
        "conversation_generations": [
            {"source": "telegram", "session_key": "agent:main:telegram:dm:42", "generation": 3}
        ],
        "gateway_heartbeats": [
            {
                "backend_id": "gw-1",
                "pid": 4242,
                "started_at": T0,
                "last_heartbeat": T0 + 60.0,
                "profile": "default",
                "host": "laptop",
            }
        ],
        "session_turn_leases": [
            {"conversation_id": ROOT_ID, "holder": "gw-1", "acquired_at": T0, "expires_at": T0 + 1}
        ],
        "async_delegations": [
            {
                "delegation_id": "d1",
                "origin_session": ROOT_ID,
                "state": "completed",
                "dispatched_at": T0,
                "completed_at": T0 + 5.0,
                "updated_at": T0 + 5.0,
            }
        ],
    }


def build_upstream30(path: Path, *, newest: bool = True) -> Upstream30:
    """Write an upstream schema-30 store (WAL, no FTS) at path; newest=False omits uid columns."""
    session_cols = _columns("sessions", SESSION_COLUMNS, newest)
    message_cols = _columns("messages", MESSAGE_COLUMNS, newest)
    structured = [{"type": "text", "text": "Raise the memory limit."}, {"type": "image_url"}]
    uid = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("BEGIN")
        sessions_ddl = ", ".join(f"{n} {d}" for n, d in session_cols)
        conn.execute(
            f"CREATE TABLE sessions ({sessions_ddl}, "
            "FOREIGN KEY (parent_session_id) REFERENCES sessions(id), "
            "FOREIGN KEY (system_prompt_hash) REFERENCES system_prompts(hash))"
        )
        conn.execute(f"CREATE TABLE messages ({', '.join(f'{n} {d}' for n, d in message_cols)})")
        for ddl in OTHER_TABLES_DDL:
            conn.execute(ddl)
        for ddl in INDEX_DDL:
            conn.execute(ddl)
        live_s = {n for n, _ in session_cols}
        live_m = {n for n, _ in message_cols}
        for row in _sessions():
            _insert(conn, "sessions", live_s, row)
        for row in _messages(structured, uid):
            _insert(conn, "messages", live_m, row)
        for table, rows in _other_rows().items():
            cols = {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}
            for row in rows:
                _insert(conn, table, cols, row)
        conn.execute("COMMIT")
        tables = tuple(sorted(table_names(conn)))
    finally:
        conn.close()  # the last connection: SQLite checkpoints the WAL into the main file
    return Upstream30(
        path=path,
        tables=tables,
        session_columns=tuple(n for n, _ in session_cols),
        message_columns=tuple(n for n, _ in message_cols),
        structured_content=structured,
        uid_of_first_message=uid if newest else None,
    )


def dump_table(
    conn: sqlite3.Connection, table: str, columns: tuple[str, ...] | None = None
) -> list:
    """Return every row of table (the given columns, or all) as tuples in rowid order."""
    select = "*" if columns is None else ", ".join(f'"{c}"' for c in columns)
    return [tuple(r) for r in conn.execute(f'SELECT {select} FROM "{table}" ORDER BY rowid')]


def table_names(conn: sqlite3.Connection) -> set[str]:
    """Return the names of the ordinary tables in a store (no sqlite_ or FTS tables)."""
    return {
        r[0]
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not r[0].startswith(("sqlite_", "messages_fts"))
    }
