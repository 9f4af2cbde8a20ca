"""Time whole `hermes` processes on a big profile against `python -c` running the bare SQL.

Usage: python bench/big_profile.py --home DIR [--repeat 7] [--only list,stats] [--json FILE]
       [--baseline CHECKOUT]

DIR is a HERMES_HOME holding state.db, e.g. one made by
``python bench/generate.py --messages 1000000 --out DIR`` or ``--field-report --out DIR``.

Each operation runs as a whole process, cold start included (``python -m hermes_cli …`` with
stdout to a pipe, as a person's command piped to less would), against a ``python -c`` process
running the bare SQL for the same answer and printing it. Both run in the same round, one
process per measurement, alternating which goes first, ``--repeat`` rounds after one untimed
warm-up each (the warm-up writes the bytecode caches and brings the store into the page cache).
The table gives medians of wall time and of CPU time (user + system of the child: steadier
than wall time on a shared machine) and checks each row against the targets of issue 37:
under 300 ms whole process, at most 100 ms above the bare SQL. A search that stopped at its
work budget (its "partial result" note) has not given the bare program's whole answer: its row
says "partial answer", never pass. The load average is printed
with the table; read wall times taken under load with care. ``--baseline CHECKOUT`` also runs
each command from another checkout of the code (e.g. ``git worktree add /tmp/before 2f1f4c5``)
in the same rounds, for before/after figures measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
for _p in (str(REPO_ROOT), str(BENCH_DIR)):
    if _p not in sys.path:  # a script run from a checkout, package not installed
        sys.path.insert(0, _p)

import generate as gen  # noqa: E402
import run  # noqa: E402

from hermes_state.store.cjk import cjk_match_expr  # noqa: E402

TARGET_MS = 300.0  # whole process, cold start included
TARGET_ABOVE_MS = 100.0  # above the bare SQL in the same run
PARTIAL_NOTE = "Note: partial result"  # what a search says on stderr when its budget stopped it

VISIBLE = (
    "(m.active = 1 OR m.compacted = 1) AND (m.display_kind IS NULL OR m.display_kind <> 'hidden')"
)

# The bare programs. Each opens the store read-only, runs the SQL for the command's answer
# and prints it (the command's rows, its count lines); argv[1] is the store, argv[2] a value.
OPEN = "import sqlite3, sys\nc = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)\n"

BARE_LIST = (
    OPEN
    + """
rows = c.execute('''
SELECT s.id, s.title, s.source, s.model, s.started_at, s.input_tokens + s.output_tokens,
       (SELECT m.content FROM messages m WHERE m.session_id = s.id AND m.role = 'user'
           AND m.content IS NOT NULL AND (m.display_kind IS NULL OR m.display_kind <> 'hidden')
         ORDER BY m.id LIMIT 1),
       (SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id)
  FROM sessions s WHERE s.archived = 0 ORDER BY s.started_at DESC, s.id DESC LIMIT 20''').fetchall()
ids = [r[0] for r in rows]
counts = dict((r[0], r[1:]) for r in c.execute(
    'SELECT session_id, SUM(active = 1), COUNT(*) FROM messages WHERE session_id IN (%s) '
    'GROUP BY session_id' % ','.join('?' * len(ids)), ids))
for r in rows:
    p = ' '.join(str(r[6] or '').split())
    print(r[0], r[1] or p[:60], r[2], r[3], counts.get(r[0], (0, 0))[0], r[5], r[7], sep='  ')
