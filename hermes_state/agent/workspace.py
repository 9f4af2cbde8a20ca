"""Where a session worked: its directory, git branch and repository root, and the grouping key
the agent's pickers derive from them."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from hermes_state.shapes.text import bindable
from hermes_state.store.connection import Store


def workspace_key(row: Mapping[str, Any]) -> str | None:
    """Return a session's workspace: its git repository root, else its directory, else None.

    The branch is left out on purpose: switching branches stays in one workspace.
    """
    root = (row.get("git_repo_root") or "").strip()
    if root:
        return str(root)
    cwd = (row.get("cwd") or "").strip()
    return str(cwd) or None


def update_session_cwd(
    store: Store,
    session_id: str,
    cwd: str,
    git_branch: str | None = None,
    git_repo_root: str | None = None,
    replace_git_meta: bool = False,
) -> int | None:
    """Record a session's working directory; return its new git-metadata generation.

    Branch and repository root are written only when given (a failed git probe never erases a
    known value), except when the directory changed or ``replace_git_meta`` is set: then the old
    ones no longer describe it and are replaced, empty or not. Returns None for an unknown
    session or an empty directory.
    """
    if not session_id or not cwd:
        return None
    branch = (git_branch or "").strip()
    root = (git_repo_root or "").strip()
    with_generation = "git_metadata_generation" in store.columns("sessions")
    sid, path = bindable(session_id), bindable(cwd)

    def fn(conn: sqlite3.Connection) -> int | None:
        row = conn.execute("SELECT cwd FROM sessions WHERE id = ?", (sid,)).fetchone()
        if row is None:
            return None
        sets = ["cwd = ?"]
        params: list[Any] = [path]
        if with_generation:
            sets.append("git_metadata_generation = COALESCE(git_metadata_generation, 0) + 1")
        if row[0] != path or replace_git_meta:
            sets += ["git_branch = ?", "git_repo_root = ?"]
            params += [bindable(branch) or None, bindable(root) or None]
        else:
            for column, value in (("git_branch", branch), ("git_repo_root", root)):
                if value:
                    sets.append(f"{column} = ?")
                    params.append(bindable(value))
        conn.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", [*params, sid])
        if not with_generation:
            return 0
        got = conn.execute(
            "SELECT git_metadata_generation FROM sessions WHERE id = ?", (sid,)
        ).fetchone()
        return int(got[0] or 0)

    return store.write(fn)


def distinct_session_cwds(store: Store, include_archived: bool = False) -> list[dict[str, Any]]:
    """Return every directory sessions worked in: {cwd, sessions, last_active}, over all history."""
    where = "cwd IS NOT NULL AND TRIM(cwd) <> ''"
    if not include_archived and "archived" in store.columns("sessions"):
        where += " AND COALESCE(archived, 0) = 0"
    rows = store.conn.execute(
        "SELECT cwd, COUNT(*), MAX(COALESCE(ended_at, started_at, 0)) FROM sessions "
        f"WHERE {where} GROUP BY cwd"
    ).fetchall()
    return [
        {"cwd": r[0], "sessions": int(r[1] or 0), "last_active": float(r[2] or 0)} for r in rows
    ]


def backfill_repo_roots(store: Store, cwd_to_root: Mapping[str, str]) -> None:
    """Fill the repository root of sessions in each directory that have none yet."""
    pairs = [(bindable(root), bindable(cwd)) for cwd, root in cwd_to_root.items() if root and cwd]
    if not pairs:
        return
    store.write(
        lambda conn: conn.executemany(
            "UPDATE sessions SET git_repo_root = ? "
            "WHERE cwd = ? AND COALESCE(git_repo_root, '') = ''",
            pairs,
        )
    )
