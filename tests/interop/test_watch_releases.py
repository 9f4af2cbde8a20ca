"""`hermes watch` beside a live agent: a real release appends to its store (as a production
gateway does) while we refresh the view four times a second. The target — no agent write that
overlapped one of our refreshes takes more than 50 ms longer than the agent's own p99 when
nobody watches — is reported (``target_met``); the test fails past 0.5 s. The view must see the
agent's session and rate; the store must come out whole, with
every acknowledged row present. The real `hermes watch --format json` process streams beside
the agent too. Figures are printed as one ``WATCH {...}`` line per test (run with ``-s``).

The releases of 0.21/0.22 keep the store in rollback-journal mode on this machine's SQLite
(3.40.1, WAL-reset-vulnerable), where a reader does hold up a writer's commit: the worst case.
0.19 puts it in WAL, where readers never block a writer.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interop.live_agent import (
    Write,
    check_after,
    live_agents,
    run_hermes,
    take_baseline,
)
from interop.releases import BY_KEY, Release

pytestmark = pytest.mark.slow

MAX_EXTRA_S = 0.050  # the target: what a refresh may add to an agent's write (reported)
# The test fails only past a ceiling far above the target: a shared 2-core machine misses the
# target by scheduling alone, a refresh that held a read across statements misses the ceiling.
CEILING_EXTRA_S = 0.5
REFRESH_EVERY_S = 0.25
WATCH_SECONDS = 12.0
QUIET_SECONDS = 8.0
RATE = 50  # messages a second, one writer


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * 99 // 100) - 1)] if ordered else 0.0


def _calls(writes: list[Write], start: float, end: float) -> list[Write]:
    """Return the agent's write calls (not open/close) that ran within [start, end]."""
    return [w for w in writes if w.op not in ("open", "close") and w.began >= start and w.at <= end]


def _overlapping(writes: list[Write], windows: list[tuple[float, float]]) -> list[Write]:
    """Return the write calls that overlapped one of our store windows."""
    out = []
    for w in writes:
        if w.op in ("open", "close"):
            continue
        if any(w.began < end and w.at > start for start, end in windows):
            out.append(w)
    return out


def _report(record_property: Callable[[str, object], None], figures: dict[str, Any]) -> str:
    figures = {**figures, "loadavg": [round(x, 2) for x in os.getloadavg()]}
    line = json.dumps(figures, default=str)
    print(f"\nWATCH {line}", flush=True)
    record_property("watch", line)
    return line


@pytest.mark.parametrize(
    "release", [pytest.param(BY_KEY[k], id=k) for k in ("r31", "r22")], indirect=True
)
def test_refreshes_beside_an_agent_writing_lose_nothing_and_report_its_delay(
    release: Release, built: Path, record_property: Callable[[str, object], None]
) -> None:
    from hermes_cli.apps.watch import make_refresh

    db = built / "state.db"
    baseline = take_baseline(built)
    refresh = make_refresh(db)
    windows: list[tuple[float, float]] = []
    store_ms: list[float] = []
    seen_rates: list[int] = []
    with live_agents(release, built, writers=1, rate=RATE, max_seconds=120) as agents:
        agents.wait_for_acks(20)
        q0 = time.time()
        time.sleep(QUIET_SECONDS)  # the agent alone: its own latency
        q1 = w0 = time.time()
        while time.time() < w0 + WATCH_SECONDS:
            started = time.time()
            snap = refresh()
            # The store is opened first and closed before locks and sizes are read.
            windows.append((started, started + snap.store_ms / 1000 + 0.002))
            store_ms.append(snap.store_ms)
            assert snap.problem is None, snap.problem_message
            assert snap.view is not None
            seen_rates.append(snap.view.messages_per_minute)
            time.sleep(max(0.0, started + REFRESH_EVERY_S - time.time()))
        w1 = time.time()
    writes = agents.writes()
    quiet = [w.t for w in _calls(writes, q0, q1)]
    touched = _overlapping(_calls(writes, w0, w1), windows)
    limit = _p99(quiet) + CEILING_EXTRA_S
    after = check_after(built, writes, baseline)
    figures = {
        "release": release.key,
        "journal_mode": baseline.journal_mode,
        "refreshes": len(windows),
        "store_ms_median": round(statistics.median(store_ms), 2),
        "store_ms_max": round(max(store_ms), 2),
        "agent_quiet_p99_s": round(_p99(quiet), 4),
        "agent_quiet_max_s": round(max(quiet, default=0.0), 4),
        "agent_calls_overlapping_a_refresh": len(touched),
        "agent_overlapping_max_s": round(max((w.t for w in touched), default=0.0), 4),
        "agent_watch_p99_s": round(_p99([w.t for w in _calls(writes, w0, w1)]), 4),
        "messages_per_minute_seen": max(seen_rates, default=0),
        "after": after.figures(),
        "target_met": all(w.t <= _p99(quiet) + MAX_EXTRA_S for w in touched),
    }
    line = _report(record_property, figures)
    slow = [w for w in touched if w.t > limit]
    assert touched, f"no agent write overlapped a refresh: {line}"
    assert not slow, f"{len(slow)} writes slower than {limit:.3f}s beside a refresh: {line}"
    assert max(seen_rates) > 0, line
    assert not (agents.problems() + after.problems()), line


@pytest.mark.parametrize("release", [pytest.param(BY_KEY["r31"], id="r31")], indirect=True)
def test_the_real_watch_process_streams_beside_a_live_agent(
    release: Release, built: Path, record_property: Callable[[str, object], None]
) -> None:
    baseline = take_baseline(built)
    with live_agents(release, built, writers=1, rate=RATE, max_seconds=120) as agents:
        agents.wait_for_acks(20)
        t0 = time.time()
        done = run_hermes(built, "watch", "--format", "json", "--count", "16", "--interval", "0.25")
        t1 = time.time()
    assert done.rc == 0 and not done.traceback, done.describe()
    docs = [json.loads(line) for line in done.stdout.splitlines()]
    writes = agents.writes()
    during = [w.t for w in _calls(writes, t0, t1)]
    after = check_after(built, writes, baseline)
    line = _report(
        record_property,
        {
            "release": release.key,
            "snapshots": len(docs),
            "store_ms_max": max(d["store_ms"] for d in docs),
            "agent_p99_s": round(_p99(during), 4),
            "agent_max_s": round(max(during, default=0.0), 4),
            "after": after.figures(),
        },
    )
    assert len(docs) == 16 and all(d["problem"] is None for d in docs), line
    assert any(a["session_id"].startswith("live_") for d in docs for a in d["active_sessions"])
    assert max(d["messages_per_minute"] for d in docs) > 0, line
    assert not (agents.problems() + after.problems()), line
