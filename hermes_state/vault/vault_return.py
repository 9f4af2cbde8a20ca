"""`vault return`: bring vaulted groups back into the live store, joining resumed sessions."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hermes_state.reports import usage_report
from hermes_state.store import cjk, meta
from hermes_state.store.connection import Store
from hermes_state.store.errors import SessionNotFoundError
from hermes_state.store.sql import quote
from hermes_state.vault import vault_twins
from hermes_state.vault.vault import VaultVerifyError, _step, vault_lock
from hermes_state.vault.vault_copy import (
    _attached,
    _common,
    _copy_rows,
    _drop_held_copies,
    _has,
    _in_both,
    _insert_written,
    _json_ints,
    _title_clashes,
)
from hermes_state.vault.vault_plan import _message_counts, session_groups
from hermes_state.vault.vault_stores import open_vault, vault_paths
from hermes_state.vault.vault_verify import _fingerprints


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
