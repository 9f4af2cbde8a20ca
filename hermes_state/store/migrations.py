"""Bringing a store to schema 31 with this package's additions, the way the agent itself would.

Only two callers migrate (SPEC §19.4): ``hermes db migrate`` and :class:`SessionDB` opened as the
agent's own store library. Every other write works within the schema the store has.

A migration keeps the agent's layout: tables, columns and indexes of schema 31 are added where
missing (never dropped or reshaped), the word/substring indexes stay in whichever release's shape
they are (an inline layout of Hermes Agent 0.19 stays inline, so that release keeps working), and
system prompts stay where they are (0.19 reads them from ``sessions.system_prompt``). What this
package adds goes under its own names. The layout this package wrote before SPEC §19 is repaired:
its objects under the agent's names are replaced by the agent's own shapes and reindexed.

Each step is a small idempotent function named for what it does; :func:`migrate` runs them in
order inside the caller's write transaction and reports what each changed.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hermes_state.shapes import lineage, sessions_json
from hermes_state.shapes.model_config import BRANCH_MARKER, DELEGATE_MARKER, ORPHANED, marker_sql
from hermes_state.store import cjk, fts, layout, meta, releases, schema, triggers
from hermes_state.store.sql import quote

log = logging.getLogger("hermes_state")

Step = Callable[[sqlite3.Connection], str | None]  # returns what it did, or None


@dataclass
class MigrateResult:
    """What a migration found and did."""

    before: int | None
    after: int
    kind_before: str
    steps: list[str] = field(default_factory=list)
    rebuild_pending: bool = False  # a chunked reindex is left for fts.finish_rebuild
    cjk_pending: bool = False  # the CJK index still has rows to catch up

    @property
    def changed(self) -> bool:
        """Tell whether the migration changed the store."""
        return bool(self.steps)

    @property
    def compatible_releases(self) -> tuple[str, ...]:
        """Return the Hermes Agent releases that can use the store afterwards."""
        return releases.package_spans()

    def to_dict(self) -> dict[str, object]:
        """Return a JSON-ready view."""
        return {
            "before": self.before,
            "after": self.after,
            "kind_before": self.kind_before,
            "steps": list(self.steps),
            "rebuild_pending": self.rebuild_pending,
            "cjk_pending": self.cjk_pending,
            "compatible_releases": list(self.compatible_releases),
        }


# --- steps -----------------------------------------------------------------------------------


def create_tables(conn: sqlite3.Connection) -> str | None:
    """Create the tables of schema 31 and of the runtime ledger that the store lacks."""
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = [name for name in schema.TABLE_DDL if name not in have]
    for name in missing:
        conn.execute(schema.TABLE_DDL[name])
    return f"created tables {', '.join(missing)}" if missing else None


def add_columns(conn: sqlite3.Connection) -> str | None:
    """Add the declared columns existing tables lack (nothing is dropped or retyped)."""
    added = schema.reconcile_columns(conn)
    return f"added columns {', '.join(added)}" if added else None


# --- the agent's version-gated data steps (a store older than the gate gets them once) --------


def _older_than(conn: sqlite3.Connection, gate: int) -> bool:
    """Tell whether the store's recorded schema is below gate (a step the agent ran there)."""
    version = schema.stored_version(conn)
    return version is not None and 0 < version < gate


def v16_tag_delegate_runs(conn: sqlite3.Connection) -> str | None:
    """Mark the runs the agent delegated before it marked them (schema 16), so pickers skip them.

    A child that is neither a branch, a reset nor a compression continuation gets
    ``_delegate_from`` naming its parent. A root that looks like a run whose parent was deleted
    (no title, at most 25 messages, tool output, no children) gets ``__orphaned__``.
    """
    if not _older_than(conn, 16):
        return None
    marker = marker_sql("", DELEGATE_MARKER)
    branch = marker_sql("", BRANCH_MARKER)
    cur = conn.execute(
        f"UPDATE sessions SET model_config = json_set(CASE WHEN json_valid(model_config) "
        f"THEN model_config ELSE '{{}}' END, '$.{DELEGATE_MARKER}', parent_session_id) "
        f"WHERE parent_session_id IS NOT NULL AND {marker} IS NULL "
        f"AND NOT {lineage.listable_sql('sessions')} AND NOT EXISTS (SELECT 1 FROM sessions p "
        "WHERE p.id = sessions.parent_session_id AND p.end_reason = 'compression')"
    )
    linked = cur.rowcount
    cur = conn.execute(
        f"UPDATE sessions SET model_config = json_set(CASE WHEN json_valid(model_config) "
        f"THEN model_config ELSE '{{}}' END, '$.{DELEGATE_MARKER}', '{ORPHANED}') "
        f"WHERE parent_session_id IS NULL AND {marker} IS NULL AND {branch} IS NULL "
        "AND title IS NULL AND COALESCE(message_count, 0) <= 25 "
        "AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.id AND m.role = 'tool')"
        " AND NOT EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = sessions.id)"
    )
    orphaned = cur.rowcount
    if not linked and not orphaned:
        return None
    return f"marked {linked} delegated runs and {orphaned} orphaned ones"


