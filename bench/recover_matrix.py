"""Damage matrix: `hermes sessions recover` against SQLite's own `.recover`, case by case.

Each case takes a generated store (bench/generate.py), changes it the way a real failure would
(a flipped bit, a zeroed page, a broken header field, a WAL that does not belong …), and then
salvages it twice: with ``hermes_state.recover.recover.recover`` and with the ``.recover`` command
of a
sqlite3 shell that has the ``sqlite_dbpage`` table (3.52, built by ``.ci/build-sqlite-shell``).
For both it counts, against the rows the store held before the damage:

- exact: rows of ``sessions`` and ``messages`` found byte-for-byte, in their table or kept aside
  in ``lost_and_found`` (``.recover``'s, and ours);
- in place: exact rows that are in their own table;
- wrong: rows in ``sessions``/``messages`` that are not an original row (placeholder sessions
  made for orphaned messages are counted apart, as placeholders);
- accepted: whether ours called the result complete (exit 0 without ``--allow-partial``).

Usage: python bench/recover_matrix.py --messages 20000 [--cases a,b] [--shell PATH] [--markdown]
       [--base STORE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # a script run from a checkout, package not installed
    sys.path.insert(0, str(REPO_ROOT))

from bench import generate as gen  # noqa: E402
from hermes_state.recover import pages  # noqa: E402

TABLES = ("sessions", "messages")
SUFFIXES = ("", "-wal", "-shm", "-journal")
SHELL_ENV = "HERMES_TEST_SQLITE3"
SHELL_CACHE = Path.home() / ".cache" / "hermes-sqlite" / "sqlite3-3.52.0" / "sqlite3"


# --- finding the shell --------------------------------------------------------------------------


def find_shell() -> tuple[str | None, str]:
    """Return (a sqlite3 shell whose .recover works, None) or (None, why there is none)."""
    tried = []
    for cli in (os.environ.get(SHELL_ENV), str(SHELL_CACHE), shutil.which("sqlite3")):
        if not cli or not Path(cli).exists():
            continue
        probe = subprocess.run(
            [cli, ":memory:", ".recover"], capture_output=True, text=True, timeout=30
        )
        if probe.returncode == 0 and "error" not in probe.stderr.lower():
            return cli, ""
        tried.append(f"{cli}: {(probe.stderr or probe.stdout).strip()[:80]}")
    why = "; ".join(tried) or "no sqlite3 shell found"
    return None, (
        f"no sqlite3 shell with a working .recover ({why}); build one with "
        f".ci/build-sqlite-shell (it caches {SHELL_CACHE}) or set {SHELL_ENV}"
    )


# --- stores and snapshots -----------------------------------------------------------------------


def files(db: Path) -> list[Path]:
    """Return the store file and the sidecars it has."""
    return [Path(str(db) + s) for s in SUFFIXES if Path(str(db) + s).exists()]


def copy_store(src: Path, dst: Path) -> Path:
    """Copy a closed store (with its sidecars) to dst."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    for member in files(src):
        shutil.copyfile(member, str(dst) + member.name[len(src.name) :])
    return dst


def snapshot(db: Path) -> dict[str, tuple[list[str], Counter[tuple]]]:
    """Return {table: (columns, rows)} of sessions and messages of a healthy store."""
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        out = {}
        for table in TABLES:
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            rows = Counter(tuple(r) for r in conn.execute(f"SELECT * FROM {table}"))
            out[table] = (cols, rows)
        return out
    finally:
        conn.close()


def sql(db: Path, *statements: str) -> None:
    """Run statements on a store with plain sqlite3 (foreign keys off)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")
        for s in statements:
            conn.execute(s)
    finally:
        conn.close()


def layout(db: Path) -> tuple[int, int]:
    """Return (page size, pages) of a store file."""
    header = db.read_bytes()[:100]
    raw = int.from_bytes(header[16:18], "big")
    size = 65536 if raw == 1 else raw
    return size, db.stat().st_size // size


def pwrite(db: Path, offset: int, data: bytes) -> None:
    """Overwrite bytes of a file in place."""
    fd = os.open(db, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def tree(db: Path, table: str) -> pages.TreeScan:
    """Walk a table's b-tree in a healthy store file."""
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,))
        root = root.fetchone()[0]
    finally:
        conn.close()
    fd = os.open(db, os.O_RDONLY)
    try:
        return pages.Pages(fd, os.fstat(fd).st_size).walk_table(root)
    finally:
        os.close(fd)


