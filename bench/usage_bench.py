"""Time `hermes usage --by day` and a `hermes watch` refresh on a generated store.

Usage: python bench/usage_bench.py --messages 1000000 [--store DIR] [--repeat 7]

The store is bench/out/store-<N>/ (made by `python bench/generate.py --messages N`), or --store
DIR (a HERMES_HOME holding state.db). Reported, each as the median of --repeat runs:

- usage-process: the whole `hermes usage --by day --json` process (start-up included), the
  SPEC §18 way of timing a command; target 300 ms at 1 M messages.
- usage-library: hermes_state.reports.usage_report.usage_report(store, "day"), beside the raw SQL a
  person would write for the same answer (per-session sums of the usage rows joined to the
  sessions for what they hold beyond them, then the day groups and a total), with the ratio and
  whether both give the same figures.
- watch-store: how long one refresh has the store open (open, read, close: the figure an agent
  writing meanwhile can feel), the first refresh (reads the newest 2,000 messages) and the later
  ones (only what was written since); target 50 ms.
- watch-refresh: a whole refresh, lock holders (/proc) and file sizes included.

Writes bench/out/usage-results-<N>.json. The CPU is shared: the load average is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from hermes_state.reports import usage_report  # noqa: E402
from hermes_state.store.connection import open_store  # noqa: E402

COUNTERS = usage_report.COUNTERS
TARGET_USAGE_MS = 300.0
TARGET_WATCH_MS = 50.0


def raw_usage_by_day(conn: Any) -> tuple[list[tuple[Any, ...]], tuple[Any, ...]]:
    """The same answer in plain SQL: day groups and totals of rows plus session leftovers."""
    sums = ", ".join(f"SUM({c}) AS {c}" for c in COUNTERS)
    left = ", ".join(f"MAX(0, COALESCE(s.{c}, 0) - COALESCE(c.{c}, 0)) AS {c}" for c in COUNTERS)
    priced = "('actual', 'estimated', 'included')"
    sql = f"""
    WITH c AS (SELECT session_id, {sums}, SUM(estimated_cost_usd) AS est,
                      SUM(actual_cost_usd) AS act
               FROM session_model_usage WHERE task = '' OR task = 'voice_chat'
               GROUP BY session_id),
    l AS (SELECT s.id, s.started_at, s.last_activity_at, {left},
                 CASE WHEN s.estimated_cost_usd - COALESCE(c.est, 0) > 1e-9
                      THEN s.estimated_cost_usd - COALESCE(c.est, 0)
                      WHEN s.estimated_cost_usd IS NOT NULL AND s.cost_status IN {priced}
                      THEN 0 END AS est,
                 CASE WHEN s.actual_cost_usd - COALESCE(c.act, 0) > 1e-9
                      THEN s.actual_cost_usd - COALESCE(c.act, 0) END AS act
          FROM sessions s LEFT JOIN c ON c.session_id = s.id),
    r AS MATERIALIZED (
        SELECT session_id, COALESCE(last_seen, first_seen) AS at,
               {", ".join(COUNTERS)},
               CASE WHEN estimated_cost_usd > 0 OR cost_status IN {priced}
                    THEN estimated_cost_usd END AS est,
               CASE WHEN actual_cost_usd > 0 THEN actual_cost_usd END AS act
        FROM session_model_usage
        UNION ALL
        SELECT l.id, MAX(COALESCE(l.last_activity_at, l.started_at),
                         COALESCE((SELECT MAX(timestamp) FROM messages m
                                   WHERE m.session_id = l.id), l.started_at)),
               {", ".join(f"l.{c}" for c in COUNTERS)}, l.est, l.act
        FROM l WHERE {" OR ".join(f"l.{c} > 0" for c in COUNTERS)} OR l.est > 0 OR l.act > 0)
    SELECT date(at, 'unixepoch', 'localtime') AS g, COUNT(DISTINCT session_id),
           {", ".join(f"SUM({c})" for c in COUNTERS)},
           SUM(COALESCE(act, est)), SUM(COALESCE(act, est) IS NULL)
    FROM r GROUP BY g
    UNION ALL
    SELECT NULL, COUNT(DISTINCT session_id), {", ".join(f"SUM({c})" for c in COUNTERS)},
           SUM(COALESCE(act, est)), SUM(COALESCE(act, est) IS NULL) FROM r
    """
    rows = conn.execute(sql).fetchall()
    return [tuple(r) for r in rows if r[0] is not None], next(
        tuple(r) for r in rows if r[0] is None
    )


def _ours_as_raw(report: Any) -> tuple[list[tuple[Any, ...]], tuple[Any, ...]]:
    """Return the library's report in the raw query's row shape (to compare the answers)."""

    def shape(key: Any, g: dict[str, Any]) -> tuple[Any, ...]:
        return (
            key,
            g["session_count"],
            *(g[c] for c in COUNTERS),
            g["cost_usd"],
            g["unknown_cost_count"],
        )

    return [shape(g["day"], g) for g in report.groups], shape(None, report.totals)[1:]


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(
        (x == y) if not isinstance(x, float) else abs(x - (y or 0)) <= 1e-6 * max(1, abs(x))
        for x, y in zip(a, b, strict=True)
    )


def timed(fn: Any, repeat: int) -> tuple[float, Any]:
    """Return the median wall time of fn() in ms, and its last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), result


