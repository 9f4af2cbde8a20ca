"""Measure `hermes vault move` on a generated profile: live store size before and after, move
throughput, and the agent's append latency on the big live store and on the small one after.

Usage: python bench/vault_bench.py --messages 1000000 [--seed 7] [--reuse] [--older-than DAYS]
       [--appends 300] [--baseline DIR [--rounds 3]]

- The store comes from bench/generate.py (bench/out/store-<N>/, reused with --reuse) and is
  copied through SQLite's backup API into bench/out/vault-<N>/home/, so the generated store is
  never changed. Generated data ends at 2026-01-01 and spans 365 days, spread evenly by message
  count; the default --older-than puts the cutoff at the point where 90 % of the messages are
  older (the age of END_TS - 36.5 days, today), so about 90 % move (whole ended groups only).
- appends: the agent's path, ``hermes_state.records.messages.append_message`` on the live store
through
  ``open_store`` (one transaction per message, FTS triggers and CJK catch-up included), into a
  fresh session, timed per call; median and p95. Once on the big store before the move, once on
  the small live store after it.
- move: the real command, ``python -m hermes_cli vault move --older-than Nd --yes --json``, in a
  subprocess (HERMES_HOME = the copy). Throughput is moved messages over the library's move time
  (``duration_s``: copy, verify, delete per round); the whole command's wall time also includes
  the reclaim of the live file (VACUUM when a quarter of it moved, as prune does).
- sizes: the live store's files (state.db and any -wal) before and after, and the vault stores.

- before/after (``--baseline DIR``): the same move, each time on a fresh copy of the store, by
  this checkout's library and by the one in DIR (another checkout, e.g. ``git archive`` of the
  commit before), alternating, ``--rounds`` times each; rates and medians, and messages per
  CPU second of the whole command (steadier than wall time when the machine is shared).

Targets (issue #27): live store after the move ≤ 15 % of before; move ≥ 20,000 messages/s.
Writes bench/out/vault-results-<N>.json. Search across live + vault is timed by the vault
search bench; ``search_comparison`` is the hook for it here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
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

from hermes_state.records.messages import append_message  # noqa: E402
from hermes_state.records.sessions import create_session  # noqa: E402
from hermes_state.store.connection import open_store  # noqa: E402

DAY_S = 86400.0
OLDER_SHARE = 0.9  # of the messages, by the generator's even spread over its span
SIZE_TARGET = 0.15
RATE_TARGET = 20_000.0


def default_older_than(now: float | None = None) -> int:
    """Return the age in whole days that leaves the newest tenth of the generated data live."""
    cut = gen.END_TS - gen.SPAN_S * (1.0 - OLDER_SHARE)
    return int(((time.time() if now is None else now) - cut) // DAY_S)


def store_bytes(db: Path) -> int:
    """Return the bytes of a store's files (the database and its -wal/-journal), by stat."""
    total = 0
    for suffix in ("", "-wal", "-journal"):
        path = Path(f"{db}{suffix}")
        if path.exists():
            total += path.stat().st_size
    return total


def copy_store(src: Path, dst: Path) -> None:
    """Copy a closed store through SQLite's backup API (one step) into a fresh file."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{dst}{suffix}").unlink(missing_ok=True)
    source = sqlite3.connect(src.resolve().as_uri() + "?mode=ro", uri=True)
    target = sqlite3.connect(dst)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()


def append_latency(db: Path, n: int, tag: str) -> dict[str, float]:
    """Time n single appends (the agent's path) into a new session; return ms figures."""
    store = open_store(db)
    try:
        sid = f"bench_append_{tag}_{os.getpid()}"
        create_session(store, sid, "cli", started_at=time.time())
        samples = []
        for i in range(n):
            text = f"append latency probe {i}: deploy the grafana dashboard to kubernetes"
            t0 = time.perf_counter()
            append_message(store, sid, "user", text)
            samples.append((time.perf_counter() - t0) * 1000.0)
    finally:
        store.close()
    ordered = sorted(samples)
    return {
        "n": n,
        "median_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[max(0, -(-len(ordered) * 95 // 100) - 1)], 3),
        "max_ms": round(ordered[-1], 3),
    }


def run_move(home: Path, older_than: int, repo: Path = REPO_ROOT) -> tuple[dict[str, Any], float]:
    """Run the real `hermes vault move` (the library of checkout repo); return its JSON result
    and the wall time."""
    env = {**os.environ, "HERMES_HOME": str(home), "PYTHONPATH": str(repo)}
    argv = [sys.executable, "-m", "hermes_cli", "vault", "move"]
    argv += ["--older-than", f"{older_than}d", "--yes", "--json"]
    t0 = time.perf_counter()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=7200)
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"vault move failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    # The command's CPU seconds (user + system): on a loaded machine, steadier than its wall time.
    result["cpu_s"] = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return result, wall


