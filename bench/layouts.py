"""The two store layouts side by side: a store this tool created, and the agent's own layout.

Usage: python bench/layouts.py --messages N [--seed 7] [--reuse] [--repeat 7]

A store created by this tool is the agent's schema-31 layout plus this tool's additions (the CJK
index ``hermes_cjk``, the runtime ledger and a few indexes). The upstream-layout copy is the same
store with those additions removed — what Hermes Agent 0.22 itself would have written — opened
as the command line opens it (within its schema, no migration). Both are measured in one run:
file size against the message text (per index), library appends (single and batched), and
library searches (rare word, common word, substring, 2-character CJK word). Nothing here is
asserted; the table is for the README.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
for _p in (str(REPO_ROOT), str(BENCH_DIR)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import generate as gen  # noqa: E402

from hermes_state.records import messages, sessions  # noqa: E402
from hermes_state.search import search  # noqa: E402
from hermes_state.store import cjk  # noqa: E402
from hermes_state.store.connection import Store, open_store  # noqa: E402

MB = 1024 * 1024
OUT = BENCH_DIR / "out"
SINGLE_APPENDS = 1000
BATCHES = 5
BATCH_SIZE = 1000


def strip_additions(db: Path) -> None:
    """Remove this tool's additions from a closed store (leaving the agent's layout)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for kind, name in conn.execute(
            "SELECT type, name FROM sqlite_master WHERE name LIKE 'hermes\\_%' ESCAPE '\\' "
            "AND type IN ('trigger', 'index')"
        ).fetchall():
            conn.execute(f'DROP {kind.upper()} "{name}"')
        conn.execute(f"DROP TABLE {cjk.TABLE}")
        conn.execute(f"DROP TABLE {cjk.PENDING_TABLE}")
        for table in (
            "worker_receipts",
            "worker_executions",
            "session_admissions",
            "runtime_epoch",
        ):
            conn.execute(f"DROP TABLE {table}")
        conn.execute("DELETE FROM state_meta WHERE key LIKE 'hermes\\_%' ESCAPE '\\'")
        conn.execute("COMMIT")
        conn.execute("VACUUM")
    finally:
        conn.close()


def sizes(db: Path) -> dict[str, Any]:
    """Return the file size, the message text it holds, and the bytes of each big object."""
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        text = conn.execute(
            "SELECT COALESCE(SUM(length(CAST(content AS BLOB))), 0) FROM messages"
        ).fetchone()[0]
        objects = dict(conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"))
    finally:
        conn.close()

    def family(prefix: str) -> int:
        return sum(v for k, v in objects.items() if k == prefix or k.startswith(prefix + "_"))

    size = sum(os.stat(str(db) + s).st_size for s in ("", "-wal") if os.path.exists(str(db) + s))
    return {
        "file": size,
        "text": text,
        "messages": objects.get("messages", 0),
        "word": family("messages_fts") - family("messages_fts_trigram"),
        "trigram": family("messages_fts_trigram"),
        "cjk": family(cjk.TABLE),
    }


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    """Return the median wall time of fn in milliseconds (one warm-up run first)."""
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def searches(store: Store, repeat: int) -> dict[str, tuple[float, str, int]]:
    """Time the library's searches; return name -> (ms, route, hits)."""
    out = {}
    for name, query in (
        ("word, rare", gen.SELECTIVE_TERM),
        ("word, common", gen.COMMON_TERM),
        ("substring", gen.SUBSTRING_QUERY),
        ("CJK 2-char", gen.CJK_QUERY),
    ):
        result = search.search_messages(store, query)
        out[name] = (
            median_ms(lambda q=query: search.search_messages(store, q), repeat),
            f"{result.route}{' (partial)' if result.partial else ''}",
            len(result),
        )
    return out


def appends(db: Path, role: str) -> tuple[float, float]:
    """Return (single appends/s, batched messages/s) through the library on a copy of db."""
    work = db.parent / "append-work.db"
    shutil.copyfile(db, work)
    try:
        store = open_store(work, role=role)  # type: ignore[arg-type]
        try:
            sessions.create_session(store, "bench_append", "cli", started_at=gen.END_TS)
            t0 = time.perf_counter()
            for i in range(SINGLE_APPENDS):
                messages.append_message(store, "bench_append", "user", f"single append {i} 会議")
            single = SINGLE_APPENDS / (time.perf_counter() - t0)
            batch = [
                {"role": "assistant", "content": f"batched append {i} checkpoint"}
                for i in range(BATCH_SIZE)
            ]
            t0 = time.perf_counter()
            for _ in range(BATCHES):
                messages.append_messages(store, "bench_append", batch)
            batched = BATCHES * BATCH_SIZE / (time.perf_counter() - t0)
            return single, batched
        finally:
            store.close()
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(work) + suffix).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) the store, derive the upstream-layout copy, measure both, print a table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, required=True)
    p.add_argument("--seed", type=int, default=gen.DEFAULT_SEED)
    p.add_argument("--reuse", action="store_true")
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)
    home = gen.default_out(args.messages)
    gen.ensure_store(home, args.messages, args.seed, reuse=args.reuse)
    ours = home / "state.db"
    up_home = OUT / f"upstream-layout-{args.messages}"
    shutil.rmtree(up_home, ignore_errors=True)
    up_home.mkdir(parents=True)
    upstream = up_home / "state.db"
    shutil.copyfile(ours, upstream)
    strip_additions(upstream)
    rows: dict[str, dict[str, Any]] = {}
    for label, db, role in (
        ("created by hermes", ours, "agent"),
        ("upstream layout", upstream, "edit"),
    ):
        size = sizes(db)
        store = open_store(db, read_only=True)
        try:
            found = searches(store, args.repeat)
        finally:
            store.close()
        rows[label] = {"size": size, "search": found, "append": appends(db, role)}
    print(
        f"\nstore layouts — {args.messages:,} messages, seed {args.seed}, "
        f"SQLite {sqlite3.sqlite_version}"
    )
    header = f"{'':34}" + "".join(f"{label:>26}" for label in rows)
    print(header)
    print("-" * len(header))

    def line(name: str, fmt: Callable[[dict[str, Any]], str]) -> None:
        print(f"{name:34}" + "".join(f"{fmt(r):>26}" for r in rows.values()))

    line("file / message text", lambda r: f"{r['size']['file'] / max(1, r['size']['text']):.2f}×")
    line("file size", lambda r: f"{r['size']['file'] / MB:,.1f} MB")
    for part in ("messages", "word", "trigram", "cjk"):
        line(
            f"  {part} / text", lambda r, p=part: f"{r['size'][p] / max(1, r['size']['text']):.2f}×"
        )
    line("single appends", lambda r: f"{r['append'][0]:,.0f}/s")
    line("batched appends", lambda r: f"{r['append'][1]:,.0f} msgs/s")
    for name in rows["created by hermes"]["search"]:
        line(
            f"search: {name}",
            lambda r, n=name: f"{r['search'][n][0]:.2f} ms {r['search'][n][1]} {r['search'][n][2]}",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
