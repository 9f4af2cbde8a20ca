"""A live agent beside our commands: real releases write to a store continuously (as a production
gateway does) while the test runs our CLI; afterwards nothing the agent was told was stored may be
missing, duplicated or changed, and the store must be whole.

Each writer is ``probe.py write`` under the release's own interpreter. It logs one JSON line per
write call to an ack file of its own, an append's line only after ``append_message`` returned, so
every ack is a row the agent was promised. The store itself is only ever read here through sqlite3
connections (never ``open()``: that would drop the writers' POSIX locks).

Use::

    baseline = take_baseline(home)
    with live_agents(release, home, writers=2, rate=50) as agents:
        t0 = time.time()
        done = run_hermes(home, "sessions", "export", "-o", str(out))
        window = write_latency(agents.writes(), t0, time.time())
    report = check_after(home, agents.writes(), baseline)
    assert not report.problems(), report
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import sqlite3
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.children import child_env, hermes_argv

from interop.releases import PROBE, Release, python_for

READY_TIMEOUT_S = 60.0  # a writer's interpreter start and first SessionDB open
STOP_TIMEOUT_S = 30.0  # from the stop file to the writer's exit (its in-flight call may wait)
KILL_TIMEOUT_S = 10.0
TRACEBACK = "Traceback (most recent call last)"


# --- what a writer logged -------------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """One write call of a live agent: its op, session, message id and hash, latency, end time."""

    writer: str
    op: str
    t: float
    at: float
    s: str | None = None
    id: int | None = None
    h: str | None = None
    error: str | None = None

    @property
    def began(self) -> float:
        """Return when the call started (wall clock)."""
        return self.at - self.t

    @property
    def is_ack(self) -> bool:
        """Return whether this is an acknowledged append (a row the agent was told is stored)."""
        return self.op == "append" and self.error is None and self.id is not None


def read_writes(path: Path, writer: str) -> tuple[list[Write], int]:
    """Return the writes of one ack file and how many lines were unreadable (a torn last line)."""
    if not path.exists():
        return [], 0
    out, torn = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            torn += 1
            continue
        out.append(
            Write(
                writer=writer,
                op=d["op"],
                t=float(d["t"]),
                at=float(d["at"]),
                s=d.get("s"),
                id=d.get("id"),
                h=d.get("h"),
                error=d.get("error"),
            )
        )
    return out, torn


def acks_of(writes: Iterable[Write], before: float | None = None) -> list[Write]:
    """Return the acknowledged appends, optionally only those that returned before a time."""
    return [w for w in writes if w.is_ack and (before is None or w.at < before)]


def errors_of(writes: Iterable[Write]) -> list[Write]:
    """Return the write calls that raised in the agent."""
    return [w for w in writes if w.error is not None]


# --- the writers ----------------------------------------------------------------------------------


def probe_env(home: Path) -> dict[str, str]:
    """Return the environment run_probe gives a release's interpreter for this home."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home.parent / "probe-home"),
        "HERMES_HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    Path(env["HOME"]).mkdir(exist_ok=True)
    return env


@dataclass
class _Writer:
    """One writer subprocess and its files."""

    name: str
    proc: subprocess.Popen[bytes]
    ack: Path
    out: Path
    err: Path
    killed: bool = False


