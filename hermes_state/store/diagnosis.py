"""What is damaged in a store file, where, and what would repair it (for `hermes db check`).

Read-only throughout, and through SQLite only (``os.stat`` for sizes): no byte of the store or
its sidecars is read from Python. ``PRAGMA integrity_check`` lines are mapped to the table,
index or search index they concern — a tree through its root page in sqlite_master, any other
page through dbstat's walk of the file, which also marks the pages it cannot decode as
``corrupted``. SQLite stops the whole-file check at the first page it cannot read, so then each
table the walk did not already explain is checked alone and the rest still gets a verdict.

The advice says whether every row is intact, and whether rebuilding indexes in place repairs
the store: only when no page is damaged, because a rebuild must first free the old index's
pages and SQLite cannot free a page it cannot read. Otherwise `hermes sessions recover` copies
what can be read into a new file (where every index is rebuilt) and `hermes restore` installs it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from hermes_state.store.connection import read_only_uri
from hermes_state.store.errors import is_lock_error
from hermes_state.store.sql import companion, quote

LITESTREAM_PREFIX = "_litestream_"  # _litestream_lock, _litestream_seq: Litestream's tables
INTEGRITY_LIMIT = 100  # lines asked of integrity_check: enough to name every damaged object
WAL_HEADER_BYTES = 32
WAL_FRAME_HEADER_BYTES = 24

# What repairs a problem: rebuilding indexes in place, or copying the rows into a new file.
REINDEX = "reindex"
RECOVER = "recover"

_TREE_PAGE = re.compile(r"\bTree (\d+) page (\d+)")
_PAGE = re.compile(r"\b[Pp]age (\d+)")
_INDEX_ROW = re.compile(r"^row (\d+) missing from index (.+)$")
_INDEX_COUNT = re.compile(r"^wrong # of entries in index (.+)$")
_INDEX_UNIQUE = re.compile(r"^non-unique entry in index (.+)$")
_NULL_VALUE = re.compile(r"^NULL value in ([^.]+)\.")
_CHECK_FAILED = re.compile(r"^CHECK constraint failed in (.+)$")


@dataclass(frozen=True)
class Problem:
    """One damaged place: its object, what that object is, the page, SQLite's words, the fix."""

    object: str | None
    kind: str  # table, index, search_index, schema, file or wal
    page: int | None
    message: str
    repair: str  # "reindex" (in place) or "recover" (into a new file)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return asdict(self)


@dataclass(frozen=True)
class SearchIndexState:
    """One full-text index: its name, what it searches, and whether it reads back whole."""

    name: str
    kind: str  # word, substring, cjk or other
    state: str  # ok, damaged or unchecked
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return asdict(self)


@dataclass(frozen=True)
class WalState:
    """The store's -wal file as SQLite sees it."""

    path: str
    exists: bool
    bytes: int
    journal_mode: str | None
    frames: int | None  # whole frames its size holds (None: not a WAL store, or not whole)
    readable: bool | None  # SQLite reads the store with it (None: there is nothing to read)
    detail: str
    warning: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return asdict(self)


@dataclass(frozen=True)
class Advice:
    """What to do: an action, whether the rows are intact, why, and the commands, in order."""

    action: str  # none, reindex, recover or restore
    rows_intact: bool | None
    summary: str
    commands: tuple[str, ...] = ()
    hint: str = ""  # the commands as one line, for an error's hint

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {**asdict(self), "commands": list(self.commands)}


NOTHING_TO_DO = Advice("none", True, "Nothing to repair.")


@dataclass(frozen=True)
class Diagnosis:
    """Everything db check says about damage: problems, search indexes, the WAL, the advice."""

    problems: tuple[Problem, ...]
    search_indexes: tuple[SearchIndexState, ...]
    wal: WalState
    advice: Advice

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "problems": [p.to_dict() for p in self.problems],
            "search_indexes": [s.to_dict() for s in self.search_indexes],
            "wal": self.wal.to_dict(),
            "advice": self.advice.to_dict(),
        }


# --- the objects of the file -------------------------------------------------------------------


