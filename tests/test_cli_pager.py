"""Long output goes through a pager on a terminal (like git), never on a pipe; show's filters."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from clitools import child, pty_child, run

from hermes_state.records import messages, sessions
from hermes_state.store.connection import open_store

LONG = "long_session"
MESSAGES = 300


@pytest.fixture
def long_store(hermes_home: Path) -> Path:
    """A store with one 300-message session (user/assistant turns, reasoning on assistants)."""
    path = hermes_home / "state.db"
    with open_store(path) as store:
        sessions.create_session(store, LONG, "cli", started_at=1.79e9)
        messages.append_messages(
            store,
            LONG,
            [
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"message number {i}",
                    "reasoning": None if i % 2 == 0 else f"thinking about {i}",
                    "timestamp": 1.79e9 + i,
                }
                for i in range(MESSAGES)
            ],
        )
    return path


def pager_into(path: Path) -> str:
    """A PAGER command line that saves what it is given into path."""
    return f"cat > {shlex.quote(str(path))}"


def test_long_show_on_a_terminal_goes_through_the_pager(long_store: Path, tmp_path: Path) -> None:
    paged = tmp_path / "paged.txt"
    result = pty_child("sessions", "show", LONG, lines=20, env={"PAGER": pager_into(paged)})
    assert result.returncode == 0, result.output
    text = re.sub(r"\x1b\[[0-9;]*m", "", paged.read_text(encoding="utf-8"))
    assert "Session:  long_session" in text and f"message number {MESSAGES - 1}" in text
    assert "message number" not in result.output  # nothing went around the pager


def test_the_pager_keeps_colour(long_store: Path, tmp_path: Path) -> None:
    paged = tmp_path / "paged.txt"
    pty_child("sessions", "show", LONG, lines=20, env={"PAGER": pager_into(paged)})
    assert "\x1b[1;32muser\x1b[0m" in paged.read_text(encoding="utf-8")


def test_hermes_pager_wins_over_pager(long_store: Path, tmp_path: Path) -> None:
    mine, theirs = tmp_path / "mine.txt", tmp_path / "theirs.txt"
    env = {"HERMES_PAGER": pager_into(mine), "PAGER": pager_into(theirs)}
    pty_child("sessions", "show", LONG, lines=20, env=env)
    assert mine.exists() and not theirs.exists()


def test_less_gets_frx_when_less_is_unset(long_store: Path, tmp_path: Path) -> None:
    seen = tmp_path / "less.txt"
    pager = f"printenv LESS > {shlex.quote(str(seen))}; cat > /dev/null"
    pty_child("sessions", "show", LONG, lines=20, env={"PAGER": pager})
    assert seen.read_text(encoding="utf-8").strip() == "FRX"


def test_short_output_on_a_terminal_is_printed_without_the_pager(
    long_store: Path, tmp_path: Path
) -> None:
    paged = tmp_path / "paged.txt"
    result = pty_child(
        "sessions", "show", LONG, "--tail", "3", lines=40, env={"PAGER": pager_into(paged)}
    )
    assert not paged.exists()
    assert f"message number {MESSAGES - 1}" in result.output


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--no-pager",), {}),
        (("--format", "jsonl"), {}),
        ((), {"PAGER": "cat"}),
        ((), {"PAGER": ""}),
        ((), {"PAGER": "no-such-pager-here -R"}),
    ],
)
def test_no_pager_when_asked_for_machine_formats_or_cat(
    long_store: Path, tmp_path: Path, args: tuple[str, ...], env: dict[str, str]
) -> None:
    paged = tmp_path / "paged.txt"
    # Without a pager setting of its own, a case gets one that would leave a file behind.
    chosen = env or {"HERMES_PAGER": pager_into(paged)}
    result = pty_child("sessions", "show", LONG, *args, lines=20, env=chosen)
    assert result.returncode == 0
    assert not paged.exists()
    assert f"message number {MESSAGES - 1}" in result.output


def test_never_a_pager_on_a_pipe(long_store: Path, tmp_path: Path) -> None:
    paged = tmp_path / "paged.txt"
    proc = child("sessions", "show", LONG, env={"PAGER": pager_into(paged), "LINES": "5"})
    assert proc.returncode == 0 and not paged.exists()
    assert f"message number {MESSAGES - 1}" in proc.stdout


def test_leaving_the_pager_early_ends_the_command_quietly(long_store: Path, tmp_path: Path) -> None:
    result = pty_child("sessions", "show", LONG, lines=20, env={"PAGER": "head -c 100 > /dev/null"})
    assert result.returncode == 0
    assert "Traceback" not in result.output and "Error" not in result.output


def test_long_list_and_search_use_the_pager_too(long_store: Path, tmp_path: Path) -> None:
    with open_store(long_store) as store:
        for i in range(40):
            sessions.create_session(store, f"extra_{i:02d}", "cli", started_at=1.8e9 + i)
    paged = tmp_path / "list.txt"
    pty_child("sessions", "list", "--limit", "40", lines=20, env={"PAGER": pager_into(paged)})
    assert "extra_39" in paged.read_text(encoding="utf-8")
    found = tmp_path / "search.txt"
    pty_child("sessions", "search", "message", lines=10, env={"PAGER": pager_into(found)})
    assert "long_session" in found.read_text(encoding="utf-8")


# --- show: --tail, --role, --reasoning ------------------------------------------------------


def test_show_tail_prints_the_last_messages_and_says_how_many_were_left_out(
    long_store: Path,
) -> None:
    out = run("sessions", "show", LONG, "--tail", "2").stdout
    assert "… 298 earlier message(s) not shown" in out
    assert "message number 298" in out and "message number 299" in out
    assert "message number 297" not in out


def test_show_role_keeps_only_those_roles(long_store: Path) -> None:
    data = json.loads(run("sessions", "show", LONG, "--role", "user", "--json").stdout)
    assert {m["role"] for m in data["messages"]} == {"user"} and len(data["messages"]) == 150


def test_show_role_and_tail_combine(long_store: Path) -> None:
    lines = run("sessions", "show", LONG, "--role", "assistant", "--tail", "1", "--format", "jsonl")
    assert [json.loads(x)["content"] for x in lines.stdout.splitlines()] == ["message number 299"]


def test_show_hides_reasoning_unless_asked(long_store: Path) -> None:
    hidden = run("sessions", "show", LONG, "--tail", "1").stdout
    assert "thinking about 299" not in hidden and "reasoning hidden" in hidden
    shown = run("sessions", "show", LONG, "--tail", "1", "--reasoning").stdout
    assert "│ thinking about 299" in shown