@dataclass
class LiveAgents:
    """Running live-agent writers on one store; ``stop()`` ends them and collects summaries."""

    release: Release
    home: Path
    writers: int
    rate: float
    max_seconds: float
    workdir: Path
    started_at: float = 0.0
    stopped_at: float | None = None
    summaries: list[dict[str, Any]] = field(default_factory=list)
    _procs: list[_Writer] = field(default_factory=list)

    @property
    def stop_file(self) -> Path:
        """Return the file whose existence tells every writer to finish."""
        return self.workdir / "stop"

    def start(self) -> None:
        """Start the writer subprocesses and wait (bounded) until each has opened the store."""
        python = python_for(self.release)
        env = probe_env(self.home)
        self.started_at = time.time()
        try:
            self._spawn(python, env)
            self._wait_ready()
        except BaseException:
            self.stop()  # never leave a writer behind
            raise

    def _spawn(self, python: Path, env: dict[str, str]) -> None:
        """Start one writer subprocess per writer, its output into files of the harness."""
        for i in range(self.writers):
            name = f"w{i}"
            ack = self.workdir / f"{name}.ack"
            out, err = self.workdir / f"{name}.out", self.workdir / f"{name}.err"
            with out.open("wb") as fo, err.open("wb") as fe:  # the harness's files, not the store
                proc = subprocess.Popen(
                    [
                        str(python),
                        str(PROBE),
                        "write",
                        str(self.home / "state.db"),
                        str(ack),
                        str(self.stop_file),
                        str(self.max_seconds),
                        str(self.rate),
                        name,
                    ],
                    stdout=fo,
                    stderr=fe,
                    env=env,
                    cwd=str(self.home.parent),
                )
            self._procs.append(_Writer(name, proc, ack, out, err))

    def _wait_ready(self) -> None:
        """Wait (bounded) until every writer has opened the store; raise if one died first."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            opened = {w.writer for w in self.writes() if w.op == "open" and w.error is None}
            if opened >= {p.name for p in self._procs}:
                return
            dead = [p for p in self._procs if p.proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"live writers did not start:\n{self.describe_failures()}")
            time.sleep(0.05)

    def writes(self, before: float | None = None) -> list[Write]:
        """Return every write logged so far (optionally only those that returned before a
        time), in order of completion."""
        out: list[Write] = []
        for p in self._procs:
            out.extend(read_writes(p.ack, p.name)[0])
        return sorted((w for w in out if before is None or w.at < before), key=lambda w: w.at)

    def torn_lines(self) -> int:
        """Return how many ack lines could not be read (only a killed writer leaves one)."""
        return sum(read_writes(p.ack, p.name)[1] for p in self._procs)

    def acks(self, before: float | None = None) -> list[Write]:
        """Return the acknowledged appends so far (optionally only those before a time)."""
        return acks_of(self.writes(), before)

    def running(self) -> list[str]:
        """Return the names of the writers still running."""
        return [p.name for p in self._procs if p.proc.poll() is None]

    def wait_for_acks(self, count: int, timeout: float = 30.0) -> int:
        """Wait (bounded) until the writers acked at least COUNT appends; return how many."""
        deadline = time.monotonic() + timeout
        while True:
            n = len(self.acks())
            if n >= count:
                return n
            if time.monotonic() > deadline or not self.running():
                raise RuntimeError(f"only {n} of {count} acks: {self.describe_failures()}")
            time.sleep(0.05)

    def stop(self) -> list[dict[str, Any]]:
        """Stop every writer (stop file, bounded wait, then kill); return their summaries."""
        if self.stopped_at is not None:
            return self.summaries
        self.stop_file.touch()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for p in self._procs:
            try:
                p.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.killed = True
                p.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.proc.wait(timeout=KILL_TIMEOUT_S)
        self.stopped_at = time.time()
        self.summaries = [self._summary(p) for p in self._procs]
        return self.summaries

    def _summary(self, p: _Writer) -> dict[str, Any]:
        """Return a writer's own JSON summary (or why there is none)."""
        lines = p.out.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        base = {"writer": p.name, "returncode": p.proc.returncode, "killed": p.killed}
        try:
            return {**base, **json.loads(lines[-1])}
        except (IndexError, json.JSONDecodeError):
            return {**base, "no_summary": True, "stderr": self._tail(p.err)}

    @staticmethod
    def _tail(path: Path, chars: int = 2000) -> str:
        """Return the end of a text file of the harness."""
        return path.read_text(encoding="utf-8", errors="replace")[-chars:] if path.exists() else ""

    def describe_failures(self) -> str:
        """Return each writer's exit status and stderr tail, for an assertion message."""
        return "\n".join(
            f"{p.name}: rc={p.proc.poll()} killed={p.killed}\n{self._tail(p.err)}"
            for p in self._procs
        )

    def problems(self) -> list[str]:
        """List what went wrong with the writers themselves (after stop())."""
        out = []
        for s in self.summaries:
            if s.get("killed"):
                out.append(f"writer {s['writer']} had to be killed")
            if s.get("no_summary") or s.get("returncode") != 0:
                out.append(f"writer {s['writer']} failed: rc={s.get('returncode')} {s}")
            elif s.get("stopped_by") != "stop_file":
                out.append(f"writer {s['writer']} stopped by {s.get('stopped_by')}, not the test")
        if self.torn_lines():
            out.append(f"{self.torn_lines()} torn ack line(s)")
        return out

    def stats(self) -> dict[str, Any]:
        """Return the writers' totals: messages, errors, worst and p99 latency, per-writer rate."""
        writes = self.writes()
        acks = acks_of(writes)
        end = self.stopped_at or time.time()
        span = max(end - self.started_at, 1e-9)
        lat = sorted(w.t for w in writes if w.op not in ("open", "close"))
        return {
            "writers": self.writers,
            "messages": len(acks),
            "messages_per_s": round(len(acks) / span, 1),
            "agent_errors": len(errors_of(writes)),
            "max_latency_s": round(lat[-1], 4) if lat else 0.0,
            "p99_latency_s": round(_p99(lat), 4),
        }


