"""Turn a store into the layout hermes-state wrote before SPEC §19 (the "old 31").

That layout replaced the agent's FTS objects with its own under the agent's names — a
``messages_fts`` over ``messages`` itself, a one-column ``detail='none'`` substring index over its
own view, a ``messages_fts_cjk`` of bigrams, triggers ``messages_fts_ai/_ad/_au`` — and called the
result schema 31 without upstream's message_uid trigger and index. The statements below are what
that version created (captured from its ``db migrate`` of a Hermes Agent 0.21 store).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

_GATE = (
    "(({ref} > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = "
    "'fts_rebuild_high_water'), -1) OR {ref} <= COALESCE((SELECT CAST(value AS INTEGER) FROM "
    "state_meta WHERE key = 'fts_rebuild_progress'), -1)))"
)
_CJK_HW = (
    "COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_cjk_high_water'), 0)"
)

LEGACY_DDL = (
    "CREATE VIEW messages_fts_trigram_src AS SELECT id, content FROM messages "
    "WHERE role IS NOT 'tool'",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_calls, "
    "content='messages', content_rowid='id')",
    "CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, "
    "content='messages_fts_trigram_src', content_rowid='id', tokenize='trigram', detail='none')",
    "CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(grams, tokenize='ascii')",
    "CREATE TABLE messages_fts_cjk_pending (id INTEGER PRIMARY KEY)",
    f"""CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages
WHEN {_GATE.format(ref="new.id")}
BEGIN
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
        VALUES (new.id, new.content, new.tool_name, new.tool_calls);
    INSERT INTO messages_fts_trigram(rowid, content)
        SELECT new.id, new.content WHERE new.role IS NOT 'tool';
END""",
    f"""CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages
WHEN {_GATE.format(ref="old.id")}
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
        VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content)
        SELECT 'delete', old.id, old.content WHERE old.role IS NOT 'tool';
END""",
    """CREATE TRIGGER messages_fts_au
AFTER UPDATE OF id, role, content, tool_name, tool_calls ON messages
WHEN old.id IS NOT new.id OR old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
  OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
        VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
        VALUES (new.id, new.content, new.tool_name, new.tool_calls);
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content)
        SELECT 'delete', old.id, old.content WHERE old.role IS NOT 'tool';
    INSERT INTO messages_fts_trigram(rowid, content)
        SELECT new.id, new.content WHERE new.role IS NOT 'tool';
END""",
    f"""CREATE TRIGGER messages_fts_cjk_ai AFTER INSERT ON messages
WHEN new.id <= {_CJK_HW}
BEGIN
    INSERT OR IGNORE INTO messages_fts_cjk_pending(id) VALUES (new.id);
END""",
    """CREATE TRIGGER messages_fts_cjk_ad AFTER DELETE ON messages
BEGIN
    DELETE FROM messages_fts_cjk WHERE rowid = old.id;
    DELETE FROM messages_fts_cjk_pending WHERE id = old.id;
END""",
    "CREATE INDEX idx_sessions_activity ON sessions(COALESCE(last_activity_at, started_at) DESC)",
    "CREATE INDEX idx_messages_owner ON messages((CASE WHEN json_valid(display_metadata) THEN "
    "json_extract(display_metadata, '$.owner.id') END)) WHERE display_metadata IS NOT NULL",
)
# Columns that version added to every store it migrated (what Hermes Agent 0.19 lacks).
ADDED_COLUMNS = {
    "sessions": (
        ("transport_profile", "TEXT"),
        ("auto_archived", "INTEGER NOT NULL DEFAULT 0"),
        ("pinned", "INTEGER NOT NULL DEFAULT 0"),
        ("last_activity_at", "REAL"),
        ("title_source", "TEXT"),
    ),
    "messages": (
        ("display_kind", "TEXT"),
        ("display_metadata", "TEXT"),
        ("message_uid", "TEXT"),
        ("absorbed_message_uids", "TEXT"),
        ("tool_call_uids", "TEXT"),
        ("tool_call_uid", "TEXT"),
    ),
}


def make_legacy(db_path: Path) -> None:
    """Rewrite the store's search layout into the pre-§19 one and label it schema 31."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for kind, name in conn.execute(
            "SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view') "
            "AND (name LIKE 'messages\\_fts%' ESCAPE '\\' OR name LIKE 'hermes\\_%' ESCAPE '\\' "
            "OR name = 'messages_message_uid_insert')"
        ).fetchall():
            conn.execute(f'DROP {kind.upper()} "{name}"')
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%' "
            "AND (name LIKE 'messages\\_fts%' ESCAPE '\\' OR name LIKE 'hermes\\_%' ESCAPE '\\')"
        ).fetchall():
            conn.execute(f'DROP TABLE "{name}"')
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE name LIKE 'hermes\\_%' ESCAPE '\\'"
        ).fetchall():
            kind = conn.execute("SELECT type FROM sqlite_master WHERE name = ?", (name,)).fetchone()
            if kind is not None:
                conn.execute(f'DROP {kind[0].upper()} IF EXISTS "{name}"')
        conn.execute("DROP INDEX IF EXISTS idx_messages_session_uid")
        conn.execute("DELETE FROM state_meta WHERE key LIKE 'hermes\\_%' ESCAPE '\\'")
        for table, columns in ADDED_COLUMNS.items():
            have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            for col, decl in columns:
                if col not in have:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {col} {decl}")
        for ddl in LEGACY_DDL:
            conn.execute(ddl)
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
        conn.execute("INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES ('rebuild')")
        conn.execute(
            "INSERT OR REPLACE INTO state_meta(key, value) VALUES ('fts_cjk_high_water', '0')"
        )
        conn.execute("DELETE FROM schema_version")
        conn.execute("INSERT INTO schema_version(version) VALUES (31)")
        conn.execute("COMMIT")
    finally:
        conn.close()
