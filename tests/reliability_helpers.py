"""Shared machinery of the reliability suites (tests/test_reliability_*.py, `-m slow` too).

The parent side starts real processes, damages real files and checks what is left; the child
side runs when this file is executed as a script (`python reliability_helpers.py ROLE ARGS…`),
so every child is plain, linted code that imports this checkout's library.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import select
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.children import child_env

HELPERS = Path(__file__).resolve()

# One unicode61 token per message (no separators), so a search finds exactly that message.
TOKEN_RE = re.compile(r"zqw(\d+)n(\d+)")
CRASH_TOKEN_RE = re.compile(r"zqk(\d+)r(\d+)n(\d+)")

SEED_ENV = "HERMES_RELIABILITY_SEED"


def child_command(role: str, *args: object) -> list[str]:
    """Return the argv that runs one child role of this file."""
    return [sys.executable, str(HELPERS), role, *(str(a) for a in args)]


def token(writer: int, index: int) -> str:
    """Return the unique content token of one writer's message."""
    return f"zqw{writer}n{index:06d}"


def crash_token(round_no: int, index: int, seed: int) -> str:
    """Return the unique content token of one crash-round message."""
    return f"zqk{seed}r{round_no}n{index:06d}"


def reliability_seed() -> int:
    """Return the seed of this run: $HERMES_RELIABILITY_SEED, or a fresh one (always printed)."""
    raw = os.environ.get(SEED_ENV)
    seed = int(raw) if raw else random.SystemRandom().randrange(1, 2**31)
    print(f"reliability seed: {seed} (rerun with {SEED_ENV}={seed})")
    return seed


def percentile(values: Sequence[float], q: float) -> float:
    """Return the q-th percentile (0–100) of values by nearest rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


# --- concurrency ------------------------------------------------------------------------------


@dataclass
class WriterReport:
    """What one writer process did."""

    writer: int
    mode: str
    written: int
    failures: list[str]
    latencies: list[float]
    returncode: int
    stderr: str


@dataclass
class ReaderReport:
    """What one reader process saw."""

    reader: int
    iterations: dict[str, int]
    errors: list[str]
    regressions: int
    returncode: int
    stderr: str


@dataclass
class ConcurrencyOutcome:
    """Everything a concurrency run produced, for the assertions and the report."""

    db_path: Path
    writers: list[WriterReport]
    readers: list[ReaderReport]
    expected: dict[int, int]
    wall_s: float

    def latencies(self, mode: str) -> list[float]:
        """Return every per-call append latency of the writers in a mode (single or batch)."""
        return [lat for w in self.writers if w.mode == mode for lat in w.latencies]

    def summary(self) -> str:
        """Return the counts and p50/p99 append latencies as one line for the test output."""
        parts = [f"{sum(self.expected.values())} messages by {len(self.writers)} writers"]
        for mode in ("single", "batch"):
            lats = self.latencies(mode)
            parts.append(
                f"{mode}: {len(lats)} calls p50 {percentile(lats, 50) * 1000:.1f} ms"
                f" p99 {percentile(lats, 99) * 1000:.1f} ms"
            )
        reads: Counter[str] = Counter()
        for r in self.readers:
            reads.update(r.iterations)
        parts.append(f"reads {dict(reads)}")
        parts.append(f"wall {self.wall_s:.1f} s")
        return "; ".join(parts)


def _ready(proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
    """Wait for a child's "ready" line (fail with its stderr if it dies first)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if line.strip() != "ready":
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"child did not get ready (got {line!r}): {err}")


def prepare_store(db_path: Path) -> None:
    """Create the store (schema and all) before children race to open it."""
    from hermes_state.store.connection import open_store

    open_store(db_path).close()


def _spawn(cmd: list[str]) -> subprocess.Popen[str]:
    """Start one child of a concurrency run with pipes and the test environment."""
    return subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )


