"""The vault: old sessions moved out of the live store into per-year stores of the same layout.

``<home>/vault/<YYYY>.db`` holds the session groups whose last activity fell in that UTC year.
A group is a connected component of parent links (a compression chain, its delegated runs and
branch children); it moves whole, and only when every member is ended, unpinned, idle since
before the cutoff and free of open ledger work (prune's rules). The crash rule: a session id
present in the live store is invisible in the vault, so a move copies, verifies, and only then
deletes from live; a return copies into live, then deletes from the vault. Re-running either
completes one a SIGKILL interrupted.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from hermes_state.records.ledger import busy_message, open_work_in
from hermes_state.recover.recover_source import DERIVED_META_KEYS, shadow_of
from hermes_state.reports import usage_report
from hermes_state.shapes.model_config import DELEGATE_MARKER, marker_sql
from hermes_state.store import bulkload, cjk, fts, guard, meta
from hermes_state.store.connection import Store, create_bare_store, read_only_uri
from hermes_state.store.diagnosis import is_litestream_table
from hermes_state.store.errors import HermesStateError, SessionNotFoundError
from hermes_state.store.home import ensure_private_dir
from hermes_state.store.patience import NO_WAITING, Waiting
from hermes_state.store.sql import chunks, marks, quote
from hermes_state.upkeep.maintenance import (
    DAY_S,
    PruneScope,
    delete_sessions_in,
    eligible_sessions_in,
    in_use,
    last_activity_sql,
)
from hermes_state.vault import vault_twins

# The vault's public names, kept here too (explicit re-exports).
from hermes_state.vault.vault_stores import (
    STORE_NAME as STORE_NAME,
    VAULT_DIR as VAULT_DIR,
    open_vault as open_vault,
    vault_dir as vault_dir,
    vault_paths as vault_paths,
    year_of as year_of,
)

# Session data copied with a group, parents first (foreign keys point from later to earlier).
COPIED_TABLES = ("sessions", "messages", "session_model_usage")
PROMPTS_TABLE = "system_prompts"
# One copy/verify/delete round moves groups holding about this many messages: short enough
# that the agent's writes never wait long for the live delete, long enough to amortise fsyncs.
BATCH_MESSAGES = 20_000
BATCH_SESSIONS = 400
VAULT_CACHE_KIB = 128 * 1024  # the vault handle's page cache while a move writes to it
# One live delete transaction takes groups of about this many messages: its FTS delete
# triggers cost ~30 µs a message, so the agent's next write waits well under a second.
DELETE_MESSAGES = 20_000
# state_meta keys that describe one file, not the layout: never carried into a vault store.
_FILE_META_KEYS = frozenset(
    {
        *DERIVED_META_KEYS,
        "fts_cjk_stale",
        "fts_rebuild_deferral",
        "store_instance_id",
        "store_created_at_utc",
        "last_auto_prune",
        "last_vacuum",
        "last_auto_archive",
    }
)
_FILE_META_PREFIXES = ("goal:", "loop:", "heartbeat:")
# Test hooks (honoured only inside a test process): SIGKILL or pause at a named step.
CRASH_ENV = "HERMES_VAULT_CRASH_AT"
PAUSE_ENV = "HERMES_VAULT_PAUSE_AT"  # "step:PATH": wait (at most 60 s) until PATH exists
STEPS = ("created", "copied", "verified", "deleted", "returned", "unvaulted")


class VaultError(HermesStateError):
    """A vault operation that cannot be done as asked."""

    hint = "`hermes vault check` reports the state of every vault store."


class VaultVerifyError(VaultError):
    """A vault copy that does not match the live rows it was copied from."""

    hint = "Nothing left the live store; run `hermes vault check`, then try again."


def _step(name: str) -> None:
    """Die or pause here when a test asked for it (never outside a test process)."""
    if not guard.in_test_context():
        return
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    pause = os.environ.get(PAUSE_ENV, "")
    if pause.startswith(name + ":"):
        release = Path(pause.split(":", 1)[1])
        sys.stderr.write(f"vault: paused at {name}\n")
        sys.stderr.flush()
        deadline = time.monotonic() + 60
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.02)


# --- fingerprints -------------------------------------------------------------------------


class _Digest:
    """An order-independent digest of rows: the sum of their hashes (mod 2**64)."""

    def __init__(self) -> None:
        self.total = 0

    def step(self, *values: Any) -> None:
        """Add one row."""
        h = hashlib.blake2b(repr(values).encode("utf-8", "surrogatepass"), digest_size=8)
        self.total = (self.total + int.from_bytes(h.digest(), "big")) % (1 << 64)

    def finalize(self) -> str:
        """Return the digest as hex."""
        return f"{self.total:016x}"


def _register(conn: sqlite3.Connection) -> None:
    try:
        conn.create_aggregate("hermes_vault_digest", -1, _Digest)  # type: ignore[arg-type]
    except sqlite3.OperationalError:
        # Already there: SQLite refuses to replace a function while a statement is pending.
        conn.execute("SELECT hermes_vault_digest(1)").fetchone()


Fingerprint = tuple[int, str, str]  # (messages, their digest, the session row's digest)


def _columns(conn: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA {schema}.table_info({quote(table)})")]


def _fingerprints(
    conn: sqlite3.Connection,
    schema: str,
    ids: Sequence[str],
    msg_cols: Sequence[str],
    session_cols: Sequence[str],
    *,
    with_ids: bool = True,
) -> dict[str, Fingerprint]:
    """Return each session's fingerprint from schema's rows (absent sessions are left out)."""
    _register(conn)
    mcols = [c for c in msg_cols if with_ids or c != "id"]
    scols = [c for c in session_cols if c != "title"]  # a title may be renamed on a clash
    out: dict[str, Fingerprint] = {}
    msgs: dict[str, tuple[int, str]] = {}
    for batch in chunks(ids):
        qs = marks(len(batch))
        for sid, n, digest in conn.execute(
            f"SELECT session_id, count(*), hermes_vault_digest({', '.join(map(quote, mcols))})"
            f" FROM {schema}.messages WHERE session_id IN ({qs}) GROUP BY session_id",
            batch,
        ):
            msgs[sid] = (int(n), str(digest))
        for sid, digest in conn.execute(
            f"SELECT id, hermes_vault_digest({', '.join(map(quote, scols))})"
            f" FROM {schema}.sessions WHERE id IN ({qs}) GROUP BY id",
            batch,
        ):
            n, mdigest = msgs.get(sid, (0, ""))
            out[sid] = (n, mdigest, str(digest))
    return out


def _differs(col: str) -> str:
    """SQL: column col of rows x and y differs, by value or storage class, byte for byte."""
    c = quote(col)
    return f"x.{c} IS NOT y.{c} COLLATE BINARY OR typeof(x.{c}) <> typeof(y.{c})"


def _mismatched(
    conn: sqlite3.Connection,
    a: str,
    b: str,
    ids: Sequence[str],
    msg_cols: Sequence[str],
    session_cols: Sequence[str],
) -> set[str]:
    """Return the sessions whose rows in schema a and schema b are not the same (compared in SQL,
    every value exactly): a session row, except its title (renamed on a clash), and the same
    set of message rows, ids included. A session absent from either side differs."""
    mdiff = " OR ".join(_differs(c) for c in msg_cols if c != "id")
    sdiff = " OR ".join(_differs(c) for c in session_cols if c not in ("id", "title"))
    out: set[str] = set()
    for batch in chunks(ids):
        qs = marks(len(batch))
        out.update(
            r[0]
            for r in conn.execute(
                f"SELECT DISTINCT x.session_id FROM {a}.messages x LEFT JOIN {b}.messages y"
                f" ON y.id = x.id WHERE x.session_id IN ({qs}) AND (y.id IS NULL OR {mdiff})",
                batch,
            )
        )
        counts = [
            dict(
                conn.execute(
                    f"SELECT session_id, count(*) FROM {side}.messages"
                    f" WHERE session_id IN ({qs}) GROUP BY session_id",
                    batch,
                ).fetchall()
            )
            for side in (a, b)
        ]
        # Every row of a has its equal in b (ids are unique): equal counts make the sets equal.
        out.update(s for s in batch if counts[0].get(s, 0) != counts[1].get(s, 0))
        present = [
            {
                r[0]
                for r in conn.execute(f"SELECT id FROM {side}.sessions WHERE id IN ({qs})", batch)
            }
            for side in (a, b)
        ]
        out.update(s for s in batch if s not in present[0] or s not in present[1])
        out.update(
            r[0]
            for r in conn.execute(
                f"SELECT x.id FROM {a}.sessions x JOIN {b}.sessions y ON y.id = x.id"
                f" WHERE x.id IN ({qs}) AND ({sdiff or '0'})",
                batch,
            )
        )
    if out:
        # A copy may hold a message under another id (a taken id was renumbered): compare those
        # sessions again by every value but the id, uid and content included.
        again = sorted(out)
        mine = _fingerprints(conn, a, again, msg_cols, session_cols, with_ids=False)
        theirs = _fingerprints(conn, b, again, msg_cols, session_cols, with_ids=False)
        out = {s for s in again if s not in mine or mine.get(s) != theirs.get(s)}
    return out


# --- groups -------------------------------------------------------------------------------


def session_groups(conn: sqlite3.Connection, schema: str = "main") -> dict[str, frozenset[str]]:
    """Map every session to its group: the connected component of parent and delegate links."""
    marker = marker_sql("", DELEGATE_MARKER)
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:
            parent[x], x = root, parent[x]
        return root

    ids: list[str] = []
    links: list[tuple[str, Any]] = []
    for sid, up, delegated_from in conn.execute(
        f"SELECT id, parent_session_id, CASE WHEN instr(model_config, '{DELEGATE_MARKER}') > 0"
        f" THEN {marker} END FROM {schema}.sessions"
    ):
        ids.append(sid)
        links += [(sid, up), (sid, delegated_from)]
    known = set(ids)
    for a, b in links:
        if isinstance(b, str) and b in known:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[ra] = rb
    members: dict[str, set[str]] = {}
    for sid in ids:
        members.setdefault(find(sid), set()).add(sid)
    out: dict[str, frozenset[str]] = {}
    for group in members.values():
        frozen = frozenset(group)
        for sid in group:
            out[sid] = frozen
    return out


@dataclass(frozen=True)
class Group:
    """Sessions that move together, and the vault year they go to."""

    ids: tuple[str, ...]
    year: str
    messages: int
    last_active: float


@dataclass
class MovePlan:
    """What a move would take, and what it keeps back and why."""

    cutoff: float
    groups: list[Group]
    busy: dict[str, str] = field(default_factory=dict)  # session id -> why it is busy
    in_use: list[str] = field(default_factory=list)  # held by the agent (lock or lease)
    held_back: int = 0  # groups with an eligible member kept because another member is not

    @property
    def session_ids(self) -> list[str]:
        """Every session the plan moves."""
        return [sid for g in self.groups for sid in g.ids]


def _activity(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    expr = last_activity_sql(conn)
    for batch in chunks(ids):
        for sid, active in conn.execute(
            f"SELECT s.id, {expr} FROM sessions s WHERE s.id IN ({marks(len(batch))})", batch
        ):
            out[sid] = float(active or 0)
    return out


def _message_counts(conn: sqlite3.Connection, schema: str, ids: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for batch in chunks(ids):
        for sid, n in conn.execute(
            f"SELECT session_id, count(*) FROM {schema}.messages"
            f" WHERE session_id IN ({marks(len(batch))}) GROUP BY session_id",
            batch,
        ):
            out[sid] = int(n)
    return out


def _blocked(conn: sqlite3.Connection, ids: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """Return the sessions with open ledger work (and why) and those the agent is using."""
    busy: dict[str, list[Any]] = {}
    for row in open_work_in(conn, ids):
        busy.setdefault(row.session_id, []).append(row)
    return {sid: busy_message(sid, rows) for sid, rows in busy.items()}, in_use(conn, ids)


def _movable(
    conn: sqlite3.Connection,
    cutoff: float,
    sources: Sequence[str],
    within: Sequence[str] | None = None,
) -> tuple[list[frozenset[str]], dict[str, str], list[str], int]:
    """Return the whole groups that may move now, the busy and in-use sessions, and how many
    groups were held back by a member that may not."""
    eligible = {sid for sid, _ in eligible_sessions_in(conn, cutoff, PruneScope(), within)}
    groups = session_groups(conn)
    seen: set[frozenset[str]] = set()
    candidates: list[frozenset[str]] = []
    held = 0
    for sid in sorted(eligible):
        group = groups.get(sid)
        if group is None or group in seen:
            continue
        seen.add(group)
        if within is not None and not group <= set(within):
            held += 1
            continue
        if not group <= eligible:
            held += 1
            continue
        candidates.append(group)
    if sources:
        wanted = set(sources)
        source_of: dict[str, str] = {}
        for batch in chunks(sorted(set().union(*candidates)) if candidates else []):
            source_of.update(
                conn.execute(
                    f"SELECT id, source FROM sessions WHERE id IN ({marks(len(batch))})", batch
                ).fetchall()
            )
        candidates = [g for g in candidates if any(source_of.get(s) in wanted for s in g)]
    flat = sorted(set().union(*candidates)) if candidates else []
    busy, using = _blocked(conn, flat)
    stop = set(busy) | set(using)
    if stop:
        kept = [g for g in candidates if g & stop]
        held += len(kept)
        candidates = [g for g in candidates if not g & stop]
    return candidates, busy, using, held


def plan_move(
    live: Store,
    older_than_days: float,
    *,
    sources: Sequence[str] = (),
    now: float | None = None,
) -> MovePlan:
    """Choose the groups a move takes: every member ended, unpinned, idle and free."""
    if older_than_days < 0:
        raise ValueError("older_than_days must not be negative")
    cutoff = (time.time() if now is None else float(now)) - float(older_than_days) * DAY_S
    with live.snapshot() as conn:
        candidates, busy, using, held = _movable(conn, cutoff, sources)
        flat = sorted(set().union(*candidates)) if candidates else []
        active = _activity(conn, flat)
        counts = _message_counts(conn, "main", flat)
    groups = []
    for g in candidates:
        last = max(active.get(s, 0.0) for s in g)
        ids = tuple(sorted(g))
        groups.append(Group(ids, year_of(last), sum(counts.get(s, 0) for s in ids), last))
    groups.sort(key=lambda g: (g.year, g.last_active, g.ids))
    return MovePlan(cutoff, groups, busy, using, held)


# --- vault stores -------------------------------------------------------------------------


def _shadow_tables(conn: sqlite3.Connection, schema: str = "main") -> set[str]:
    """Return the names of the FTS shadow tables (made by their virtual tables themselves)."""
    try:
        return {r[1] for r in conn.execute(f"PRAGMA {schema}.table_list") if str(r[2]) == "shadow"}
    except sqlite3.DatabaseError:  # SQLite before 3.37: by name
        rows = conn.execute(f"SELECT name, sql FROM {schema}.sqlite_master WHERE type='table'")
        tables = {n: s or "" for n, s in rows}
        virtual = {n for n, s in tables.items() if s.upper().startswith("CREATE VIRTUAL")}
        return {n for n in tables if shadow_of(n, virtual)}


def _schema_rows(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """Return (type, name, sql) of the store's own objects, in creation order."""
    shadow = _shadow_tables(conn)
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY rowid").fetchall()
    out = [
        (str(t), str(n), str(s))
        for t, n, s in rows
        if s
        and not str(n).startswith("sqlite_")
        and n not in shadow
        and not is_litestream_table(str(n))  # Litestream's, in a replicated store
    ]
    rank = {"table": 0, "index": 2, "view": 3, "trigger": 4}

    def order(row: tuple[str, str, str]) -> int:
        virtual = row[0] == "table" and row[2].upper().startswith("CREATE VIRTUAL")
        return 1 if virtual else rank.get(row[0], 5)

    return sorted(out, key=order)  # stable: creation order within each kind


