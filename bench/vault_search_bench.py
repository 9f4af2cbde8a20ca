"""Time a ranked search across the live store and the vault against the same data in one store.

Usage: python bench/vault_search_bench.py [--messages 200000] [--older-than 500] [--runs 7]
       [--combined DB --split HOME] [--sort rank] [QUERY ...]

- The combined store is bench/out/store-<N>/state.db (bench/generate.py; built when missing);
  the split copy is bench/out/vault-search-<N>/home/: the store copied through SQLite's backup
  API and split by the real ``hermes vault move --older-than <DAYS>d`` (built once, reused).
  --combined/--split point at existing copies instead.
- Per query: one warm-up each, then ``--runs`` alternating runs of ``search_messages`` on the
  combined store and ``search_spanning`` on the split home (library time, limit 20); median of
  each and their ratio. Hits must be equal: ids, order and (for rank) the scores' order.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
for _p in (str(REPO_ROOT), str(BENCH_DIR)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import generate as gen  # noqa: E402
import vault_bench as vb  # noqa: E402

from hermes_state.search import search  # noqa: E402
from hermes_state.store.connection import open_store  # noqa: E402
from hermes_state.vault import vault_search  # noqa: E402

QUERIES = [
    "docker",
    "hermes",
    "timeout",
    "docker build",
    '"function call"',
    "buil*",
    "会議",
    "docker OR gateway",
    "error OR hermes checkpoint",
]
TARGET = 1.5


def split_home(combined: Path, messages: int, older_than: int) -> Path:
    """Return the home of a split copy of the combined store (made once by `vault move`)."""
    home = BENCH_DIR / "out" / f"vault-search-{messages}" / "home"
    if not (home / "vault").is_dir():
        vb.copy_store(combined, home / "state.db")
        vb.run_move(home, older_than)
    return home


def median_ms(fn, runs: int) -> float:  # type: ignore[no-untyped-def]
    """Return the median wall time of fn over runs calls, in ms."""
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    """Print per-query medians and ratios; exit 1 when any query's hits differ."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--older-than", type=int, default=500, metavar="DAYS")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--sort", default="rank")
    p.add_argument("--combined", type=Path, default=None)
    p.add_argument("--split", type=Path, default=None)
    p.add_argument("queries", nargs="*")
    args = p.parse_args(argv)
    combined = args.combined
    if combined is None:
        combined = BENCH_DIR / "out" / f"store-{args.messages}" / "state.db"
        if not combined.exists():
            gen.main(["--messages", str(args.messages)])
    home = args.split or split_home(combined, args.messages, args.older_than)
    one = open_store(combined, read_only=True)
    live = open_store(home / "state.db", read_only=True)
    bad = 0
    try:
        for q in args.queries or QUERIES:

            def alone(q: str = q) -> search.SearchResult:
                return search.search_messages(one, q, limit=20, sort=args.sort)

            def spanning(q: str = q) -> search.SearchResult:
                return vault_search.search_spanning(live, home, q, limit=20, sort=args.sort)

            a, b = alone(), spanning()
            ta, tb = [], []
            for _ in range(args.runs):
                ta.append(median_ms(alone, 1))
                tb.append(median_ms(spanning, 1))
            ma, mb = statistics.median(ta), statistics.median(tb)
            same = [h["id"] for h in a] == [h["id"] for h in b]
            bad += not same
            flag = "" if mb / ma <= TARGET else "  > target"
            print(
                f"{q!r:30} hits={len(a):2} same={same!s:5} one={ma:7.1f} ms "
                f"split={mb:7.1f} ms  x{mb / ma:.2f}{flag}",
                flush=True,
            )
    finally:
        live.close()
        one.close()
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
