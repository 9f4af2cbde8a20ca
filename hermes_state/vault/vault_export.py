"""Export records across the live store and the vault, resumed sessions joined into one."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hermes_state.store.connection import Store
from hermes_state.vault.vault_list import _held, _live_ids
from hermes_state.vault.vault_return import _SUMMED, _USAGE_KEY, _USAGE_SUMMED
from hermes_state.vault.vault_stores import open_vault, vault_paths


def _joined_record(record: dict[str, Any], parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Return a resumed session's live export record with its vault parts joined in: every
    message in id order, counters added up, the earliest start."""
    import heapq

    from hermes_state.transfer.export import USAGE_KEY

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

    from hermes_state.transfer.export import export_all
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