total = c.execute('SELECT COUNT(*) FROM sessions WHERE archived = 0').fetchone()[0]
print('Showing 1-%d of %d sessions' % (len(rows), total))
"""
)


def bare_search(sql: str, count_sql: str | None) -> str:
    """Return a bare search program: the top 20 hits of sql (run.py's raw SQL for our answer,
    argv[2] the match expression, argv[3] the query) and, given count_sql, the match count."""
    params = 4 if "?2" in sql else 3  # the end of the argv slice: expression (and query)
    prog = (
        OPEN
        + f"for r in c.execute({sql!r}, sys.argv[2:{params}]):\n"
        + "    print(r[0], r[1], r[2], ' '.join(str(r[3] or '').split()))\n"
    )
    if count_sql is not None:
        prog += f"n, s = c.execute({count_sql!r}, sys.argv[2:3]).fetchone()\n"
        prog += "print(n, 'matches in', s, 'sessions')\n"
    return prog


def count_sql(table: str) -> str:
    """Return the SQL counting the visible matches of an FTS table and their sessions."""
    return (
        f"SELECT COUNT(*), COUNT(DISTINCT m.session_id) FROM {table} CROSS JOIN messages m "
        f"ON m.id = {table}.rowid WHERE {table} MATCH ? AND {VISIBLE}"
    )


BARE_WORD = bare_search(run.RAW_WORD_RECENT_SQL, count_sql("messages_fts"))
BARE_CJK = bare_search(run.RAW_CJK_SQL, count_sql("hermes_cjk"))
BARE_SUBSTRING = bare_search(run.RAW_TRIGRAM_SQL, None)

BARE_SHOW = (
    OPEN
    + """
s = c.execute('SELECT id, title, source, model, started_at FROM sessions WHERE id = ?',
              (sys.argv[2],)).fetchone()
print(*s)
out = sys.stdout.write
for r in c.execute(
    'SELECT id, role, timestamp, content, tool_calls, tool_name FROM messages '
    'WHERE session_id = ? AND (active = 1 OR compacted = 1) ORDER BY id', (sys.argv[2],)):
    out('%s %s %s\\n%s\\n%s\\n\\n' % (r[0], r[1], r[2], r[3] or '', r[4] or r[5] or ''))
"""
)

BARE_STATS = (
    OPEN
    + """import os
print(c.execute('SELECT COUNT(*) FROM sessions').fetchone()[0], 'sessions')
for r in c.execute(
    'SELECT s.source, COUNT(*), COALESCE(SUM(c.live), 0), COALESCE(SUM(c.stored), 0) '
    'FROM sessions s LEFT JOIN (SELECT session_id, SUM(active = 1) AS live, COUNT(*) AS stored '
    'FROM messages GROUP BY session_id) c ON c.session_id = s.id '
    'GROUP BY s.source ORDER BY 2 DESC'):
    print(*r)
for r in c.execute(
    'SELECT model, COUNT(DISTINCT session_id), SUM(input_tokens), SUM(output_tokens), '
    'SUM(estimated_cost_usd) FROM session_model_usage GROUP BY model ORDER BY 5 DESC'):
    print(*r)
for r in c.execute(
    'SELECT u.session_id, s.title, SUM(u.input_tokens + u.output_tokens) AS t, '
    'SUM(u.estimated_cost_usd) FROM session_model_usage u JOIN sessions s ON s.id = u.session_id '
    'GROUP BY u.session_id ORDER BY t DESC LIMIT 10'):
    print(*r)
for suffix in ('', '-wal', '-shm'):
    try:
        print(suffix or 'db', os.stat(sys.argv[1] + suffix).st_size)
    except FileNotFoundError:
        print(suffix, 0)
"""
)

BARE_USAGE = (
    OPEN
    + """
cols = ('COUNT(DISTINCT session_id), SUM(api_call_count), SUM(input_tokens), SUM(output_tokens), '
        'SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(reasoning_tokens), '
        'SUM(estimated_cost_usd)')
for r in c.execute("SELECT strftime('%Y-%m', COALESCE(last_seen, first_seen), 'unixepoch', "
                   "'localtime') AS g, " + cols + " FROM session_model_usage GROUP BY g"):
    print(*r)
print('Total', *c.execute('SELECT ' + cols + ' FROM session_model_usage').fetchone())
"""
)


@dataclass
class Op:
    """One operation: the hermes command line and the bare program giving the same answer."""

    name: str
    argv: list[str]
    bare: str
    bare_args: list[str] = field(default_factory=list)


@dataclass
class Row:
    """The measured result of one operation."""

    name: str
    command: str
    ours_ms: float
    bare_ms: float
    ours_cpu_ms: float
    bare_cpu_ms: float
    above_ms: float
    passed: bool
    partial: bool = False  # ours stopped at its work budget: not the same answer as bare
    before_ms: float | None = None
    before_cpu_ms: float | None = None
    samples: dict[str, list[float]] = field(default_factory=dict)


def biggest_session(db: Path) -> str:
    """Return the id of the session with the most messages."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "SELECT session_id FROM messages GROUP BY session_id ORDER BY COUNT(*) DESC LIMIT 1"
        ).fetchone()
    finally:
        conn.close()
    return str(row[0])


