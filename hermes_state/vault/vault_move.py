"""`vault move`: copy whole groups into the year's vault store, verify, then delete from live."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from hermes_state.store import cjk
from hermes_state.store.connection import Store
from hermes_state.store.errors import HermesStateError
from hermes_state.store.patience import Waiting
from hermes_state.upkeep.deletion import delete_sessions_in
from hermes_state.vault import vault_twins
from hermes_state.vault.vault import VaultError, VaultVerifyError, _step, vault_lock
from hermes_state.vault.vault_copy import (
    _attached,
    _cjk_current,
    _cjk_index_copied,
    _common,
    _copy_rows,
    _defer_indexing,
    _delete_copies,
    _drop_held_copies,
    _in_both,
    _index_copied,
    _title_clashes,
)
from hermes_state.vault.vault_layout import _align_columns, _schema_rows, create_vault_store
from hermes_state.vault.vault_plan import Group, MovePlan, _movable, plan_move
from hermes_state.vault.vault_stores import open_vault, vault_dir, vault_paths
from hermes_state.vault.vault_verify import _mismatched

# One copy/verify/delete round moves groups holding about this many messages: short enough
# that the agent's writes never wait long for the live delete, long enough to amortise fsyncs.
BATCH_MESSAGES = 20_000
BATCH_SESSIONS = 400
VAULT_CACHE_KIB = 128 * 1024  # each handle's page cache (vault and live) while a move writes
# One live delete transaction takes groups of about this many messages: taking them out of the
# agent's search indexes costs ~25-45 µs a message, so its next write waits about a second.
DELETE_MESSAGES = 20_000


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
        # This handle's own cache (main: the vault file): a round's copy touches every
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
    with vault_lock(home), _live_cache(live):
        return _move_locked(live, home, plan, progress, result)


@contextlib.contextmanager
def _live_cache(live: Store) -> Iterator[None]:
    """Give this command's own live handle a larger page cache for the move, then put it back.

    A live delete of a round touches every index of messages and both FTS indexes: in the 2 MB
    default, a rollback-journal store spills dirty pages (a journal sync each) mid-transaction.
    The setting is this connection's alone; nothing is written to the store."""
    before = int(live.conn.execute("PRAGMA main.cache_size").fetchone()[0])
    live.conn.execute(f"PRAGMA main.cache_size = -{VAULT_CACHE_KIB}")
    try:
        yield
    finally:
        live.conn.execute(f"PRAGMA main.cache_size = {before}")


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
                return ok, kept, delete_sessions_in(conn, ok, bulk_unindex=True).messages

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