@dataclass(frozen=True)
class _Object:
    name: str
    type: str  # table or index
    table: str  # the table an index is on (its own name for a table)
    root: int
    search: str | None  # the full-text index a table belongs to (itself or a shadow table)

    @property
    def kind(self) -> str:
        if self.search is not None:
            return "search_index"
        if self.name in ("sqlite_master", "sqlite_schema"):
            return "schema"
        return "index" if self.type == "index" else "table"

    @property
    def owner(self) -> str:
        """The name a problem is reported under: the full-text index for its shadow tables."""
        return self.search or self.name


def is_litestream_table(name: str) -> bool:
    """Tell whether a table is one Litestream adds to a database it replicates."""
    return name.startswith(LITESTREAM_PREFIX)


def litestream_traces(conn: sqlite3.Connection, path: Path) -> str | None:
    """Say what Litestream left in and beside a store (its tables, its folder), or None."""
    names = [
        str(r[0])
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if is_litestream_table(str(r[0]))
    ]
    folder = path.parent / f".{path.name}-litestream"
    if not names and not folder.is_dir():
        return None
    what = [", ".join(names) + " (its tables)"] if names else []
    what += [f"{folder.name}/ (its local copy of changes)"] if folder.is_dir() else []
    return (
        f"Litestream's: {'; '.join(what)} — the store is or was replicated "
        "(hermes replicate); not damage"
    )


def _fts5_names(rows: Sequence[tuple[str, str, str, int, str | None]]) -> list[str]:
    return [
        name
        for name, type_, _tbl, _root, sql in rows
        if type_ == "table" and re.search(r"USING\s+fts5", sql or "", re.IGNORECASE)
    ]


def _objects(conn: sqlite3.Connection) -> dict[str, _Object]:
    """Read every b-tree of the file from sqlite_master (itself included), by name."""
    rows = conn.execute(
        "SELECT name, type, tbl_name, rootpage, sql FROM sqlite_master WHERE type IN "
        "('table', 'index')"
    ).fetchall()
    fts5 = _fts5_names(rows)
    found = {"sqlite_master": _Object("sqlite_master", "table", "sqlite_master", 1, None)}
    for name, type_, table, root, _sql in rows:
        found[name] = _Object(name, type_, table, int(root or 0), _search_owner(name, table, fts5))
    return found


def _search_owner(name: str, table: str, fts5: Sequence[str]) -> str | None:
    """Return the full-text index a table or index belongs to (None: no such index)."""
    # The longest name it extends: messages_fts_trigram_data is messages_fts_trigram's.
    if name in fts5:
        return name
    for candidate in (name, table):
        owners = [f for f in fts5 if candidate.startswith(f + "_")]
        if owners:
            return max(owners, key=len)
    return None


def _walk(
    conn: sqlite3.Connection, pages: Iterable[int]
) -> tuple[list[tuple[str, int]], dict[int, str], str | None]:
    """Walk every b-tree page (dbstat): return undecodable pages, owners asked for, any error."""
    wanted = sorted(set(pages))
    sql = "SELECT name, pageno, pagetype FROM dbstat WHERE pagetype = 'corrupted'"
    if wanted:
        sql += " OR pageno IN (" + ", ".join(str(int(p)) for p in wanted) + ")"
    corrupted: list[tuple[str, int]] = []
    owners: dict[int, str] = {}
    try:
        for name, page, pagetype in conn.execute(sql):
            owners.setdefault(int(page), str(name))
            if pagetype == "corrupted":
                corrupted.append((str(name), int(page)))
    except sqlite3.DatabaseError as exc:
        if is_lock_error(exc):
            raise
        return corrupted, owners, str(exc)
    return corrupted, owners, None


def _walk_each(
    conn: sqlite3.Connection, objects: Iterable[_Object]
) -> Iterator[tuple[_Object, str]]:
    """Walk the objects one by one (after a whole-file walk failed); yield those that fail."""
    for obj in objects:
        if obj.root <= 0:
            continue
        try:
            conn.execute(
                "SELECT count(*) FROM dbstat WHERE name = ? AND pagetype = 'corrupted'", (obj.name,)
            ).fetchone()
        except sqlite3.DatabaseError as exc:
            if is_lock_error(exc):
                raise
            yield obj, str(exc)


