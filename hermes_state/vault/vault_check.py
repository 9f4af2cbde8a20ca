"""`vault check`: every vault store's integrity, its search indexes, and each session once."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_state.store.connection import Store
from hermes_state.store.errors import HermesStateError
from hermes_state.store.patience import NO_WAITING, Waiting
from hermes_state.store.sql import quote
from hermes_state.vault import vault_twins
from hermes_state.vault.vault_list import _live_ids
from hermes_state.vault.vault_stores import open_vault, vault_paths


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