@contextlib.contextmanager
def live_agents(
    release: Release,
    home: Path,
    writers: int = 2,
    rate: float = 50,
    max_seconds: float = 180,
    workdir: Path | None = None,
) -> Iterator[LiveAgents]:
    """Run WRITERS live agents of RELEASE on home's store at about RATE messages/s each.

    Yields once every writer has opened the store; on exit stops them (stop file, wait, kill).
    Each writer also stops by itself after MAX_SECONDS, so nothing outlives a hung test.
    """
    where = workdir or Path(tempfile.mkdtemp(prefix="live-", dir=home.parent))
    where.mkdir(parents=True, exist_ok=True)
    agents = LiveAgents(release, home, writers, rate, max_seconds, where)
    agents.start()
    try:
        yield agents
    finally:
        agents.stop()


# --- our commands ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One run of our CLI: its arguments, exit code (None: timed out), duration and output."""

    args: tuple[str, ...]
    rc: int | None
    seconds: float
    started: float
    stdout: str
    stderr: str

    @property
    def ended(self) -> float:
        """Return when the run ended (wall clock)."""
        return self.started + self.seconds

    @property
    def traceback(self) -> bool:
        """Return whether the run printed a Python traceback."""
        return TRACEBACK in self.stdout or TRACEBACK in self.stderr

    def describe(self) -> str:
        """Return a one-paragraph account for an assertion message."""
        return (
            f"hermes {' '.join(self.args)} -> rc={self.rc} in {self.seconds:.2f}s\n"
            f"{self.stdout[-800:]}\n{self.stderr[-1500:]}"
        )


def run_hermes(home: Path, *args: str, timeout: float = 90.0) -> Run:
    """Run this checkout's `hermes ARGS` against home's store, bounded by a timeout."""
    env = child_env(home)
    env.pop("NO_COLOR", None)
    started, t0 = time.time(), time.perf_counter()
    try:
        done = subprocess.run(
            hermes_argv(*args), capture_output=True, text=True, env=env, timeout=timeout
        )
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:  # run() killed it: a hang is a failure, not a wait
        rc = None
        out = _text(exc.stdout)
        err = _text(exc.stderr) + f"\n[timed out after {timeout}s]"
    return Run(tuple(args), rc, time.perf_counter() - t0, started, out, err)


def _text(data: bytes | str | None) -> str:
    """Return captured output as text."""
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


# --- latency of the agent's writes ----------------------------------------------------------------