def run_concurrency(
    db_path: Path,
    work_dir: Path,
    *,
    writers: int = 8,
    per_writer: int = 100,
    batch: int = 20,
    readers: int = 4,
    timeout: float = 600.0,
) -> ConcurrencyOutcome:
    """Run writers (half single appends, half batches) and readers at once on one store."""
    prepare_store(db_path)
    work_dir.mkdir(parents=True, exist_ok=True)
    wprocs: list[tuple[int, str, Path, subprocess.Popen[str]]] = []
    rprocs: list[tuple[int, Path, subprocess.Popen[str]]] = []
    for w in range(writers):
        mode = "single" if w % 2 == 0 else "batch"
        out = work_dir / f"writer-{w}.json"
        proc = _spawn(child_command("writer", db_path, w, per_writer, mode, batch, out))
        wprocs.append((w, mode, out, proc))
    for r in range(readers):
        out = work_dir / f"reader-{r}.json"
        proc = _spawn(child_command("reader", db_path, r, writers, per_writer, timeout, out))
        rprocs.append((r, out, proc))
    try:
        for *_, proc in wprocs:
            _ready(proc)
        for *_, proc in rprocs:
            _ready(proc)
        started = time.monotonic()
        # Everyone starts at once; readers loop until their stdin closes after the writers end.
        for *_, proc in [*wprocs, *rprocs]:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        writer_reports = []
        for w, mode, out, proc in wprocs:
            _, err = proc.communicate(timeout=timeout)
            writer_reports.append(_writer_report(w, mode, out, proc.returncode, err))
        wall = time.monotonic() - started
        reader_reports = []
        for r, out, proc in rprocs:
            _, err = proc.communicate(timeout=60)  # closes stdin: the reader's stop signal
            reader_reports.append(_reader_report(r, out, proc.returncode, err))
    finally:
        for *_, proc in [*wprocs, *rprocs]:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    return ConcurrencyOutcome(
        db_path=db_path,
        writers=writer_reports,
        readers=reader_reports,
        expected=dict.fromkeys(range(writers), per_writer),
        wall_s=wall,
    )


def _writer_report(w: int, mode: str, out: Path, code: int, err: str) -> WriterReport:
    data = json.loads(out.read_text()) if out.exists() else {}
    return WriterReport(
        writer=w,
        mode=mode,
        written=data.get("written", 0),
        failures=data.get("failures", ["no report written"]),
        latencies=data.get("latencies", []),
        returncode=code,
        stderr=err,
    )


def _reader_report(r: int, out: Path, code: int, err: str) -> ReaderReport:
    data = json.loads(out.read_text()) if out.exists() else {}
    return ReaderReport(
        reader=r,
        iterations=data.get("iterations", {}),
        errors=data.get("errors", ["no report written"]),
        regressions=data.get("regressions", 0),
        returncode=code,
        stderr=err,
    )


# --- verifying a store --------------------------------------------------------------------------


@dataclass
class StoreVerdict:
    """What a finished store holds compared with what was acknowledged."""

    missing: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    integrity: list[str] = field(default_factory=list)
    fts_problems: list[str] = field(default_factory=list)
    search_misses: list[str] = field(default_factory=list)
    messages: int = 0

    @property
    def ok(self) -> bool:
        """Whether nothing is missing, duplicated or damaged."""
        return not (
            self.missing
            or self.duplicated
            or self.unexpected
            or self.integrity != ["ok"]
            or self.fts_problems
            or self.search_misses
        )


def verify_store(
    db_path: Path,
    expected: Iterable[str],
    *,
    token_re: re.Pattern[str] = TOKEN_RE,
    allowed_extra: Iterable[str] = (),
    search_sample: int = 20,
    seed: int = 0,
) -> StoreVerdict:
    """Open the store with the library and compare its tokens with the expected ones."""
    from hermes_state.search.search import search_messages
    from hermes_state.store import fts
    from hermes_state.store.connection import open_store

    expected = list(expected)
    verdict = StoreVerdict()
    store = open_store(db_path)
    try:
        conn = store.conn
        verdict.integrity = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
        verdict.fts_problems = fts.integrity_check(conn)
        seen: Counter[str] = Counter()
        for (content,) in conn.execute("SELECT content FROM messages"):
            verdict.messages += 1
            seen.update(m.group(0) for m in token_re.finditer(str(content or "")))
        wanted = set(expected)
        extra_ok = set(allowed_extra)
        verdict.missing = sorted(t for t in wanted if seen[t] == 0)
        verdict.duplicated = sorted(t for t, n in seen.items() if n > 1)
        verdict.unexpected = sorted(t for t in seen if t not in wanted and t not in extra_ok)
        rng = random.Random(seed)
        for tok in rng.sample(sorted(wanted), min(search_sample, len(wanted))):
            hits = search_messages(store, tok, limit=5)
            if len(hits) != 1:
                verdict.search_misses.append(f"{tok}: {len(hits)} hits")
    finally:
        store.close()
    return verdict


