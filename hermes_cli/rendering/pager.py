"""A pager for long output on a terminal, the way git does it.

The pager is `$HERMES_PAGER`, else `$PAGER`, else `less` (with `LESS=FRX` when LESS is unset, so
colours are kept and a screenful is left on the terminal). An empty value or `cat` means no pager,
and so does a pager program that cannot be found (the output is printed instead of lost).
Output is held back until it is longer than the terminal; only then is the pager started, so
short output prints as usual whatever the pager is. It is never used when stdout is not a
terminal, for machine formats, or with --no-pager. Quitting the pager early ends the command
quietly (exit 0), as `git log | less` does.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from hermes_cli.rendering import output
from hermes_cli.rendering.layout import visible_width

DEFAULT_PAGER = "less"


def _runnable(command: str) -> bool:
    """Tell whether a pager command line's program exists (shell syntax is given the benefit)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if not words:
        return False
    if "=" in words[0] or any(ch in command for ch in "|;&<>$`("):
        return True  # a shell line: the shell will say if it cannot run it
    return shutil.which(words[0]) is not None


def pager_command() -> str | None:
    """Return the pager command line to run, or None when paging is off or cannot run."""
    for name in ("HERMES_PAGER", "PAGER"):
        value = os.environ.get(name)
        if value is not None:
            value = value.strip()
            if value in ("", "cat") or not _runnable(value):
                return None  # a missing pager must not swallow the output
            return value
    return DEFAULT_PAGER if shutil.which(DEFAULT_PAGER) else None


class QuitPager(Exception):
    """The person left the pager before the output ended."""


class PagedStdout(io.TextIOBase):
    """Stands in for stdout: holds lines back until they overflow the screen, then pages them."""

    def __init__(self, real: Any, command: str, width: int, height: int) -> None:
        self._real = real
        self._command = command
        self._width = max(1, width)
        self._room = max(1, height - 1)  # keep a line for the shell prompt
        self._held: list[str] = []
        self._rows = 0
        self._partial = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._pipe: Any = None

    def isatty(self) -> bool:
        """Report a terminal: the output still ends up on one."""
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """The encoding written to the pager."""
        return "utf-8"

    def writable(self) -> bool:
        """Report that text can be written."""
        return True

    def _count(self, text: str) -> None:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._rows += max(1, -(-visible_width(line) // self._width))

    def write(self, text: str) -> int:
        """Write text: held back while it fits on the screen, then through the pager."""
        if self._pipe is not None:
            self._send(text)
            return len(text)
        self._held.append(text)
        self._count(text)
        if self._rows > self._room:
            self._start()
        return len(text)

    def _send(self, text: str) -> None:
        try:
            self._pipe.write(text)
        except (BrokenPipeError, ValueError):
            raise QuitPager from None

    def _start(self) -> None:
        env = dict(os.environ)
        env.setdefault("LESS", "FRX")
        env.setdefault("LV", "-c")
        self._real.flush()
        self._proc = subprocess.Popen(self._command, shell=True, stdin=subprocess.PIPE, env=env)
        assert self._proc.stdin is not None
        self._pipe = io.TextIOWrapper(self._proc.stdin, encoding="utf-8", errors="replace")
        held, self._held = "".join(self._held), []
        self._send(held)

    def flush(self) -> None:
        """Flush what the pager has been given (nothing is held back from it)."""
        if self._pipe is not None:
            try:
                self._pipe.flush()
            except (BrokenPipeError, ValueError):
                raise QuitPager from None

    def finish(self) -> None:
        """Print held-back output directly, or close the pager and wait for the person."""
        if self._proc is None:
            self._real.write("".join(self._held))
            self._real.flush()
            return
        with contextlib.suppress(BrokenPipeError, ValueError, OSError):
            self._pipe.close()
        self._wait()

    def abandon(self) -> None:
        """Stop feeding the pager (it was quit or interrupted) and wait for it to exit."""
        if self._proc is None:
            return
        with contextlib.suppress(BrokenPipeError, ValueError, OSError):
            self._pipe.close()
        self._wait()

    def _wait(self) -> None:
        assert self._proc is not None
        # Ctrl-C belongs to the pager while it runs (less uses it); we just wait for it.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self._proc.wait()
        finally:
            signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def paging(settings: output.Settings) -> Iterator[None]:
    """Send stdout through the pager for the block when settings allow it and output is long."""
    command = pager_command() if settings.pager else None
    if command is None or settings.width is None or settings.height is None:
        yield
        return
    real = sys.stdout
    paged = PagedStdout(real, command, settings.width, settings.height)
    sys.stdout = paged
    try:
        yield
        sys.stdout = real
        try:
            paged.finish()
        except QuitPager:
            paged.abandon()
    except QuitPager:
        sys.stdout = real
        paged.abandon()
    except BaseException:
        sys.stdout = real
        paged.abandon()
        raise
    finally:
        sys.stdout = real
