"""The vault beside live Hermes Agent releases (issue 39): two real agent writers append, end
sessions and resume a vaulted chat by id while `vault move` (moving what the agents just ended),
`vault return`, `vault list|check`, `sessions list --vault|search` and `backup` run in a loop,
with SIGKILLs of move and return. Afterwards, once a last move finishes what a kill left, every
message the agents were told was stored is in the profile's stores exactly once, no session is
in zero places or in two (a resumed one is one conversation in two stores, by design), and every
store is whole.

Figures are printed as one ``LIVE {...}`` JSON line per test (run with ``-s``). Environment:
``HERMES_LIVE_VAULT_SECONDS`` (default 30): how long the loop runs per release.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from support.children import child_env, hermes_argv

from interop.live_agent import (
    Run,
    Write,
    errors_of,
    fts5_integrity,
    live_agents,
    run_hermes,
    take_baseline,
)
from interop.releases import BY_KEY, Release, run_probe

SECONDS = float(os.environ.get("HERMES_LIVE_VAULT_SECONDS", "30"))
MIN_ROUNDS = 6  # every kind of step at least twice (kills of move and return, a resume)
MAX_SECONDS = 150.0  # a slow machine stops here, whatever the rounds
WRITERS, RATE = 2, 50
TIMEOUT_S = 60.0
KILLED = -signal.SIGKILL
BUSY = 75  # a command that waited its patience out: reported, not a failure of the data
# The agents keep a DELETE-journal store locked most of the time on a loaded machine: every
# command of the loop waits longer than its default patience for a turn.
WAIT = ("--wait", "30")

pytestmark = pytest.mark.slow


def _name(run: Run) -> str:
    """Return a run's command name (its first two words after the shared options)."""
    words = [a for a in run.args if a not in WAIT]
    return " ".join(words[:2])


def _reports_interrupted(run: Run) -> bool:
    """Tell whether a run is a `vault check` whose only problems are an interrupted run's."""
    if _name(run) != "vault check" or run.rc != 1:
        return False
    try:
        problems = json.loads(run.stdout)["problems"]
    except (ValueError, KeyError):
        return False
    return bool(problems) and all(
        ": absent_from_live: " in p and "interrupted move or return" in p for p in problems
    )


def _stores(home: Path) -> list[Path]:
    return [home / "state.db", *sorted((home / "vault").glob("[0-9][0-9][0-9][0-9].db"))]


def _ro(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True, timeout=30)


def _killed_run(home: Path, args: tuple[str, ...], rng: random.Random) -> Run:
    """Start `hermes ARGS` and SIGKILL it after a random moment (it may finish first)."""
    started, t0 = time.time(), time.perf_counter()
    args = (*WAIT, *args)
    proc = subprocess.Popen(
        hermes_argv(*args),
        env=child_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        proc.wait(timeout=rng.uniform(0.05, 1.5))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=TIMEOUT_S)
    return Run(args, proc.returncode, time.perf_counter() - t0, started, out, err)


def _vaulted(home: Path) -> list[str]:
    """Return the ids of sessions only the vault holds (as `sessions list --vault` shows)."""
    done = run_hermes(home, *WAIT, "sessions", "list", "--vault", "--json", timeout=TIMEOUT_S)
    if done.rc != 0:
        return []
    return [r["id"] for r in json.loads(done.stdout)["sessions"] if r.get("vault")]


def _where(home: Path, sessions: set[str]) -> dict[str, list[str]]:
    """Return, per session, the stores holding a row of it."""
    out: dict[str, list[str]] = {s: [] for s in sessions}
    for db in _stores(home):
        conn = _ro(db)
        try:
            for (sid,) in conn.execute("SELECT id FROM sessions"):
                if sid in out:
                    out[sid].append(db.name)
        finally:
            conn.close()
    return out


def _acked_copies(home: Path, acks: list[Write]) -> tuple[list[Write], list[Write]]:
    """Return the acked appends found in no store and those found in more than one place."""
    copies: Counter[tuple[str, str]] = Counter()
    wanted = {(w.s, w.h) for w in acks}
    for db in _stores(home):
        conn = _ro(db)
        try:
            for sid, content in conn.execute("SELECT session_id, content FROM messages"):
                if isinstance(content, str):
                    key = (sid, hashlib.sha256(content.encode("utf-8")).hexdigest())
                    if key in wanted:
                        copies[key] += 1
        finally:
            conn.close()
    missing = [w for w in acks if copies[(str(w.s), str(w.h))] == 0]
    doubled = [w for w in acks if copies[(str(w.s), str(w.h))] > 1]
    return missing, doubled


def _resume(release: Release, home: Path, sid: str, tag: int) -> list[Write]:
    """Resume a vaulted chat through the release (a gateway's create_session + appends)."""
    got = run_probe(release, "resume", home, sid, "2", timeout=TIMEOUT_S)
    texts = [f"resumed axolotl {i}" for i in range(2)]
    now = time.time()
    return [
        Write(
            writer=f"resume{tag}",
            op="append",
            t=0.0,
            at=now,
            s=sid,
            id=int(mid),
            h=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        )
        for mid, text in zip(got["ids"], texts, strict=True)
    ]