def v18_gateway_metadata(conn: sqlite3.Connection) -> str | None:
    """Fill gateway columns from the agent's ``sessions/sessions.json`` (schema 18)."""
    if not _older_than(conn, 18):
        return None
    row = conn.execute("PRAGMA database_list").fetchone()
    if row is None or not row[2]:
        return None
    changed = sessions_json.backfill_from_sessions_json(conn, Path(row[2]).parent)
    return f"filled gateway fields of {changed} sessions from sessions.json" if changed else None


def v20_seed_model_usage(conn: sqlite3.Connection) -> str | None:
    """Give every session with usage and no per-model row one from its totals (schema 20)."""
    if not _older_than(conn, 20):
        return None
    usage_cols = set(schema.live_columns(conn, "session_model_usage"))
    if not usage_cols:
        return None
    counters = [c for c in schema.USAGE_COUNTERS if c in usage_cols]
    totals = " + ".join(f"COALESCE(s.{c}, 0)" for c in counters)
    cur = conn.execute(
        "INSERT OR IGNORE INTO session_model_usage (session_id, model, billing_provider, "
        f"billing_base_url, billing_mode, {', '.join(counters)}, estimated_cost_usd, "
        "actual_cost_usd, first_seen, last_seen) "
        "SELECT s.id, COALESCE(NULLIF(s.model, ''), 'unknown'), COALESCE(s.billing_provider, ''),"
        " COALESCE(s.billing_base_url, ''), COALESCE(s.billing_mode, ''), "
        f"{', '.join(f'COALESCE(s.{c}, 0)' for c in counters)}, "
        "COALESCE(s.estimated_cost_usd, 0), COALESCE(s.actual_cost_usd, 0), s.started_at, "
        "COALESCE(s.ended_at, s.started_at) FROM sessions s "
        f"WHERE ({totals} + COALESCE(s.estimated_cost_usd, 0) + COALESCE(s.actual_cost_usd, 0))"
        " > 0 AND NOT EXISTS (SELECT 1 FROM session_model_usage u WHERE u.session_id = s.id)"
    )
    return (
        f"seeded {cur.rowcount} per-model usage rows from session totals" if cur.rowcount else None
    )


def v22_usage_task_key(conn: sqlite3.Connection) -> str | None:
    """Rebuild session_model_usage with ``task`` in its key (schema 22), keeping every row."""
    info = conn.execute("PRAGMA table_info(session_model_usage)").fetchall()
    if not info or any(r[1] == "task" and r[5] for r in info):
        return None
    cols = [r[1] for r in info]
    conn.execute("ALTER TABLE session_model_usage RENAME TO hermes_usage_rebuild")
    conn.execute(schema.SESSION_MODEL_USAGE_DDL)
    keep = [c for c in cols if c in schema.column_names("session_model_usage")]
    quoted = ", ".join(quote(c) for c in keep)
    conn.execute(
        f"INSERT OR IGNORE INTO session_model_usage ({quoted}) SELECT {quoted} "
        "FROM hermes_usage_rebuild"
    )
    conn.execute("DROP TABLE hermes_usage_rebuild")
    for name in ("idx_session_model_usage_session", "idx_session_model_usage_model"):
        conn.execute(schema.UPSTREAM_INDEX_DDL[name])
    return "rebuilt session_model_usage with task in its key"


def _fts_sql(conn: sqlite3.Connection, table: str) -> str:
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    return "" if row is None else str(row[0] or "")


