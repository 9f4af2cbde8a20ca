"""Our commands beside live Hermes Agent releases: two real agent writers append to the store (as a
production gateway does) while our CLI edits, exports and recovers it. Afterwards every message
the agent was told was stored must be there exactly once, the agent must have seen no error, and
the store must be whole. See live_agent.py for the instrument.

Figures are printed as one ``LIVE {...}`` JSON line per test (run with ``-s``) and recorded as
the test's ``live`` property (``--junitxml``). Environment:

- ``HERMES_LIVE_SECONDS`` (default 60): how long the edit loop of the first test runs.
- ``HERMES_LIVE_RELEASES`` (default r31): the releases the edit loop runs beside.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interop.harness import REPO_ROOT
from interop.live_agent import (
    AckCheck,
    Baseline,
    Run,
    check_acks,
    check_after,
    columns,
    live_agents,
    run_hermes,
    take_baseline,
    write_latency,
)
from interop.releases import BY_KEY, RELEASES, Release, run_probe

SAMPLE = REPO_ROOT / "examples" / "sample-sessions.jsonl"
LIVE_SECONDS = float(os.environ.get("HERMES_LIVE_SECONDS", "60"))
EDIT_RELEASES = os.environ.get("HERMES_LIVE_RELEASES", "r31").split(",")
WRITERS, RATE = 2, 50  # two agents at about 50 messages/s each
COMMAND_TIMEOUT_S = 45.0  # our edits wait up to 20 s for a lock by default, then exit 75
BUSY = 75
AGED_DAYS = 300  # the aged copies of the sample; the build's old sessions are 200 days old
PRUNE_OLDER_THAN = "100d"  # matches only those: the sample is days old, the agents' seconds
JOURNAL = {"r30": "delete", "r31": "delete"}  # SQLite 3.40.1: these releases avoid WAL
VICTIMS = ("s_victim_1", "s_victim_2", "s_victim_3")
# Build sessions whose titles the sample also uses ("Fix Docker build", "Deploy checklist").
CLASHING_TITLES = {"s_cli_docker": "Fix Docker build (built)", "s_chain_child": "Deploy (built)"}
# The targets (issue 25) are reported in the LIVE line; a test fails only past a ceiling well
# above them, which only a real regression reaches (before the read windows: 16 s exports, and
# agent writes held for seconds). Shared 2-core machines miss the targets by scheduling alone.
MAX_AGENT_WRITE_S = 0.5
EXPORT_SLOWDOWN = 3.0
AGENT_WRITE_CEILING_S = 2.0
EXPORT_SLOWDOWN_CEILING = 10.0
MIN_IDLE_EXPORT_S = 0.3
QUIET_S = 2.0
RECOVER_SESSIONS = 100  # of 100 messages: the live store recover copies (~10k messages)

pytestmark = pytest.mark.slow


def _releases(keys: list[str] | tuple[str, ...]) -> list[Any]:
    """Parametrize the release fixture with these release keys."""
    return [pytest.param(BY_KEY[k.strip()], id=k.strip()) for k in keys if k.strip()]


def _report(record_property: Callable[[str, object], None], figures: dict[str, Any]) -> str:
    """Print and record a test's figures (with the machine's load); return them as one line."""
    figures = {**figures, "loadavg": [round(x, 2) for x in os.getloadavg()]}
    line = json.dumps(figures, ensure_ascii=False, default=str)
    print(f"\nLIVE {line}", flush=True)
    record_property("live", line)
    return line


def _expect_journal(release: Release, baseline: Baseline) -> None:
    """The store is in the journal mode the scenario claims (DELETE for 0.21 and 0.22)."""
    want = JOURNAL.get(release.key)
    assert want is None or baseline.journal_mode == want, (
        f"{release.key} built a {baseline.journal_mode} store, not {want}: not the case tested"
    )


def _by_command(runs: list[Run]) -> dict[str, dict[str, Any]]:
    """Return per command: runs, exit codes, median and worst duration."""
    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(" ".join(r.args[:2]), []).append(r)
    return {
        name: {
            "runs": len(rs),
            "exits": dict(Counter(str(r.rc) for r in rs)),
            "median_s": round(statistics.median(r.seconds for r in rs), 3),
            "max_s": round(max(r.seconds for r in rs), 3),
        }
        for name, rs in sorted(groups.items())
    }


def _bad(acks: AckCheck) -> dict[str, list[Any]]:
    """Return the acked rows and created sessions a store lost, changed or doubled."""
    return {
        "lost": acks.missing,
        "changed": acks.wrong,
        "duplicated": acks.duplicated,
        "sessions_lost": acks.sessions_missing,
    }


def _run_problems(runs: list[Run]) -> list[str]:
    """List every run that exited 75, failed otherwise, timed out or printed a traceback."""
    return [
        r.describe()
        for r in runs
        if r.rc != 0 or r.traceback  # rc None: timed out
    ]


# --- the edit loop ------------------------------------------------------------------------------


def _aged_copy(src: Path, dst: Path) -> list[str]:
    """Write the sample as sessions AGED_DAYS older under new ids and titles; return the ids."""
    shift = AGED_DAYS * 86400.0

    def uid(value: Any) -> Any:
        return hashlib.sha256(f"aged:{value}".encode()).hexdigest()[:32] if value else value

    ids, lines = [], []
    for line in src.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        rec["id"] = f"aged_{rec['id']}"
        ids.append(rec["id"])
        for key in ("parent_session_id", "session_key"):
            if rec.get(key):
                rec[key] = f"aged_{rec[key]}"
        if rec.get("title"):
            rec["title"] = f"Aged {rec['title']}"
        for key in ("started_at", "ended_at", "last_activity_at"):
            if isinstance(rec.get(key), int | float):
                rec[key] -= shift
        for msg in rec.get("messages", []):
            if isinstance(msg.get("timestamp"), int | float):
                msg["timestamp"] -= shift
            for key in ("message_uid", "tool_call_uid"):
                if key in msg:
                    msg[key] = uid(msg[key])
            if isinstance(msg.get("tool_call_uids"), dict):
                msg["tool_call_uids"] = {k: uid(v) for k, v in msg["tool_call_uids"].items()}
        lines.append(json.dumps(rec, ensure_ascii=False))
    dst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return ids


def _sample_leaves() -> list[str]:
    """Return the sample's session ids that are nobody's parent (safe to delete alone)."""
    recs = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    parents = {r.get("parent_session_id") for r in recs}
    return [r["id"] for r in recs if r["id"] not in parents]


def _edit_round(
    home: Path, i: int, scratch: Path, aged: Path, deadline: float, *, pin: bool
) -> list[Run]:
    """Run one round of our edit commands (never on the agents' sessions); stop at DEADLINE.

    ``pin``: the layout has sessions.pinned (schema 22 has not: pin refuses it, by design).
    """
    leaves = _sample_leaves()
    target = VICTIMS[i] if i < len(VICTIMS) else leaves[i % len(leaves)]
    pins = [("sessions", "pin", "s_tg_tokyo"), ("sessions", "unpin", "s_tg_tokyo")] if pin else []
    steps: list[tuple[str, ...]] = [
        ("sessions", "import", str(SAMPLE), "--on-conflict", "replace"),
        ("sessions", "import", str(aged), "--on-conflict", "replace"),
        ("sessions", "rename", "s_cli_docker2", f"Live rename {i}"),
        *pins,
        ("sessions", "delete", target, "--yes"),
        ("sessions", "prune", "--older-than", PRUNE_OLDER_THAN, "--yes"),
        ("sessions", "export", "-o", str(scratch / f"export-{i}.jsonl")),
    ]
    runs = []
    for args in steps:
        if time.time() >= deadline:
            break
        runs.append(run_hermes(home, *args, timeout=COMMAND_TIMEOUT_S))
    return runs


@pytest.mark.parametrize("release", _releases(EDIT_RELEASES), indirect=True)
def test_edit_commands_beside_two_agent_writers_never_give_up_and_lose_nothing(
    release: Release,
    built: Path,
    scratch: Path,
    record_property: Callable[[str, object], None],
) -> None:
    aged = scratch / "aged.jsonl"
    aged_ids = _aged_copy(SAMPLE, aged)
    for sid, title in CLASHING_TITLES.items():  # titles are unique: let the sample's in
        done = run_hermes(built, "sessions", "rename", sid, title)
        assert done.rc == 0, done.describe()
    baseline = take_baseline(built)
    _expect_journal(release, baseline)
    pin = "pinned" in columns(built / "state.db", "sessions")
    runs: list[Run] = []
    rounds = 0
    with live_agents(
        release, built, writers=WRITERS, rate=RATE, max_seconds=LIVE_SECONDS + 90
    ) as agents:
        agents.wait_for_acks(20)
        t0 = time.time()
        deadline = t0 + LIVE_SECONDS
        while time.time() < deadline and len(agents.running()) == WRITERS:
            runs += _edit_round(built, rounds, scratch, aged, deadline, pin=pin)
            rounds += 1
        t1 = time.time()
        still_running = agents.running()
    window = write_latency(agents.writes(), t0, t1)
    after = check_after(built, agents.writes(), baseline)
    exports = [r for r in runs if r.args[1] == "export" and r.rc == 0]
    empty = [r.args[-1] for r in exports if Path(r.args[-1]).stat().st_size == 0]
    pruned = sum(1 for r in runs if r.args[1] == "prune" and "Pruned" in r.stdout)
    figures = {
        "test": "edit_loop",
        "release": release.key,
        "journal_mode": baseline.journal_mode,
        "seconds": round(t1 - t0, 1),
        "rounds": rounds,
        "pin_unpin": pin,
        "commands": len(runs),
        "exit_75": sum(1 for r in runs if r.rc == BUSY),
        "other_failures": sum(1 for r in runs if r.rc not in (0, BUSY)),
        "tracebacks": sum(1 for r in runs if r.traceback),
        "prunes_that_deleted": pruned,
        "by_command": _by_command(runs),
        "agents": agents.stats(),
        "agent_latency_during_loop": window.as_dict(),
        "after": after.figures(),
    }
    line = _report(record_property, figures)
    problems = _run_problems(runs)
    if len(still_running) != WRITERS:
        problems.append(f"only {still_running} of the writers lasted the loop")
    problems += agents.problems() + after.problems()
    problems += [f"export {p} is empty" for p in empty]
    assert aged_ids, "the aged copy of the sample is empty"
    assert not problems, f"{len(problems)} problem(s); figures: {line}\n" + "\n".join(problems)


# --- export under load --------------------------------------------------------------------------


def _grow(home: Path, scratch: Path, sessions: int = 300, messages: int = 100) -> Run:
    """Grow the store by importing SESSIONS ended sessions of MESSAGES messages (our import)."""
    words = ("deploy", "kubernetes", "grafana", "docker", "latency", "wombat", "会議", "tokyo")
    base = time.time() - 40 * 86400.0
    path = scratch / "grow.jsonl"
    with path.open("w", encoding="utf-8") as out:  # a file of the test, not a store file
        for s in range(sessions):
            t = base + s * 600.0
            msgs = [
                {
                    "role": "user" if m % 2 == 0 else "assistant",
                    "content": f"bulk {s}/{m} "
                    + " ".join(words[(s * 31 + m * 7 + k) % len(words)] for k in range(40)),
                    "timestamp": t + m,
                }
                for m in range(messages)
            ]
            rec = {
                "id": f"bulk_{s:05d}",
                "source": "cli",
                "model": "bulk/model",
                "started_at": t,
                "ended_at": t + messages + 1,
                "end_reason": "user_exit",
                "messages": msgs,
            }
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return run_hermes(home, "sessions", "import", str(path), timeout=120)


def _export(home: Path, out: Path) -> Run:
    """Run one `sessions export -o OUT`."""
    return run_hermes(home, "sessions", "export", "-o", str(out), timeout=COMMAND_TIMEOUT_S)


@pytest.mark.parametrize("release", _releases([r.key for r in RELEASES]), indirect=True)
def test_export_under_load_loses_nothing_and_reports_its_slowdown(
    release: Release,
    built: Path,
    scratch: Path,
    record_property: Callable[[str, object], None],
) -> None:
    grown = _grow(built, scratch)
    assert grown.rc == 0 and not grown.traceback, grown.describe()
    baseline = take_baseline(built)
    _expect_journal(release, baseline)
    idle = [_export(built, scratch / f"idle-{k}.jsonl") for k in range(3)]
    with live_agents(release, built, writers=WRITERS, rate=RATE, max_seconds=120) as agents:
        agents.wait_for_acks(20)
        q0 = time.time()
        time.sleep(QUIET_S)  # the agents alone: what they wait for each other, for comparison
        q1 = time.time()
        loaded = [_export(built, scratch / f"load-{k}.jsonl") for k in range(3)]
        time.sleep(0.5)  # the writers' calls overlapping the last export return and are logged
    writes = agents.writes()
    windows = [write_latency(writes, r.started, r.ended) for r in loaded]
    after = check_after(built, writes, baseline)
    idle_s = statistics.median(r.seconds for r in idle)
    load_s = statistics.median(r.seconds for r in loaded)
    worst = max(windows, key=lambda w: w.max_s)
    quiet = write_latency(writes, q0, q1)
    figures = {
        "test": "export_under_load",
        "release": release.key,
        "journal_mode": baseline.journal_mode,
        "store_bytes": (built / "state.db").stat().st_size,
        "idle_s": [round(r.seconds, 3) for r in idle],
        "load_s": [round(r.seconds, 3) for r in loaded],
        "idle_median_s": round(idle_s, 3),
        "load_median_s": round(load_s, 3),
        "ratio": round(load_s / idle_s, 2),
        "exits": [r.rc for r in idle + loaded],
        "agent_latency_without_command": quiet.as_dict(),
        "agent_latency_during_exports": [w.as_dict() for w in windows],
        "worst_agent_write": {
            "op": worst.worst.op,
            "call_s": round(worst.worst.t, 4),
            "waited_during_export_s": round(worst.max_s, 4),
        }
        if worst.worst
        else None,
        "agents": agents.stats(),
        "after": after.figures(),
        "targets_met": {
            "slowdown_at_most_3x": load_s <= EXPORT_SLOWDOWN * idle_s,
            "agent_write_at_most_0_5s": worst.max_s <= MAX_AGENT_WRITE_S,
        },
    }
    line = _report(record_property, figures)
    problems = _run_problems(idle + loaded) + agents.problems() + after.problems()
    if idle_s < MIN_IDLE_EXPORT_S:
        problems.append(f"idle export took {idle_s:.3f}s: the store is too small to measure")
    if load_s > EXPORT_SLOWDOWN_CEILING * idle_s:
        problems.append(
            f"export under load {load_s:.3f}s > {EXPORT_SLOWDOWN_CEILING}x idle {idle_s:.3f}s"
        )
    if worst.max_s > AGENT_WRITE_CEILING_S:
        problems.append(
            f"an agent write waited {worst.max_s:.3f}s during an export "
            f"(> {AGENT_WRITE_CEILING_S}s; the agents alone, without a command, waited up to "
            f"{quiet.max_s:.3f}s)"
        )
    assert not problems, f"{len(problems)} problem(s); figures: {line}\n" + "\n".join(problems)


# --- the change feed beside a live agent ----------------------------------------------------------

FEED_SECONDS = float(os.environ.get("HERMES_LIVE_FEED_SECONDS", "20"))
FEED_MARK = re.compile(r"Highest message id: (\d+) \(next run: --after-id (\d+)\)")


def _feed_batch(home: Path, follower: Path, after: int, out: Path) -> tuple[list[Run], int]:
    """Export the feed above AFTER to OUT and import it into the follower; return the runs
    and the feed's mark (the next AFTER)."""
    feed = run_hermes(
        home, "sessions", "export", "--after-id", str(after), "-o", str(out), timeout=60
    )
    m = FEED_MARK.search(feed.stderr)
    if feed.rc != 0 or m is None:
        return [feed], after
    taken = run_hermes(follower, "sessions", "import", str(out), timeout=60)
    return [feed, taken], int(m.group(1))


@pytest.mark.parametrize("release", _releases([r.key for r in RELEASES]), indirect=True)
def test_change_feed_beside_two_agent_writers_has_every_message_exactly_once(
    release: Release,
    built: Path,
    scratch: Path,
    record_property: Callable[[str, object], None],
) -> None:
    baseline = take_baseline(built)
    _expect_journal(release, baseline)
    follower = scratch / "follower"
    follower.mkdir()
    runs, batches = [], []
    first, after = _feed_batch(built, follower, 0, scratch / "feed-0.jsonl")
    runs += first
    batches.append(scratch / "feed-0.jsonl")
    with live_agents(release, built, writers=WRITERS, rate=RATE, max_seconds=120) as agents:
        agents.wait_for_acks(20)
        deadline = time.time() + FEED_SECONDS
        while time.time() < deadline:
            out = scratch / f"feed-{len(batches)}.jsonl"
            done, after = _feed_batch(built, follower, after, out)
            runs += done
            batches.append(out)
    # The writers have stopped: one more feed takes the rest.
    out = scratch / f"feed-{len(batches)}.jsonl"
    done, after = _feed_batch(built, follower, after, out)
    runs += done
    batches.append(out)
    writes = agents.writes()
    exported: Counter[int] = Counter()
    for path in batches:
        for line in path.read_text(encoding="utf-8").splitlines():
            exported.update(m["id"] for m in json.loads(line)["messages"])
    acked = [w.id for w in writes if w.is_ack]
    missed = sorted(i for i in acked if i is not None and exported[i] == 0)
    twice = sorted(i for i, n in exported.items() if n > 1)
    source = check_after(built, writes, baseline)
    copied = check_acks(follower / "state.db", writes)
    # A session the agent created and never wrote to has no message for a feed to carry.
    empty = len(copied.sessions_missing)
    copied.sessions_missing = []
    figures = {
        "test": "change_feed",
        "release": release.key,
        "journal_mode": baseline.journal_mode,
        "feed_batches": len(batches),
        "exported_messages": sum(exported.values()),
        "acked": len(acked),
        "feed_missed": len(missed),
        "feed_twice": len(twice),
        "follower": _bad(copied) | {"created_sessions_without_messages": empty},
        "agents": agents.stats(),
        "after": source.figures(),
    }
    line = _report(record_property, figures)
    problems = _run_problems(runs) + agents.problems() + source.problems()
    if missed:
        problems.append(f"{len(missed)} acked message(s) in no feed batch: {missed[:20]}")
    if twice:
        problems.append(f"{len(twice)} message(s) in two feed batches: {twice[:20]}")
    problems += [f"follower: {p}" for p in copied.problems()]
    if len(batches) < 5:
        problems.append(f"only {len(batches)} feed batches ran beside the writers")
    assert not problems, f"{len(problems)} problem(s); figures: {line}\n" + "\n".join(problems)


# --- recover beside a live agent ----------------------------------------------------------------


@pytest.mark.parametrize("release", _releases([r.key for r in RELEASES]), indirect=True)
def test_recover_beside_a_live_agent_succeeds_and_names_its_source(
    release: Release,
    built: Path,
    scratch: Path,
    record_property: Callable[[str, object], None],
) -> None:
    grown = _grow(built, scratch, sessions=RECOVER_SESSIONS)  # a copy that takes a while
    assert grown.rc == 0 and not grown.traceback, grown.describe()
    new_home = scratch / "recovered"
    target = new_home / "state.db"
    with live_agents(release, built, writers=WRITERS, rate=RATE, max_seconds=120) as agents:
        agents.wait_for_acks(50)
        t0 = time.time()
        run = run_hermes(built, "sessions", "recover", "--to", str(target), timeout=90)
        time.sleep(0.5)  # keep writing a little after, as a gateway would
    before = agents.writes(before=t0)  # every write that returned before recover started
    window = write_latency(agents.writes(), run.started, run.ended)
    text = run.stdout + run.stderr
    problems = [] if run.rc == 0 and not run.traceback else [run.describe()]
    # The files are read when they held still while being copied (no lock taken at all),
    # SQLite's snapshot when the agent wrote meanwhile: either way the output says which.
    sources = [x for x in text.splitlines() if x.startswith("Source: ")]
    if len(sources) != 1 or not any(w in sources[0] for w in ("snapshot", "files")):
        problems.append(f"recover does not say which source it read:\n{text[-1500:]}")
    kept: dict[str, Any] = {}
    if run.rc == 0 and target.exists():
        acks = check_acks(target, before)
        problems += acks.problems()
        kept = {"acked_before": acks.acked, **{k: len(v) for k, v in _bad(acks).items()}}
        integrity = run_probe(release, "integrity", new_home)
        if integrity["integrity_check"] != ["ok"]:
            problems.append(f"recovered store: integrity_check {integrity['integrity_check']}")
        problems += [
            f"recovered store: FTS5 {t}: {v}" for t, v in integrity["fts"].items() if v != "ok"
        ]
        try:
            run_probe(release, "open", new_home, timeout=60)
        except RuntimeError as exc:
            problems.append(f"{release.key} cannot open the recovered store: {exc}")
    figures = {
        "test": "recover_live",
        "release": release.key,
        "rc": run.rc,
        "seconds": round(run.seconds, 3),
        "store_bytes": (built / "state.db").stat().st_size,
        "source": sources[0] if sources else None,
        "source_lines": [x for x in text.splitlines() if "source" in x.lower()][:3],
        "output_tail": text.strip().splitlines()[-2:],
        "kept": kept,
        "agent_latency_during_recover": window.as_dict(),
        "agents": agents.stats(),
    }
    line = _report(record_property, figures)
    problems += agents.problems()
    assert not problems, f"{len(problems)} problem(s); figures: {line}\n" + "\n".join(problems)


# --- the instrument can fail ------------------------------------------------------------------


HOLD_S = 1.5


@pytest.mark.parametrize("release", _releases(["r31"]), indirect=True)
def test_the_instrument_sees_a_blocked_agent_and_a_lost_changed_or_doubled_row(
    release: Release,
    built: Path,
    record_property: Callable[[str, object], None],
) -> None:
    """A negative control: hold the store's lock, then damage acked rows and the schema; every
    check of the harness must report it (else a green run above would prove nothing)."""
    db = built / "state.db"
    baseline = take_baseline(built)
    with live_agents(release, built, writers=WRITERS, rate=RATE, max_seconds=60) as agents:
        agents.wait_for_acks(20)
        conn = sqlite3.connect(db, isolation_level=None, timeout=10)
        try:
            t0 = time.time()
            conn.execute("BEGIN EXCLUSIVE")  # what a command must never do for long
            time.sleep(HOLD_S)
            conn.execute("COMMIT")
            t1 = time.time()
        finally:
            conn.close()
        agents.wait_for_acks(len(agents.acks()) + 20)
    window = write_latency(agents.writes(), t0, t1)
    clean = check_after(built, agents.writes(), baseline)
    lost, changed, doubled = agents.acks()[:3]
    conn = sqlite3.connect(db)
    try:
        with conn:
            cols = ", ".join(
                f'"{r[1]}"' for r in conn.execute("PRAGMA table_info(messages)") if r[1] != "id"
            )
            conn.execute("DELETE FROM messages WHERE id = ?", (lost.id,))
            conn.execute("UPDATE messages SET content = content || '!' WHERE id = ?", (changed.id,))
            conn.execute(
                f"INSERT INTO messages ({cols}) SELECT {cols} FROM messages WHERE id = ?",
                (doubled.id,),
            )
            conn.execute("CREATE TABLE live_control (x)")
    finally:
        conn.close()
    damaged = check_after(built, agents.writes(), baseline)
    figures = {
        "test": "control",
        "release": release.key,
        "hold_s": round(t1 - t0, 3),
        "agent_latency_during_hold": window.as_dict(),
        "clean": clean.figures(),
        "damaged": damaged.figures(),
    }
    line = _report(record_property, figures)
    assert not clean.problems(), f"{clean}\n{line}"
    assert window.max_s >= 0.8 * HOLD_S and window.longest_gap_s >= 0.8 * HOLD_S, line
    bad = _bad(damaged.acks)
    assert [w.id for w in bad["lost"]] == [lost.id], line
    assert [w.id for w, _ in bad["changed"]] == [changed.id], line
    assert [w.id for w, _ in bad["duplicated"]] == [doubled.id], line
    assert [r[1] for r in damaged.master_added] == ["live_control"], line
