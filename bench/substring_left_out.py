"""Time a substring search with and without the scan of the rows the agent's index leaves out.

Usage: python bench/substring_left_out.py [--messages 50000] [--runs 7] [QUERY ...]

The store is bench/out/store-<N>/state.db (bench/generate.py; built when missing). Per query:
one warm-up, then ``--runs`` runs of ``search_messages`` (limit 20) as it is, and as it was
before issue 33 (the substring route without its scan of tool output and cron/subagent
sessions: ``fts.Index.covers`` answering "every row"); the median of each, with hits and
``complete``. Read-only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
for _p in (str(REPO_ROOT), str(BENCH_DIR)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import generate as gen  # noqa: E402

from hermes_state.search import search  # noqa: E402
from hermes_state.store import fts  # noqa: E402
from hermes_state.store.connection import Store, open_store  # noqa: E402


def _median(store: Store, query: str, runs: int) -> tuple[float, int, bool]:
    search.search_messages(store, query, limit=20)
    times: list[float] = []
    found: Any = None
    for _ in range(runs):
        t0 = time.perf_counter()
        found = search.search_messages(store, query, limit=20)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000, len(found), bool(found.complete)


def main(argv: list[str] | None = None) -> int:
    """Print one line per query: with the scan, and without it."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=50000)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("queries", nargs="*", default=["etzal", "ocker"])
    args = p.parse_args(argv)
    home = gen.default_out(args.messages)
    gen.ensure_store(home, args.messages)
    with open_store(home / "state.db", read_only=True) as store:
        for query in args.queries:
            with_scan = _median(store, query, args.runs)
            covers = fts.Index.covers
            fts.Index.covers = lambda self, alias="m": None  # type: ignore[method-assign]
            try:
                without = _median(store, query, args.runs)
            finally:
                fts.Index.covers = covers  # type: ignore[method-assign]
            print(
                f"{query}: with the left-out scan {with_scan[0]:.1f} ms, {with_scan[1]} hits, "
                f"complete={with_scan[2]}; trigram only {without[0]:.1f} ms, {without[1]} hits, "
                f"complete={without[2]}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