# --- reading SQLite's own checks ---------------------------------------------------------------


def integrity_lines(
    conn: sqlite3.Connection, table: str | None = None
) -> tuple[list[str], str | None]:
    """Run integrity_check (of the file or one table); return its lines and what stopped it."""
    arg = str(INTEGRITY_LIMIT) if table is None else quote(table)
    lines: list[str] = []
    try:
        for row in conn.execute(f"PRAGMA integrity_check({arg})"):
            # One row may hold several lines, headed "*** in database main ***".
            for line in str(row[0]).splitlines():
                if line.strip() and not line.startswith("*** in database"):
                    lines.append(line)
    except sqlite3.DatabaseError as exc:
        if is_lock_error(exc):
            raise
        return lines, str(exc)
    return lines, None


@dataclass
class _Reading:
    """One integrity line, read: the object it names (if any), the page, and the repair."""

    line: str
    object: str | None = None
    page: int | None = None
    repair: str = RECOVER
    rowid: int | None = None


def _read_line(line: str, roots: dict[int, str]) -> _Reading:
    """Find the object, page and repair one integrity_check line speaks of."""
    reading = _Reading(line)
    if match := _INDEX_ROW.match(line):
        reading.rowid, reading.object, reading.repair = int(match[1]), match[2], REINDEX
    elif match := _INDEX_COUNT.match(line):
        reading.object, reading.repair = match[1], REINDEX
    elif match := _INDEX_UNIQUE.match(line):
        reading.object = match[1]  # the table holds duplicates: a rebuild would refuse them
    elif (match := _NULL_VALUE.match(line)) or (match := _CHECK_FAILED.match(line)):
        reading.object = match[1]
    elif match := _TREE_PAGE.search(line):
        reading.object, reading.page = roots.get(int(match[1])), int(match[2])
    elif match := _PAGE.search(line):
        reading.page = int(match[1])
    return reading


def _summarise(readings: list[_Reading]) -> list[_Reading]:
    """Fold `row N missing from index X` lines into one per index (there is one per row)."""
    out: list[_Reading] = []
    missing: dict[str, list[int]] = {}
    for r in readings:
        if r.rowid is not None and r.object is not None:
            if r.object not in missing:
                missing[r.object] = []
                out.append(r)
            missing[r.object].append(r.rowid)
        else:
            out.append(r)
    for r in out:
        rows = missing.get(r.object or "") if r.rowid is not None else None
        if rows and len(rows) > 1:
            shown = ", ".join(str(n) for n in rows[:5]) + (", …" if len(rows) > 5 else "")
            more = "+" if len(rows) >= INTEGRITY_LIMIT else ""
            r.line = f"{len(rows)}{more} rows missing from index {r.object} (rows {shown})"
    return out


# --- the -wal ----------------------------------------------------------------------------------


def wal_state(path: Path, journal_mode: str | None, page_size: int | None) -> WalState:
    """Judge the store's -wal by its size and the store's journal mode (os.stat only)."""
    wal = companion(path, "-wal")

    def state(size: int, frames: int | None, readable: bool | None, detail: str) -> WalState:
        warning = readable is False
        return WalState(str(wal), True, size, journal_mode, frames, readable, detail, warning)

    try:
        size = os.stat(wal).st_size
    except FileNotFoundError:
        waiting = " (nothing waits to be checkpointed)" if journal_mode == "wal" else ""
        return WalState(str(wal), False, 0, journal_mode, None, None, "no -wal file" + waiting)
    except OSError as exc:
        return state(0, None, False, f"cannot be read: {exc.strerror}")
    # SQLite opens any -wal it finds beside a store, whatever mode the header records, so
    # every -wal is judged the same way.
    if size == 0:
        return state(0, 0, True, "empty (everything is in the main file)")
    if not page_size:
        return state(size, None, None, f"{size} bytes beside a main file SQLite cannot read")
    frame = page_size + WAL_FRAME_HEADER_BYTES
    body = size - WAL_HEADER_BYTES
    if body >= 0 and body % frame == 0:
        frames = body // frame
        return state(size, frames, True, f"{frames} frames ({size} bytes), read with the main file")
    return state(
        size,
        None,
        False,
        f"{wal.name} is {size} bytes, not a 32-byte header and whole {frame}-byte frames: it "
        "was cut short or is not a WAL SQLite wrote for this store. SQLite applies only the "
        "frames whose checksums hold and ignores the rest (committed work in what it ignores "
        "is lost)",
    )