# --- crash rounds -------------------------------------------------------------------------------


@dataclass
class CrashRound:
    """One writer killed with SIGKILL: what it acknowledged and when it died."""

    round_no: int
    seed: int
    delay_s: float
    acked: list[str]
    torn: list[str]

    def possibly_committed(self, batch_max: int = 5) -> list[str]:
        """Return tokens that may be stored without an ack (killed between commit and ack)."""
        indexes = [
            int(m.group(3)) for t in self.acked + self.torn if (m := CRASH_TOKEN_RE.match(t))
        ]
        start = max(indexes) + 1 if indexes else 0
        tail = [crash_token(self.round_no, i, self.seed) for i in range(start, start + batch_max)]
        return self.torn + tail


def read_acks(path: Path) -> tuple[list[str], list[str]]:
    """Return (tokens on complete ack lines, tokens of a torn last line)."""
    if not path.exists():
        return [], []
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    torn = lines.pop()  # "" when the file ends with a newline
    acked = [t for line in lines for t in line.split()]
    return acked, torn.split()


def crash_round(db_path: Path, work_dir: Path, round_no: int, seed: int) -> CrashRound:
    """Start a writer, SIGKILL it after a seeded random delay; return what it acknowledged."""
    rng = random.Random(seed * 1000 + round_no)
    delay = rng.uniform(0.05, 1.0)
    ack = work_dir / f"acks-{round_no}.txt"
    proc = subprocess.Popen(
        child_command("crasher", db_path, round_no, ack, seed),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    try:
        # Measured from the spawn: short delays land during start-up or the store's open.
        time.sleep(delay)
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise AssertionError(f"crash writer exited by itself ({proc.returncode}): {err}")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, proc.returncode
    acked, torn = read_acks(ack)
    return CrashRound(round_no, seed, delay, acked, torn)


@dataclass
class CrashOutcome:
    """The rounds run, the store's state after the last one, and every failed check."""

    rounds: list[CrashRound]
    verdict: StoreVerdict
    failures: list[str]
    cli_exit_codes: list[int]

    def summary(self) -> str:
        """Return rounds, acknowledged writes and kill delays as one line for the test output."""
        acked = sum(len(r.acked) for r in self.rounds)
        delays = [r.delay_s for r in self.rounds]
        return (
            f"{len(self.rounds)} rounds, {acked} acknowledged appends checked, "
            f"{self.verdict.messages} messages stored, kill delays "
            f"{min(delays):.2f}-{max(delays):.2f} s, failures {len(self.failures)}"
        )


def crash_rounds(db_path: Path, work_dir: Path, rounds: int, seed: int) -> CrashOutcome:
    """Run crash rounds on one store, checking it with the library and the CLI after each."""
    work_dir.mkdir(parents=True, exist_ok=True)
    done: list[CrashRound] = []
    failures: list[str] = []
    codes: list[int] = []
    verdict = StoreVerdict()
    for n in range(rounds):
        done.append(crash_round(db_path, work_dir, n, seed))
        acked = [t for r in done for t in r.acked]
        maybe = [t for r in done for t in r.possibly_committed()]
        if not db_path.exists():
            # Killed before the store was created: fine, as long as nothing was acknowledged.
            if acked:
                failures.append(f"round {n}: no store, but {len(acked)} appends were acked")
        else:
            verdict = verify_store(
                db_path, acked, token_re=CRASH_TOKEN_RE, allowed_extra=maybe, seed=seed + n
            )
            if not verdict.ok:
                failures.append(f"round {n} (killed after {done[-1].delay_s:.3f} s): {verdict}")
        cli = run_cli(["sessions", "list"], home=db_path.parent)
        codes.append(cli.returncode)
        # Killed before the writer made its home, the CLI's answer is its one-line error that
        # the home does not exist (exit 1); with a home, a listing, maybe empty (exit 0).
        expected = 0 if db_path.parent.exists() else 1
        clean = "Traceback" not in cli.stderr and (expected == 0 or "does not exist" in cli.stderr)
        if cli.returncode != expected or not clean:
            failures.append(f"round {n}: sessions list exited {cli.returncode}: {cli.stderr}")
        if failures:
            break  # later rounds would only pile up on the first problem
    return CrashOutcome(done, verdict, failures, codes)


# --- the command line ---------------------------------------------------------------------------


def run_cli(
    args: Sequence[str],
    *,
    home: Path,
    input_text: str | None = None,
    timeout: float = 60.0,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m hermes_cli ARGS` in a child with HERMES_HOME=home."""
    return subprocess.run(
        [sys.executable, "-m", "hermes_cli", *args],
        env=child_env(home, extra_env),
        capture_output=True,
        text=True,
        input=input_text,
        timeout=timeout,
    )


def error_lines(stderr: str) -> list[str]:
    """Return the `Error: …` lines of a command's stderr."""
    return [line for line in stderr.splitlines() if line.startswith("Error: ")]


# --- files --------------------------------------------------------------------------------------


def file_digest(path: Path) -> str:
    """Return the sha256 of a file that no connection of this process has open."""
    from hermes_state.store.connection import is_open_in_process

    assert not is_open_in_process(path), f"{path} is open in this process"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_state(path: Path) -> tuple[int, int, str] | None:
    """Return (size, mtime_ns, sha256) of a file, or None when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns, file_digest(path)


def tree_listing(root: Path) -> dict[str, tuple[str, int]]:
    """Return every path under root (root included) with its kind and size."""
    out: dict[str, tuple[str, int]] = {".": ("dir", 0)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            kind = "dir" if p.is_dir() and not p.is_symlink() else "file"
            out[str(p.relative_to(root))] = (kind, 0 if kind == "dir" else st.st_size)
    return out


# --- fuzzing ------------------------------------------------------------------------------------

FTS_SYNTAX = [
    '"',
    "'",
    "*",
    "^",
    ":",
    "(",
    ")",
    "-",
    "+",
    "{",
    "}",
    "[",
    "]",
    "\\",
    "\0",
    "%",
    "_",
    " AND ",
    " OR ",
    " NOT ",
    "NEAR(",
    "NEAR/2",
    "content:",
    "tool_name:",
    "messages_fts",
    "\ud800",
    "\udfff",
    "\udcff",
    "部署",
    "デプロイ",
    "é",
    "\u200b",
    "\n",
    "\t",
    "deploy",
    "dock",
    "x" * 300,
]


def queries() -> Any:
    """Return the hypothesis strategy of hostile search text (lone surrogates included)."""
    from hypothesis import strategies as st

    any_char = st.characters(codec=None, exclude_categories=())
    return st.lists(
        st.one_of(st.text(any_char, max_size=6), st.sampled_from(FTS_SYNTAX)), max_size=8
    ).map("".join)


def build_search_store(db: Path) -> Path:
    """Create a store with words, punctuation, CJK and tool calls for the search fuzzers."""
    from support.stores import populate_store

    from hermes_state.records import messages, sessions
    from hermes_state.store.connection import open_store

    populate_store(db, sessions_n=3, messages_per_session=30)
    with open_store(db) as store:
        sessions.create_session(store, "odd", "cli")
        for text in ['say "hi" (now)', "部署 デプロイ 服务器", "a-b_c%d*e", "NEAR AND OR NOT"]:
            messages.append_message(store, "odd", "user", text)
        messages.append_message(
            store,
            "odd",
            "assistant",
            None,
            tool_calls=[{"id": "c1", "function": {"name": "run", "arguments": '{"q": "x"}'}}],
        )
    return db


@dataclass
class FuzzOutcome:
    """How a fuzzing child ended, and the input it was working on when it did."""

    returncode: int
    stderr: str
    last_input: str

    def describe(self) -> str:
        """Say how the child died and on what input, for the assertion message."""
        how = f"killed by signal {-self.returncode}" if self.returncode < 0 else "failed"
        return f"fuzzer {how} on input {self.last_input}: {self.stderr[-3000:]}"


def fuzz_search(
    mode: str, target: Path, work_dir: Path, *, examples: int, seed: int | None = None
) -> FuzzOutcome:
    """Fuzz search in a child (a crash inside SQLite must not take pytest down with it).

    mode "library" searches the store at target; "cli" runs `sessions search` through
    CliRunner with HERMES_HOME=target. seed None derandomizes (the same inputs every run).
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    last = work_dir / f"fuzz-{mode}-last.txt"
    proc = subprocess.run(
        child_command(
            "fuzz", mode, target, examples, "derandomize" if seed is None else seed, last
        ),
        env=child_env(target if mode == "cli" else None),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    text = last.read_text(encoding="utf-8", errors="replace") if last.exists() else ""
    return FuzzOutcome(proc.returncode, proc.stderr, text.strip())


# --- child processes ----------------------------------------------------------------------------


def _wait_for_go() -> None:
    print("ready", flush=True)
    line = sys.stdin.readline()
    if line.strip() != "go":
        raise SystemExit(f"expected go, got {line!r}")


def writer_main(args: list[str]) -> int:
    """Child: append a known set of messages (single calls or batches), timing every call."""
    from hermes_state.records import messages, sessions
    from hermes_state.store.connection import open_store

    db, w, count, mode, batch, out = (
        args[0],
        int(args[1]),
        int(args[2]),
        args[3],
        int(args[4]),
        args[5],
    )
    store = open_store(Path(db))
    sid = f"writer-{w}"
    sessions.create_session(store, sid, "reliability", model="test/model")
    _wait_for_go()
    latencies: list[float] = []
    failures: list[str] = []
    written = 0
    step = 1 if mode == "single" else batch
    for start in range(0, count, step):
        rows = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {token(w, i)} ok"}
            for i in range(start, min(count, start + step))
        ]
        t0 = time.perf_counter()
        try:
            if mode == "single":
                messages.append_message(store, sid, rows[0]["role"], rows[0]["content"])
            else:
                messages.append_messages(store, sid, rows)
            written += len(rows)
        except Exception as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
        latencies.append(time.perf_counter() - t0)
    store.close()
    Path(out).write_text(
        json.dumps({"written": written, "failures": failures, "latencies": latencies})
    )
    return 0 if not failures else 1


def _stdin_closed() -> bool:
    ready, _, _ = select.select([sys.stdin], [], [], 0)
    return bool(ready) and sys.stdin.readline() == ""


def reader_main(args: list[str]) -> int:
    """Child: list, search and export in a loop until stdin closes; record every error."""
    from hermes_state.records import session_list
    from hermes_state.search.search import search_messages
    from hermes_state.store.connection import open_store
    from hermes_state.transfer import export

    db, r, writers, per_writer, limit_s, out = (
        Path(args[0]),
        int(args[1]),
        int(args[2]),
        int(args[3]),
        float(args[4]),
        args[5],
    )
    rng = random.Random(r)
    _wait_for_go()
    iterations: Counter[str] = Counter()
    errors: list[str] = []
    regressions = 0
    last_seen = 0
    deadline = time.monotonic() + limit_s
    n = 0
    while time.monotonic() < deadline:
        op = ("list", "search", "export")[n % 3]
        n += 1
        try:
            # A fresh read-only open per operation, like one CLI command each.
            with open_store(db, read_only=True) as store:
                if op == "list":
                    session_list.list_sessions(store, limit=20)
                elif op == "search":
                    search_messages(store, token(rng.randrange(writers), rng.randrange(per_writer)))
                    search_messages(store, "message", limit=20)
                else:
                    seen = sum(sum(1 for _ in rec["messages"]) for rec in export.export_all(store))
                    if seen < last_seen:
                        regressions += 1  # a later snapshot must never hold fewer rows
                    last_seen = max(last_seen, seen)
            iterations[op] += 1
        except Exception as exc:
            errors.append(f"{op}: {type(exc).__name__}: {exc} | {traceback.format_exc(limit=3)}")
        if n >= 3 and _stdin_closed():  # at least one list, search and export each
            break
    Path(out).write_text(
        json.dumps({"iterations": iterations, "errors": errors, "regressions": regressions})
    )
    return 0


def crasher_main(args: list[str]) -> int:
    """Child: append forever, writing each acknowledged token to a file (fsynced) after commit."""
    from hermes_state.records import messages, sessions
    from hermes_state.store.connection import open_store

    db, round_no, ack, seed = Path(args[0]), int(args[1]), args[2], int(args[3])
    rng = random.Random(seed + round_no)
    fd = os.open(ack, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    store = open_store(db)
    sid = f"crash-{seed}-{round_no}"
    sessions.create_session(store, sid, "reliability")
    i = 0
    deadline = time.monotonic() + 120  # a safety net: the parent kills us long before
    while time.monotonic() < deadline:
        n = 1 if rng.random() < 0.5 else rng.randint(2, 5)
        toks = [crash_token(round_no, j, seed) for j in range(i, i + n)]
        rows = [
            {"role": "user", "content": f"crash {t} " + "x" * rng.randint(0, 400)} for t in toks
        ]
        if n == 1:
            messages.append_message(store, sid, "user", rows[0]["content"])
        else:
            messages.append_messages(store, sid, rows)
        # Acknowledged only once committed: the parent requires every line here to be stored.
        os.write(fd, (" ".join(toks) + "\n").encode())
        os.fsync(fd)
        i += n
    return 0


def patient_writer_main(args: list[str]) -> int:
    """Child: make one write with the given patience once told to; print what happened as JSON."""
    from hermes_state.records import messages
    from hermes_state.store.connection import open_store

    db, sid, patience = Path(args[0]), args[1], float(args[2])
    store = open_store(db)
    _wait_for_go()
    started = time.time()
    try:
        store.write(
            lambda conn: messages.insert_messages(conn, sid, [{"role": "user", "content": "late"}]),
            patience=patience,
        )
        outcome: dict[str, Any] = {"ok": True}
    except Exception as exc:
        outcome = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    outcome.update(started=started, finished=time.time())
    store.close()
    print(json.dumps(outcome), flush=True)
    return 0


def fuzz_main(args: list[str]) -> int:
    """Child: run a hypothesis search fuzzer, recording each input before it is tried."""
    from hypothesis import HealthCheck, given, seed as fixed_seed, settings, strategies as st

    mode, target, examples, seed_arg, last = args[0], Path(args[1]), int(args[2]), args[3], args[4]
    fd = os.open(last, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)

    def remember(value: object) -> None:
        data = ascii(value).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)

    config = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=seed_arg == "derandomize",
        suppress_health_check=list(HealthCheck),
    )
    if mode == "library":
        from hermes_state.search.search import SORTS, search_messages
        from hermes_state.store.connection import open_store

        store = open_store(target, read_only=True)

        @config
        @given(
            query=queries(),
            sort=st.sampled_from(sorted(SORTS)),
            inactive=st.booleans(),
            limit=st.integers(0, 30),
            roles=st.sampled_from([None, ["user"], ["assistant", "tool"]]),
            source=st.sampled_from([None, "cli", ["discord", "telegram"]]),
        )
        def check(
            query: str, sort: str, inactive: bool, limit: int, roles: Any, source: Any
        ) -> None:
            remember((query, sort, inactive, limit, roles, source))
            hits = search_messages(
                store,
                query,
                sort=sort,
                include_inactive=inactive,
                limit=limit,
                role_filter=roles,
                source_filter=source,
            )
            assert len(hits) <= limit

    elif mode == "cli":
        from typer.testing import CliRunner

        from hermes_cli.main import build_app
        from hermes_state.search.query import query_problem

        app, runner = build_app(), CliRunner()

        @config
        @given(query=queries(), as_json=st.booleans(), separated=st.booleans())
        def check(query: str, as_json: bool, separated: bool) -> None:
            argv = ["sessions", "search", *(["--json"] if as_json else [])]
            argv += ["--", query] if separated else [query]
            remember(argv)
            result = runner.invoke(app, argv)
            assert result.exception is None or isinstance(result.exception, SystemExit), repr(
                result.exception
            )
            assert "Traceback" not in result.output
            if not separated and query in ("--help", "-h"):  # read as the help flag it is
                assert result.exit_code == 0 and "Usage:" in result.output, result.output
                return
            if result.exit_code == 2 and not separated:  # text starting with '-' read as a flag
                assert len(error_lines(result.stderr)) == 1, result.stderr
                return
            refused = query_problem(query) is not None or not query.strip()  # empty: usage
            if result.exit_code == 2 and refused:  # refused, not dropped
                assert len(error_lines(result.stderr)) == 1 and result.stdout == "", result.stderr
                return
            assert result.exit_code == 0, result.output
            if as_json:
                assert json.loads(result.stdout)["query"] == query

    else:
        raise SystemExit(f"unknown fuzz mode {mode!r}")
    if seed_arg != "derandomize":
        check = fixed_seed(int(seed_arg))(check)
    check()
    return 0


ROLES = {
    "writer": writer_main,
    "reader": reader_main,
    "crasher": crasher_main,
    "patient-writer": patient_writer_main,
    "fuzz": fuzz_main,
}

if __name__ == "__main__":
    sys.exit(ROLES[sys.argv[1]](sys.argv[2:]))