def _round(
    home: Path, release: Release, i: int, rng: random.Random, resumed: list[Write]
) -> list[Run]:
    """One round of the vault loop; a resumed chat's acks are added to resumed."""
    runs: list[Run] = []
    move = ("vault", "move", "--older-than", "0d", "--yes", "--json")
    runs.append(
        _killed_run(home, move, rng)
        if i % 3 == 1
        else run_hermes(home, *WAIT, *move, timeout=TIMEOUT_S)
    )
    reads = [("vault", "list", "--json"), ("vault", "check", "--json")]
    if i % 3 == 0:
        reads += [("sessions", "search", "kubernetes", "--json"), ("usage", "--json")]
    for args in reads:
        runs.append(run_hermes(home, *WAIT, *args, timeout=TIMEOUT_S))
    vaulted = _vaulted(home)
    if vaulted and i % 3 == 0:
        resumed += _resume(release, home, rng.choice(vaulted), i)
    if len(vaulted) > 2:
        back = ("vault", "return", *rng.sample(vaulted, 2), "--json")
        runs.append(
            _killed_run(home, back, rng)
            if i % 3 == 2
            else run_hermes(home, *WAIT, *back, timeout=TIMEOUT_S)
        )
    if i % 5 == 4:
        runs.append(run_hermes(home, *WAIT, "backup", timeout=TIMEOUT_S))
    return runs


@pytest.mark.parametrize("release", [BY_KEY["r22"], BY_KEY["r31"]], ids=["r22", "r31"])
def test_vault_loop_beside_two_agent_writers_loses_and_doubles_nothing(
    release: Release, built: Path, record_property: Callable[[str, object], None]
) -> None:
    baseline = take_baseline(built)
    rng = random.Random(39)
    runs: list[Run] = []
    resumed: list[Write] = []
    rounds = 0
    with live_agents(
        release, built, writers=WRITERS, rate=RATE, max_seconds=MAX_SECONDS + 90
    ) as agents:
        agents.wait_for_acks(20)
        t0 = time.time()
        while (
            (rounds < MIN_ROUNDS or time.time() < t0 + SECONDS)
            and time.time() < t0 + MAX_SECONDS
            and len(agents.running()) == WRITERS
        ):
            runs += _round(built, release, rounds, rng, resumed)
            rounds += 1
    # A last move finishes what a kill interrupted; then nothing else runs.
    final = run_hermes(built, "vault", "move", "--older-than", "0d", "--yes", "--json")
    check = run_hermes(built, "vault", "check", "--json")
    writes = agents.writes()
    acks = [w for w in writes if w.is_ack] + resumed
    created = {w.s for w in writes if w.op == "create" and w.error is None and w.s}
    missing, doubled = _acked_copies(built, acks)
    places = _where(built, created | {w.s for w in resumed if w.s})
    report = json.loads(check.stdout) if check.rc == 0 else {}
    resumed_ids = {
        s
        for store in report.get("stores", [])
        for c in store["checks"]
        for s in c.get("sessions", [])
    }
    nowhere = sorted(s for s, at in places.items() if not at)
    twice = sorted(s for s, at in places.items() if len(at) > 1 and s not in resumed_ids)
    integrity = {}
    for db in _stores(built):
        conn = _ro(db)
        try:
            integrity[db.name] = conn.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            conn.close()
    fts = {db.name: fts5_integrity(db) for db in _stores(built)}
    killed = [r for r in runs if r.rc == KILLED]
    busy = [r for r in runs if r.rc == BUSY]
    # After a SIGKILLed move or return, `vault check` rightly reports the copies it left (exit
    # 1) until the next move or return finishes it: that report, and only that, is expected.
    interrupted = [r for r in runs if _reports_interrupted(r)]
    failed = [
        r for r in runs if (r.rc not in (0, KILLED, BUSY) and r not in interrupted) or r.traceback
    ]
    figures = {
        "test": "vault_loop",
        "release": release.key,
        "journal_mode": baseline.journal_mode,
        "rounds": rounds,
        "commands": len(runs),
        "sigkills": len(killed),
        "acknowledged": len(acks),
        "resumed_messages": len(resumed),
        "lost": len(missing),
        "duplicated": len(doubled),
        "sessions_nowhere": len(nowhere),
        "sessions_twice": len(twice),
        "resumed_sessions": len(resumed_ids),
        "vault_stores": len(_stores(built)) - 1,
        "agent_errors": len(errors_of(writes)),
        "busy_exits": len(busy),
        "checks_seeing_an_interrupted_run": len(interrupted),
        "failures": len(failed),
        "seconds_by_command": {
            name: round(sum(r.seconds for r in runs if _name(r) == name), 1)
            for name in sorted({_name(r) for r in runs})
        },
    }
    line = json.dumps(figures)
    print(f"\nLIVE {line}", flush=True)
    record_property("live", line)
    problems = [r.describe() for r in failed[:5]]
    problems += [f"final move: {final.describe()}"] if final.rc != 0 else []
    problems += [f"vault check: {check.describe()}"] if check.rc != 0 else []
    problems += [f"acked {w.id} of {w.s} is lost" for w in missing[:10]]
    problems += [f"acked {w.id} of {w.s} is stored twice" for w in doubled[:10]]
    problems += [f"session {s} is nowhere" for s in nowhere[:10]]
    problems += [f"session {s} is in {places[s]}" for s in twice[:10]]
    problems += [f"{n}: integrity {v}" for n, v in integrity.items() if v != "ok"]
    problems += [f"{n}: {t} {v}" for n, f in fts.items() for t, v in f.items() if v != "ok"]
    problems += [f"agent error: {w.error}" for w in errors_of(writes)[:5]]
    assert not problems, f"figures: {line}\n" + "\n".join(problems)