def v23_flag_fts_optimize(conn: sqlite3.Connection) -> str | None:
    """Record that the agent's storage optimisation has work (schema 23), as the agent does.

    The agent never converts an older search layout itself; it sets ``fts_optimize_available``
    so its ``sessions optimize-storage`` offers to. A word index without ``tool_name`` (the
    inline layout up to 0.19) or a substring index with ``tool_calls`` (schema 25/26) has work.
    Once the store says 31 the agent skips this step, so the migration does it.
    """
    if not _older_than(conn, 23):
        return None
    word, trigram = _fts_sql(conn, fts.WORD_TABLE), _fts_sql(conn, fts.TRIGRAM_TABLE)
    legacy_word = bool(word) and "tool_name" not in word
    if not (legacy_word or "tool_calls" in trigram.lower()):
        return None
    meta.put(conn, "fts_optimize_available", "1")
    return "flagged the search layout for the agent's optimize-storage (schema 23 step)"


def v25_system_prompts(conn: sqlite3.Connection) -> str | None:
    """Store each session's system prompt once in ``system_prompts`` and point the session at it
    by hash (schema 25), as the agent does.

    The agent also clears ``sessions.system_prompt``; this step keeps it: the release that
    wrote the store (0.13 … 0.19) reads only that column, and every later release reads the
    prompt table first and the column as its fallback, so both find the same text.
    """
    if not _older_than(conn, 25):
        return None
    cols = schema.live_columns(conn, "sessions")
    if "system_prompt" not in cols or "system_prompt_hash" not in cols:
        return None
    rows = conn.execute(
        "SELECT id, system_prompt FROM sessions "
        "WHERE system_prompt IS NOT NULL AND system_prompt_hash IS NULL"
    ).fetchall()
    for sid, prompt in rows:
        text = str(prompt)
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        conn.execute(
            "INSERT OR IGNORE INTO system_prompts (hash, prompt) VALUES (?, ?)", (digest, text)
        )
        conn.execute("UPDATE sessions SET system_prompt_hash = ? WHERE id = ?", (digest, sid))
    return f"stored {len(rows)} system prompts by hash (schema 25 step)" if rows else None


def heal_null_active(conn: sqlite3.Connection) -> str | None:
    """Show again the messages an old writer stored with active = NULL (read as hidden)."""
    if "active" not in schema.live_columns(conn, "messages"):
        return None
    cur = conn.execute("UPDATE messages SET active = 1 WHERE active IS NULL")
    return f"made {cur.rowcount} messages stored without a state live" if cur.rowcount else None


def fill_ledger_session_ids(conn: sqlite3.Connection) -> str | None:
    """Fill session_id of ledger rows written by layouts that named it target_session_id."""
    if "target_session_id" not in schema.live_columns(conn, "session_admissions"):
        return None
    cur = conn.execute(
        "UPDATE session_admissions SET session_id = target_session_id "
        "WHERE session_id IS NULL AND target_session_id IS NOT NULL"
    )
    return f"filled {cur.rowcount} ledger session ids" if cur.rowcount else None


def remove_legacy_objects(conn: sqlite3.Connection) -> str | None:
    """Drop what this package's layout before SPEC §19 created under names it no longer uses."""
    removed = []
    for name in schema.LEGACY_INDEXES:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone():
            conn.execute(f"DROP INDEX IF EXISTS {quote(name)}")
            removed.append(name)
    if cjk.remove_legacy(conn):
        removed.append("old CJK index")
    return f"removed {', '.join(removed)}" if removed else None


def repair_search_layout(conn: sqlite3.Connection) -> str | None:
    """Give a store the agent's word/substring layout where it has none or ours from before.

    An agent's layout (inline or external) is kept as it is; missing pieces of an external one
    are added. Our old objects under the agent's names, and any FTS object a half-applied
    mixture left, are replaced by the external layout, which is then reindexed.
    """
    flavor = fts.layout_of(conn)
    if flavor in ("inline", "foreign"):
        return None
    stale = meta.get(conn, fts.STALE_KEY) is not None
    if stale and flavor == "external":
        # The agent detached its indexes (their triggers are gone): what it does at its next
        # start is recreate the triggers and rebuild; so does this step.
        for name in fts.EXTERNAL_TRIGGERS:
            conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    if flavor == "legacy":
        for kind, name, _sql in list(fts.iter_fts_objects(conn)):
            if name.startswith("messages_fts_cjk"):
                continue  # an agent's CJK index (ours was removed by remove_legacy_objects)
            if kind == "trigger":
                conn.execute(f"DROP TRIGGER IF EXISTS {quote(name)}")
            elif kind == "view":
                conn.execute(f"DROP VIEW IF EXISTS {quote(name)}")
        for table in fts.INDEX_TABLES:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
                fts.drop_table(conn, table)
    created = fts.create_external(conn)
    if not created:
        return None
    pending = fts.schedule_rebuild(conn)
    meta.delete(conn, fts.STALE_KEY)
    what = "replaced the old search layout" if flavor == "legacy" else "created search indexes"
    return f"{what} ({'reindexing in chunks' if pending else 'reindexed'})"


