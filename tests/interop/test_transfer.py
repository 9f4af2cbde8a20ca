"""Export -> import between profiles and releases: every session, message, usage row and prompt.

For every pair of field releases (schema 22, 30, 31, in both directions, each into itself) and
into a store of this checkout: a store the source release built is exported with our CLI and
imported into a store the target release created itself (or ours). Afterwards the two stores
hold the same sessions with the same message ids, content hashes, per-model usage rows and
system prompts; the import summary names what the target's layout could not hold; and the
target release opens the result and finds its rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from interop.harness import copy_store, hermes
from interop.releases import RELEASES, Release, ReleaseUnavailable, python_for, run_probe

JSON_COLUMNS = (
    "tool_calls",
    "tool_call_uids",
    "absorbed_message_uids",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
    "display_metadata",
)
# Derived by the agent from the rest (a cache it recomputes): not part of what is moved.
DERIVED = ("display_identity", "display_order")
USAGE_KEY = ("model", "billing_provider", "billing_base_url", "billing_mode", "task")


def _ro(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def _prompt(conn: sqlite3.Connection, row: dict[str, Any], column: str, addr: str) -> Any:
    """Return a session's prompt text, wherever its layout keeps it."""
    value = row.get(column)
    digest = row.get(addr)
    addressed = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'system_prompts'")
    if addressed.fetchone() and isinstance(digest, str) and len(digest) == 64:
        found = conn.execute("SELECT prompt FROM system_prompts WHERE hash = ?", (digest,))
        hit = found.fetchone()
        if hit is not None:
            return hit[0]
    return value


def contents(db: Path, *, message_columns: list[str], session_columns: list[str]) -> dict:
    """Every session's rows as the comparison sees them (JSON by value, content by hash)."""
    conn = _ro(db)
    try:
        out: dict[str, Any] = {}
        have_usage = bool(_columns(conn, "session_model_usage"))
        for (sid,) in conn.execute("SELECT id FROM sessions ORDER BY id").fetchall():
            cur = conn.execute("SELECT * FROM sessions WHERE id = ?", (sid,))
            names = [d[0] for d in cur.description]
            row = dict(zip(names, cur.fetchone(), strict=True))
            messages = []
            select = ", ".join(message_columns)
            for values in conn.execute(
                f"SELECT {select} FROM messages WHERE session_id = ? ORDER BY id", (sid,)
            ):
                msg = dict(zip(message_columns, values, strict=True))
                msg["content"] = hashlib.sha256(repr(msg["content"]).encode()).hexdigest()
                for c in JSON_COLUMNS:
                    if isinstance(msg.get(c), str):
                        msg[c] = json.loads(msg[c])
                messages.append(msg)
            usage = []
            if have_usage:
                ucur = conn.execute(
                    "SELECT * FROM session_model_usage WHERE session_id = ?", (sid,)
                )
                unames = [d[0] for d in ucur.description]
                usage = sorted(
                    (dict(zip(unames, u, strict=True)) for u in ucur),
                    key=lambda u: tuple(str(u.get(k)) for k in USAGE_KEY),
                )
            out[sid] = {
                "columns": {c: row.get(c) for c in session_columns},
                "system_prompt": _prompt(conn, row, "system_prompt", "system_prompt_hash"),
                "tool_names": _prompt(conn, row, "tool_names", "tool_names"),
                "messages": messages,
                "usage": usage,
            }
        return out
    finally:
        conn.close()


def _common(src: Path, dst: Path, table: str, leave: tuple[str, ...] = ()) -> list[str]:
    a, b = _ro(src), _ro(dst)
    try:
        theirs = set(_columns(b, table))
        return [c for c in _columns(a, table) if c in theirs and c not in leave]
    finally:
        a.close()
        b.close()


