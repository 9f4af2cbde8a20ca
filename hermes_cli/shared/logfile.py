"""Where the CLI's warnings go: <hermes home>/logs/errors.log (made on first record) and stderr."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path

LOG_NAME = "errors.log"
_FORMAT = "%(asctime)s %(levelname)s %(name)s [pid %(process)d]: %(message)s"


def error_log_path() -> Path:
    """Return the error log of the current profile home."""
    from hermes_state.store.home import get_hermes_home

    return get_hermes_home() / "logs" / LOG_NAME


class LazyFileHandler(logging.Handler):
    """Append records to the profile's errors.log, creating it (mode 0600) only on the first one."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter(_FORMAT))
        self._fd: int | None = None

    def _open(self) -> int:
        # Resolved at the first record, so a -p/--profile applied later in the run is honoured.
        from hermes_state.store.home import ensure_private_dir

        path = error_log_path()
        ensure_private_dir(path.parent)  # 0700 for every directory it makes, whatever the umask
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        with contextlib.suppress(OSError):
            os.chmod(path, 0o600)  # an older file may have been made with looser bits
        return fd

    def emit(self, record: logging.LogRecord) -> None:
        """Write one formatted record (never raises into the caller)."""
        try:
            if self._fd is None:
                self._fd = self._open()
            os.write(self._fd, (self.format(record) + "\n").encode("utf-8", "replace"))
        except Exception:  # logging must never break a command
            self.handleError(record)

    def close(self) -> None:
        """Close the log file if it was opened."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        super().close()


class StderrWarningHandler(logging.Handler):
    """Show WARNING+ records on the current stderr as `Warning: …` lines."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record's message to sys.stderr as it is now (tests swap it)."""
        if record.name == "hermes_state.store.lockowners":
            return  # the lock error the command prints names the holders already
        try:
            sys.stderr.write(f"Warning: {record.getMessage()}\n")
        except Exception:
            self.handleError(record)


class AttachedHandlers:
    """The handlers one run attached to the root logger; close() detaches them."""

    def __init__(self, handlers: list[logging.Handler]) -> None:
        self.handlers = handlers

    def close(self) -> None:
        """Detach and close the handlers."""
        root = logging.getLogger()
        for handler in self.handlers:
            root.removeHandler(handler)
            handler.close()


def attached_error_log() -> AttachedHandlers:
    """Attach the errors.log and stderr handlers to the root logger for one run."""
    root = logging.getLogger()
    handlers: list[logging.Handler] = [LazyFileHandler(), StderrWarningHandler()]
    for handler in handlers:
        root.addHandler(handler)
    return AttachedHandlers(handlers)