def operations(db: Path) -> list[Op]:
    """Return the operations of issue 37 item 4, in table order."""
    big = biggest_session(db)
    return [
        Op("sessions list", ["sessions", "list"], BARE_LIST),
        Op(
            "search, rare",
            ["sessions", "search", gen.SELECTIVE_TERM],
            BARE_WORD,
            [gen.SELECTIVE_TERM, gen.SELECTIVE_TERM],
        ),
        Op(
            "search, common",
            ["sessions", "search", gen.COMMON_TERM],
            BARE_WORD,
            [gen.COMMON_TERM] * 2,
        ),
        Op(
            "search, CJK",
            ["sessions", "search", gen.CJK_QUERY],
            BARE_CJK,
            [cjk_match_expr(gen.CJK_QUERY), gen.CJK_QUERY],
        ),
        Op(
            "search, substring",
            ["sessions", "search", gen.SUBSTRING_QUERY],
            BARE_SUBSTRING,
            [f'"{gen.SUBSTRING_QUERY}"', gen.SUBSTRING_QUERY],
        ),
        Op("show, biggest session", ["sessions", "show", big], BARE_SHOW, [big]),
        Op("sessions stats", ["sessions", "stats"], BARE_STATS),
        Op("usage --by month", ["usage", "--by", "month"], BARE_USAGE),
    ]


def child_env(home: Path, checkout: Path = REPO_ROOT) -> dict[str, str]:
    """Environment of the timed processes: a checkout importable, HERMES_HOME at the store."""
    env = {**os.environ, "PYTHONPATH": f"{checkout}{os.pathsep}{BENCH_DIR}"}
    env.update(HERMES_HOME=str(home), NO_COLOR="1", COLUMNS="120")
    # Timed as an installed tool starts: from cached bytecode (the warm-up run writes it).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run one process to completion; return its wall and CPU (user + system) seconds and
    what it wrote on stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # Run from the store's home: `python -m` puts the working directory first on sys.path, which
    # would put a checkout there ahead of PYTHONPATH's (the baseline's).
    proc = subprocess.run(argv, env=env, capture_output=True, cwd=env["HERMES_HOME"])
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:6])} exited {proc.returncode}: {proc.stderr[-400:]!r}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stderr.decode("utf-8", "replace")


def measure(op: Op, home: Path, repeat: int, python: str, baseline: Path | None = None) -> Row:
    """Time op's command and its bare program (and the baseline checkout's command) in turn,
    repeat rounds after a warm-up, the order rotating each round."""
    env = child_env(home)
    db = str(home / "state.db")
    runs = [
        ("ours", [python, "-m", "hermes_cli", *op.argv], env),
        ("bare", [python, "-c", op.bare, db, *op.bare_args], env),
    ]
    if baseline is not None:
        runs.append(("before", runs[0][1], child_env(home, baseline)))
    # A search that stopped at its work budget is not the bare program's whole answer.
    partial = PARTIAL_NOTE in run_once(runs[0][1], runs[0][2])[2]
    for _who, argv, run_env in runs[1:]:
        run_once(argv, run_env)
    walls: dict[str, list[float]] = {who: [] for who, _a, _e in runs}
    cpus: dict[str, list[float]] = {who: [] for who, _a, _e in runs}
    for i in range(repeat):
        for who, argv, run_env in runs[i % len(runs) :] + runs[: i % len(runs)]:
            wall, cpu, _err = run_once(argv, run_env)
            walls[who].append(wall * 1000)
            cpus[who].append(cpu * 1000)
    ours, bare = statistics.median(walls["ours"]), statistics.median(walls["bare"])
    above = ours - bare
    before = statistics.median(walls["before"]) if baseline is not None else None
    before_cpu = statistics.median(cpus["before"]) if baseline is not None else None
    return Row(
        name=op.name,
        command="hermes " + " ".join(op.argv),
        ours_ms=round(ours, 1),
        bare_ms=round(bare, 1),
        ours_cpu_ms=round(statistics.median(cpus["ours"]), 1),
        bare_cpu_ms=round(statistics.median(cpus["bare"]), 1),
        above_ms=round(above, 1),
        passed=ours < TARGET_MS and above <= TARGET_ABOVE_MS and not partial,
        partial=partial,
        before_ms=None if before is None else round(before, 1),
        before_cpu_ms=None if before_cpu is None else round(before_cpu, 1),
        samples={f"{k}_wall_ms": v for k, v in walls.items()}
        | {f"{k}_cpu_ms": v for k, v in cpus.items()},
    )


