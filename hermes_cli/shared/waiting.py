"""How long a command waits for another process's lock on the store, and what it says meanwhile.

``--wait SECONDS`` sets the limit and ``--no-wait`` gives up at once; both work anywhere on the
line, like ``-p``. Without them the library's own limits apply (20 s for an edit, 5 s to open
for reading). A wait longer than a second prints one line naming who holds the lock.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hermes_state.store.patience import Waiting

_patience: float | None = None


def set_patience(seconds: float | None) -> None:
    """Set how long this command waits for locks (None: the library's defaults)."""
    global _patience
    _patience = seconds


def current() -> Waiting:
    """Return the waiting rules store handles of this command use."""
    from hermes_state.store.patience import Waiting

    return Waiting(patience=_patience, notify=_notice)


def _notice(path: Path, waited: float) -> None:
    """Say, once per wait, that the command is waiting and who holds the lock."""
    from hermes_cli.rendering import render
    from hermes_state.store.lockowners import write_holders_text

    who = write_holders_text(path) or "another process"
    limit = f"for up to {_patience:g}s" if _patience is not None else "for it"
    # The vault's lock file (hermes_state.vault.vault): held by a running move or return.
    what = "the vault" if path.name == ".lock" and path.parent.name == "vault" else path.name
    render.echo(
        f"Waiting {limit}: {what} is locked by {who} (waited {waited:.1f}s so far; "
        "--no-wait gives up at once, --wait SECONDS sets the limit).",
        err=True,
    )