@pytest.fixture(scope="module")
def fresh_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per release, a home holding a store the release created and never wrote to."""
    out = {}
    for rel in RELEASES:
        try:
            python_for(rel)
        except ReleaseUnavailable:
            continue
        home = tmp_path_factory.mktemp(f"fresh-{rel.key}") / "home"
        home.mkdir()
        run_probe(rel, "open", home)
        out[rel.key] = home
    return out


TARGETS = [r.key for r in RELEASES] + ["ours"]


@pytest.mark.parametrize("target", TARGETS)
def test_export_imports_whole_into_every_release_and_ours(
    built: Path,
    release: Release,
    target: str,
    fresh_stores: dict[str, Path],
    tmp_path: Path,
) -> None:
    _release_runs(release, built, PIN_SCRIPT)  # a tool pin, where the release has them
    export = tmp_path / "all.jsonl"
    done = hermes(built, "sessions", "export", "-o", str(export))
    assert done.returncode == 0, done.stderr
    home = tmp_path / "target"
    if target == "ours":
        home.mkdir()
    else:
        if target not in fresh_stores:
            pytest.skip(f"{target} is not installed")
        copy_store(fresh_stores[target], home)
    done = hermes(home, "sessions", "import", str(export))
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    src, dst = built / "state.db", home / "state.db"
    mcols = _common(src, dst, "messages", (*DERIVED, "session_id"))
    scols = _common(src, dst, "sessions", ("system_prompt", "system_prompt_hash", "tool_names"))
    before = contents(src, message_columns=mcols, session_columns=scols)
    after = contents(dst, message_columns=mcols, session_columns=scols)
    assert set(after) == set(before)
    for sid, want in before.items():
        got = after[sid]
        assert got["messages"] == want["messages"], sid  # ids, content hashes, flags, uids
        assert got["usage"] == want["usage"] or not want["usage"], sid
        assert got["system_prompt"] == want["system_prompt"], sid
        if "tool_names" in _columns(_ro(dst), "sessions"):
            assert got["tool_names"] == want["tool_names"], sid
        assert got["columns"] == want["columns"], sid
    assert any(v["usage"] for v in before.values()), "the built store has usage rows to move"
    assert any(v["system_prompt"] for v in before.values()), "and a system prompt"
    # What the target's layout cannot hold is said, column by column.
    lost = set(_common(src, src, "messages")) - set(_columns(_ro(dst), "messages")) - set(DERIVED)
    with_values = [c for c in lost if _has_values(src, "messages", c)]
    for column in with_values:
        assert f"messages.{column}" in done.stderr, (column, done.stderr)
    if target != "ours":
        rel = next(r for r in RELEASES if r.key == target)
        report = run_probe(rel, "integrity", home)
        assert report.get("ok", True), report


def _has_values(db: Path, table: str, column: str) -> bool:
    conn = _ro(db)
    try:
        row = conn.execute(
            f'SELECT 1 FROM {table} WHERE "{column}" IS NOT NULL AND "{column}" NOT IN (0, \'\')'
            " LIMIT 1"
        ).fetchone()
        return row is not None
    finally:
        conn.close()


PIN_SCRIPT = """
import sys
from pathlib import Path
from hermes_state import SessionDB
db = SessionDB(db_path=Path(sys.argv[1]))
if hasattr(db, "update_session_tool_names"):
    db.update_session_tool_names("s_cli_docker", [{"type": "function", "name": "terminal"}])
db.close()
"""
APPEND_SCRIPT = """
import sys
from pathlib import Path
from hermes_state import SessionDB
db = SessionDB(db_path=Path(sys.argv[1]))
db.append_message(sys.argv[2], "user", "one more question about the feed")
db.create_session("s_feed_new", "cli", model="probe-model")
db.append_message("s_feed_new", "user", "a session the follower has never seen")
db.append_message("s_feed_new", "assistant", "and its answer")
db.close()
"""


def _release_runs(release: Release, home: Path, script: str, *args: str) -> None:
    """Run a few lines of the release's own API on the store in home, in its interpreter."""
    done = subprocess.run(
        [str(python_for(release)), "-c", script, str(home / "state.db"), *args],
        capture_output=True,
        text=True,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HERMES_HOME": str(home),
            "HOME": str(home.parent),
        },
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_replace_keeps_every_message_id(built: Path, release: Release, tmp_path: Path) -> None:
    export = tmp_path / "all.jsonl"
    assert hermes(built, "sessions", "export", "-o", str(export)).returncode == 0
    home = tmp_path / "copy"
    home.mkdir()
    assert hermes(home, "sessions", "import", str(export)).returncode == 0
    done = hermes(home, "sessions", "import", str(export), "--on-conflict", "replace")
    assert done.returncode == 0, done.stderr
    assert "kept its id" in done.stdout, done.stdout
    a, b = _ro(built / "state.db"), _ro(home / "state.db")
    try:
        want = a.execute("SELECT id, session_id FROM messages ORDER BY id").fetchall()
        got = b.execute("SELECT id, session_id FROM messages ORDER BY id").fetchall()
    finally:
        a.close()
        b.close()
    assert got == want


def test_a_change_feed_brings_each_new_message_once(
    built: Path, release: Release, tmp_path: Path
) -> None:
    follower = tmp_path / "follower"
    follower.mkdir()
    first = tmp_path / "first.jsonl"
    assert hermes(built, "sessions", "export", "-o", str(first)).returncode == 0
    assert hermes(follower, "sessions", "import", str(first)).returncode == 0
    conn = _ro(built / "state.db")
    try:
        top = conn.execute("SELECT MAX(id) FROM messages").fetchone()[0]
        old_session = conn.execute("SELECT session_id FROM messages WHERE id = ?", (top,))
        sid = old_session.fetchone()[0]
    finally:
        conn.close()
    # The release writes more: to the session holding the last message, and a new session.
    _release_runs(release, built, APPEND_SCRIPT, sid)
    feed = tmp_path / "feed.jsonl"
    done = hermes(built, "sessions", "export", "--after-id", str(top), "-o", str(feed))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in feed.read_text().splitlines()]
    assert records and all(r["messages_after_id"] == top for r in records)
    assert all(m["id"] > top for r in records for m in r["messages"])
    assert "next run: --after-id" in done.stderr
    done = hermes(follower, "sessions", "import", str(feed))
    assert done.returncode == 0, (done.stdout, done.stderr)
    again = hermes(follower, "sessions", "import", str(feed))
    assert again.returncode == 0, again.stderr
    a, b = _ro(built / "state.db"), _ro(follower / "state.db")
    try:
        query = "SELECT session_id, role, content FROM messages ORDER BY session_id, id"
        assert b.execute(query).fetchall() == a.execute(query).fetchall()
    finally:
        a.close()
        b.close()
    assert sid
