"""Test stores built through the library, settled, copied and compared.

Builders for other layouts live beside this module: ``legacy_layout`` (this package's layout before
SPEC §19) and ``upstream30`` (an upstream schema-30 store with every kind of row).
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from hermes_state.records import messages, sessions
from hermes_state.store.connection import open_store
from hermes_state.store.sql import (
    SIDECAR_SUFFIXES,
    STORE_FILE_SUFFIXES,
    companion,
    quote,
    store_files,
)
from support.children import child_env

WORDS = [
    "deploy",
    "docker",
    "build",
    "error",
    "fix",
    "test",
    "gateway",
    "telegram",
    "session",
    "search",
    "index",
    "query",
    "compress",
    "token",
    "model",
    "cache",
    "retry",
    "lock",
    "write",
    "read",
    "table",
    "page",
    "value",
    "result",
    "agent",
    "tool",
]


@dataclass(frozen=True)
class Populated:
    """What populate_store wrote."""

    sessions: int
    messages: int


def _text(rng: random.Random, size: int) -> str:
    """Return about size characters of words."""
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)


def populate_store(
    path: Path,
    *,
    sessions_n: int = 10,
    messages_per_session: int = 100,
    content_size: int = 300,
    seed: int = 1,
    batch: int = 500,
) -> Populated:
    """Create (or extend) a WAL store with sessions, messages and usage rows through the library."""
    rng = random.Random(seed)
    if not path.exists():
        make_wal_store(path)
    store = open_store(path)
    try:
        total = 0
        for s in range(sessions_n):
            sid = f"sess-{seed}-{s:05d}"
            sessions.create_session(
                store,
                sid,
                rng.choice(["cli", "telegram", "discord"]),
                model="test/model",
                started_at=1_700_000_000.0 + s * 100,
            )
            sessions.set_session_title(store, sid, f"session {seed}-{s}")
            rows = []
            for m in range(messages_per_session):
                role = "user" if m % 2 == 0 else "assistant"
                rows.append(
                    {
                        "role": role,
                        "content": _text(rng, content_size),
                        "timestamp": 1_700_000_000.0 + s * 100 + m * 0.01,
                    }
                )
            for i in range(0, len(rows), batch):
                total += len(messages.append_messages(store, sid, rows[i : i + batch]))
            store.write(
                lambda c, sid=sid: c.execute(
                    "INSERT INTO session_model_usage(session_id, model, input_tokens) "
                    "VALUES (?, 'test/model', 10)",
                    (sid,),
                )
            )
        return Populated(sessions_n, total)
    finally:
        store.close()


def make_wal_store(path: Path) -> None:
    """Create an empty store file in WAL mode (new stores get WAL only with a fixed SQLite)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    finally:
        conn.close()
    os.chmod(path, 0o600)


def settle(path: Path) -> None:
    """Checkpoint the WAL fully into the main file and truncate it (test stores only)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


CRASH_WRITER = textwrap.dedent(
    """
    import os, sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    session_id, count = sys.argv[2], int(sys.argv[3])
    for i in range(count):
        conn.execute(
            "INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            (session_id, f"after the last checkpoint {i}", 1.8e9 + i),
        )
    os._exit(0)  # no close: the WAL keeps the committed frames, the main file stays stale
    """
)


def crash_with_committed_wal(path: Path, session_id: str, count: int = 50) -> None:
    """Commit count messages in a child that then dies without checkpointing."""
    settle(path)
    env = child_env()
    subprocess.run(
        [sys.executable, "-c", CRASH_WRITER, str(path), session_id, str(count)],
        check=True,
        env=env,
        timeout=60,
    )


def bundle_digest(path: Path) -> dict[str, str]:
    """Return sha256 of the main file and each sidecar that exists (to prove nothing changed)."""
    out = {}
    for member in store_files(path):
        if member.exists():
            out[member.name] = hashlib.sha256(member.read_bytes()).hexdigest()
    return out


def count_rows(path: Path, table: str) -> int:
    """Count a table's rows in a healthy store file (opened read-only)."""
    conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {quote(table)}").fetchone()[0])
    finally:
        conn.close()


def copy_bundle(src_db: Path, dest_db: Path) -> None:
    """Copy a closed store file and whichever companions it has, keeping their mtimes."""
    dest_db.parent.mkdir(parents=True, exist_ok=True)
    for suffix in STORE_FILE_SUFFIXES:
        src = companion(src_db, suffix)
        if src.exists():
            shutil.copy2(src, companion(dest_db, suffix))


def drop_sidecars(db: Path) -> None:
    """Remove a closed store's -wal/-shm/-journal (the damage then sits in the main file alone)."""
    for side in store_files(db, SIDECAR_SUFFIXES):
        side.unlink(missing_ok=True)
