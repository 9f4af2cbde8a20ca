"""Test helpers that build stores and damage their files on purpose.

Every damaging function works on a store that no connection of this process has open (the
helpers settle the WAL into the main file first, so the damage is not masked by WAL frames).
"""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hermes_state import messages, sessions
from hermes_state.connection import open_store

BUNDLE_SUFFIXES = ("", "-wal", "-shm", "-journal")
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


def page_size(path: Path) -> int:
    """Return the page size recorded in the database header."""
    with open(path, "rb") as f:
        header = f.read(100)
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


def table_pages(path: Path, table: str, pagetype: str = "leaf") -> list[int]:
    """Return the page numbers of one table's btree pages of a type, in key order."""
    settle(path)
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = ? ORDER BY path",
            (table, pagetype),
        ).fetchall()
    finally:
        conn.close()
    return [r[0] for r in rows]


def zero_pages(path: Path, pages: Iterable[int]) -> None:
    """Overwrite whole pages (1-based page numbers) with zero bytes."""
    size = page_size(path)
    fd = os.open(path, os.O_WRONLY)
    try:
        for page in pages:
            os.pwrite(fd, b"\0" * size, (page - 1) * size)
        os.fsync(fd)
    finally:
        os.close(fd)


def zero_middle_pages(
    path: Path, table: str = "messages", count: int = 2, gap: int = 0
) -> list[int]:
    """Zero count leaf pages in the middle of a table's btree (gap leaves apart); return them."""
    leaves = table_pages(path, table, "leaf")
    if len(leaves) < (count - 1) * (gap + 1) + 1:
        raise ValueError(f"{table} has only {len(leaves)} leaf pages")
    middle = (len(leaves) - (count - 1) * (gap + 1)) // 2
    chosen = [leaves[middle + i * (gap + 1)] for i in range(count)]
    zero_pages(path, chosen)
    return chosen


def zero_interior_page(path: Path, table: str = "messages") -> int:
    """Zero one interior page of a table's b-tree (below the root when there is such a level).

    Every leaf below it is cut off from the table although the leaves themselves are intact.
    """
    settle(path)
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT pageno, path FROM dbstat WHERE name = ? AND pagetype = 'internal' "
            "ORDER BY path",
            (table,),
        ).fetchall()
    finally:
        conn.close()
    if not rows:
        raise ValueError(f"{table} has no interior pages")
    deeper = [page for page, p in rows if p != "/"] or [rows[0][0]]  # "/" is the root
    page = deeper[len(deeper) // 2]
    zero_pages(path, [page])
    return page


def truncate_store(path: Path, fraction: float = 0.5) -> int:
    """Cut the main file to a fraction of its size (whole pages); return the new size."""
    settle(path)
    size = page_size(path)
    keep = max(1, int(os.path.getsize(path) * fraction) // size) * size
    os.truncate(path, keep)
    return keep


def garbage_header(path: Path, nbytes: int = 100, seed: int = 7) -> None:
    """Overwrite the first nbytes (the 100-byte database header by default) with random bytes."""
    settle(path)
    rng = random.Random(seed)
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(rng.randrange(256) for _ in range(nbytes)), 0)
    finally:
        os.close(fd)


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
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run(
        [sys.executable, "-c", CRASH_WRITER, str(path), session_id, str(count)],
        check=True,
        env=env,
        timeout=60,
    )


def bundle_digest(path: Path) -> dict[str, str]:
    """Return sha256 of the main file and each sidecar that exists (to prove nothing changed)."""
    out = {}
    for suffix in BUNDLE_SUFFIXES:
        member = Path(str(path) + suffix)
        if member.exists():
            out[member.name] = hashlib.sha256(member.read_bytes()).hexdigest()
    return out


def count_rows(path: Path, table: str) -> int:
    """Count a table's rows in a healthy store file (opened read-only)."""
    conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
    finally:
        conn.close()
