"""The agent's start-up housekeeping: prune old sessions at most once per interval, then give
the space back, recording when it last ran in ``state_meta``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_state.store import meta
from hermes_state.store.connection import Store

log = logging.getLogger("hermes_state")

LAST_RUN_KEY = "last_auto_prune"
LAST_VACUUM_KEY = "last_vacuum"
# Below this share of free pages a VACUUM rewrites a large file to give back little.
MIN_FREELIST_RATIO = 0.25


def _since(now: float, stamp: str | None) -> float | None:
    """Return the seconds since a stored time stamp (None: none, or unreadable)."""
    try:
        return None if stamp is None else now - float(stamp)
    except ValueError:
        return None


def _free_share(store: Store) -> float | None:
    """Return the share of the file's pages that are free (None when it cannot be read)."""
    try:
        pages = int(store.conn.execute("PRAGMA page_count").fetchone()[0])
        free = int(store.conn.execute("PRAGMA freelist_count").fetchone()[0])
    except Exception:  # a diagnostic: never a reason to fail housekeeping
        return None
    return free / pages if pages else None


def maybe_prune_and_vacuum(
    store: Store,
    prune: Callable[[float, Path | None], int],
    vacuum_store: Callable[[], object],
    *,
    retention_days: float = 90,
    min_interval_hours: float = 24,
    vacuum: bool = True,
    sessions_dir: Path | None = None,
    min_vacuum_interval_days: float = 30,
    min_vacuum_freelist_ratio: float = MIN_FREELIST_RATIO,
) -> dict[str, Any]:
    """Prune sessions idle past retention_days unless that ran within min_interval_hours.

    ``prune(days, sessions_dir)`` deletes and returns how many went; ``vacuum_store()`` gives
    the space back, only after a prune that deleted something, at most once per
    min_vacuum_interval_days, and only when more than min_vacuum_freelist_ratio of the file is
    free. Returns {skipped, pruned, vacuumed} and, when something failed, ``error``; it never
    raises: housekeeping must not stop the agent from starting.
    """
    result: dict[str, Any] = {"skipped": False, "pruned": 0, "vacuumed": False}
    try:
        now = time.time()
        last = meta.get(store.conn, LAST_RUN_KEY)
        try:
            if last is not None and now - float(last) < float(min_interval_hours) * 3600:
                result["skipped"] = True
                return result
        except ValueError:
            pass  # an unreadable stamp counts as no earlier run
        result["pruned"] = prune(retention_days, sessions_dir)
        since = _since(now, meta.get(store.conn, LAST_VACUUM_KEY))
        due = since is None or since >= float(min_vacuum_interval_days) * 86400
        share = _free_share(store)
        if (
            vacuum
            and result["pruned"] > 0
            and due
            and (share is None or share > min_vacuum_freelist_ratio)
        ):
            try:
                vacuum_store()
                result["vacuumed"] = True
                store.write(lambda conn: meta.put(conn, LAST_VACUUM_KEY, str(now)))
            except Exception as exc:  # the prune stands; the space comes back another time
                log.warning("state.db VACUUM after auto-prune failed: %s", exc)
        store.write(lambda conn: meta.put(conn, LAST_RUN_KEY, str(now)))
        if result["pruned"]:
            log.info(
                "state.db auto-maintenance: pruned %d session(s) idle over %g days%s",
                result["pruned"],
                retention_days,
                " and vacuumed" if result["vacuumed"] else "",
            )
    except Exception as exc:
        log.warning("state.db auto-maintenance failed: %s", exc)
        result["error"] = str(exc)
    return result