def compare_moves(
    store: Path, work: Path, older_than: int, baseline: Path, rounds: int
) -> dict[str, Any]:
    """Move the same store with this checkout's library and with baseline's, each on a fresh
    copy, alternating (baseline first), rounds times each; return every rate and the medians."""
    rates: dict[str, list[float]] = {"baseline": [], "this": []}
    cpu: dict[str, list[float]] = {"baseline": [], "this": []}
    for _ in range(rounds):
        for side, repo in (("baseline", baseline), ("this", REPO_ROOT)):
            home = work / f"compare-{side}" / "home"
            shutil.rmtree(home.parent, ignore_errors=True)
            copy_store(store, home / "state.db")
            os.sync()
            moved, _wall = run_move(home, older_than, repo)
            rates[side].append(moved["messages"] / max(1e-9, float(moved["duration_s"])))
            cpu[side].append(moved["messages"] / max(1e-9, float(moved["cpu_s"])))
            shutil.rmtree(home.parent, ignore_errors=True)
    med = {side: statistics.median(r) for side, r in rates.items()}
    med_cpu = {side: statistics.median(r) for side, r in cpu.items()}
    return {
        "baseline": str(baseline),
        "rounds": rounds,
        "rates": {side: [round(x) for x in r] for side, r in rates.items()},
        "median_baseline": round(med["baseline"]),
        "median_this": round(med["this"]),
        "ratio": round(med["this"] / max(1e-9, med["baseline"]), 2),
        "per_cpu_s": {side: [round(x) for x in r] for side, r in cpu.items()},
        "cpu_ratio": round(med_cpu["this"] / max(1e-9, med_cpu["baseline"]), 2),
    }


def search_comparison(home: Path) -> dict[str, Any] | None:
    """Hook for timing search across live + vault against live alone (the vault search bench
    measures it; nothing is timed here)."""
    return None


def main(argv: list[str] | None = None) -> int:
    """Generate (or reuse) the store, copy it, and print the vault move measurements."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=gen.DEFAULT_SEED)
    p.add_argument("--reuse", action="store_true")
    p.add_argument("--older-than", type=int, default=None, metavar="DAYS")
    p.add_argument("--appends", type=int, default=300)
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="DIR",
        help="also move with the library of this checkout, alternating, for a before/after",
    )
    p.add_argument("--rounds", type=int, default=3, help="moves per side with --baseline")
    args = p.parse_args(argv)
    older_than = args.older_than if args.older_than is not None else default_older_than()
    src_home = gen.default_out(args.messages)
    t0 = time.perf_counter()
    _made, reused = gen.ensure_store(
        src_home,
        args.messages,
        args.seed,
        reuse=args.reuse,
        progress=gen.progress_printer(args.messages),
    )
    generated_s = time.perf_counter() - t0
    work = BENCH_DIR / "out" / f"vault-{args.messages}"
    shutil.rmtree(work, ignore_errors=True)
    home = work / "home"
    db = home / "state.db"
    copy_store(src_home / "state.db", db)
    os.sync()  # the copy's dirty pages would otherwise be written back during the appends' fsyncs
    before = store_bytes(db)
    load_before = os.getloadavg()[0]
    big = append_latency(db, args.appends, "big")
    moved, wall = run_move(home, older_than)
    after = store_bytes(db)
    small = append_latency(db, args.appends, "small")
    vault_bytes = sum(store_bytes(p) for p in sorted((home / "vault").glob("*.db")))
    rate = moved["messages"] / max(1e-9, float(moved["duration_s"]))
    results = {
        "messages": args.messages,
        "seed": args.seed,
        "store": "reused" if reused else f"generated in {generated_s:.0f}s",
        "older_than_days": older_than,
        "command": f"hermes vault move --older-than {older_than}d --yes --json",
        "moved_sessions": moved["sessions"],
        "moved_messages": moved["messages"],
        "moved_share": round(moved["messages"] / args.messages, 4),
        "move_s": moved["duration_s"],
        "command_wall_s": round(wall, 3),
        "move_messages_per_s": round(rate),
        "live_bytes_before": before,
        "live_bytes_after": after,
        "live_after_share": round(after / before, 4),
        "vault_bytes": vault_bytes,
        "by_year": moved["by_year"],
        "reclaimed": moved.get("reclaimed"),
        "append_big": big,
        "append_small": small,
        "search": search_comparison(home),
        "compare": (
            compare_moves(src_home / "state.db", work, older_than, args.baseline, args.rounds)
            if args.baseline is not None
            else None
        ),
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    out = BENCH_DIR / "out" / f"vault-results-{args.messages}.json"
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    mb = 1 << 20
    print(f"store: {src_home} ({args.messages:,} messages, {results['store']}); work copy {home}")
    print(f"command: {results['command']}")
    print(
        f"moved {moved['sessions']:,} sessions, {moved['messages']:,} messages "
        f"({results['moved_share']:.1%}) in {moved['duration_s']:.1f}s: {rate:,.0f} msgs/s "
        f"(target >= {RATE_TARGET:,.0f}); whole command {wall:.1f}s with the reclaim"
    )
    share = results["live_after_share"]
    print(
        f"live store: {before / mb:,.1f} MiB -> {after / mb:,.1f} MiB ({share:.1%}; target "
        f"<= {SIZE_TARGET:.0%}); vault stores {vault_bytes / mb:,.1f} MiB"
    )
    for label, figures in (("big live store (before)", big), ("small live store (after)", small)):
        print(
            f"append_message on the {label}: median {figures['median_ms']:.2f} ms, "
            f"p95 {figures['p95_ms']:.2f} ms, max {figures['max_ms']:.2f} ms "
            f"over {figures['n']} appends"
        )
    if (cmp := results["compare"]) is not None:
        print(
            f"before/after, {cmp['rounds']} moves each, alternating: baseline {cmp['baseline']}"
            f" median {cmp['median_baseline']:,} msgs/s {cmp['rates']['baseline']}; this checkout"
            f" median {cmp['median_this']:,} msgs/s {cmp['rates']['this']} ({cmp['ratio']}x);"
            f" messages per CPU second of the whole command (reclaim included): baseline"
            f" {cmp['per_cpu_s']['baseline']}, this {cmp['per_cpu_s']['this']}"
            f" ({cmp['cpu_ratio']}x)"
        )
    print(f"load average {load_before:.2f} -> {os.getloadavg()[0]:.2f}; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
