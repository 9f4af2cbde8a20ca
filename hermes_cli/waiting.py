"""How long a command waits for another process's lock on the store, and what it says meanwhile.

``--wait SECONDS`` sets the limit and ``--no-wait`` gives up at once; both work anywhere on the
line, like ``-p``. Without them the library's own limits apply (20 s for an edit, 5 s to open
for reading). A wait longer than a second prints one line naming who holds the lock.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hermes_state.connection import Waiting

WAIT_FLAG = "--wait"
NO_WAIT_FLAG = "--no-wait"

_patience: float | None = None


class WaitFlagError(ValueError):
    """A --wait without a usable number of seconds."""


def parse_seconds(text: str) -> float:
    """Return --wait's value as seconds (a finite number ≥ 0), or raise WaitFlagError."""
    try:
        seconds = float(text)
    except ValueError:
        raise WaitFlagError(f"--wait needs a number of seconds, not {text!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise WaitFlagError(f"--wait needs a number of seconds of 0 or more, not {text!r}")
    return seconds


def take_flags(argv: list[str]) -> list[str]:
    """Remove --wait N, --wait=N and --no-wait from argv[1:] (before --) and apply the last."""
    kept = argv[:1]
    rest = argv[1:]
    i = 0
    while i < len(rest):
        token = rest[i]
        if token == "--":
            kept.extend(rest[i:])
            break
        if token == NO_WAIT_FLAG:
            set_patience(0.0)
        elif token == WAIT_FLAG:
            if i + 1 >= len(rest):
                raise WaitFlagError("--wait needs a number of seconds")
            set_patience(parse_seconds(rest[i + 1]))
            i += 1
        elif token.startswith(WAIT_FLAG + "="):
            set_patience(parse_seconds(token.removeprefix(WAIT_FLAG + "=")))
        else:
            kept.append(token)
        i += 1
    return kept


def set_patience(seconds: float | None) -> None:
    """Set how long this command waits for locks (None: the library's defaults)."""
    global _patience
    _patience = seconds


def current() -> Waiting:
    """Return the waiting rules store handles of this command use."""
    from hermes_state.connection import Waiting

    return Waiting(patience=_patience, notify=_notice)


def _notice(path: Path, waited: float) -> None:
    """Say, once per wait, that the command is waiting and who holds the lock."""
    from hermes_cli import render
    from hermes_state.lockowners import write_holders_text

    who = write_holders_text(path) or "another process"
    limit = f"for up to {_patience:g}s" if _patience is not None else "for it"
    render.echo(
        f"Waiting {limit}: {path.name} is locked by {who} (waited {waited:.1f}s so far; "
        "--no-wait gives up at once, --wait SECONDS sets the limit).",
        err=True,
    )
