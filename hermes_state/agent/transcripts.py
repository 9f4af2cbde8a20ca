"""The agent's transcript files beside the store (``<home>/sessions/<id>.json``, ``.jsonl`` and
``request_dump_<id>_*.json``): removed with their session when the caller names the directory."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger("hermes_state")


def _safe_id(session_id: str) -> bool:
    """Tell whether an id can name files in the directory (no separators, no dot names)."""
    return (
        bool(session_id)
        and "/" not in session_id
        and "\\" not in session_id
        and (session_id not in (".", "..") and "\x00" not in session_id)
    )


def session_files(sessions_dir: Path, session_id: str) -> list[Path]:
    """Return the transcript files of one session that exist in sessions_dir."""
    if not _safe_id(session_id):
        return []
    found = [sessions_dir / f"{session_id}{ext}" for ext in (".json", ".jsonl")]
    out = [p for p in found if p.is_file() and not p.is_symlink()]
    prefix = f"request_dump_{session_id}_"
    with contextlib.suppress(OSError):
        for entry in os.scandir(sessions_dir):
            if (
                entry.name.startswith(prefix)
                and entry.name.endswith(".json")
                and entry.is_file(follow_symlinks=False)
            ):
                out.append(Path(entry.path))
    return out


def remove_session_files(sessions_dir: Path | None, session_ids: Iterable[str]) -> int:
    """Delete the transcript files of these sessions; return how many went (None: none)."""
    if sessions_dir is None:
        return 0
    directory = Path(sessions_dir)
    removed = 0
    for sid in session_ids:
        for path in session_files(directory, sid):
            try:
                path.unlink()
                removed += 1
            except OSError as exc:  # a file left behind is not worth failing a finished delete
                log.warning("could not remove transcript %s: %s", path, exc)
    return removed