def _p99(ordered: list[float]) -> float:
    """Return the 99th percentile (nearest rank) of sorted values."""
    if not ordered:
        return 0.0
    return ordered[max(0, -(-len(ordered) * 99 // 100) - 1)]


@dataclass(frozen=True)
class Latency:
    """The agent's write latency over a window: calls, worst and p99 wait since the window
    opened, the worst whole call, and the longest time without an acknowledged append."""

    start: float
    end: float
    calls: int
    max_s: float
    p99_s: float
    max_call_s: float
    longest_gap_s: float
    worst: Write | None

    def as_dict(self) -> dict[str, Any]:
        """Return the figures, rounded, for printing."""
        return {
            "window_s": round(self.end - self.start, 3),
            "calls": self.calls,
            "max_s": round(self.max_s, 4),
            "p99_s": round(self.p99_s, 4),
            "max_call_s": round(self.max_call_s, 4),
            "longest_gap_s": round(self.longest_gap_s, 4),
        }


def waited_since(w: Write, start: float) -> float:
    """Return how long a call had been waiting since START when it returned."""
    return w.at - max(w.began, start)


def write_latency(writes: Iterable[Write], start: float, end: float) -> Latency:
    """Measure the agent's write calls (append, create, tokens, end) overlapping [start, end].

    ``max_s``/``p99_s``: what each call waited from the later of its start and START until it
    returned, even past END (a command's after-effects count, an earlier wait does not: a call
    that began before the window is charged only from START). ``max_call_s``: the longest whole
    call. ``longest_gap_s``: the longest time in the window in which no writer completed an
    acknowledged append (window edges included). Read the writes after the writers stopped (or
    well after END): a call blocked through the window is only logged once it returns.
    """
    inside = [w for w in writes if w.op not in ("open", "close") and w.began < end and w.at > start]
    waits = sorted(waited_since(w, start) for w in inside)
    worst = max(inside, key=lambda w: waited_since(w, start), default=None)
    points = [start, *sorted(w.at for w in inside if w.is_ack and start <= w.at <= end), end]
    gap = max(b - a for a, b in itertools.pairwise(points))
    return Latency(
        start,
        end,
        len(inside),
        waits[-1] if waits else 0.0,
        _p99(waits),
        max((w.t for w in inside), default=0.0),
        gap,
        worst,
    )


# --- the store before and after -------------------------------------------------------------------


def _ro(db: Path) -> sqlite3.Connection:
    """Open a read-only sqlite3 connection to a store (never open() on a store file)."""
    return sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True, timeout=10)


def columns(db: Path, table: str) -> list[str]:
    """Return a table's column names (read-only connection)."""
    conn = _ro(db)
    try:
        return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
    finally:
        conn.close()


def fts5_tables(conn: sqlite3.Connection) -> list[str]:
    """Return the FTS5 tables of a store (as probe.py finds them)."""
    return [
        name
        for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
        if sql and "USING FTS5" in sql.upper()
    ]


@dataclass(frozen=True)
class Baseline:
    """What must not change while the agents and our commands run: journal mode, schema
    version and the schema objects (type, name, table, sql) of sqlite_master."""

    journal_mode: str
    schema_version: Any
    master: frozenset[tuple[str, str, str, str | None]]


def _schema_version(conn: sqlite3.Connection) -> Any:
    """Return the schema_version table's rows (or PRAGMA user_version without that table)."""
    try:
        return tuple(tuple(r) for r in conn.execute("SELECT * FROM schema_version"))
    except sqlite3.Error:
        return ("user_version", conn.execute("PRAGMA user_version").fetchone()[0])


def take_baseline(home: Path) -> Baseline:
    """Record journal mode, schema version and sqlite_master of home's store (read-only)."""
    conn = _ro(home / "state.db")
    try:
        return Baseline(
            journal_mode=conn.execute("PRAGMA journal_mode").fetchone()[0],
            schema_version=_schema_version(conn),
            master=frozenset(
                conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
            ),
        )
    finally:
        conn.close()


@dataclass
class AckCheck:
    """How the acknowledged appends fared in a store."""

    acked: int = 0
    missing: list[Write] = field(default_factory=list)
    wrong: list[tuple[Write, Any]] = field(default_factory=list)
    duplicated: list[tuple[Write, int]] = field(default_factory=list)
    sessions_missing: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """List every acked row that is missing, changed or stored more than once, and every
        session the agent created that is gone."""
        out = [f"session {s} the agent created is gone" for s in self.sessions_missing[:20]]
        out += [f"acked row {w.id} of {w.s} is missing" for w in self.missing[:20]]
        out += [f"acked row {w.id} of {w.s} is now {got!r}" for w, got in self.wrong[:20]]
        out += [f"acked row {w.id} of {w.s} is stored {n} times" for w, n in self.duplicated[:20]]
        total = len(self.missing) + len(self.wrong) + len(self.duplicated)
        if total > 60:
            out.append(f"... {total} bad acked rows in all")
        return out


def check_acks(db: Path, writes: Iterable[Write]) -> AckCheck:
    """Check every acked (session, id, hash) is in the store exactly once with that content,
    and every session whose create_session returned among WRITES still exists."""
    writes = list(writes)
    acks = [w for w in writes if w.is_ack]
    created = {w.s for w in writes if w.op == "create" and w.error is None and w.s}
    report = AckCheck(acked=len(acks))
    sessions = sorted({w.s for w in acks if w.s} | created)
    present: set[str] = set()
    by_id: dict[int, tuple[str, str | None]] = {}
    copies: Counter[tuple[str, str | None]] = Counter()
    conn = _ro(db)
    try:
        for i in range(0, len(sessions), 500):
            chunk = sessions[i : i + 500]
            marks = ",".join("?" * len(chunk))
            present.update(
                r[0] for r in conn.execute(f"SELECT id FROM sessions WHERE id IN ({marks})", chunk)
            )
            rows = conn.execute(
                f"SELECT id, session_id, content FROM messages WHERE session_id IN ({marks})",
                chunk,
            )
            for msg_id, sid, content in rows:
                digest = (
                    hashlib.sha256(content.encode("utf-8")).hexdigest()
                    if isinstance(content, str)
                    else None
                )
                by_id[msg_id] = (sid, digest)
                copies[(sid, digest)] += 1
    finally:
        conn.close()
    report.sessions_missing = sorted(created - present)
    seen: Counter[int] = Counter(w.id for w in acks if w.id is not None)
    for w in acks:
        assert w.id is not None and w.s is not None
        got = by_id.get(w.id)
        if got is None:
            report.missing.append(w)
        elif got != (w.s, w.h):
            report.wrong.append((w, got))
        elif copies[(w.s, w.h)] != 1 or seen[w.id] != 1:
            report.duplicated.append((w, max(copies[(w.s, w.h)], seen[w.id])))
    return report


@dataclass
class AfterCheck:
    """The post-checks of a live run: acks, agent errors, integrity, schema versus baseline."""

    acks: AckCheck
    agent_errors: list[Write]
    integrity: list[str]
    fts: dict[str, str]
    journal_mode: str
    schema_version: Any
    master_added: list[tuple[Any, ...]]
    master_removed: list[tuple[Any, ...]]
    baseline: Baseline

    def problems(self) -> list[str]:
        """List everything that went wrong."""
        out = self.acks.problems()
        out += [f"agent error in {w.op} ({w.writer}): {w.error}" for w in self.agent_errors[:20]]
        if len(self.agent_errors) > 20:
            out.append(f"... {len(self.agent_errors)} agent errors in all")
        if self.integrity != ["ok"]:
            out.append(f"PRAGMA integrity_check: {self.integrity[:10]}")
        out += [f"FTS5 integrity-check of {t}: {v}" for t, v in self.fts.items() if v != "ok"]
        if self.journal_mode != self.baseline.journal_mode:
            out.append(f"journal mode {self.baseline.journal_mode} -> {self.journal_mode}")
        if self.schema_version != self.baseline.schema_version:
            out.append(f"schema_version {self.baseline.schema_version} -> {self.schema_version}")
        out += [f"sqlite_master gained {row[:3]}" for row in self.master_added]
        out += [f"sqlite_master lost {row[:3]}" for row in self.master_removed]
        return out

    def figures(self) -> dict[str, Any]:
        """Return the counts, for printing."""
        return {
            "acked": self.acks.acked,
            "sessions_lost": len(self.acks.sessions_missing),
            "lost": len(self.acks.missing),
            "changed": len(self.acks.wrong),
            "duplicated": len(self.acks.duplicated),
            "agent_errors": len(self.agent_errors),
            "integrity": self.integrity[:3],
            "fts": self.fts,
            "journal_mode": self.journal_mode,
            "schema_changes": len(self.master_added) + len(self.master_removed),
        }

    def __str__(self) -> str:
        """Return the problems, one a line (or 'ok')."""
        return "\n".join(self.problems()) or "ok"


def check_after(home: Path, writes: Iterable[Write], baseline: Baseline) -> AfterCheck:
    """Post-check home's store once every writer stopped: acked rows exactly once with their
    content, agent errors, PRAGMA integrity_check, FTS5 integrity-check of every FTS5 table,
    and journal mode, schema_version and sqlite_master unchanged versus the baseline."""
    writes = list(writes)
    db = home / "state.db"
    acks = check_acks(db, writes)
    conn = _ro(db)
    try:
        integrity = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
        version = _schema_version(conn)
        master = frozenset(
            conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
        )
    finally:
        conn.close()
    return AfterCheck(
        acks=acks,
        agent_errors=errors_of(writes),
        integrity=integrity,
        fts=fts5_integrity(db),
        journal_mode=journal,
        schema_version=version,
        master_added=sorted(master - baseline.master, key=repr),
        master_removed=sorted(baseline.master - master, key=repr),
        baseline=baseline,
    )


def fts5_integrity(db: Path) -> dict[str, str]:
    """Run FTS5 'integrity-check' on every FTS5 table, rolled back (no writer may be running:
    the check is an INSERT, so it needs a read-write connection)."""
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=rw", uri=True, timeout=10)
    conn.isolation_level = None
    try:
        out = {}
        for table in fts5_tables(conn):
            conn.execute("BEGIN")
            try:
                conn.execute(f'INSERT INTO "{table}"("{table}") VALUES (\'integrity-check\')')
                out[table] = "ok"
            except sqlite3.Error as exc:
                out[table] = f"{type(exc).__name__}: {exc}"
            finally:
                conn.execute("ROLLBACK")
        return out
    finally:
        conn.close()