def detach_unloadable_cjk(conn: sqlite3.Connection) -> str | None:
    """Detach an agent's CJK index whose tokenizer this process cannot load, as the agent does.

    Hermes Agent 0.21+ may keep ``messages_fts_cjk`` with a native ``cjk_unicode61`` tokenizer.
    Where that library cannot load, every insert into messages would fail on its triggers; the
    agent itself then drops those triggers and sets ``fts_cjk_stale`` (it rebuilds the index
    where the tokenizer is available). This package's own CJK index serves those searches.
    """
    if not conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts_cjk'"
    ).fetchone():
        return None
    try:
        conn.execute("SELECT 1 FROM messages_fts_cjk LIMIT 0").fetchall()
        return None
    except sqlite3.OperationalError as exc:
        if "tokenizer" not in str(exc).lower():
            raise
    dropped = []
    for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages' "
        "AND sql LIKE '%messages_fts_cjk%'"
    ).fetchall():
        conn.execute(f"DROP TRIGGER IF EXISTS {quote(name)}")
        dropped.append(name)
    meta.put(conn, "fts_cjk_stale", "1")
    return f"detached the agent's CJK index ({', '.join(dropped) or 'no triggers'})"


def create_indexes(conn: sqlite3.Connection) -> str | None:
    """Create the indexes of schema 31 that the store lacks (and the unique-title index)."""
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    missing = [n for n in schema.UPSTREAM_INDEX_DDL if n not in have]
    for name in missing:
        conn.execute(schema.UPSTREAM_INDEX_DDL[name])
    cleared = 0
    if "idx_sessions_title_unique" not in have:
        cleared = schema.ensure_title_index(conn)
        missing.append("idx_sessions_title_unique")
    if not missing:
        return None
    note = f" (cleared {cleared} duplicate titles)" if cleared else ""
    return f"created indexes {', '.join(missing)}{note}"


def narrow_update_triggers(conn: sqlite3.Connection) -> str | None:
    """Make an inline layout's broad ``AFTER UPDATE`` FTS triggers fire on indexed columns only.

    Hermes Agent 0.19 re-indexes a row on an update of any column. Schema 31's message_uid
    trigger updates every row it inserts, which such a trigger would index a second time
    (a duplicate rowid: the insert fails). Hermes Agent 0.22 narrows these triggers to
    ``AFTER UPDATE OF content, tool_name, tool_calls, role`` when it opens such a store; so does
    this step, keeping each trigger's name and body. The indexed text depends on those columns
    only, so what the index holds does not change.
    """
    narrowed = []
    rows = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages' "
        "AND name IN ('messages_fts_update', 'messages_fts_trigram_update')"
    ).fetchall()
    for name, sql in rows:
        compact = " ".join((sql or "").split()).upper()
        if "AFTER UPDATE ON MESSAGES" not in compact:
            continue
        new_sql = re.sub(
            r"AFTER\s+UPDATE\s+ON\s+messages",
            "AFTER UPDATE OF content, tool_name, tool_calls, role ON messages",
            sql,
            count=1,
            flags=re.IGNORECASE,
        )
        conn.execute(f"DROP TRIGGER {quote(name)}")
        conn.execute(new_sql)
        narrowed.append(name)
    return f"narrowed {', '.join(narrowed)} to indexed columns" if narrowed else None


