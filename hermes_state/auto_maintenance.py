"""The agent's start-up housekeeping: prune old sessions at most once per interval, then give
the space back, recording when it last ran in ``state_meta``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_state import meta
from hermes_state.connection import Store

log = logging.getLogger("hermes_state")

LAST_RUN_KEY = "last_auto_prune"


def maybe_prune_and_vacuum(
    store: Store,
    prune: Callable[[float, Path | None], int],
    vacuum_store: Callable[[], object],
    *,
    retention_days: float = 90,
    min_interval_hours: float = 24,
    vacuum: bool = True,
    sessions_dir: Path | None = None,
) -> dict[str, Any]:
    """Prune sessions idle past retention_days unless that ran within min_interval_hours.

    ``prune(days, sessions_dir)`` deletes and returns how many went; ``vacuum_store()`` gives
    the space back (only after a prune that deleted something). Returns {skipped, pruned,
    vacuumed} and, when something failed, ``error``; it never raises: housekeeping must not
    stop the agent from starting.
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
        if vacuum and result["pruned"] > 0:
            try:
                vacuum_store()
                result["vacuumed"] = True
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
