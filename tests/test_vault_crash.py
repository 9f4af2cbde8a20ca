"""Never in zero places: a `hermes vault move` or `return` killed with SIGKILL at each of its
steps leaves every session visible in exactly one place, and running it again finishes it."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from clitools import child
from support.children import child_env, hermes_argv
from test_vault import make_session

from hermes_state import vault
from hermes_state.connection import open_store
from hermes_state.home import default_db_path

OLD = time.time() - 400 * 86400
ORIGINAL = {"a": 3, "a2": 3, "b": 3, "c": 3}


def _build() -> None:
    with open_store(default_db_path()) as store:
        make_session(store, "a")
        make_session(store, "a2", parent="a")
        make_session(store, "b")
        make_session(store, "c", time.time())


def _ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)


def _visible() -> dict[str, list[tuple[str, int]]]:
    """Where each session is visible (live, or a vault store without it in live), with its
    message count there — what a reader of either place can see."""
    seen: dict[str, list[tuple[str, int]]] = {}
    conn = _ro(default_db_path())
    live = dict(
        conn.execute(
            "SELECT s.id, (SELECT count(*) FROM messages m WHERE m.session_id = s.id)"
            " FROM sessions s"
        ).fetchall()
    )
    conn.close()
    for sid, n in live.items():
        seen.setdefault(sid, []).append(("live", n))
    for year, path in vault.vault_paths(default_db_path().parent):
        conn = _ro(path)
        for sid, n in conn.execute(
            "SELECT s.id, (SELECT count(*) FROM messages m WHERE m.session_id = s.id)"
            " FROM sessions s"
        ):
            if sid not in live:
                seen.setdefault(sid, []).append((year, n))
        conn.close()
    return seen


def _assert_once_each() -> None:
    seen = _visible()
    assert set(seen) == set(ORIGINAL), seen
    for sid, places in seen.items():
        assert len(places) == 1, (sid, places)
        assert places[0][1] == ORIGINAL[sid], (sid, places)


def _killed(*args: str, step: str) -> None:
    done = subprocess.run(
        hermes_argv(*args),
        capture_output=True,
        text=True,
        env=child_env(extra={vault.CRASH_ENV: step}),
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL, (step, done.returncode, done.stderr)


@pytest.mark.parametrize("step", ["created", "copied", "verified", "deleted"])
def test_move_killed_at_each_step_leaves_every_session_once_and_rerun_finishes(
    step: str,
) -> None:
    _build()
    _killed("vault", "move", "--older-than", "90d", "--yes", step=step)
    _assert_once_each()
    again = child("vault", "move", "--older-than", "90d", "--yes", "--json")
    assert again.returncode == 0, again.stderr
    _assert_once_each()
    assert {sid for sid, p in _visible().items() if p[0][0] == "live"} == {"c"}
    checked = child("vault", "check", "--json")
    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize("step", ["returned", "unvaulted"])
def test_return_killed_at_each_step_leaves_every_session_once_and_rerun_finishes(
    step: str,
) -> None:
    _build()
    assert child("vault", "move", "--older-than", "90d", "--yes").returncode == 0
    _killed("vault", "return", "b", step=step)
    _assert_once_each()
    again = child("vault", "return", "b")
    assert again.returncode == 0 or step == "unvaulted", again.stderr
    _assert_once_each()
    assert _visible()["b"][0][0] == "live"
    assert child("vault", "check").returncode == 0


def test_a_session_changed_during_the_move_stays_live_and_its_copy_goes(tmp_path: Path) -> None:
    _build()
    release = tmp_path / "go"
    proc = subprocess.Popen(
        hermes_argv("vault", "move", "--older-than", "90d", "--yes", "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(extra={vault.PAUSE_ENV: f"verified:{release}"}),
    )
    assert proc.stderr is not None
    line = ""
    deadline = time.monotonic() + 30
    while "paused at verified" not in line and time.monotonic() < deadline:
        line = proc.stderr.readline()
    from hermes_state.messages import append_messages

    with open_store(default_db_path()) as store:  # the agent writes to b meanwhile
        append_messages(store, "b", [{"role": "user", "content": "one more"}])
    release.touch()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    import json

    result = json.loads(out)
    assert result["changed"] == ["b"] and sorted(result["session_ids"]) == ["a", "a2"]
    seen = _visible()
    assert seen["b"] == [("live", 4)]
    assert child("vault", "check").returncode == 0


def test_a_second_move_at_once_is_refused(tmp_path: Path) -> None:
    _build()
    release = tmp_path / "go"
    proc = subprocess.Popen(
        hermes_argv("vault", "move", "--older-than", "90d", "--yes"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(extra={vault.PAUSE_ENV: f"copied:{release}"}),
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while "paused at copied" not in proc.stderr.readline() and time.monotonic() < deadline:
        pass
    second = child("vault", "move", "--older-than", "90d", "--yes")
    release.touch()
    proc.communicate(timeout=60)
    assert second.returncode == 1 and "another `hermes vault move`" in second.stderr
    _assert_once_each()
