"""`db migrate`: bring a store to the current schema while the agent is stopped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_state.store import fts
from hermes_state.store.connection import store_schema_refusal
from hermes_state.upkeep.reclaim import _catch_up_cjk, _refuse_if_shared
from hermes_state.upkeep.store_check import require_intact


def migrate_store(
    db_path: Path,
    *,
    force: bool = False,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> MigrateOutcome:
    """Bring the store at db_path to schema 31 with this package's additions (`db migrate`).

    Creates a missing store. Refuses stores of unknown or newer schemas and other applications'
    databases (nothing written), damaged stores, and (unless forced) stores another process has
    open: a migration changes the schema under the agent, so it runs while the agent is stopped.
    """
    from hermes_state.store import cjk, migrations
    from hermes_state.store.connection import open_store

    existed = db_path.is_file()
    store = open_store(db_path, role="edit", create=True)
    try:
        if store.too_new:
            store.write(lambda conn: None)  # raises the schema refusal
        found = store.layout
        if found is not None and found.kind == "old":
            # A number no release writes (27, or 12): what it holds is unknown, so no release
            # line's steps can be said to apply; it is read, never rewritten (issue 33).
            raise store_schema_refusal(store)
        kind_before = found.kind if found is not None else "not_hermes"
        require_intact(store)  # a damaged store is for `sessions recover`, not for DDL
        if kind_before != "current":
            _refuse_if_shared(store, force, "change its schema")
        store.refusal = None  # a legacy layout is exactly what this repairs
        result = store.write(migrations.migrate)
        store.forget_columns()
        if not existed:
            result.before = None
        if fts.rebuild_pending(store.conn):

            def step(done: fts.RebuildProgress) -> None:
                if on_progress is not None:
                    on_progress("search index", done.progress, done.high_water)

            fts.finish_rebuild(store, on_progress=step)
        if cjk.is_installed(store.conn):
            _catch_up_cjk(store)
        result.rebuild_pending = fts.rebuild_pending(store.conn)
        result.cjk_pending = cjk.status(store.conn).behind > 0
        return MigrateOutcome(path=db_path, existed=existed, result=result)
    finally:
        store.close()


@dataclass(frozen=True)
class MigrateOutcome:
    """What `db migrate` did to which file."""

    path: Path
    existed: bool
    result: Any  # migrations.MigrateResult

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {"path": str(self.path), "existed": self.existed, **self.result.to_dict()}