def settle_agent_triggers(conn: sqlite3.Connection) -> str | None:
    """Give the store the agent's uid and display triggers in the agent's exact text.

    Hermes Agent 0.22 compares these triggers' stored SQL with its own on every open and
    recreates any that differ; having its text from the start spares it that schema change.
    """
    have = {
        name: bytes(sql or b"").decode("utf-8", "replace")
        for name, sql in conn.execute(
            "SELECT name, CAST(sql AS BLOB) FROM sqlite_master WHERE type = 'trigger' AND name IN "
            f"({', '.join('?' * len(triggers.CHECKED_TRIGGER_DDL))})",
            tuple(triggers.CHECKED_TRIGGER_DDL),
        ).fetchall()
    }
    did = []
    for name, ddl in triggers.CHECKED_TRIGGER_DDL.items():
        if have.get(name) == ddl:
            continue
        if name in have:
            conn.execute(f"DROP TRIGGER {quote(name)}")
        conn.execute(ddl)
        did.append(name)
    return f"set the agent's triggers {', '.join(did)}" if did else None


def add_message_uids(conn: sqlite3.Connection) -> str | None:
    """Give every message without a uid one (the trigger mints them for later rows)."""
    did = []
    cur = conn.execute(
        "UPDATE messages SET message_uid = lower(hex(randomblob(16))) "
        "WHERE message_uid IS NULL OR message_uid = ''"
    )
    if cur.rowcount:
        did.append(f"gave {cur.rowcount} messages a message_uid")
    if meta.get(conn, triggers.UID_BACKFILL_KEY) != "1":
        meta.put(conn, triggers.UID_BACKFILL_KEY, "1")  # what the agent's own backfill leaves
    return "; ".join(did) or None


def install_additions(conn: sqlite3.Connection) -> str | None:
    """Create this package's own indexes and CJK index, and record their version."""
    did = []
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    for name, ddl in schema.ADDITION_INDEX_DDL.items():
        if name not in have:
            conn.execute(ddl)
            did.append(name)
    if not cjk.is_off(conn) and cjk.install(conn):
        did.append(cjk.TABLE)
        if fts.max_id(conn) <= fts.INLINE_REBUILD_MAX_ROWS:
            cjk.catch_up(conn)
    if meta.get_int(conn, schema.ADDITIONS_KEY) != schema.ADDITIONS_VERSION:
        meta.put(conn, schema.ADDITIONS_KEY, schema.ADDITIONS_VERSION)
    return f"created {', '.join(did)}" if did else None


def record_version(conn: sqlite3.Connection) -> str | None:
    """Record schema 31 (a newer number is never lowered: the caller refuses those stores)."""
    before = schema.stored_version(conn)
    if before == schema.SCHEMA_VERSION:
        return None
    schema.set_version(conn, schema.SCHEMA_VERSION)
    return f"schema {before} -> {schema.SCHEMA_VERSION}" if before else None


STEPS: tuple[Step, ...] = (
    create_tables,
    add_columns,
    heal_null_active,
    v16_tag_delegate_runs,
    v18_gateway_metadata,
    v20_seed_model_usage,
    v22_usage_task_key,
    v23_flag_fts_optimize,
    v25_system_prompts,
    fill_ledger_session_ids,
    remove_legacy_objects,
    detach_unloadable_cjk,
    repair_search_layout,
    create_indexes,
    narrow_update_triggers,
    settle_agent_triggers,
    add_message_uids,
    install_additions,
    record_version,
)


# --- runner ----------------------------------------------------------------------------------


def needs_migration(conn: sqlite3.Connection) -> bool:
    """Tell whether the store is short of schema 31 or this package's additions."""
    return layout.inspect(conn).kind != "current"


def migrate(conn: sqlite3.Connection) -> MigrateResult:
    """Bring the store to schema 31 with the additions, inside the caller's write transaction.

    The caller must have refused stores of unknown or newer schemas and foreign databases
    (``layout.inspect(conn).kind``); a store without any schema yet is created here.
    """
    found = layout.inspect(conn)
    result = MigrateResult(
        before=found.version, after=schema.SCHEMA_VERSION, kind_before=found.kind
    )
    if found.kind == "current":
        return result
    for step in STEPS:
        did = step(conn)
        if did:
            log.info("migrate: %s: %s", step.__name__, did)
            result.steps.append(did)
    result.rebuild_pending = fts.rebuild_pending(conn)
    result.cjk_pending = cjk.status(conn).behind > 0
    return result


def create_new(conn: sqlite3.Connection) -> MigrateResult:
    """Lay out an empty store: schema 31, its search indexes and the additions."""
    return migrate(conn)