def _main_file_sound(path: Path) -> bool | None:
    """Tell whether the main file alone (its -wal ignored) passes quick_check (None: unknown)."""
    # immutable=1: SQLite reads the main file only, taking no lock and making no sidecar.
    try:
        conn = sqlite3.connect(read_only_uri(path) + "&immutable=1", uri=True)
    except sqlite3.Error:
        return None
    try:
        rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check(1)")]
        return rows == ["ok"]
    except sqlite3.DatabaseError:
        return False
    finally:
        conn.close()


# --- search indexes ----------------------------------------------------------------------------


def _search_kind(name: str) -> str:
    from hermes_state.store import cjk, fts

    return {fts.WORD_TABLE: "word", fts.TRIGRAM_TABLE: "substring", cjk.TABLE: "cjk"}.get(
        name, "other"
    )


def _search_states(
    names: Iterable[str], problems: Sequence[Problem], checked: str | None
) -> list[SearchIndexState]:
    """Say for each full-text index whether it reads back whole (checked: why it could not be)."""
    states = []
    for name in names:
        own = [p for p in problems if p.object == name]
        kind = _search_kind(name)
        if own:
            pages = sorted({p.page for p in own if p.page is not None})
            where = f" (pages {', '.join(map(str, pages))})" if pages else ""
            states.append(
                SearchIndexState(
                    name, kind, "damaged", "; ".join(p.message for p in own[:3]) + where
                )
            )
        elif checked is not None:
            states.append(SearchIndexState(name, kind, "unchecked", checked))
        else:
            states.append(
                SearchIndexState(
                    name, kind, "ok", "its pages read back and it holds the messages it should"
                )
            )
    return states


def _fts_problems(conn: sqlite3.Connection) -> tuple[list[Problem], str | None]:
    """Compare each full-text index with the messages it should hold (read-only row checks)."""
    from hermes_state.store import cjk, fts

    try:
        found = fts.integrity_check(conn) + cjk.integrity_problems(conn)
    except sqlite3.DatabaseError as exc:
        if is_lock_error(exc):
            raise
        return [], f"could not be compared with the messages: {exc}"
    problems = []
    for text in found:
        name = text.split(":", 1)[0] if ":" in text else None
        problems.append(Problem(name, "search_index", None, text, REINDEX))
    return problems, None


# --- the diagnosis -----------------------------------------------------------------------------


def _problem(obj: _Object | None, page: int | None, message: str, repair: str) -> Problem:
    if obj is None:
        return Problem(None, "file", page, message, repair)
    if obj.search is not None and obj.name != obj.search:
        message = f"{message} (in {obj.name})"
    return Problem(obj.owner, obj.kind, page, message, repair)


def _unique(problems: Iterable[Problem]) -> list[Problem]:
    """Drop repeats: one problem per object and page (SQLite's words kept over the walk's)."""
    out: list[Problem] = []
    seen: set[tuple[str | None, int | None, str]] = set()
    for p in problems:
        key = (p.object, p.page, p.message if p.page is None else "")
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def find_problems(
    conn: sqlite3.Connection, lines: list[str], stopped: str | None
) -> tuple[list[Problem], list[str]]:
    """Map integrity_check's lines to problems; return them and the store's full-text indexes."""
    objects = _objects(conn)
    by_root = {o.root: o.name for o in objects.values() if o.root > 0}
    readings = _summarise([_read_line(line, by_root) for line in lines if line != "ok"])
    corrupted, owners, walk_error = _walk(conn, [r.page for r in readings if r.page is not None])
    problems: list[Problem] = []
    for r in readings:
        name = r.object or (owners.get(r.page) if r.page is not None else None)
        if name is None and r.page is not None and r.page in by_root:
            name = by_root[r.page]
        problems.append(_problem(objects.get(name or ""), r.page, r.line, r.repair))
    for name, page in corrupted:
        problems.append(
            _problem(
                objects.get(name),
                page,
                f"page {page} is not a b-tree page SQLite can read",
                RECOVER,
            )
        )
    if walk_error is not None:
        for obj, error in _walk_each(conn, objects.values()):
            problems.append(_problem(obj, None, f"its pages could not be walked: {error}", RECOVER))
    if stopped is not None:
        problems += _check_tables_alone(conn, objects, problems, stopped)
    fts_names = sorted({o.search for o in objects.values() if o.search is not None})
    return _unique(problems), fts_names


