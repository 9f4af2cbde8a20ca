"""Flags that work anywhere on the command line, before any `--`: `-p/--profile NAME`,
`--wait SECONDS` and `--no-wait`. They are taken out of argv before Typer sees it, so every
command accepts them in any position (they are also declared on the root for --help).

Two output flags may also come before the command, as with git and gh: `hermes --json sessions
list` and `hermes --no-pager sessions show X` move them after it. `--json=id,title` (any
position) is `--json --fields id,title`."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

PROFILE_FLAGS = ("-p", "--profile")
WAIT_FLAG = "--wait"
NO_WAIT_FLAG = "--no-wait"
# Output flags accepted before the command word, and handed to the command.
LEADING_OUTPUT_FLAGS = ("--json", "--no-pager")


class FlagError(ValueError):
    """A global flag without a usable value (a usage error)."""


@dataclass
class GlobalFlags:
    """The global flags found on a command line (None: not given)."""

    profile: str | None = None
    wait: float | None = None  # seconds; 0 for --no-wait


def parse_seconds(text: str) -> float:
    """Return --wait's value as seconds (a finite number ≥ 0), or raise FlagError."""
    try:
        seconds = float(text)
    except ValueError:
        raise FlagError(f"--wait needs a number of seconds, not {text!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise FlagError(f"--wait needs a number of seconds of 0 or more, not {text!r}")
    return seconds


def _value(rest: list[str], i: int, flag: str) -> str:
    """Return the value after flag at rest[i]; an option in its place is a missing value."""
    value = rest[i + 1] if i + 1 < len(rest) else ""
    if not value or (value.startswith("-") and flag in PROFILE_FLAGS):
        raise FlagError(
            f"{flag} needs a profile name, e.g. {flag} coder"
            if flag in PROFILE_FLAGS
            else f"{flag} needs a number of seconds"
        )
    return value


# Options of Hermes Agent's own `hermes` that people type here out of habit.
AGENT_OPTIONS = ("-r", "--resume", "-c", "--continue")


def agent_option(argv: list[str]) -> str | None:
    """Return the agent-only option given before any command word (`hermes --resume X`)."""
    rest = argv[1:]
    i = 0
    while i < len(rest):
        token = rest[i]
        name = token.split("=", 1)[0]
        if token == "--" or not token.startswith("-"):
            return None  # a command word: what follows is that command's business
        if name in AGENT_OPTIONS:
            return name
        i += 2 if token in (*PROFILE_FLAGS, WAIT_FLAG) else 1
    return None


def _looks_like_fields(after: list[str]) -> bool:
    """Tell whether the token after --json is a comma-separated list of field names."""
    return bool(after) and re.fullmatch(r"[a-z_]+(,[a-z_]+)+,?", after[0]) is not None


def take_global_flags(argv: list[str]) -> tuple[GlobalFlags, list[str]]:
    """Return the global flags of argv[1:] (the last of each wins) and argv without them."""
    flags = GlobalFlags()
    kept = argv[:1]
    rest = argv[1:]
    moved: list[str] = []  # output flags given before the command word
    command_seen = False
    i = 0
    while i < len(rest):
        token = rest[i]
        if token == "--":
            kept.extend(moved)
            moved = []
            kept.extend(rest[i:])
            break
        if token == "--json" and _looks_like_fields(rest[i + 1 : i + 2]):
            # gh's spelling, `--json id,title`: here fields follow an equals sign.
            raise FlagError(
                f"--json takes its fields after an equals sign: --json={rest[i + 1]} "
                f"(or --json --fields {rest[i + 1]})"
            )
        if token.startswith("--json="):
            fields = ["--json", "--fields", token.removeprefix("--json=")]
            (kept if command_seen else moved).extend(fields)
        elif token in LEADING_OUTPUT_FLAGS and not command_seen:
            moved.append(token)
        elif not token.startswith("-") and token not in PROFILE_FLAGS:
            command_seen = True
            kept.append(token)
        elif token in PROFILE_FLAGS:
            flags.profile = _value(rest, i, token)
            i += 1
        elif token.startswith("--profile="):
            flags.profile = token.removeprefix("--profile=")
            if not flags.profile:
                raise FlagError("--profile needs a profile name, e.g. --profile coder")
        elif token == WAIT_FLAG:
            flags.wait = parse_seconds(_value(rest, i, token))
            i += 1
        elif token.startswith(WAIT_FLAG + "="):
            flags.wait = parse_seconds(token.removeprefix(WAIT_FLAG + "="))
        elif token == NO_WAIT_FLAG:
            flags.wait = 0.0
        else:
            kept.append(token)
        i += 1
    return flags, kept + moved
