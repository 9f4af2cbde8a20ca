"""`db cjk-index`: this package's CJK index on or off, and what it costs in the file.

The index (:mod:`hermes_state.store.cjk`) finds 1- and 2-character CJK words by index. It is an
addition of this package, so its owner may do without it: turned off, it is dropped with its
queue and triggers and a mark in state_meta keeps every later migration from adding it back;
CJK queries are then served by the agent's substring index (3 or more characters) or a scan
under the search's work budget. Turned on, it is created empty and filled from every message
in bounded transactions. Only this package's own objects change; the agent's never do.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from hermes_state.store import cjk
from hermes_state.store.connection import Store
from hermes_state.store.errors import StoreNeedsMigrationError
from hermes_state.upkeep.reclaim import _catch_up_cjk
from hermes_state.upkeep.store_check import require_intact


@dataclass(frozen=True)
class CjkIndexState:
    """Where the CJK index stands: on or off, how far it has indexed, its bytes in the file."""

    installed: bool
    off: bool  # the owner turned it off (a migration will not add it back)
    behind: int  # messages not indexed yet (a catch-up indexes them)
    index_bytes: int | None  # pages of its tables (None: this SQLite has no dbstat)
    file_bytes: int

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return asdict(self)


@dataclass(frozen=True)
class CjkIndexChange:
    """What `db cjk-index on|off` did."""

    changed: bool
    before: CjkIndexState
    after: CjkIndexState

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "changed": self.changed,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
        }


def _index_bytes(conn: sqlite3.Connection) -> int | None:
    """Return the bytes of the pages the index's tables use (None: no dbstat here)."""
    try:
        row = conn.execute(
            "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name = ? OR name LIKE ? ESCAPE '\\'",
            (cjk.PENDING_TABLE, cjk.TABLE.replace("_", "\\_") + "\\_%"),
        ).fetchone()
    except sqlite3.OperationalError:
        return None
    return int(row[0])


def cjk_index_state(store: Store) -> CjkIndexState:
    """Report the CJK index of a store (read-only)."""
    with store.snapshot() as conn:
        status = cjk.status(conn)
        size = conn.execute(
            "SELECT page_count * page_size FROM pragma_page_count, pragma_page_size"
        ).fetchone()[0]
        return CjkIndexState(
            installed=status.installed,
            off=cjk.is_off(conn),
            behind=status.behind,
            index_bytes=_index_bytes(conn) if status.installed else 0,
            file_bytes=int(size),
        )


def set_cjk_index(
    store: Store, on: bool, *, on_progress: Callable[[int], None] | None = None
) -> CjkIndexChange:
    """Turn the CJK index on (created, then filled from every message: ``on_progress`` gets
    how many are left after each bounded step) or off (dropped, and kept out of migrations).

    A damaged store is refused: it is for `sessions recover`; so is turning the index on in a
    store without hermes' additions (an agent's layout `db migrate` has not upgraded). The
    pages an index leaves are free pages of the file until `db optimize` gives them back.
    """
    require_intact(store)
    before = cjk_index_state(store)
    if on and (store.layout is None or store.layout.kind != "current") and not before.installed:
        # hermes' additions come with `db migrate`; this switch does not add them piecemeal.
        version = store.layout.version if store.layout is not None else None
        at = f" (schema {version})" if version is not None else ""
        raise StoreNeedsMigrationError(
            f"{store.path}{at} does not have hermes' additions yet; nothing was changed",
            hint="Upgrade the store with `hermes db migrate` (the agent release that wrote it "
            "keeps working; it adds the CJK index unless it was turned off), then retry.",
        )
    if on:
        changed = store.write(cjk.turn_on) or before.off
        _catch_up_cjk(store, on_progress)
    else:
        changed = store.write(cjk.uninstall) or not before.off
    return CjkIndexChange(changed=changed, before=before, after=cjk_index_state(store))