def _check_tables_alone(
    conn: sqlite3.Connection, objects: dict[str, _Object], found: list[Problem], stopped: str
) -> list[Problem]:
    """Check alone each table the damage found so far does not explain (the check stopped)."""
    explained = {p.object for p in found}
    tables_explained = {
        o.table for o in objects.values() if o.name in explained or o.owner in explained
    }
    out: list[Problem] = []
    for obj in objects.values():
        if obj.type != "table" or obj.root <= 0 or obj.name == "sqlite_master":
            continue
        if obj.name in tables_explained or obj.owner in explained:
            continue
        lines, error = integrity_lines(conn, obj.name)
        by_root = {o.root: o.name for o in objects.values() if o.root > 0}
        for r in _summarise([_read_line(line, by_root) for line in lines if line != "ok"]):
            out.append(_problem(objects.get(r.object or obj.name), r.page, r.line, r.repair))
        if error is not None:
            out.append(
                _problem(obj, None, f"integrity_check of {obj.name} stopped: {error}", RECOVER)
            )
    if not found and not out:
        out.append(Problem(None, "file", None, f"integrity_check stopped: {stopped}", RECOVER))
    return out


def diagnose(
    conn: sqlite3.Connection,
    path: Path,
    *,
    lines: list[str],
    stopped: str | None,
    journal_mode: str | None,
) -> Diagnosis:
    """Diagnose an open store from its integrity check's lines (and the error that stopped it)."""
    from hermes_state.store import fts

    wal = wal_state(path, journal_mode, _pragma_int(conn, "page_size"))
    damaged = stopped is not None or lines != ["ok"]
    problems: list[Problem] = []
    fts_names: list[str] = []
    if damaged:
        problems, fts_names = find_problems(conn, lines, stopped)
    else:
        with contextlib.suppress(sqlite3.DatabaseError):
            fts_names = sorted(fts.fts5_tables(conn))
    checked: str | None = None
    # A search index with unreadable pages is for recover; comparing its rows adds nothing.
    if not any(p.kind == "search_index" and p.repair == RECOVER for p in problems):
        found, checked = _fts_problems(conn)
        problems += found
    if damaged and wal.frames:
        problems += _wal_damage(path, wal)
    problems = _unique(problems)
    states = _search_states(fts_names, problems, checked)
    return Diagnosis(tuple(problems), tuple(states), wal, advise(path, problems))


def _wal_damage(path: Path, wal: WalState) -> list[Problem]:
    """Blame the -wal when the main file alone is sound but the store read with it is not."""
    if _main_file_sound(path):
        return [
            Problem(
                Path(wal.path).name,
                "wal",
                None,
                "the store reads as damaged with its -wal but the main file alone is sound: "
                "the -wal's frames do not fit this file (frames of an older generation of it?)",
                RECOVER,
            )
        ]
    return []


def _pragma_int(conn: sqlite3.Connection, name: str) -> int | None:
    try:
        row = conn.execute(f"PRAGMA {name}").fetchone()
    except sqlite3.DatabaseError:
        return None
    return int(row[0]) if row is not None else None


def diagnose_unopenable(path: Path, error: str) -> Diagnosis:
    """Diagnose a store SQLite cannot open or whose schema it cannot read."""
    try:
        size = os.stat(path).st_size
    except OSError:
        size = -1
    wal = wal_state(path, None, None)
    if size == 0:
        problem = Problem(None, "file", None, f"{path.name} is empty (0 bytes)", RECOVER)
        return Diagnosis((problem,), (), wal, advise(path, [problem], empty=True))
    error = error.removeprefix(f"{path} is damaged: ")
    kind, page = ("schema", 1) if "schema" in error or "malformed" in error else ("file", None)
    problems = [Problem("sqlite_master" if kind == "schema" else None, kind, page, error, RECOVER)]
    if wal.exists and wal.bytes and _main_file_sound(path):
        problems.append(
            Problem(
                Path(wal.path).name,
                "wal",
                None,
                "the main file alone is sound: SQLite cannot read the store with its -wal",
                RECOVER,
            )
        )
    return Diagnosis(tuple(problems), (), wal, advise(path, problems))