def leaves(db: Path, table: str) -> list[int]:
    """Return a table's leaf pages in key order."""
    scan = tree(db, table)
    order: dict[int, int] = {}
    for rowid, (page, _i) in scan.cells.items():
        order[page] = min(order.get(page, rowid), rowid)
    return sorted(order, key=order.__getitem__)


def interior(db: Path, table: str) -> list[int]:
    """Return a table's interior pages below the root."""
    scan = tree(db, table)
    size, _ = layout(db)
    out = []
    with open(db, "rb") as f:
        for page in sorted(scan.pages):
            f.seek((page - 1) * size)
            if f.read(1) == b"\x05":
                out.append(page)
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,))
        root = root.fetchone()[0]
    finally:
        conn.close()
    return [p for p in out if p != root] or out


def zero_pages(db: Path, numbers: list[int]) -> None:
    """Overwrite whole pages with zeros."""
    size, _ = layout(db)
    for n in numbers:
        pwrite(db, (n - 1) * size, bytes(size))


CRASH_WRITER = textwrap.dedent(
    """
    import os, sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("PRAGMA foreign_keys=OFF")
    sid = conn.execute("SELECT id FROM sessions ORDER BY rowid LIMIT 1").fetchone()[0]
    for i in range(int(sys.argv[2])):
        conn.execute(
            "INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            (sid, sys.argv[3] + f" {i} " + "x" * 300, 1.9e9 + i),
        )
    if len(sys.argv) > 4:
        conn.execute(sys.argv[4])
    os._exit(0)  # no close: the WAL keeps the committed frames, the main file stays stale
    """
)


def crash_writes(db: Path, count: int, text: str, extra: str | None = None) -> None:
    """Commit rows in a child that dies without checkpointing (its WAL stays behind)."""
    argv = [sys.executable, "-c", CRASH_WRITER, str(db), str(count), text]
    subprocess.run([*argv, *([extra] if extra else [])], check=True, timeout=120)


def to_wal(db: Path) -> None:
    """Switch a store to WAL mode and settle it."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


# --- the cases ----------------------------------------------------------------------------------
# A case is (prepare, damage): prepare changes the healthy store in ways that are its real
# content (the snapshot is taken after it); damage then breaks the files.

Step = Callable[[Path, random.Random, Path], None]


def nothing(db: Path, rng: random.Random, scratch: Path) -> None:
    """Leave the store as it is."""


def flip_rowid(db: Path, rng: random.Random, scratch: Path, mask: int = 0x08) -> None:
    """Flip one bit of one rowid varint a third into the messages table."""
    scan = tree(db, "messages")
    rowids = sorted(scan.cells)
    rowid = rowids[len(rowids) // 3]
    page, index = scan.cells[rowid]
    size, _ = layout(db)
    data = db.read_bytes()[(page - 1) * size : page * size]
    off = int.from_bytes(data[8 + 2 * index : 10 + 2 * index], "big")
    _, pos = pages.varint(data, off)  # payload size, then the rowid
    # A high bit of the first byte of a two-byte varint, or of a one-byte one.
    flipped = data[pos] ^ (mask if data[pos] & 0x80 else 0x40)
    pwrite(db, (page - 1) * size + pos, bytes([flipped]))


def flip_one_percent(db: Path, rng: random.Random, scratch: Path) -> None:
    """Flip one random bit in 1 % of the pages (page 1 included when drawn)."""
    size, count = layout(db)
    chosen = rng.sample(range(1, count + 1), max(1, count // 100))
    data = bytearray(db.read_bytes())
    for page in chosen:
        bit = rng.randrange(size * 8)
        data[(page - 1) * size + bit // 8] ^= 1 << (bit % 8)
    db.write_bytes(bytes(data))


def leaf_over_leaf(db: Path, rng: random.Random, scratch: Path) -> None:
    """Write a messages leaf page over a sessions leaf page."""
    msg = leaves(db, "messages")
    ses = leaves(db, "sessions")
    size, _ = layout(db)
    data = db.read_bytes()
    source = msg[len(msg) // 2]
    pwrite(db, (ses[len(ses) // 2] - 1) * size, data[(source - 1) * size : source * size])


def header_page_size(db: Path, rng: random.Random, scratch: Path) -> None:
    """Set the header's page-size field to a wrong (but valid-looking) value."""
    size, _ = layout(db)
    pwrite(db, 16, (1024 if size != 1024 else 4096).to_bytes(2, "big"))


