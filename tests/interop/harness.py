"""What the interop tests do to a store and how they judge it: run our CLI, let a release use
the store, dump every row, and compare."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from support.children import child_env, hermes_argv

from interop.releases import Release, run_probe

REPO_ROOT = Path(__file__).resolve().parents[2]
STORE_FILES = ("state.db", "state.db-wal", "state.db-shm", "state.db-journal")
# Steps of probe.exercise that must succeed whatever the release.
MUST_SUCCEED = ("open", "append_new", "append_existing", "rename", "delete", "close")
# Searches whose hits must include what the untouched store's hits were.
KEPT_SEARCHES = ("search_old_word", "search_substring", "search_cjk")
LEDGER = ("runtime_epoch", "session_admissions", "worker_executions", "worker_receipts")


def hermes(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run this checkout's `hermes` in a child process against the store in home."""
    env = child_env(home)
    env.pop("NO_COLOR", None)
    return subprocess.run(
        hermes_argv(*args),
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=300,
    )


def copy_store(src_home: Path, dst_home: Path) -> Path:
    """Copy a store that no process has open into another home; return the new db path."""
    dst_home.mkdir(parents=True, exist_ok=True)
    for name in STORE_FILES:
        if (src_home / name).exists():
            shutil.copyfile(src_home / name, dst_home / name)
    return dst_home / "state.db"


def file_digests(home: Path) -> dict[str, str]:
    """Return sha256 of every store file in home (none of them open in this process)."""
    out = {}
    for name in STORE_FILES:
        path = home / name
        if path.exists():
            out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _ro(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)


def data_tables(conn: sqlite3.Connection) -> list[str]:
    """Return the ordinary tables holding data (not SQLite's, not FTS indexes or their shadows)."""
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    virtual = {n for n, sql in rows if (sql or "").upper().startswith("CREATE VIRTUAL")}
    suffixes = ("_data", "_idx", "_content", "_docsize", "_config")
    return sorted(
        n
        for n, _sql in rows
        if not n.startswith("sqlite_")
        and n not in virtual
        and not any(n == v + s for v in virtual for s in suffixes)
        and n not in ("hermes_cjk_pending", "messages_fts_cjk_pending")  # derived queues
    )


def dump(db: Path) -> dict[str, dict[Any, dict[str, Any]]]:
    """Return every data table's rows, keyed by primary key (or the whole row), as dicts."""
    conn = _ro(db)
    try:
        out: dict[str, dict[Any, dict[str, Any]]] = {}
        for table in data_tables(conn):
            info = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
            cols = [r[1] for r in info]
            pk = [r[1] for r in sorted(info, key=lambda r: r[5]) if r[5]]
            rows: dict[Any, dict[str, Any]] = {}
            for values in conn.execute(f'SELECT * FROM "{table}"'):
                row = dict(zip(cols, values, strict=True))
                key = tuple(row[c] for c in pk) if pk else tuple(values)
                rows[key] = row
            out[table] = rows
        return out
    finally:
        conn.close()


def _session_of(table: str, row: dict[str, Any]) -> Any:
    if table == "sessions":
        return row.get("id")
    return row.get("session_id")


def lost_rows(
    before: dict[str, dict[Any, dict[str, Any]]],
    after: dict[str, dict[Any, dict[str, Any]]],
    *,
    deleted_sessions: Iterable[str] = (),
    may_change: dict[str, set[str]] | None = None,
    may_fill: Iterable[str] = ("message_uid",),
    skip_tables: Iterable[str] = (),
) -> list[str]:
    """List every row or value of before that after lost or changed, beyond what is allowed.

    ``may_change`` maps table -> columns an operation is meant to change; ``may_fill`` are
    columns that may go from NULL to a value (a migration's backfill); rows of
    ``deleted_sessions`` may be gone.
    """
    deleted = set(deleted_sessions)
    changeable = may_change or {}
    fillable = set(may_fill)
    skip = set(skip_tables)
    problems = []
    for table, rows in before.items():
        if table in skip:
            continue
        if table not in after:
            problems.append(f"table {table} is gone ({len(rows)} rows)")
            continue
        for key, row in rows.items():
            other = after[table].get(key)
            if other is None:
                if _session_of(table, row) not in deleted:
                    problems.append(f"{table} row {key} is gone")
                continue
            for col, value in row.items():
                if col not in other:
                    problems.append(f"{table}.{col} is gone")
                    break
                if other[col] == value or col in changeable.get(table, set()):
                    continue
                if value is None and col in fillable:
                    continue
                problems.append(f"{table} row {key}: {col} {value!r} -> {other[col]!r}")
    return problems


def exercise(release: Release, home: Path, tag: str) -> dict[str, dict[str, Any]]:
    """Let the release open and use the store; return its step reports."""
    return run_probe(release, "exercise", home, tag)["steps"]


def agent_problems(
    steps: dict[str, dict[str, Any]],
    baseline: dict[str, dict[str, Any]],
    tag: str,
    *,
    deleted_sessions: Iterable[str] = (),
) -> list[str]:
    """Compare a release's use of the store with its use of the untouched store."""
    problems = []
    for name in MUST_SUCCEED:
        if not steps[name]["ok"]:
            problems.append(f"{name}: {steps[name]['error']}")
    integrity = steps["integrity"]
    if not integrity["ok"]:
        problems.append(f"integrity: {integrity['error']}")
    else:
        value = integrity["value"]
        if value["integrity_check"] != ["ok"]:
            problems.append(f"integrity_check: {value['integrity_check']}")
        for table, verdict in value["fts"].items():
            if verdict != "ok":
                problems.append(f"FTS5 integrity-check of {table}: {verdict}")
    new_session = f"r_{tag}"
    for name, want in (("search_new_word", new_session), ("search_new_word2", "s_tg_tokyo")):
        got = steps[name].get("value") or []
        if want not in got:
            problems.append(f"{name}: {want} not found (got {got})")
    gone = set(deleted_sessions)
    for name in (*KEPT_SEARCHES, "search_cjk_new"):
        base = set(baseline[name].get("value") or []) - gone
        base = {s.replace("r_base", new_session) for s in base}
        got = set(steps[name].get("value") or []) if steps[name]["ok"] else set()
        if not base <= got:
            problems.append(f"{name}: lost {sorted(base - got)} (got {sorted(got)})")
    return problems


def our_search(home: Path, query: str) -> set[str]:
    """Return the session ids `hermes sessions search QUERY --json` finds."""
    done = hermes(home, "sessions", "search", query, "--json", "--limit", "50")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    hits = data["hits"] if isinstance(data, dict) else data
    return {h["session_id"] for h in hits}
