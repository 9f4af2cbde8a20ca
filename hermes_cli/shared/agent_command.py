"""The line that resumes a session in Hermes Agent, naming the agent's own `hermes` unambiguously.

This tool and the agent both install a command called `hermes` (both even run a module called
`hermes_cli`), so a bare `hermes --resume ID` runs whichever comes first on PATH. The line names
the agent's executable by its path instead: $HERMES_AGENT_BIN when set, else the first `hermes`
on PATH whose Python environment holds `run_agent.py` (a module only Hermes Agent installs).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

AGENT_BIN_ENV = "HERMES_AGENT_BIN"
AGENT_MODULE = "run_agent.py"


@dataclass(frozen=True)
class ResumeCommand:
    """The agent's command line for a session, and how its executable was found."""

    argv: tuple[str, ...]
    found: str  # "env" ($HERMES_AGENT_BIN), "path" (found on PATH) or "" (not found: bare name)

    @property
    def line(self) -> str:
        """Return the command as one line a shell runs as it is."""
        return shlex.join(self.argv)


def _interpreter(script: Path) -> Path | None:
    """Return the interpreter a script's `#!` line names, or None."""
    try:
        with script.open("rb") as fp:
            first = fp.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode("utf-8", "replace").split()
    return Path(parts[0]) if parts else None


def is_agent(script: Path) -> bool:
    """Tell whether an executable is Hermes Agent's `hermes`: its environment has run_agent.py."""
    interpreter = _interpreter(script)
    if interpreter is None:
        return False
    prefix = interpreter.parent.parent  # <venv>/bin/python -> <venv>
    for lib in ("lib", "lib64"):
        for site in (prefix / lib).glob("python3*/site-packages"):
            if (site / AGENT_MODULE).is_file():
                return True
    return False


def find_agent(path: str | None = None) -> Path | None:
    """Return the first `hermes` on PATH that is Hermes Agent's, or None."""
    for folder in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        if not folder:
            continue
        candidate = Path(folder) / "hermes"
        if candidate.is_file() and os.access(candidate, os.X_OK) and is_agent(candidate):
            return candidate.absolute()
    return None


def resume_command(session_id: str, profile: str | None) -> ResumeCommand:
    """Return the agent's command that resumes a session (`-p NAME` for a named profile)."""
    chosen = os.environ.get(AGENT_BIN_ENV, "").strip()
    found = "env" if chosen else ""
    if not chosen:
        agent = find_agent()
        chosen, found = (str(agent), "path") if agent is not None else ("hermes", "")
    flags = ("-p", profile) if profile else ()
    return ResumeCommand((chosen, *flags, "--resume", session_id), found)