def header_reserved(db: Path, rng: random.Random, scratch: Path) -> None:
    """Set the header's reserved-bytes-per-page field to 32."""
    pwrite(db, 20, bytes([32]))


def header_garbage(db: Path, rng: random.Random, scratch: Path) -> None:
    """Overwrite the whole 100-byte header with random bytes."""
    pwrite(db, 0, bytes(rng.randrange(256) for _ in range(100)))


def page1_zeroed(db: Path, rng: random.Random, scratch: Path) -> None:
    """Zero page 1 (header and the root of the schema)."""
    zero_pages(db, [1])


def schema_leaf_zeroed(db: Path, rng: random.Random, scratch: Path) -> None:
    """Zero the schema page that holds the messages table's row."""
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        conn.execute("SELECT 1 FROM sqlite_master").fetchall()
    finally:
        conn.close()
    fd = os.open(db, os.O_RDONLY)
    try:
        raw = pages.Pages(fd, os.fstat(fd).st_size)
        scan = raw.walk_table(1)
        for page, index in scan.cells.values():
            _, fields = raw.cell(page, index)
            if fields[1] == "messages" and fields[0] == "table":
                target = page
                break
        else:  # pragma: no cover - every store has the table
            raise RuntimeError("no schema row for messages")
    finally:
        os.close(fd)
    zero_pages(db, [target])


def delete_a_session(db: Path, rng: random.Random, scratch: Path) -> None:
    """Delete the largest session and its messages, leaving their pages free (not wiped)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA secure_delete=OFF")
        conn.execute("PRAGMA foreign_keys=OFF")
        sid = conn.execute(
            "SELECT session_id FROM messages GROUP BY session_id ORDER BY count(*) DESC LIMIT 1"
        ).fetchone()[0]
        for table in ("session_model_usage", "messages"):
            conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (sid,))
        conn.execute(
            "UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = ?", (sid,)
        )
        conn.execute("DELETE FROM sessions WHERE id = ?", (sid,))
    finally:
        conn.close()


def lose_freelist(db: Path, rng: random.Random, scratch: Path) -> None:
    """Zero the header's freelist pointer and count."""
    pwrite(db, 32, bytes(8))


def garbage_values(db: Path, rng: random.Random, scratch: Path) -> None:
    """Store values the tool cannot use: a text timestamp, a session without an id."""
    sql(
        db,
        "UPDATE messages SET timestamp = 'last tuesday' "
        "WHERE id = (SELECT min(id) + 7 FROM messages)",
        "UPDATE sessions SET started_at = 'soon' WHERE rowid = (SELECT max(rowid) FROM sessions)",
        "INSERT INTO sessions (id, source, started_at) VALUES (NULL, 'foreign', 1.7e9)",
    )


def foreign_wal(db: Path, rng: random.Random, scratch: Path) -> None:
    """Put the committed WAL of another store next to this one."""
    to_wal(db)
    other = scratch / "foreign"
    gen.generate(other, 300, seed=99)
    to_wal(other / "state.db")
    crash_writes(other / "state.db", 40, "foreign row", "UPDATE sessions SET title = NULL")
    shutil.copyfile(str(other / "state.db") + "-wal", str(db) + "-wal")


def stale_wal_prepare(db: Path, rng: random.Random, scratch: Path) -> None:
    """Leave a WAL behind, keep a copy of it, then let the store move on without it."""
    to_wal(db)
    crash_writes(db, 30, "first crash")
    shutil.copyfile(str(db) + "-wal", scratch / "old-wal")
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")
        conn.execute("DELETE FROM messages WHERE content LIKE 'first crash%' AND rowid % 2 = 0")
        conn.execute("UPDATE messages SET content = 'edited later' WHERE rowid % 97 = 0")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    with contextlib.suppress(FileNotFoundError):
        os.remove(str(db) + "-wal")
    with contextlib.suppress(FileNotFoundError):
        os.remove(str(db) + "-shm")


def stale_wal_damage(db: Path, rng: random.Random, scratch: Path) -> None:
    """Put the old WAL back."""
    shutil.copyfile(scratch / "old-wal", str(db) + "-wal")


def zeroed_leaves(db: Path, rng: random.Random, scratch: Path) -> None:
    """Zero three leaf pages in the middle of the messages table."""
    msg = leaves(db, "messages")
    mid = len(msg) // 2
    zero_pages(db, [msg[mid - 3], msg[mid], msg[mid + 3]])