# --- advice ------------------------------------------------------------------------------------


def _hermes(path: Path) -> str:
    """Return `hermes` with the profile flag that reaches the store at path."""
    from hermes_state.store.home import named_profile_of

    profile = named_profile_of(path.parent)
    return f"hermes -p {profile}" if profile else "hermes"


def recover_target(path: Path, today: datetime | None = None) -> Path:
    """Return a new file name beside the store for a recovered copy (none exists there yet)."""
    stamp = (today or datetime.now()).strftime("%Y%m%d")
    candidate = path.with_name(f"state-recovered-{stamp}.db")
    n = 1
    while any(os.path.lexists(p) for p in (candidate, companion(candidate, "-wal"))):
        candidate = path.with_name(f"state-recovered-{stamp}-{n}.db")
        n += 1
    return candidate


def _names(problems: Iterable[Problem], kinds: Iterable[str]) -> str:
    wanted = set(kinds)
    names = sorted({p.object for p in problems if p.kind in wanted and p.object})
    return ", ".join(names[:6]) + (", …" if len(names) > 6 else "")


def advise(path: Path, problems: Sequence[Problem], *, empty: bool = False) -> Advice:
    """Say what to do about the problems: nothing, rebuild indexes in place, or recover."""
    if not problems:
        return NOTHING_TO_DO
    hermes = _hermes(path)
    stop = " Stop Hermes first: restore refuses while another process has the store open."
    if empty:
        return Advice(
            "restore",
            False,
            "The store file is empty: there is nothing in it to recover. Restore a backup "
            "(list them with the first command) or, if none, let Hermes start a new store." + stop,
            (f"{hermes} backup list", f"{hermes} restore ARCHIVE"),
            f"Restore a backup: `{hermes} backup list`, then `{hermes} restore ARCHIVE` (an "
            "empty file holds nothing for `hermes sessions recover` to salvage).",
        )
    rows_intact = all(p.kind in ("index", "search_index") for p in problems)
    if all(p.repair == REINDEX for p in problems):
        return Advice(
            REINDEX,
            True,
            "Every row is intact; only indexes disagree with their tables "
            f"({_names(problems, ('index', 'search_index'))}). Rebuilding them in place repairs "
            "the store.",
            (f"{hermes} db optimize --reindex",),
            f"Rebuild the indexes in place: `{hermes} db optimize --reindex`.",
        )
    target = shlex.quote(str(recover_target(path)))
    commands = (f"{hermes} sessions recover --to {target}", f"{hermes} restore {target}")
    if rows_intact:
        summary = (
            "Every table reads back whole; only index pages are damaged "
            f"({_names(problems, ('index', 'search_index'))}). An index cannot be rebuilt in "
            "place over a page SQLite cannot read, so copy the store into a new file (every "
            "row is copied and every index rebuilt; nothing is lost) and install that copy."
        )
    elif any(p.kind in ("schema", "file") for p in problems):
        summary = (
            "SQLite cannot read the store's structure as it is. Recover reads what it can "
            "from a copy (repairing the header, then table by table and page by page) into a "
            "new file and reports what was lost; install that copy once you accept it."
        )
    else:
        summary = (
            f"Pages of {_names(problems, ('table', 'wal')) or 'the store'} cannot be read in "
            "place, so some rows may be lost. Recover copies every row that can still be read "
            "(around the damaged pages) into a new file, rebuilds the indexes and reports "
            "what was lost; install that copy once you accept it."
        )
    hint = (
        f"Salvage it into a new file: `{commands[0]}`, then install that file (Hermes stopped): "
        f"`{commands[1]}`."
    )
    return Advice(RECOVER, rows_intact, summary + stop, commands, hint)