def bench_usage(home: Path, repeat: int) -> dict[str, Any]:
    """Time the usage command (process and library) and the raw SQL of the same answer."""
    env = {**os.environ, "HERMES_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}
    argv = [sys.executable, "-m", "hermes_cli", "usage", "--by", "day", "--json"]

    def process() -> str:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
        return done.stdout

    process()  # warm the page cache, as a person's second run would be
    process_ms, out = timed(process, repeat)
    with open_store(home / "state.db", read_only=True) as store:
        library_ms, report = timed(lambda: usage_report.usage_report(store, "day"), repeat)
        raw_ms, raw = timed(lambda: raw_usage_by_day(store.conn), repeat)
        records = store.conn.execute("SELECT COUNT(*) FROM session_model_usage").fetchone()[0]
        sessions = store.conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
    ours = _ours_as_raw(report)
    same = len(ours[0]) == len(raw[0]) and all(
        _same(a, b) for a, b in zip(ours[0], raw[0], strict=True)
    )
    same = same and _same(ours[1], raw[1][1:])
    return {
        "usage_process_ms": round(process_ms, 1),
        "usage_library_ms": round(library_ms, 1),
        "usage_raw_sql_ms": round(raw_ms, 1),
        "ratio_library_to_raw": round(library_ms / raw_ms, 2) if raw_ms else None,
        "same_answer": same,
        "days": len(report.groups),
        "sessions": sessions,
        "usage_rows": records,
        "json_bytes": len(out),
    }


def bench_watch(home: Path, repeat: int) -> dict[str, Any]:
    """Time watch refreshes: store time of the first and of later ones, and a whole refresh."""
    from hermes_cli.apps.watch import make_refresh

    firsts, laters, wholes = [], [], []
    for _ in range(repeat):
        refresh = make_refresh(home / "state.db")
        start = time.perf_counter()
        snap = refresh()
        wholes.append((time.perf_counter() - start) * 1000)
        firsts.append(snap.store_ms)
        for _ in range(5):
            laters.append(refresh().store_ms)
    return {
        "watch_first_store_ms": round(statistics.median(firsts), 2),
        "watch_later_store_ms": round(statistics.median(laters), 2),
        "watch_store_ms_max": round(max(firsts + laters), 2),
        "watch_refresh_ms": round(statistics.median(wholes), 1),
    }


def main() -> None:
    """Run the benchmarks and print one line per figure."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--store", type=Path, help="a HERMES_HOME with state.db")
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    home = args.store or BENCH_DIR / "out" / f"store-{args.messages}"
    if not (home / "state.db").is_file():
        sys.exit(f"no store at {home}; run: python bench/generate.py --messages {args.messages}")
    load_before = os.getloadavg()
    results = {**bench_usage(home, args.repeat), **bench_watch(home, args.repeat)}
    results.update(
        store=str(home),
        messages=args.messages,
        repeat=args.repeat,
        loadavg_before=[round(x, 2) for x in load_before],
        loadavg_after=[round(x, 2) for x in os.getloadavg()],
    )
    for key, value in results.items():
        print(f"{key:28} {value}")
    ok_usage = results["usage_process_ms"] <= TARGET_USAGE_MS
    ok_watch = results["watch_store_ms_max"] <= TARGET_WATCH_MS
    print(f"{'target usage <= 300 ms':28} {'pass' if ok_usage else 'FAIL'}")
    print(f"{'target watch <= 50 ms':28} {'pass' if ok_watch else 'FAIL'}")
    out = BENCH_DIR / "out" / f"usage-results-{args.messages}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
