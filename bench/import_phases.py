"""Where an import's time goes: CPU seconds per phase of a plain-SQL import of a bench export.

Usage: python bench/import_phases.py --messages N [--seed 7]

Exports the generated store of N messages (bench/out/store-<N>/, made by generate.py), then
imports it into an empty store of our layout with plain SQL in one transaction, timing each
phase in CPU seconds of this process (less sensitive than wall time to a shared CPU): parsing
the JSON, building the rows, inserting them (the agent's indexes and triggers, the triggers
gated off by the rebuild window as hermes_state.store.bulkload does), filling each search index.
Then the message insert again on scratch stores without the triggers, and without the indexes
too, to show what each costs. Nothing here is asserted; it explains the import row of run.py.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
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

from hermes_state.store import cjk  # noqa: E402
from hermes_state.store.connection import open_store  # noqa: E402
from hermes_state.transfer import export  # noqa: E402

WINDOW = [("fts_rebuild_high_water", 2**62), ("fts_rebuild_progress", 0)]


def _cpu(phases: dict[str, float], name: str, fn: Callable[[], Any]) -> Any:
    """Run fn, add its CPU seconds to phases[name]; return its result."""
    t0 = time.process_time()
    out = fn()
    phases[name] = time.process_time() - t0
    return out


def _rows(
    src: Path, scols: list[str], mcols: list[str]
) -> tuple[list[Any], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Parse the export; return the records and the session and message rows."""
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

    def value(v: Any) -> Any:
        return dumps(v) if isinstance(v, list | dict) else v

    with open(src, encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh]
    sessions = [tuple(value(r.get(c)) for c in scols) for r in records]
    messages = []
    for r in records:
        for m in r.get("messages") or ():
            m["session_id"] = r["id"]
            messages.append(tuple(value(m.get(c)) for c in mcols))
    return records, sessions, messages


def _empty_store(path: Path) -> sqlite3.Connection:
    """Create an empty store of our layout; return a plain connection to it."""
    open_store(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def _columns(conn: sqlite3.Connection) -> tuple[list[str], list[str]]:
    scols = [r[1] for r in conn.execute("PRAGMA table_info(sessions)")]
    mcols = [r[1] for r in conn.execute("PRAGMA table_info(messages)") if r[1] != "id"]
    return scols, mcols


def _insert_sql(table: str, cols: list[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"


def phases(src: Path, work: Path) -> dict[str, float]:
    """Import src with plain SQL into a new store; return CPU seconds per phase."""
    out: dict[str, float] = {}
    conn = _empty_store(work / "phases" / "state.db")
    scols, mcols = _columns(conn)
    _records, srows, mrows = _cpu(
        out, "parse JSON + build rows (Python)", lambda: _rows(src, scols, mcols)
    )
    conn.execute("BEGIN")
    conn.executemany("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", WINDOW)
    _cpu(out, "insert sessions", lambda: conn.executemany(_insert_sql("sessions", scols), srows))
    _cpu(
        out,
        "insert messages (agent's indexes + triggers)",
        lambda: conn.executemany(_insert_sql("messages", mcols), mrows),
    )
    for t in ("messages_fts", "messages_fts_trigram"):
        conn.execute(f"INSERT INTO {t}({t}, rank) VALUES ('hashsize', 67108864)")
    _cpu(
        out,
        "word index (one INSERT … SELECT)",
        lambda: conn.execute(
            "INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)"
            " SELECT id, content, tool_name, tool_calls FROM messages_fts_src"
        ),
    )
    _cpu(
        out,
        "substring index (one INSERT … SELECT)",
        lambda: conn.execute(
            "INSERT INTO messages_fts_trigram(rowid, content, tool_name)"
            " SELECT id, content, tool_name FROM messages_fts_trigram_src"
        ),
    )

    def grams() -> None:
        docs = []
        for i, content, calls in conn.execute("SELECT id, content, tool_calls FROM messages"):
            parts = [p for p in (content, calls) if isinstance(p, str) and cjk.has_cjk(p)]
            if parts:
                docs.append((i, " ".join(cjk.cjk_grams(p) for p in parts)))
        conn.executemany(f"INSERT INTO {cjk.TABLE}(rowid, grams) VALUES (?, ?)", docs)

    _cpu(out, "CJK bigram index (Python + insert)", grams)
    conn.execute("ROLLBACK")
    conn.close()
    return out


def insert_variants(src: Path, work: Path) -> dict[str, float]:
    """CPU seconds of the message insert with and without the triggers and the indexes."""
    out: dict[str, float] = {}
    for variant in ("as the agent's layout", "without the triggers", "without triggers, indexes"):
        conn = _empty_store(work / variant.replace(" ", "-").replace(",", "") / "state.db")
        scols, mcols = _columns(conn)
        _records, srows, mrows = _rows(src, scols, mcols)
        conn.execute("BEGIN")
        conn.executemany("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", WINDOW)
        conn.executemany(_insert_sql("sessions", scols), srows)
        drops = []
        if variant != "as the agent's layout":
            drops += [
                f'DROP TRIGGER "{n}"'
                for (n,) in conn.execute(
                    "SELECT name FROM sqlite_master"
                    " WHERE type = 'trigger' AND tbl_name = 'messages'"
                ).fetchall()
            ]
        if variant == "without triggers, indexes":
            drops += [
                f'DROP INDEX "{n}"'
                for (n,) in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'index'"
                    " AND tbl_name = 'messages' AND sql IS NOT NULL"
                ).fetchall()
            ]
        for sql in drops:
            conn.execute(sql)
        sql = _insert_sql("messages", mcols)
        t0 = time.process_time()
        conn.executemany(sql, mrows)
        out[variant] = time.process_time() - t0
        conn.execute("ROLLBACK")
        conn.close()
    return out


def main(argv: list[str] | None = None) -> int:
    """Export the bench store, time the phases, print them per message."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, required=True)
    p.add_argument("--seed", type=int, default=gen.DEFAULT_SEED)
    args = p.parse_args(argv)
    home = gen.default_out(args.messages)
    if gen.read_meta(home) is None:
        raise SystemExit(f"no generated store at {home}: run bench/generate.py first")
    with tempfile.TemporaryDirectory(dir=BENCH_DIR / "out") as tmp:
        work = Path(tmp)
        src = work / "export.jsonl"
        with open_store(home / "state.db", read_only=True) as store, open(src, "w") as fh:
            n = export.write_jsonl(export.export_all(store), fh).messages
        found = phases(src, work)
        variants = insert_variants(src, work)
    total = sum(found.values())
    print(f"plain-SQL import of {n:,} messages, CPU seconds (µs per message):")
    for name, seconds in found.items():
        print(f"  {name:48s} {seconds:7.2f} s  {seconds / n * 1e6:6.1f} µs")
    print(f"  {'total':48s} {total:7.2f} s  = {n / total:,.0f} msgs/s on one core")
    # What the inserts and indexes cost (the statements any import of this layout runs, and the
    # CJK grams no SQL computes): one writer cannot import faster, however little else it does.
    sql = sum(s for name, s in found.items() if not name.startswith("parse"))
    print(f"  {'inserts + indexes (all but parsing)':48s} {sql:7.2f} s  = {n / sql:,.0f} msgs/s")
    print("the message insert alone:")
    for name, seconds in variants.items():
        print(f"  {name:48s} {seconds:7.2f} s  {seconds / n * 1e6:6.1f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
