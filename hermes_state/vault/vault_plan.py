"""What a move takes: session groups (parent and delegate links) and the ones that may move."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_state.records.ledger import busy_message, open_work_in
from hermes_state.shapes.model_config import DELEGATE_MARKER, marker_sql
from hermes_state.store.connection import Store
from hermes_state.store.sql import chunks, marks
from hermes_state.upkeep.deletion import in_use
from hermes_state.upkeep.prune import DAY_S, PruneScope, eligible_sessions_in, last_activity_sql
from hermes_state.vault.vault_stores import year_of


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
