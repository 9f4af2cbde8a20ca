"""What a replica holds, store by store: its LTX files (from `litestream ltx`), whether a full
snapshot is there to restore from, and how far behind the store here it is."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from hermes_state.backups.replica import (
    TOOL_TIMEOUT_S,
    ReplicaError,
    ReplicatedStore,
    Target,
    failure_hint,
    last_line,
    litestream_argv,
    run_tool,
    work_dir,
    write_config,
)

_LTX_NAME = re.compile(r"([0-9a-f]{16})-([0-9a-f]{16})\.ltx\Z")


@dataclass(frozen=True)
class LtxFile:
    """One LTX file of a replica: its compaction level, transaction range, size and time."""

    level: int
    min_txid: int
    max_txid: int
    size: int
    time: float


@dataclass
class ReplicaStatus:
    """What a replica holds for one store, and how far it is behind the store here."""

    rel: str
    url: str
    files: int = 0
    bytes: int = 0
    latest_txid: int | None = None
    latest_time: float | None = None
    snapshot: bool = False
    snapshot_time: float | None = None
    local_txid: int | None = None
    local_time: float | None = None

    @property
    def restorable(self) -> bool:
        """Tell whether a restore can start: a full snapshot is there."""
        return self.snapshot

    @property
    def behind(self) -> int | None:
        """Return how many transactions the store here has that the replica lacks."""
        if self.local_txid is None:
            return None
        return max(0, self.local_txid - (self.latest_txid or 0))

    @property
    def lag_s(self) -> float | None:
        """Return how far (seconds) the replica's latest change is behind the store's here."""
        if self.local_time is None or self.latest_time is None:
            return None
        if not self.behind:
            return 0.0
        return max(0.0, self.local_time - (self.latest_time or 0.0))

    def problem(self) -> str | None:
        """Return why a restore from this replica would fail, or None."""
        if self.files == 0:
            return "the replica holds nothing for this store"
        if not self.snapshot:
            return (
                "the replica has no snapshot (it was deleted or lost): Litestream keeps adding "
                "increments to it, but a restore from it fails"
            )
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "store": self.rel,
            "url": self.url,
            "files": self.files,
            "bytes": self.bytes,
            "latest_txid": self.latest_txid,
            "latest_time": self.latest_time,
            "snapshot": self.snapshot,
            "snapshot_time": self.snapshot_time,
            "local_txid": self.local_txid,
            "behind_txids": self.behind,
            "lag_s": None if self.lag_s is None else round(self.lag_s, 3),
            "restorable": self.restorable,
            "problem": self.problem(),
        }


def _iso_seconds(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def list_ltx(binary: str, config: Path, db_path: Path) -> list[LtxFile]:
    """Return every LTX file the replica of db_path holds, at every level."""
    done = run_tool(
        litestream_argv(binary, "ltx", config, "-level", "all", "-json", str(db_path)),
        TOOL_TIMEOUT_S,
    )
    if done.returncode != 0:
        why = last_line(done)
        raise ReplicaError(f"litestream could not list the replica: {why}", hint=failure_hint(why))
    try:
        rows = json.loads(done.stdout or "[]") or []
        return [
            LtxFile(
                int(r["level"]),
                int(r["min_txid"], 16),
                int(r["max_txid"], 16),
                int(r["size"]),
                _iso_seconds(str(r["timestamp"])),
            )
            for r in rows
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise ReplicaError(f"litestream listed the replica in an unknown form: {exc}") from exc


def _local_position(store: Path) -> tuple[int | None, float | None]:
    """Return the newest transaction Litestream staged for a store here, and its time."""
    level0 = store.parent / f".{store.name}-litestream" / "ltx" / "0"
    best: tuple[int | None, float | None] = (None, None)
    try:
        entries = list(os.scandir(level0))
    except OSError:
        return best
    for entry in entries:
        m = _LTX_NAME.match(entry.name)
        if m is None:
            continue
        txid = int(m.group(2), 16)
        if best[0] is None or txid > best[0]:
            with contextlib.suppress(OSError):
                best = (txid, entry.stat().st_mtime)
    return best


def replica_status(
    stores: Sequence[ReplicatedStore], target: Target, binary: str, home: Path
) -> list[ReplicaStatus]:
    """Return what the target holds for each store (and how far behind the store here it is)."""
    out = []
    with work_dir(home) as work:
        config = write_config(work.path, [(s.path, s.rel) for s in stores], target)
        for store in stores:
            files = list_ltx(binary, config, store.path)
            status = ReplicaStatus(store.rel, target.store_url(store.rel), files=len(files))
            status.bytes = sum(f.size for f in files)
            if files:
                newest = max(files, key=lambda f: (f.max_txid, f.time))
                status.latest_txid, status.latest_time = newest.max_txid, newest.time
            # A restore starts from a file holding the whole database: one that begins at
            # transaction 1 (the first sync, or a snapshot of level 9).
            full = [f for f in files if f.min_txid == 1]
            status.snapshot = bool(full)
            if full:
                status.snapshot_time = max(f.time for f in full)
            status.local_txid, status.local_time = _local_position(store.path)
            out.append(status)
    return out
