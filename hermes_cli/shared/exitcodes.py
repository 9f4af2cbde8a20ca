"""The exit codes of `hermes`, each with what it means (the man page and README list them)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """How a `hermes` command ended."""

    OK = 0
    FAILURE = 1
    USAGE = 2
    BUSY = 75  # EX_TEMPFAIL: the store stayed locked; retrying later can succeed
    INTERRUPTED = 130  # 128 + SIGINT: stopped by Ctrl-C


MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "Success (also: an empty result, e.g. a profile with no store yet, or a "
    "reader that closed the pipe early, as in `| head`).",
    ExitCode.FAILURE: "Failure: unknown session or profile, corrupt store, refused action, "
    "declined prompt, partial recovery.",
    ExitCode.USAGE: "Usage error: unknown option, missing argument, bad AGE, role, source or "
    "profile name, or a sort the query cannot have.",
    ExitCode.BUSY: "The store stayed busy: another process held its lock beyond the wait "
    "(--wait SECONDS, --no-wait); retry later.",
    ExitCode.INTERRUPTED: "Interrupted (Ctrl-C). A long write says what it did first; what it "
    "committed is kept, the store stays healthy, and running the same command again finishes.",
}