def table(rows: list[Row]) -> str:
    """Return the rows as a plain-text table (with the baseline's columns when measured)."""
    with_before = any(r.before_ms is not None for r in rows)
    head = (
        f"{'operation':<24} {'ours ms':>8} {'bare ms':>8} {'above':>7} "
        f"{'ours cpu':>9} {'bare cpu':>9} {'cpu above':>9}"
        + (f" {'before ms':>9} {'before cpu':>10}" if with_before else "")
        + f"  target (<{TARGET_MS:.0f} ms, <= +{TARGET_ABOVE_MS:.0f} ms)"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        cpu_above = r.ours_cpu_ms - r.bare_cpu_ms
        before = f" {r.before_ms or 0:>9.1f} {r.before_cpu_ms or 0:>10.1f}" if with_before else ""
        lines.append(
            f"{r.name:<24} {r.ours_ms:>8.1f} {r.bare_ms:>8.1f} {r.above_ms:>+7.1f} "
            f"{r.ours_cpu_ms:>9.1f} {r.bare_cpu_ms:>9.1f} {cpu_above:>+9.1f}{before}  "
            f"{'partial answer' if r.partial else 'pass' if r.passed else 'FAIL'}"
        )
    return "\n".join(lines)


def store_shape(db: Path) -> dict[str, Any]:
    """Return the store's size: sessions, messages, bytes."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        sessions = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        messages = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    finally:
        conn.close()
    return {"sessions": sessions, "messages": messages, "db_bytes": os.stat(db).st_size}


def main(argv: list[str] | None = None) -> int:
    """Measure every operation (or --only some) and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--home", type=Path, required=True, help="HERMES_HOME holding state.db")
    p.add_argument("--repeat", type=int, default=7, help="timed rounds per operation")
    p.add_argument("--only", help="comma-separated operation names (prefixes) to run")
    p.add_argument("--json", type=Path, help="also write the rows here")
    p.add_argument("--python", default=sys.executable, help="interpreter for both processes")
    p.add_argument(
        "--baseline", type=Path, help="another checkout whose commands run in the same rounds"
    )
    args = p.parse_args(argv)
    db = args.home / "state.db"
    if not db.exists():
        p.error(f"no state.db in {args.home}")
    ops = operations(db)
    if args.only:
        wanted = [w.strip() for w in args.only.split(",")]
        ops = [o for o in ops if any(o.name.startswith(w) for w in wanted)]
    shape = store_shape(db)
    load_before = os.getloadavg()
    print(
        f"store {db}: {shape['sessions']:,} sessions, {shape['messages']:,} messages, "
        f"{shape['db_bytes'] / 2**20:,.0f} MiB; load {load_before[0]:.2f}",
        file=sys.stderr,
    )
    rows: list[Row] = []
    for op in ops:
        row = measure(op, args.home, args.repeat, args.python, args.baseline)
        print(
            f"  {row.name}: ours {row.ours_ms:.0f} ms, bare {row.bare_ms:.0f} ms",
            file=sys.stderr,
        )
        rows.append(row)
    load_after = os.getloadavg()
    print(table(rows))
    print(
        f"medians of {args.repeat} rounds; load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after; {os.cpu_count()} CPUs"
    )
    if args.json:
        doc: dict[str, Any] = {
            "store": str(db),
            **shape,
            "repeat": args.repeat,
            "load_avg": [load_before[0], load_after[0]],
            "rows": [asdict(r) for r in rows],
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