def zeroed_interior(db: Path, rng: random.Random, scratch: Path) -> None:
    """Zero one interior page of the messages table (its leaves are cut off, not lost)."""
    pages_ = interior(db, "messages")
    zero_pages(db, [pages_[len(pages_) // 2]])


LONG_VALUES = 12  # messages given values long enough for overflow chains of 1 to 3 pages


def long_values(db: Path, rng: random.Random, scratch: Path) -> None:
    """Give a dozen messages spread over the table values that spill onto overflow pages."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        ids = [r[0] for r in conn.execute("SELECT id FROM messages ORDER BY id")]
        for i in range(LONG_VALUES):
            rowid = ids[len(ids) * (2 * i + 1) // (2 * LONG_VALUES)]
            words = " ".join(f"word{rng.randrange(10_000)}" for _ in range(500 * (1 + i % 3)))
            conn.execute(
                "UPDATE messages SET content = coalesce(content, '') || ? WHERE id = ?",
                (" " + words, rowid),
            )
    finally:
        conn.close()


def chains(db: Path, table: str) -> list[list[int]]:
    """Return the overflow chains of a table's values, in rowid order."""
    scan = tree(db, table)
    fd = os.open(db, os.O_RDONLY)
    try:
        raw = pages.Pages(fd, os.fstat(fd).st_size)
        found = [raw.overflow_pages(scan.cells[r]) for r in sorted(scan.cells)]
    finally:
        os.close(fd)
    return [c for c in found if c]


def overflow_zeroed(db: Path, rng: random.Random, scratch: Path) -> None:
    """Zero five overflow pages of messages: the last page of three chains (SQLite reads the
    zeros as the value's end without an error) and the first page of two longer ones (the
    chain then ends early, which SQLite does notice)."""
    found = chains(db, "messages")
    ends = [found[k * len(found) // 3] for k in range(3)]
    longer = [c for c in found if len(c) > 1 and c not in ends]
    starts = [longer[k * len(longer) // 2] for k in range(2)]
    zero_pages(db, [c[-1] for c in ends] + [c[0] for c in starts])


def truncated(db: Path, rng: random.Random, scratch: Path) -> None:
    """Cut the file to 60 % of its pages."""
    size, count = layout(db)
    os.truncate(db, int(count * 0.6) * size)


CASES: dict[str, tuple[Step, Step, str]] = {
    "healthy": (nothing, nothing, "no damage"),
    "rowid-bit": (nothing, flip_rowid, "one flipped bit in a messages rowid"),
    "bits-1pct": (nothing, flip_one_percent, "one flipped bit in 1 % of pages"),
    "leaf-over-leaf": (nothing, leaf_over_leaf, "a messages leaf written over a sessions leaf"),
    "header-page-size": (nothing, header_page_size, "page-size field wrong (magic intact)"),
    "header-reserved": (nothing, header_reserved, "reserved-bytes field set to 32"),
    "header-garbage": (nothing, header_garbage, "100-byte header overwritten"),
    "page1-zeroed": (nothing, page1_zeroed, "page 1 zeroed"),
    "schema-leaf-zeroed": (nothing, schema_leaf_zeroed, "schema page of messages zeroed"),
    "freelist-lost": (delete_a_session, lose_freelist, "session deleted, freelist header lost"),
    "garbage-values": (garbage_values, nothing, "text timestamps, a session with NULL id"),
    "foreign-wal": (nothing, foreign_wal, "another store's WAL next to the file"),
    "stale-wal": (stale_wal_prepare, stale_wal_damage, "an old WAL of the same store put back"),
    "zeroed-leaves": (nothing, zeroed_leaves, "three messages leaf pages zeroed"),
    "zeroed-interior": (nothing, zeroed_interior, "an interior page of messages zeroed"),
    "truncated": (nothing, truncated, "file cut to 60 %"),
    "overflow-zeroed": (long_values, overflow_zeroed, "five overflow pages of messages zeroed"),
}


# --- counting -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one salvage kept, counted against the original rows."""

    exact: int = 0
    in_place: int = 0
    wrong: int = 0
    placeholders: int = 0
    aside: int = 0  # rows in lost_and_found
    accepted: bool | None = None
    summary: str = ""
    seconds: float = 0.0
    error: str = ""


def _match(
    original: dict[str, tuple[list[str], Counter[tuple]]],
    table: str,
    row: tuple,
    left: dict[str, Counter[tuple]],
) -> bool:
    """Take one original row equal to row off the pool; tell whether there was one."""
    if left[table][row] > 0:
        left[table][row] -= 1
        return True
    return False


def count_target(
    db: Path, original: dict[str, tuple[list[str], Counter[tuple]]], *, theirs: bool
) -> Outcome:
    """Count exact, in-place and wrong rows of a salvaged store."""
    out = Outcome()
    left = {t: Counter(rows) for t, (_cols, rows) in original.items()}
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for table in TABLES:
            cols = original[table][0]
            if table not in tables:
                continue
            have = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            pick = ", ".join(f'"{c}"' if c in have else "NULL" for c in cols)
            extra = ", source" if table == "sessions" and "source" in have else ", NULL"
            for row in conn.execute(f"SELECT {pick}{extra} FROM {table}"):
                values, marker = tuple(row[:-1]), row[-1]
                if _match(original, table, values, left):
                    out.exact += 1
                    out.in_place += 1
                elif table == "sessions" and marker == "recovered":
                    out.placeholders += 1
                else:
                    out.wrong += 1
        if "lost_and_found" in tables:
            out.aside = conn.execute("SELECT count(*) FROM lost_and_found").fetchone()[0]
            rows = _aside_rows(conn, theirs)
            for candidates in rows:
                for table, values in candidates:
                    if table in original and _match(original, table, values, left):
                        out.exact += 1
                        break
    finally:
        conn.close()
    return out


def _aside_rows(conn: sqlite3.Connection, theirs: bool) -> list[list[tuple[str, tuple]]]:
    """Return, per lost_and_found row, the (table, row) readings it could be."""
    out: list[list[tuple[str, tuple]]] = []
    if theirs:
        cols = [r[1] for r in conn.execute("PRAGMA table_info(lost_and_found)")]
        for row in conn.execute("SELECT * FROM lost_and_found"):
            rec = dict(zip(cols, row, strict=True))
            n = rec["nfield"]
            fields = [rec.get(f"c{i}") for i in range(n)]
            readings = [("sessions", tuple(fields))]
            if fields:
                readings.append(("messages", (rec["id"], *fields[1:])))
            out.append(readings)
        return out
    for table, body in conn.execute("SELECT table_name, row_json FROM lost_and_found"):
        value = json.loads(body)
        if isinstance(value, dict):
            out.append([(table, tuple(_unjson(v) for v in value.values()))])
        else:
            fields = [_unjson(v) for v in value]
            out.append([("sessions", tuple(fields)), ("messages", tuple(fields))])
    return out


def _unjson(value: Any) -> Any:
    """Undo lost_and_found's JSON form of a value."""
    if isinstance(value, dict) and "$hex" in value:
        return bytes.fromhex(value["$hex"])
    return value


RECOVER_TIMEOUT_S = 600.0


def run_ours(
    src: Path, out_dir: Path, original: dict, timeout: float = RECOVER_TIMEOUT_S
) -> Outcome:
    """Recover with the real hermes process (under a timeout: a hang is a result too) and
    count the result."""
    target = out_dir / "ours.db"
    home = out_dir / "home"
    home.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "hermes_cli", "sessions", "recover"]
    argv += ["--from", str(src), "--to", str(target)]
    env = {**os.environ, "HERMES_HOME": str(home), "NO_COLOR": "1"}
    start = time.monotonic()
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO_ROOT
        )
    except subprocess.TimeoutExpired:
        return Outcome(error=f"recover did not finish in {timeout:g} s", seconds=timeout)
    seconds = time.monotonic() - start
    if proc.returncode not in (0, 1) or "Traceback" in proc.stderr or not target.exists():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Outcome(error=f"exit {proc.returncode}: {tail}", seconds=seconds)
    outcome = count_target(target, original, theirs=False)
    outcome.accepted = proc.returncode == 0
    outcome.summary = proc.stdout.strip()
    outcome.seconds = seconds
    return outcome


def run_theirs(shell: str, src: Path, out_dir: Path, original: dict) -> Outcome:
    """Recover with the shell's .recover and count the result."""
    work = out_dir / "theirs-input"
    work.mkdir()
    copy = copy_store(src, work / src.name)
    target = out_dir / "theirs.db"
    start = time.monotonic()
    dump = subprocess.run([shell, str(copy), ".recover"], capture_output=True, timeout=1800)
    subprocess.run([shell, str(target)], input=dump.stdout, capture_output=True, timeout=1800)
    seconds = time.monotonic() - start
    if not target.exists():
        return Outcome(error="no output", seconds=seconds)
    outcome = count_target(target, original, theirs=True)
    outcome.seconds = seconds
    return outcome


@dataclass
class CaseResult:
    """One row of the matrix."""

    case: str
    what: str
    total: int
    ours: Outcome
    theirs: Outcome | None


def run_case(
    name: str, base: Path, work: Path, shell: str | None, seed: int = 11
) -> tuple[CaseResult, Path]:
    """Apply one case to a copy of the base store, salvage it both ways, count; return the
    result and the directory holding the damaged copy and our target (ours.db)."""
    prepare, damage, what = CASES[name]
    case_dir = work / name
    scratch = case_dir / "scratch"
    scratch.mkdir(parents=True)
    db = copy_store(base, case_dir / "src" / "state.db")
    rng = random.Random(seed)
    prepare(db, rng, scratch)
    original = snapshot(db)
    total = sum(sum(rows.values()) for _cols, rows in original.values())
    damage(db, rng, scratch)
    ours = run_ours(db, case_dir, original)
    theirs = run_theirs(shell, db, case_dir, original) if shell else None
    return CaseResult(name, what, total, ours, theirs), case_dir


def markdown(results: list[CaseResult], messages: int) -> str:
    """Render the matrix as a Markdown table."""
    head = (
        "| case | rows | ours: exact (in place) / wrong | ours: exit | "
        "`.recover`: exact (in place) / wrong | time: ours / `.recover` |\n"
        "|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in results:
        o, t = r.ours, r.theirs
        exit_ = "0" if o.accepted else "1 (partial)"
        ours = f"{o.exact:,} ({o.in_place:,}) / {o.wrong:,}"
        if o.placeholders:
            ours += f", {o.placeholders} placeholder sessions"
        theirs = "—" if t is None else f"{t.exact:,} ({t.in_place:,}) / {t.wrong:,}"
        times = f"{o.seconds:.1f} s / " + ("—" if t is None else f"{t.seconds:.1f} s")
        lines.append(
            f"| {r.case}: {r.what} | {r.total:,} | {ours} | {exit_} | {theirs} | {times} |"
        )
    return head + "\n".join(lines) + f"\n\n(stores of {messages:,} generated messages)\n"


def from_json(path: Path) -> list[CaseResult]:
    """Read results written by --json."""
    out = []
    for item in json.loads(path.read_text()):
        theirs = Outcome(**item["theirs"]) if item["theirs"] else None
        out.append(
            CaseResult(item["case"], item["what"], item["total"], Outcome(**item["ours"]), theirs)
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the matrix and print it."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=gen.DEFAULT_SEED)
    p.add_argument("--cases", help="comma-separated case names (default: all)")
    p.add_argument("--shell", help=f"sqlite3 shell with .recover (default: ${SHELL_ENV}, cache)")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    p.add_argument("--from-json", type=Path, help="print the Markdown table of a --json file")
    p.add_argument(
        "--base",
        type=Path,
        help="a closed store bench/generate.py made (only copies of it are damaged), "
        "instead of generating one",
    )
    args = p.parse_args(argv)
    if args.from_json:
        print(markdown(from_json(args.from_json), args.messages))
        return 0
    if args.shell:
        os.environ[SHELL_ENV] = args.shell
    shell, why = find_shell()
    if shell is None:
        print(f"note: {why}; only our side is measured", file=sys.stderr)
    names = args.cases.split(",") if args.cases else list(CASES)
    with tempfile.TemporaryDirectory(prefix="recover-matrix-") as tmp:
        work = Path(tmp)
        if args.base is not None:
            base = args.base
        else:
            gen.generate(work / "base", args.messages, args.seed)
            base = work / "base" / "state.db"
        results = []
        for name in names:
            result, _dir = run_case(name, base, work, shell)
            results.append(result)
            o, t = result.ours, result.theirs
            print(
                f"{name:20} total {result.total:7}  ours exact {o.exact:7} in place "
                f"{o.in_place:7} wrong {o.wrong:5} ph {o.placeholders:4} "
                f"accepted {o.accepted!s:5} {o.seconds:6.1f}s {o.error}"
                + (
                    ""
                    if t is None
                    else f" | theirs exact {t.exact:7} in place {t.in_place:7} "
                    f"wrong {t.wrong:5} {t.seconds:6.1f}s"
                ),
                file=sys.stderr,
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    if args.markdown:
        print(markdown(results, args.messages))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
