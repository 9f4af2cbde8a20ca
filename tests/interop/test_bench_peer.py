"""The bench's peer script under the newest release: its serve mode answers as its one-shot runs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from interop.releases import BY_KEY, ReleaseUnavailable, python_for, run_probe

REPO_ROOT = Path(__file__).resolve().parents[2]
PEER_SCRIPT = REPO_ROOT / "bench" / "peer_upstream.py"


def _env(home: Path) -> dict[str, str]:
    """The release's environment: HERMES_HOME at the store, HOME out of the real one."""
    scratch = home.parent / "peer-home"
    scratch.mkdir(exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(scratch),
        "HERMES_HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def test_serve_answers_each_request_as_the_one_shot_operation(tmp_path: Path) -> None:
    release = BY_KEY["r31"]  # the bench's peer: the newest release
    try:
        python = str(python_for(release))
    except ReleaseUnavailable as exc:
        pytest.skip(str(exc))
    built = tmp_path / "home"
    built.mkdir()
    run_probe(release, "build", built)
    db = str(built / "state.db")
    once = subprocess.run(
        [python, str(PEER_SCRIPT), "search", db, "docker", "2"],
        env=_env(built),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    want = json.loads(once.stdout.splitlines()[-1])["ids"]
    requests = [["search", "docker", 3], ["list", 2], ["search", "docker", 4]]
    served = subprocess.run(
        [python, str(PEER_SCRIPT), "serve", db],
        input="".join(json.dumps(r) + "\n" for r in requests),
        env=_env(built),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    replies = [json.loads(line) for line in served.stdout.splitlines()]
    assert [len(r.get("samples_s", [])) for r in replies[:3]] == [3, 2, 4]
    assert replies[0]["ids"] == want and want  # the store holds 'docker' messages
    assert "ids" in replies[1] and "ids" not in replies[2]  # an answer once per request kind
    assert all(s > 0 for r in replies[:3] for s in r["samples_s"])