def _carried_meta(conn: sqlite3.Connection) -> list[tuple[str, Any]]:
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'state_meta'").fetchone():
        return []
    return [
        (k, v)
        for k, v in conn.execute("SELECT key, value FROM state_meta")
        if k not in _FILE_META_KEYS and not str(k).startswith(_FILE_META_PREFIXES)
    ]


def create_vault_store(live: Store, path: Path) -> None:
    """Create a vault store in the live store's layout at path (atomically: built aside)."""
    ensure_private_dir(path.parent)
    temp = path.with_name(f".{path.name}.new-{os.getpid()}")
    # Half-made files of killed runs (the vault lock says no other run is making one): never
    # visible as a store, never anyone's live file.
    for leftover in path.parent.glob(f".{path.name}.new-*"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
    with live.snapshot() as conn:
        rows = _schema_rows(conn)
        versions = conn.execute("SELECT * FROM schema_version").fetchall()
        carried = _carried_meta(conn)
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        header = {k: int(conn.execute(f"PRAGMA {k}").fetchone()[0]) for k in ("application_id",)}
    store = create_bare_store(temp, page_size=page_size, journal_mode="delete")
    try:

        def lay_out(conn: sqlite3.Connection) -> None:
            for _kind, _name, sql in rows:
                conn.execute(sql)
            if versions:
                conn.executemany(
                    f"INSERT INTO schema_version VALUES ({marks(len(versions[0]))})",
                    [tuple(r) for r in versions],
                )
            if carried:
                conn.executemany(
                    "INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", carried
                )
            if cjk.is_installed(conn):
                meta.put(conn, cjk.HIGH_WATER_KEY, 0)

        store.write(lay_out)
        for key, value in header.items():
            if value:
                store.conn.execute(f"PRAGMA {key} = {value}")
    finally:
        store.close()
    _step("created")
    os.replace(temp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a crash
    finally:
        os.close(fd)


def _column_def(row: sqlite3.Row | tuple[Any, ...]) -> str | None:
    """Return an ADD COLUMN definition for a PRAGMA table_info row (None: cannot be added)."""
    _cid, name, kind, notnull, default, _pk = tuple(row)[:6]
    text = quote(str(name)) + (f" {kind}" if kind else "")
    if default is not None:
        text += f" DEFAULT {default}"
    if notnull:
        if default is None:
            return None
        text += " NOT NULL"
    return text


def _align_columns(vault: Store, live: Store) -> None:
    """Give the vault store every column (and copied table) the live store has gained."""

    def fn(conn: sqlite3.Connection) -> None:
        for table in (*COPIED_TABLES, PROMPTS_TABLE):
            live_info = live.conn.execute(f"PRAGMA table_info({quote(table)})").fetchall()
            if not live_info:
                continue
            have = {r[1] for r in conn.execute(f"PRAGMA table_info({quote(table)})")}
            if not have:
                row = live.conn.execute(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
                ).fetchone()
                if row is not None and row[0]:
                    conn.execute(row[0])
                continue
            for info in live_info:
                if info[1] not in have and (ddl := _column_def(info)) is not None:
                    conn.execute(f"ALTER TABLE {quote(table)} ADD COLUMN {ddl}")

    vault.write(fn)
    vault.forget_columns()


def _common(conn: sqlite3.Connection, table: str, a: str, b: str) -> list[str]:
    right = set(_columns(conn, b, table))
    return [c for c in _columns(conn, a, table) if c in right]


@contextlib.contextmanager
def _attached(store: Store, path: Path, name: str) -> Iterator[None]:
    """Attach another store read-only to this handle's connection for the block."""
    with store.lock:
        store.conn.execute(f"ATTACH DATABASE ? AS {name}", (read_only_uri(path),))
        try:
            yield
        finally:
            store.conn.execute(f"DETACH DATABASE {name}")


def _delete_copies(conn: sqlite3.Connection, schema: str, ids: Sequence[str]) -> int:
    """Delete these sessions' rows from a vault store (inside the caller's transaction)."""
    gone = 0
    for batch in chunks(ids):
        qs = marks(len(batch))
        conn.execute(f"DELETE FROM {schema}.messages WHERE session_id IN ({qs})", batch)
        if conn.execute(
            f"SELECT 1 FROM {schema}.sqlite_master WHERE name = 'session_model_usage'"
        ).fetchone():
            conn.execute(
                f"DELETE FROM {schema}.session_model_usage WHERE session_id IN ({qs})", batch
            )
        conn.execute(
            f"UPDATE {schema}.sessions SET parent_session_id = NULL"
            f" WHERE parent_session_id IN ({qs}) AND id NOT IN ({qs})",
            [*batch, *batch],
        )
        gone += conn.execute(f"DELETE FROM {schema}.sessions WHERE id IN ({qs})", batch).rowcount
    return gone


def _parents_first(conn: sqlite3.Connection, schema: str, ids: Sequence[str]) -> list[str]:
    """Order sessions so that each comes after its parent (foreign keys hold on insert)."""
    parent: dict[str, str | None] = {}
    for batch in chunks(ids):
        parent.update(
            conn.execute(
                f"SELECT id, parent_session_id FROM {schema}.sessions"
                f" WHERE id IN ({marks(len(batch))})",
                batch,
            ).fetchall()
        )
    depth: dict[str, int] = {}

    def level(sid: str) -> int:
        chain, seen = [], set()
        x: str | None = sid
        while x is not None and x in parent and x not in depth and x not in seen:
            seen.add(x)
            chain.append(x)
            x = parent[x]
        base = depth.get(x, -1) if x is not None else -1
        for node in reversed(chain):
            base += 1
            depth[node] = base
        return depth[sid]

    return sorted(parent, key=lambda s: (level(s), s))


def _copy_rows(
    conn: sqlite3.Connection,
    src: str,
    dst: str,
    ids: Sequence[str],
    *,
    keep_ids: bool = True,
    catch_up: bool = True,
) -> int:
    """Copy these sessions' rows from schema src to schema dst (caller's transaction); return
    how many messages got new ids (their ids were taken in dst)."""
    ordered = _parents_first(conn, src, ids)
    cols = _common(conn, "sessions", src, dst)
    names = ", ".join(map(quote, cols))
    # Titles are unique in every layout: one the other side already uses gets the id appended.
    values = ", ".join(
        f"CASE WHEN EXISTS (SELECT 1 FROM {dst}.sessions t WHERE t.title = s.title)"
        " THEN s.title || ' [' || s.id || ']' ELSE s.title END"
        if c == "title"
        else f"s.{quote(c)}"
        for c in cols
    )
    if (
        _has(conn, src, PROMPTS_TABLE)
        and _has(conn, dst, PROMPTS_TABLE)
        and ("system_prompt_hash" in cols)
    ):
        # Before the sessions: R30/R31 declare sessions.system_prompt_hash REFERENCES it.
        pcols = ", ".join(map(quote, _common(conn, PROMPTS_TABLE, src, dst)))
        for batch in chunks(ids):
            conn.execute(
                f"INSERT OR IGNORE INTO {dst}.{PROMPTS_TABLE} ({pcols}) SELECT {pcols}"
                f" FROM {src}.{PROMPTS_TABLE} WHERE hash IN (SELECT system_prompt_hash FROM"
                f" {src}.sessions WHERE id IN ({marks(len(batch))}))",
                batch,
            )
    for batch in chunks(ordered, 1):  # parents first, one statement each keeps the order
        conn.execute(
            f"INSERT INTO {dst}.sessions ({names}) SELECT {values} FROM {src}.sessions s"
            " WHERE s.id = ?",
            batch,
        )
    mcols = _common(conn, "messages", src, dst)
    written = _insert_written(conn, dst, mcols)
    renumbered = 0
    for batch in chunks(ids):
        qs = marks(len(batch))
        taken: list[int] = []
        if keep_ids:
            taken = [
                r[0]
                for r in conn.execute(
                    f"SELECT m.id FROM {src}.messages m JOIN {dst}.messages t ON t.id = m.id"
                    f" WHERE m.session_id IN ({qs})",
                    batch,
                )
            ]
        names = ", ".join(map(quote, mcols))
        conn.execute(
            f"INSERT INTO {dst}.messages ({names}) SELECT {names} FROM {src}.messages"
            f" WHERE session_id IN ({qs}) AND id NOT IN (SELECT value FROM json_each(?))"
            " ORDER BY id",
            [*batch, _json_ints(taken)],
        )
        pairs: list[tuple[int, int]] = []
        if taken:
            rest = [c for c in mcols if c != "id"]
            names = ", ".join(map(quote, rest))
            top = conn.execute(f"SELECT coalesce(max(id), 0) FROM {dst}.messages").fetchone()[0]
            conn.execute(
                f"INSERT INTO {dst}.messages ({names}) SELECT {names} FROM {src}.messages"
                " WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id",
                [_json_ints(taken)],
            )
            new_ids = [
                r[0]
                for r in conn.execute(
                    f"SELECT id FROM {dst}.messages WHERE id > ? ORDER BY id", (top,)
                )
            ]
            pairs = list(zip(sorted(taken), new_ids, strict=True))
            renumbered += len(taken)
        _restore_written(conn, src, dst, written, batch, pairs)
        if _has(conn, src, "session_model_usage") and _has(conn, dst, "session_model_usage"):
            ucols = ", ".join(map(quote, _common(conn, "session_model_usage", src, dst)))
            conn.execute(
                f"INSERT OR IGNORE INTO {dst}.session_model_usage ({ucols}) SELECT {ucols}"
                f" FROM {src}.session_model_usage WHERE session_id IN ({qs})",
                batch,
            )
    if catch_up and dst == "main" and meta.get(conn, cjk.HIGH_WATER_KEY) is not None:
        cjk.catch_up(conn)  # our CJK index is filled by the library, not by triggers
    return renumbered


_WINDOW_LOW = -(2**62)


def _defer_indexing(conn: sqlite3.Connection) -> bool:
    """Close the rebuild window of the vault store's word and substring indexes, so the rows
    this transaction copies are indexed in bulk by :func:`_index_copied`; tell whether it did.

    Only the agent's gated external layout can defer (see :mod:`bulkload`); any other layout,
    or a rebuild already pending, keeps its per-row triggers. No other connection ever sees the
    closed window: :func:`_index_copied` reopens it in the same transaction.
    """
    idx = fts.indexes(conn)
    if idx.stale or idx.high_water is not None or idx.progress is not None:
        return False
    expected = ((idx.word, fts.WORD_SOURCE), (idx.trigram, fts.TRIGRAM_SOURCE))
    for index, source in expected:
        if index is None or index.flavor != "external" or index.content != source:
            return False
    if not all(bulkload._gated(conn, f"{t}_insert") for t in fts.INDEX_TABLES):
        return False
    # Ids in (_WINDOW_LOW, OPEN_TOP] are left to _index_copied; the triggers index any other.
    meta.put(conn, fts.HIGH_WATER_KEY, bulkload.OPEN_TOP)
    meta.put(conn, fts.PROGRESS_KEY, _WINDOW_LOW)
    return True


def _index_copied(conn: sqlite3.Connection, ids: Sequence[str]) -> None:
    """Index these sessions' messages in the vault store's word and substring indexes in one
    statement per index, and reopen the window (same transaction)."""
    idx = fts.indexes(conn)
    saved = {t: bulkload._hashsize(conn, t) for t in fts.INDEX_TABLES}
    for table in fts.INDEX_TABLES:
        bulkload._set_hashsize(conn, table, max(bulkload.BULK_HASHSIZE, saved[table] or 0))
    for index in (idx.word, idx.trigram):
        assert index is not None and index.content is not None
        cols = ", ".join(map(quote, index.columns))
        for batch in chunks(ids):
            conn.execute(
                f"INSERT INTO main.{quote(index.table)}(rowid, {cols}) SELECT id, {cols}"
                f" FROM main.{quote(index.content)} WHERE id IN (SELECT id FROM main.messages"
                f" WHERE session_id IN ({marks(len(batch))}) AND id > ? AND id <= ?)",
                [*batch, _WINDOW_LOW, bulkload.OPEN_TOP],
            )
    for table in fts.INDEX_TABLES:
        bulkload._set_hashsize(conn, table, saved[table])
    meta.delete(conn, fts.HIGH_WATER_KEY, fts.PROGRESS_KEY)


def _cjk_current(conn: sqlite3.Connection) -> bool:
    """Tell whether the vault store's CJK index holds every message (mark at the top, no queue)."""
    hw = meta.get_int(conn, cjk.HIGH_WATER_KEY)
    if hw is None or hw < fts.max_id(conn):
        return False
    return conn.execute(f"SELECT 1 FROM main.{cjk.PENDING_TABLE} LIMIT 1").fetchone() is None


def _cjk_index_copied(conn: sqlite3.Connection, ids: Sequence[str]) -> None:
    """Index the copied messages in the CJK index, which held every other row before the copy
    (see :func:`_cjk_current`), and move its mark to the top (same transaction)."""
    for batch in chunks(ids):
        qs = marks(len(batch))
        # CJK text is never ASCII: a byte count above the character count finds every candidate
        # row in C; _grams_for then decides, exactly as catch-up does.
        rows = conn.execute(
            "SELECT id, content, tool_calls FROM main.messages"
            f" WHERE session_id IN ({qs}) AND (length(CAST(content AS BLOB)) > length(content)"
            " OR length(CAST(tool_calls AS BLOB)) > length(tool_calls))",
            batch,
        ).fetchall()
        docs = [(rid, g) for rid, content, calls in rows if (g := cjk._grams_for(content, calls))]
        conn.executemany(f"INSERT INTO main.{cjk.TABLE}(rowid, grams) VALUES (?, ?)", docs)
        # Copied rows at or below the mark were queued by the insert trigger: indexed now.
        conn.execute(
            f"DELETE FROM main.{cjk.PENDING_TABLE} WHERE id IN"
            f" (SELECT id FROM main.messages WHERE session_id IN ({qs}))",
            batch,
        )
    meta.put(conn, cjk.HIGH_WATER_KEY, fts.max_id(conn))


_ASSIGNED = re.compile(r'"?(\w+)"?\s*=')


def _insert_written(conn: sqlite3.Connection, schema: str, cols: Sequence[str]) -> list[str]:
    """Return the message columns that schema's AFTER INSERT triggers on messages may rewrite
    (R30/R31 fill display_order, R31 mints message_uid), over-approximated from their SQL."""
    found: set[str] = set()
    for (sql,) in conn.execute(
        f"SELECT sql FROM {schema}.sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"
    ):
        text = str(sql or "")
        if re.search(r"\bAFTER\s+INSERT\b", text, re.I) and re.search(
            r"\bUPDATE\s+\"?messages\"?\s", text, re.I
        ):
            found.update(_ASSIGNED.findall(text))
    return [c for c in cols if c in found and c != "id"]


def _restore_written(
    conn: sqlite3.Connection,
    src: str,
    dst: str,
    written: Sequence[str],
    batch: Sequence[str],
    pairs: Sequence[tuple[int, int]],
) -> None:
    """Put back the source's values where dst's insert triggers rewrote a copied row: a copy is
    exact, or verification rightly refuses it (a NULL display_order would come back filled)."""
    qs = marks(len(batch))
    renumbered = _json_ints([new for _old, new in pairs])
    for col in map(quote, written):
        theirs = f"(SELECT s.{col} FROM {src}.messages s WHERE s.id = messages.id)"
        conn.execute(
            f"UPDATE {dst}.messages SET {col} = {theirs} WHERE session_id IN ({qs})"
            f" AND id NOT IN (SELECT value FROM json_each(?)) AND {col} IS NOT {theirs}",
            [*batch, renumbered],
        )
        for old, new in pairs:  # renumbered rows: matched by the order they were inserted in
            conn.execute(
                f"UPDATE {dst}.messages SET {col} = (SELECT {col} FROM {src}.messages"
                " WHERE id = ?) WHERE id = ?",
                (old, new),
            )


def _json_ints(values: Sequence[int]) -> str:
    return "[" + ",".join(str(int(v)) for v in values) + "]"


def _has(conn: sqlite3.Connection, schema: str, table: str) -> bool:
    row = conn.execute(
        f"SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    return row is not None


# --- move ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MoveResult:
    """What a move took into the vault (or, for a dry run, would take)."""

    cutoff: float
    dry_run: bool
    sessions: int
    messages: int
    groups: int
    session_ids: tuple[str, ...]
    by_year: dict[str, dict[str, int]]  # year -> {sessions, messages}
    busy: tuple[dict[str, str], ...] = ()  # kept: open ledger work
    in_use: tuple[str, ...] = ()  # kept: the agent holds a lock or lease on it
    held_back: int = 0  # groups kept because one member may not move
    changed: tuple[str, ...] = ()  # kept: changed while being moved
    finished: int = 0  # sessions of an interrupted move or return completed first
    title_clashes: int = 0  # vaulted titles renamed (another vaulted session had it)
    resumed: tuple[str, ...] = ()  # kept: the agent resumed it; `vault return` joins it first
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Return the result as plain JSON-ready data."""
        out = asdict(self)
        out["session_ids"] = list(self.session_ids)
        out["busy"] = [dict(b) for b in self.busy]
        out["in_use"] = list(self.in_use)
        out["changed"] = list(self.changed)
        out["resumed"] = list(self.resumed)
        out["duration_s"] = round(self.duration_s, 3)
        return out


def _batches(groups: Sequence[Group]) -> Iterator[list[Group]]:
    """Split groups (already by year) into rounds of about BATCH_MESSAGES, one year each."""
    batch: list[Group] = []
    msgs = sessions = 0
    for g in groups:
        if batch and (
            batch[0].year != g.year
            or msgs + g.messages > BATCH_MESSAGES
            or sessions + len(g.ids) > BATCH_SESSIONS
        ):
            yield batch
            batch, msgs, sessions = [], 0, 0
        batch.append(g)
        msgs += g.messages
        sessions += len(g.ids)
    if batch:
        yield batch


def _in_both(live: Store, vault: Store) -> list[str]:
    """Return the session ids the vault store holds that the live store has too."""
    ids = [r[0] for r in vault.conn.execute("SELECT id FROM sessions")]
    there: list[str] = []
    for batch in chunks(ids):
        there += [
            r[0]
            for r in live.conn.execute(
                f"SELECT id FROM sessions WHERE id IN ({marks(len(batch))})", batch
            )
        ]
    return there


@contextlib.contextmanager
def vault_lock(home: Path) -> Iterator[None]:
    """Hold the profile's vault lock (one move or return at a time); refuse when it is held."""
    import fcntl

    where = ensure_private_dir(vault_dir(home))
    # An ordinary lock file of ours, never a store file: closing it drops only this flock.
    fd = os.open(where / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise VaultError(
                "another `hermes vault move` or `return` (or a `hermes backup` of the vault) "
                "is running on this profile",
                hint="Wait for it to finish, then run this again.",
            ) from exc
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def vault_lock_waiting(
    home: Path, patience: float, waiting: Waiting = NO_WAITING, not_done: str = ""
) -> Iterator[None]:
    """Hold the vault lock of a profile whose vault directory exists, waiting up to patience
    seconds for a running move or return to let go of it (told once through waiting).

    A reader's lock (backup): StoreLockedError when the patience runs out, ``not_done`` ending
    its message. A vault this user cannot write has no lock file to take and no move running.
    """
    import fcntl

    from hermes_state.store.errors import StoreLockedError
    from hermes_state.store.lockowners import write_holders_text
    from hermes_state.store.patience import WAIT_NOTICE_S

    lock = vault_dir(home) / ".lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError:  # a read-only vault directory
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)  # flock needs no write
        except OSError:
            yield  # no lock file and none can be made here: no move or return can run
            return
    try:
        started = time.monotonic()
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                if waited >= patience:
                    who = write_holders_text(lock)
                    raise StoreLockedError(
                        f"a `hermes vault move` or `return` kept the vault of {home} locked "
                        f"for {waited:.1f}s (patience {patience:g}s)"
                        + (f" (held by {who})" if who else "")
                        + not_done,
                        hint="Let the move or return finish, then retry (--wait SECONDS "
                        "waits longer).",
                    ) from None
                if not told and waited >= WAIT_NOTICE_S:
                    told = True
                    waiting.tell(lock, waited)
                time.sleep(min(0.05, patience - waited))
        yield
    finally:
        os.close(fd)


def _empty_of_another_layout(live: Store, path: Path) -> bool:
    """Tell whether a vault store holds no session and is not in the live store's layout
    (one a refused or failed move of an older version left: it must not block later moves)."""
    store = open_vault(path, read_only=True, waiting=live.waiting)
    try:
        if store.conn.execute("SELECT 1 FROM sessions LIMIT 1").fetchone() is not None:
            return False
        if store.conn.execute("SELECT 1 FROM messages LIMIT 1").fetchone() is not None:
            return False
        theirs = {(t, n, sql) for t, n, sql in _schema_rows(store.conn)}
    finally:
        store.close()
    with live.snapshot() as conn:
        mine = {(t, n, sql) for t, n, sql in _schema_rows(conn)}
    return theirs != mine


def _remove_store(path: Path) -> None:
    """Remove a vault store file of ours that holds nothing (with its rollback journal)."""
    for leftover in (path, path.with_name(path.name + "-journal")):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()


def _vault_for(
    live: Store, home: Path, year: str, opened: dict[str, Store], created: list[Path]
) -> Store:
    if year not in opened:
        path = vault_dir(home) / f"{year}.db"
        if path.exists() and _empty_of_another_layout(live, path):
            _remove_store(path)
        if not path.exists():
            create_vault_store(live, path)
            created.append(path)
        vault = open_vault(path, waiting=live.waiting)
        # This handle's page cache only (never the live store's): a round's copy touches every
        # index of messages and three FTS indexes; the default 2 MB evicts what the next needs.
        vault.conn.execute(f"PRAGMA main.cache_size = -{VAULT_CACHE_KIB}")
        _align_columns(vault, live)
        opened[year] = vault
    return opened[year]


def _held_any(path: Path, waiting: Waiting) -> bool:
    """Tell whether a vault store holds any session (a store that cannot be read: yes)."""
    try:
        store = open_vault(path, read_only=True, waiting=waiting)
    except (HermesStateError, sqlite3.Error):
        return True
    try:
        return store.conn.execute("SELECT 1 FROM sessions LIMIT 1").fetchone() is not None
    except sqlite3.Error:
        return True
    finally:
        store.close()


def _drop_held_copies(vault: Store, live_path: Path, ids: Sequence[str]) -> tuple[int, list[str]]:
    """Delete the vault copies of these sessions whose every message the live store holds;
    return (sessions dropped, sessions kept because the vault holds history live lacks).

    Checked inside the vault's delete transaction against the live store attached: no copy
    whose content is not in the live store is ever deleted (a resumed session keeps its part).
    """
    if not ids:
        return 0, []
    with _attached(vault, live_path, "live"):

        def drop(conn: sqlite3.Connection) -> tuple[int, list[str]]:
            lacking = vault_twins.unmatched_in(conn, "main", "live", ids)
            held = [s for s in ids if s not in lacking]
            present = {
                r[0]
                for batch in chunks(held)
                for r in conn.execute(
                    f"SELECT id FROM live.sessions WHERE id IN ({marks(len(batch))})", batch
                )
            }
            gone = [s for s in held if s in present]
            return _delete_copies(conn, "main", gone), sorted(lacking)

        result: tuple[int, list[str]] = vault.write(drop)
        return result


def _drop_stale(live: Store, home: Path) -> tuple[int, dict[str, str]]:
    """Delete vault copies of sessions the live store still has, where the copy is stale.

    Such a copy is what a killed move left before its live delete (or a killed return after
    its live copy): the live session is the visible one, so the copy goes. A copy holding
    history the live store lacks is a session the agent resumed: it stays (returned: id ->
    year), and that session does not move until ``vault return`` joins its parts.
    """
    dropped = 0
    resumed: dict[str, str] = {}
    for year, path in vault_paths(home):
        vault = open_vault(path, waiting=live.waiting)
        try:
            n, kept = _drop_held_copies(vault, live.path, _in_both(live, vault))
            dropped += n
            resumed.update((sid, year) for sid in kept)
        finally:
            vault.close()
    return dropped, resumed


def move_sessions(
    live: Store,
    home: Path,
    older_than_days: float,
    *,
    sources: Sequence[str] = (),
    dry_run: bool = False,
    now: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> MoveResult:
    """Move the groups plan_move chooses into the vault (or, dry, say which it would).

    Each round: copy into the year's vault store (one transaction), verify every session there
    against the live rows it came from, then delete from live in one transaction that first
    re-checks each session is unchanged and still may move (a group that changed stays, and its
    copy is dropped). Copies an interrupted run left behind are finished or dropped first.
    """
    started = time.monotonic()
    plan = plan_move(live, older_than_days, sources=sources, now=now)
    by_year: dict[str, dict[str, int]] = {}
    for g in plan.groups:
        slot = by_year.setdefault(g.year, {"sessions": 0, "messages": 0})
        slot["sessions"] += len(g.ids)
        slot["messages"] += g.messages

    def result(ids: Sequence[str], msgs: int, **kw: Any) -> MoveResult:
        return MoveResult(
            cutoff=plan.cutoff,
            dry_run=dry_run,
            sessions=len(ids),
            messages=msgs,
            groups=kw.pop("groups", len(plan.groups)),
            session_ids=tuple(ids),
            by_year=kw.pop("by_year", by_year),
            busy=tuple({"session_id": k, "message": v} for k, v in plan.busy.items()),
            in_use=tuple(plan.in_use),
            held_back=plan.held_back,
            duration_s=time.monotonic() - started,
            **kw,
        )

    if dry_run:
        return result(plan.session_ids, sum(g.messages for g in plan.groups))
    with vault_lock(home):
        return _move_locked(live, home, plan, progress, result)


def _move_locked(
    live: Store,
    home: Path,
    plan: MovePlan,
    progress: Callable[[int, int], None] | None,
    result: Callable[..., MoveResult],
) -> MoveResult:
    finished, resumed = _drop_stale(live, home)
    if resumed:
        # One conversation in two stores: it moves only once `vault return` has joined it.
        plan = replace(
            plan,
            groups=[g for g in plan.groups if resumed.keys().isdisjoint(g.ids)],
            held_back=plan.held_back
            + sum(1 for g in plan.groups if not resumed.keys().isdisjoint(g.ids)),
        )
    opened: dict[str, Store] = {}
    created: list[Path] = []
    moved: list[str] = []
    changed: list[str] = []
    msgs = clashes = 0
    done_by_year: dict[str, dict[str, int]] = {}
    total = len(plan.session_ids)
    try:
        if progress is not None:
            progress(0, total)
        for batch in _batches(plan.groups):
            vault = _vault_for(live, home, batch[0].year, opened, created)
            going, stayed, n, clash = _move_round(live, vault, batch, plan.cutoff)
            moved += going
            changed += stayed
            msgs += n
            clashes += clash
            slot = done_by_year.setdefault(batch[0].year, {"sessions": 0, "messages": 0})
            slot["sessions"] += len(going)
            slot["messages"] += n
            if progress is not None:
                progress(len(moved) + len(changed), total)
    finally:
        for vault in opened.values():
            vault.close()
        # A store this run made and left empty (it failed or was refused) is not left behind.
        for path in created:
            if not _held_any(path, live.waiting):
                _remove_store(path)
    done = set(moved)
    return result(
        moved,
        msgs,
        groups=sum(1 for g in plan.groups if not done.isdisjoint(g.ids)),
        by_year=done_by_year,
        changed=tuple(changed),
        finished=finished,
        title_clashes=clashes,
        resumed=tuple(sorted(resumed)),
    )


def _move_round(
    live: Store, vault: Store, batch: Sequence[Group], cutoff: float
) -> tuple[list[str], list[str], int, int]:
    """Copy, verify, delete one round of groups; return (moved, changed, messages, clashes).

    Both checks compare the rows themselves in SQL, every value exactly: the copy against the
    live snapshot it was read from (inside the copy's transaction: a difference is a bad copy),
    then, inside each live delete transaction, the committed vault rows against the live rows
    of that moment (a difference is a change meanwhile: that group stays live).
    """
    ids = [sid for g in batch for sid in g.ids]
    with _attached(vault, live.path, "live"):
        msg_cols = _common(vault.conn, "messages", "live", "main")
        ses_cols = _common(vault.conn, "sessions", "live", "main")

        def copy(conn: sqlite3.Connection) -> int:
            lacking = vault_twins.unmatched_in(conn, "main", "live", ids)
            if lacking:
                raise VaultError(
                    f"{len(lacking)} session(s) due to move hold history in {vault.path.name}"
                    f" that the live store lacks (first: {min(lacking)}); nothing was moved",
                    hint="`hermes vault return ID` joins a resumed session's parts first.",
                )
            _delete_copies(conn, "main", ids)  # an earlier, interrupted copy: made again
            clash = _title_clashes(conn, "live", "main", ids)
            deferred = _defer_indexing(conn)
            cjk_bulk = cjk.is_installed(conn) and _cjk_current(conn)
            _copy_rows(conn, "live", "main", ids, catch_up=not cjk_bulk)
            if deferred:
                _index_copied(conn, ids)
            if cjk_bulk:
                _cjk_index_copied(conn, ids)
            wrong = _mismatched(conn, "main", "live", ids, msg_cols, ses_cols)
            if wrong:
                first = sorted(wrong)[0]
                raise VaultVerifyError(
                    f"the vault copy of {len(wrong)} session(s) did not match the live rows"
                    f" (first: {first}); the copies were dropped and nothing left the live store"
                )
            return clash

        clashes = vault.write(copy)
    _step("copied")
    _step("verified")
    going: list[str] = []
    stayed: list[str] = []
    n = 0
    with _attached(live, vault.path, "vault"):
        for part in _delete_rounds(batch):
            part_ids = [sid for g in part for sid in g.ids]

            def delete(
                conn: sqlite3.Connection,
                part: Sequence[Group] = part,
                part_ids: list[str] = part_ids,
            ) -> tuple[list[str], list[str], int]:
                differ = _mismatched(conn, "main", "vault", part_ids, msg_cols, ses_cols)
                candidates, _busy, _using, _held = _movable(conn, cutoff, (), within=part_ids)
                may = set().union(*candidates) if candidates else set()
                ok: list[str] = []
                kept: list[str] = []
                for g in part:
                    fine = all(s in may and s not in differ for s in g.ids)
                    (ok if fine else kept).extend(g.ids)
                return ok, kept, delete_sessions_in(conn, ok).messages

            ok, kept, done = live.write(delete)
            going += ok
            stayed += kept
            n += done
    _step("deleted")
    if stayed:
        vault.write(lambda c: _delete_copies(c, "main", stayed))
    return going, stayed, n, clashes


def _delete_rounds(batch: Sequence[Group]) -> Iterator[list[Group]]:
    """Split a round's groups into live delete transactions of about DELETE_MESSAGES each."""
    part: list[Group] = []
    msgs = 0
    for g in batch:
        if part and msgs + g.messages > DELETE_MESSAGES:
            yield part
            part, msgs = [], 0
        part.append(g)
        msgs += g.messages
    if part:
        yield part


def _title_clashes(conn: sqlite3.Connection, src: str, dst: str, ids: Sequence[str]) -> int:
    """Count the titles of these src sessions that dst already uses (renamed on the copy)."""
    count = 0
    for batch in chunks(ids):
        count += int(
            conn.execute(
                f"SELECT count(*) FROM {src}.sessions s WHERE s.id IN ({marks(len(batch))})"
                f" AND s.title IS NOT NULL AND EXISTS (SELECT 1 FROM {dst}.sessions t"
                " WHERE t.title = s.title)",
                batch,
            ).fetchone()[0]
        )
    return count


# --- return -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReturnResult:
    """What a return brought back into the live store."""

    sessions: int
    messages: int
    session_ids: tuple[str, ...]
    with_group: tuple[str, ...]  # sessions returned because they share a group with one asked
    kept_ids: int
    renumbered: int  # messages whose ids were taken in the live store got new ones
    title_clashes: int
    finished: int  # sessions an interrupted move or return had left in both places
    not_found: tuple[str, ...] = ()
    joined: tuple[str, ...] = ()  # resumed by the agent: the vault part joined the live one
    already_live: tuple[str, ...] = ()  # asked for, but only the live store has them

    def to_dict(self) -> dict[str, Any]:
        """Return the result as plain JSON-ready data."""
        out = asdict(self)
        for key in ("session_ids", "with_group", "not_found", "joined", "already_live"):
            out[key] = list(out[key])
        return out


@dataclass
class _Returned:
    ids: list[str]
    extra: list[str]
    messages: int
    renumbered: int
    clashes: int
    finished: int
    joined: list[str]


# Session counters a joined session adds up from its two parts (as the usage figures count).
_USAGE_SUMMED = (*usage_report.COUNTERS, "estimated_cost_usd", "actual_cost_usd")
_SUMMED = ("tool_call_count", *_USAGE_SUMMED)
_USAGE_KEY = ("session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task")


def _copy_messages(conn: sqlite3.Connection, src: str, dst: str, ids: Sequence[int]) -> int:
    """Copy these messages (by id) from src to dst, keeping each id dst has free; return how
    many got a new id (caller's transaction)."""
    if not ids:
        return 0
    mcols = _common(conn, "messages", src, dst)
    written = _insert_written(conn, dst, mcols)
    taken = [
        int(r[0])
        for r in conn.execute(
            f"SELECT id FROM {dst}.messages WHERE id IN (SELECT value FROM json_each(?))",
            (_json_ints(ids),),
        )
    ]
    free = sorted(set(ids) - set(taken))
    names = ", ".join(map(quote, mcols))
    conn.execute(
        f"INSERT INTO {dst}.messages ({names}) SELECT {names} FROM {src}.messages"
        " WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id",
        (_json_ints(free),),
    )
    pairs: list[tuple[int, int]] = []
    if taken:
        rest = ", ".join(quote(c) for c in mcols if c != "id")
        top = conn.execute(f"SELECT coalesce(max(id), 0) FROM {dst}.messages").fetchone()[0]
        conn.execute(
            f"INSERT INTO {dst}.messages ({rest}) SELECT {rest} FROM {src}.messages"
            " WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id",
            (_json_ints(taken),),
        )
        new_ids = [
            r[0]
            for r in conn.execute(f"SELECT id FROM {dst}.messages WHERE id > ? ORDER BY id", (top,))
        ]
        pairs = list(zip(sorted(taken), new_ids, strict=True))
    for col in map(quote, written):
        theirs = f"(SELECT s.{col} FROM {src}.messages s WHERE s.id = messages.id)"
        conn.execute(
            f"UPDATE {dst}.messages SET {col} = {theirs} WHERE id IN"
            f" (SELECT value FROM json_each(?)) AND {col} IS NOT {theirs}",
            (_json_ints(free),),
        )
        for old, new in pairs:
            conn.execute(
                f"UPDATE {dst}.messages SET {col} = (SELECT {col} FROM {src}.messages"
                " WHERE id = ?) WHERE id = ?",
                (old, new),
            )
    return len(taken)


def _join(conn: sqlite3.Connection, src: str, dst: str, sid: str) -> tuple[int, int]:
    """Join a resumed session's part in src into its part in dst: the messages dst lacks, the
    counters added up, the earlier start, a title if dst has none; return (messages copied,
    of those renumbered). Caller's transaction."""
    ids = vault_twins.unmatched_ids(conn, src, dst, sid)
    renumbered = _copy_messages(conn, src, dst, ids)
    cols = set(_common(conn, "sessions", src, dst))
    other = f"(SELECT o.{{c}} FROM {src}.sessions o WHERE o.id = :sid)"
    sets = [
        f"{quote(c)} = CASE WHEN {quote(c)} IS NULL AND {other.format(c=quote(c))} IS NULL"
        f" THEN NULL ELSE coalesce({quote(c)}, 0) + coalesce({other.format(c=quote(c))}, 0) END"
        for c in _SUMMED
        if c in cols
    ]
    if "message_count" in cols:
        sets.append("message_count = coalesce(message_count, 0) + :copied")
    if "started_at" in cols:
        sets.append(
            f"started_at = min(started_at, coalesce({other.format(c='started_at')}, started_at))"
        )
    if "title" in cols:
        theirs = other.format(c="title")
        sets.append(
            f"title = CASE WHEN title IS NULL AND NOT EXISTS (SELECT 1 FROM {dst}.sessions t"
            f" WHERE t.title = {theirs}) THEN {theirs} ELSE title END"
        )
    if "parent_session_id" in cols:
        up = other.format(c="parent_session_id")
        sets.append(
            f"parent_session_id = coalesce(parent_session_id, (SELECT p.id FROM {dst}.sessions p"
            f" WHERE p.id = {up} AND p.id <> :sid))"
        )
    if sets:
        conn.execute(
            f"UPDATE {dst}.sessions SET {', '.join(sets)} WHERE id = :sid",
            {"sid": sid, "copied": len(ids)},
        )
    if _has(conn, src, "session_model_usage") and _has(conn, dst, "session_model_usage"):
        _join_usage(conn, src, dst, sid)
    return len(ids), renumbered


def _join_usage(conn: sqlite3.Connection, src: str, dst: str, sid: str) -> None:
    """Add a session part's per-model usage rows to the other part's (caller's transaction)."""
    cols = _common(conn, "session_model_usage", src, dst)
    key = [c for c in _USAGE_KEY if c in cols]
    same = " AND ".join(f"d.{quote(c)} IS s.{quote(c)}" for c in key)
    sums = [c for c in _USAGE_SUMMED if c in cols]
    if sums:
        sets = ", ".join(
            f"{quote(c)} = {quote(c)} + (SELECT s.{quote(c)} FROM {src}.session_model_usage s"
            f" WHERE {same.replace('d.', f'{dst}.session_model_usage.')})"
            for c in sums
        )
        conn.execute(
            f"UPDATE {dst}.session_model_usage SET {sets} WHERE session_id = ? AND EXISTS"
            f" (SELECT 1 FROM {src}.session_model_usage s"
            f" WHERE {same.replace('d.', f'{dst}.session_model_usage.')})",
            (sid,),
        )
    names = ", ".join(map(quote, cols))
    conn.execute(
        f"INSERT INTO {dst}.session_model_usage ({names}) SELECT {names}"
        f" FROM {src}.session_model_usage s WHERE s.session_id = ? AND NOT EXISTS"
        f" (SELECT 1 FROM {dst}.session_model_usage d WHERE {same})",
        (sid,),
    )


def _return_from(live: Store, path: Path, asked: set[str]) -> _Returned:
    """Return the groups of the asked sessions from one vault store.

    A session the live store has too is either a stale copy (every vault message is live:
    dropped) or one the agent resumed (joined: the vault part's messages and counters go into
    the live session). The vault copy is deleted only after the live store holds all of it.
    """
    vault = open_vault(path, waiting=live.waiting)
    try:
        groups = session_groups(vault.conn)
        ids = sorted(set().union(*(groups[s] for s in asked if s in groups)))
        both = sorted(set(_in_both(live, vault)) & set(ids))
        fresh = [s for s in ids if s not in both]
        with _attached(live, path, "vault"):
            msg_cols = _common(live.conn, "messages", "vault", "main")
            ses_cols = _common(live.conn, "sessions", "vault", "main")

            def same(conn: sqlite3.Connection, which: Sequence[str]) -> list[str]:
                mine = _fingerprints(conn, "main", which, msg_cols, ses_cols, with_ids=False)
                theirs = _fingerprints(conn, "vault", which, msg_cols, ses_cols, with_ids=False)
                return [s for s in which if mine.get(s) != theirs.get(s)]

            def copy(conn: sqlite3.Connection) -> tuple[int, int, int, list[str]]:
                resumed = sorted(vault_twins.unmatched_in(conn, "vault", "main", both))
                renumbered = 0
                for sid in resumed:
                    renumbered += _join(conn, "vault", "main", sid)[1]
                clash = _title_clashes(conn, "vault", "main", fresh)
                renumbered += _copy_rows(conn, "vault", "main", fresh)
                if resumed and meta.get(conn, cjk.HIGH_WATER_KEY) is not None:
                    cjk.catch_up(conn)
                return renumbered, sum(_message_counts(conn, "vault", ids).values()), clash, resumed

            renumbered, count, clashes, joined = live.write(copy)
            with live.snapshot() as conn:
                wrong = same(conn, fresh)
        if wrong:
            raise VaultVerifyError(
                f"the returned copy of {wrong[0]} does not match its vault rows; the vault "
                "copy was kept",
                hint="`hermes vault check` reports the state; the live copy is the visible one.",
            )
        _step("returned")
        _dropped, kept = _drop_held_copies(vault, live.path, ids)
        if kept:
            raise VaultVerifyError(
                f"the live store lacks messages of {kept[0]} that {path.name} holds; the vault"
                " copy was kept",
                hint="Run `hermes vault return` again; `hermes vault check` reports the state.",
            )
        _step("unvaulted")
        return _Returned(
            ids,
            [s for s in ids if s not in asked],
            count,
            renumbered,
            clashes,
            len(both) - len(joined),
            joined,
        )
    finally:
        vault.close()


def return_sessions(live: Store, home: Path, refs: Sequence[str]) -> ReturnResult:
    """Bring vaulted sessions (each with its whole group) back into the live store.

    A session is named as every command names one (id, unique prefix across the profile's
    stores, exact title). Session ids, message ids and uids are kept; a message id the live
    store has given to another message meanwhile gets a new one (counted). A session already
    in both places is an interrupted move or return (its vault copy is dropped) or one the
    agent resumed (its two parts are joined). A session only the live store has is reported
    as already there, not as an error: a return run again after it finished is a no-op.
    """
    from hermes_state.vault import profile_stores

    by_path: dict[Path, set[str]] = {}
    already: list[str] = []
    missing: list[str] = []
    paths = dict(vault_paths(home))
    for ref in refs:
        try:
            found = profile_stores.locate(live, home, ref, live.waiting)
        except SessionNotFoundError:
            missing.append(ref)
            continue
        years = (*found.vault, *found.stale)
        if not years:
            already.append(found.session_id)
        for year in years:
            by_path.setdefault(paths[year], set()).add(found.session_id)
    if missing and not by_path and not already:
        raise SessionNotFoundError(
            f"no vaulted session {missing[0]!r}",
            hint="`hermes vault list` shows the vault; `hermes sessions search` finds sessions.",
        )
    with vault_lock(home):
        parts = [_return_from(live, path, asked) for path, asked in sorted(by_path.items())]
    messages = sum(p.messages for p in parts)
    renumbered = sum(p.renumbered for p in parts)
    return ReturnResult(
        sessions=len({s for p in parts for s in p.ids}),
        messages=messages,
        session_ids=tuple(dict.fromkeys(s for p in parts for s in p.ids)),
        with_group=tuple(dict.fromkeys(s for p in parts for s in p.extra)),
        kept_ids=messages - renumbered,
        renumbered=renumbered,
        title_clashes=sum(p.clashes for p in parts),
        finished=sum(p.finished for p in parts),
        not_found=tuple(missing),
        joined=tuple(dict.fromkeys(s for p in parts for s in p.joined)),
        already_live=tuple(dict.fromkeys(already)),
    )


# --- list and check -----------------------------------------------------------------------


@dataclass(frozen=True)
class VaultStoreInfo:
    """One vault store: what it holds and how big it is."""

    year: str
    path: str
    sessions: int
    messages: int
    bytes: int
    first_started: float | None
    last_active: float | None
    hidden: int = 0  # stale copies of sessions the live store has (invisible here)
    resumed: int = 0  # sessions the agent resumed: their history here is read with the live part

    def to_dict(self) -> dict[str, Any]:
        """Return the store's figures as plain JSON-ready data."""
        return asdict(self)


def _held(store: Store, ids: Sequence[str]) -> set[str]:
    """Return which of these session ids the store has."""
    out: set[str] = set()
    for batch in chunks(ids):
        out.update(
            r[0]
            for r in store.conn.execute(
                f"SELECT id FROM sessions WHERE id IN ({marks(len(batch))})", batch
            )
        )
    return out


def _live_ids(live: Store | None, ids: Sequence[str]) -> set[str]:
    """Return which of these session ids the live store has."""
    return set() if live is None else _held(live, ids)


def live_ids(live: Store | None, ids: Sequence[str]) -> set[str]:
    """Return which of these session ids the live store has (those are invisible in the vault)."""
    return _live_ids(live, ids)


def list_vault(
    home: Path, live: Store | None = None, waiting: Waiting = NO_WAITING
) -> list[VaultStoreInfo]:
    """Describe every vault store of the profile (read-only), oldest year first."""
    out = []
    for year, path in vault_paths(home):
        store = open_vault(path, read_only=True, waiting=waiting)
        try:
            with store.snapshot() as conn:
                ids = [r[0] for r in conn.execute("SELECT id FROM sessions")]
                msgs = int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
                first, last = conn.execute(
                    f"SELECT MIN(s.started_at), MAX({last_activity_sql(conn)}) FROM sessions s"
                ).fetchone()
                twins = _live_ids(live, ids)
                resumed = (
                    len(vault_twins.unmatched(live.conn, conn, twins)) if live and twins else 0
                )
        finally:
            store.close()
        out.append(
            VaultStoreInfo(
                year=year,
                path=str(path),
                sessions=len(ids),
                messages=msgs,
                bytes=os.stat(path).st_size,
                first_started=first,
                last_active=last,
                hidden=len(twins) - resumed,
                resumed=resumed,
            )
        )
    return out


@dataclass(frozen=True)
class VaultCheck:
    """What check_vault found: per store its checks, and the problems across stores."""

    stores: tuple[dict[str, Any], ...]
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether every store is sound and every vaulted session is in exactly one place."""
        return not self.problems and all(s["ok"] for s in self.stores)

    def to_dict(self) -> dict[str, Any]:
        """Return the report as plain JSON-ready data."""
        return {
            "ok": self.ok,
            "stores": [dict(s) for s in self.stores],
            "problems": list(self.problems),
        }


def _fts5_tables(conn: sqlite3.Connection) -> list[str]:
    return [
        str(n)
        for n, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
        if sql and "USING FTS5" in str(sql).upper()
    ]


def check_vault(home: Path, live: Store | None, waiting: Waiting = NO_WAITING) -> VaultCheck:
    """Check every vault store: integrity, its search indexes, and that each vaulted session
    is in one vault store only and absent from the live store."""
    stores: list[dict[str, Any]] = []
    problems: list[str] = []
    seen: dict[str, str] = {}
    for year, path in vault_paths(home):
        checks: list[dict[str, Any]] = []
        try:
            # Writable (it is ours, and FTS5 integrity-check is a write statement; it writes
            # nothing): never migrated, the edit role.
            store = open_vault(path, waiting=waiting)
        except (HermesStateError, sqlite3.Error) as exc:
            stores.append(
                {
                    "year": year,
                    "path": str(path),
                    "ok": False,
                    "checks": [{"name": "open", "ok": False, "detail": str(exc)}],
                }
            )
            continue
        try:
            conn = store.conn
            lines = [str(r[0]) for r in conn.execute("PRAGMA integrity_check(20)")]
            checks.append(
                {"name": "integrity", "ok": lines == ["ok"], "detail": "; ".join(lines[:3])}
            )
            bad = [p for t in _fts5_tables(conn) if (p := _fts_problem(conn, t))]
            checks.append(
                {"name": "search_indexes", "ok": not bad, "detail": "; ".join(bad) or "ok"}
            )
            ids = [r[0] for r in conn.execute("SELECT id FROM sessions")]
            twins = sorted(_live_ids(live, ids))
            resumed = sorted(vault_twins.unmatched(live.conn, conn, twins)) if live else []
        finally:
            store.close()
        twice = [s for s in ids if s in seen]
        for sid in ids:
            seen.setdefault(sid, year)
        in_live = [s for s in twins if s not in resumed]
        checks.append(
            {
                "name": "once",
                "ok": not twice,
                "detail": f"{len(twice)} also in {seen[twice[0]]}.db (first: {twice[0]})"
                if twice
                else "ok",
            }
        )
        checks.append(
            {
                "name": "absent_from_live",
                "ok": not in_live,
                "detail": f"{len(in_live)} also in the live store (first: {in_live[0]}), every"
                " message of the copy there too: an interrupted move or return; re-run it to"
                " finish"
                if in_live
                else "ok",
            }
        )
        checks.append(
            {
                # Not a fault: one conversation in two stores, read as one (ok either way).
                "name": "resumed",
                "ok": True,
                "detail": f"{len(resumed)} vaulted session(s) the agent resumed (first:"
                f" {resumed[0]}): their history here is read with the live part;"
                f" `hermes vault return {resumed[0]}` joins them"
                if resumed
                else "none",
                "sessions": resumed,
            }
        )
        ok = all(c["ok"] for c in checks)
        if not ok:
            problems += [f"{year}.db: {c['name']}: {c['detail']}" for c in checks if not c["ok"]]
        stores.append(
            {"year": year, "path": str(path), "ok": ok, "sessions": len(ids), "checks": checks}
        )
    return VaultCheck(tuple(stores), tuple(problems))


def _fts_problem(conn: sqlite3.Connection, table: str) -> str | None:
    try:
        conn.execute(f"INSERT INTO {quote(table)}({quote(table)}) VALUES ('integrity-check')")
    except sqlite3.DatabaseError as exc:
        return f"{table}: {exc}"
    return None


def locate(
    home: Path, ref: str, live: Store | None, waiting: Waiting = NO_WAITING
) -> tuple[str, Path, str] | None:
    """Find a session only the vault holds, named as every command names one (see
    :func:`hermes_state.vault.profile_stores.locate`): return (year, store path, session id), the
    newest year holding it; None when the live store has it (it is read there)."""
    from hermes_state.vault import profile_stores

    found = profile_stores.locate(live, home, ref, waiting)
    if found.year is None:
        return None
    return found.year, vault_dir(home) / f"{found.year}.db", found.session_id


def _joined_record(record: dict[str, Any], parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Return a resumed session's live export record with its vault parts joined in: every
    message in id order, counters added up, the earliest start."""
    import heapq

    from hermes_state.transfer.portability import USAGE_KEY

    out = dict(record)
    older = [list(p.get("messages") or ()) for p in parts]
    out["messages"] = heapq.merge(
        *older, record.get("messages") or (), key=lambda m: int(m.get("id") or 0)
    )
    for part in parts:
        for col in ("message_count", *_SUMMED):
            if part.get(col) is not None:
                out[col] = (out.get(col) or 0) + part[col]
        if part.get("started_at") is not None:
            out["started_at"] = min(
                float(out.get("started_at") or part["started_at"]), part["started_at"]
            )
        if out.get("title") is None and part.get("title") is not None:
            out["title"] = part["title"]
        usage: dict[tuple[Any, ...], dict[str, Any]] = {
            tuple(u.get(k) for k in _USAGE_KEY): dict(u) for u in out.get(USAGE_KEY) or ()
        }
        for u in part.get(USAGE_KEY) or ():
            key = tuple(u.get(k) for k in _USAGE_KEY)
            if key in usage:
                for col in _USAGE_SUMMED:
                    if u.get(col) is not None:
                        usage[key][col] = (usage[key].get(col) or 0) + u[col]
            else:
                usage[key] = dict(u)
        if usage:
            out[USAGE_KEY] = list(usage.values())
    out["vault_parts"] = [p.get("vault") for p in parts]
    return out


def export_spanning(
    live: Store,
    records: Iterator[dict[str, Any]],
    *,
    session_ids: Sequence[str] | None = None,
    **filters: Any,
) -> Iterator[dict[str, Any]]:
    """Yield the live export records and the vault's (same filters; ``session_ids`` then names
    vaulted ones), each marked ``"vault"``: its year, or None for live; oldest first.

    A session the agent resumed after it was vaulted is one record: its live record with the
    vault part joined in (``"vault_parts"`` names the years); a stale copy is left out.
    """
    import heapq

    from hermes_state.transfer.portability import export_all
    from hermes_state.vault import profile_stores

    home = live.path.parent
    resumed = profile_stores.resumed_sessions(live, home, live.waiting)
    paths = dict(vault_paths(home))

    def part_records(sid: str) -> list[dict[str, Any]]:
        parts = []
        for year in resumed[sid]:
            store = open_vault(paths[year], read_only=True, waiting=live.waiting)
            try:
                for record in export_all(store, session_ids=[sid]):
                    record["messages"] = list(record.get("messages") or ())
                    record["vault"] = year
                    parts.append(record)
            finally:
                store.close()
        return parts

    def marked(it: Iterator[dict[str, Any]], year: str | None) -> Iterator[dict[str, Any]]:
        for record in it:
            record["vault"] = year
            sid = str(record.get("id"))
            yield _joined_record(record, part_records(sid)) if sid in resumed else record

    def from_store(year: str, path: Path) -> Iterator[dict[str, Any]]:
        store = open_vault(path, read_only=True, waiting=live.waiting)
        try:
            named = session_ids
            if named is not None:  # only those this store holds (another year has the rest)
                here = _held(store, named)
                named = [s for s in named if s in here]
                if not named:
                    return
            for record in export_all(store, session_ids=named, **filters):
                if record.get("id") not in _live_ids(live, [str(record.get("id"))]):
                    record["vault"] = year
                    yield record
        finally:
            store.close()

    streams = [marked(records, None)]
    if session_ids is None or session_ids:
        streams += [from_store(y, p) for y, p in vault_paths(home)]
    yield from heapq.merge(*streams, key=lambda r: float(r.get("started_at") or 0))
