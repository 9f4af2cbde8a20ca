"""Whole-store statistics: sessions and messages per source, usage per model, files and tables."""

from __future__ import annotations

import os
import re
from typing import Any

from hermes_state.records.session_list import live_sql
from hermes_state.reports import usage_report
from hermes_state.store.connection import Store
from hermes_state.store.schema import stored_version
from hermes_state.store.sql import quote


def usage_by_model(store: Store) -> list[dict[str, Any]]:
    """Return sessions, tokens and cost summed per model, costliest first.

    The figures are `hermes usage --by model`'s (hermes_state.reports.usage_report): per-route usage
    rows, auxiliary calls included, plus what the sessions' own counters hold beyond them; a
    cost no record knows is None, never 0.
    """
    return [model_row(g) for g in usage_report.usage_groups(store, "model")]


def model_row(group: dict[str, Any]) -> dict[str, Any]:
    """Return a `--by model` usage group as a stats row."""
    return {
        k: group[k] for k in ("model", "session_count", "input_tokens", "output_tokens", "cost_usd")
    }


def top_session_row(group: dict[str, Any]) -> dict[str, Any]:
    """Return a `--by session` usage group as a top-sessions row."""
    return {
        "id": group["session_id"],
        "title": group["title"],
        "model": group["model"],
        "source": group["source"],
        "total_tokens": group["total_tokens"],
        "cost_usd": group["cost_usd"],
    }


def top_sessions_by_tokens(store: Store, n: int = 10) -> list[dict[str, Any]]:
    """Return the n sessions that used the most input+output tokens (as `hermes usage` counts)."""
    return [
        top_session_row(g)
        for g in usage_report.usage_groups(store, "session", order="tokens", limit=n)
    ]


def counts_by_source(store: Store) -> list[dict[str, Any]]:
    """Return sessions, live messages and stored messages per source (from the rows),
    most sessions first."""
    live, _ = live_sql(store)
    rows = store.conn.execute(
        "SELECT s.source, COUNT(*) AS sessions, COALESCE(SUM(c.live), 0) AS messages, "
        "COALESCE(SUM(c.stored), 0) AS stored_messages FROM sessions s LEFT JOIN "
        f"(SELECT session_id, SUM({live}) AS live, COUNT(*) AS stored FROM messages "
        "GROUP BY session_id) c ON c.session_id = s.id "
        "GROUP BY s.source ORDER BY sessions DESC, s.source"
    ).fetchall()
    return [dict(r) for r in rows]


def store_files(store: Store) -> dict[str, Any]:
    """Return the store's path and file sizes (db, WAL, SHM) and their total."""
    files = {}
    for suffix in ("", "-wal", "-shm"):  # the keys stats reports: db, wal, shm
        try:
            size = os.stat(str(store.path) + suffix).st_size
        except FileNotFoundError:
            size = 0
        files["db" if not suffix else suffix[1:]] = size
    return {"path": str(store.path), "files": files, "total_bytes": sum(files.values())}


def store_stats(store: Store, *, tables: bool = True) -> dict[str, Any]:
    """Return file sizes (db, WAL, SHM), page and freelist counts and per-table row counts
    (``tables=False``: no counts, an empty ``tables``; counting a big store takes a while)."""
    conn = store.conn
    counts: dict[str, int] = {}
    if tables:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
                " AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name"
            )
        ]
        # FTS5 shadow tables are derived data; count only real tables and the FTS tables.
        counts = {
            t: int(conn.execute(f"SELECT COUNT(*) FROM {quote(t)}").fetchone()[0])
            for t in names
            if not re.search(r"_(data|idx|content|docsize|config)$", t)
            or not t.startswith("messages_fts")
        }
    files = store_files(store)
    return {
        "path": files["path"],
        "schema_version": stored_version(conn),
        "files": files["files"],
        "total_bytes": files["total_bytes"],
        "page_size": conn.execute("PRAGMA page_size").fetchone()[0],
        "page_count": conn.execute("PRAGMA page_count").fetchone()[0],
        "freelist_count": conn.execute("PRAGMA freelist_count").fetchone()[0],
        "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
        "tables": counts,
    }
