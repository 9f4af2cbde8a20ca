"""Completion of values (session ids, titles, sources, roles, profiles) in real bash, zsh, fish."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clitools import child, load_sample
from support.children import REPO_ROOT

from hermes_state.records import sessions
from hermes_state.store import home
from hermes_state.store.connection import open_store

NEWEST = ["20261201_171845_4e5f60", "20261130_091233_3d4e5f", "20261129_030000_2c3d4e"]
SOURCES = ["cli", "cron", "discord", "telegram"]
ROLES = ["user", "assistant", "tool", "system"]


@pytest.fixture
def sample(hermes_home: Path) -> Path:
    """The test profile's store, filled with examples/sample-sessions.jsonl."""
    return load_sample()


@pytest.fixture
def shell_env(tmp_path: Path, hermes_home: Path) -> dict[str, str]:
    """An environment whose PATH has a `hermes` that runs this checkout."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "hermes"
    script.write_text(
        # PYTHONSAFEPATH: never import a hermes_cli from the shell's current directory.
        "#!/bin/sh\nPYTHONSAFEPATH=1 "
        f'PYTHONPATH="{REPO_ROOT}" exec "{sys.executable}" -m hermes_cli "$@"\n',
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def complete(*args: str) -> list[str]:
    """Run `hermes __complete ARGS`; return its lines."""
    proc = child("__complete", *args)
    assert proc.returncode == 0 and proc.stderr == ""
    lines: list[str] = proc.stdout.splitlines()
    return lines


# --- the value source -----------------------------------------------------------------------


def test_ids_come_newest_first_with_their_titles(sample: Path) -> None:
    lines = complete("ids")
    assert [line.split("\t")[0] for line in lines[:3]] == NEWEST
    assert lines[0] == "20261201_171845_4e5f60\tSQLite WAL checkpoint questions"
    assert "20261128_220940_1b2c3d" in lines  # untitled: the id alone


def test_ids_titles_and_sources_filter_by_prefix(sample: Path) -> None:
    assert [x.split("\t")[0] for x in complete("ids", "2026112")][:2] == [
        "20261129_030000_2c3d4e",
        "20261128_220940_1b2c3d",
    ]
    assert complete("titles", "Refactor") == ["Refactor search module", "Refactor search module #2"]
    assert complete("sources") == SOURCES and complete("sources", "c") == ["cli", "cron"]
    assert complete("roles", "t") == ["tool"]


def test_values_come_from_the_profile_named_on_the_line(sample: Path) -> None:
    home.create_profile("coder")
    with open_store(home.profile_home("coder") / "state.db") as store:
        sessions.create_session(store, "coder-1", "slack")
    assert complete("profiles") == ["default", "coder"]
    proc = child("-p", "coder", "__complete", "sources")
    assert proc.stdout.splitlines() == ["slack"]


def test_completion_never_creates_or_writes_a_store(hermes_home: Path, sample: Path) -> None:
    home.create_profile("empty")
    assert child("-p", "empty", "__complete", "ids").stdout == ""
    assert not (home.profile_home("empty") / "state.db").exists()
    before = sample.stat().st_mtime_ns
    complete("ids")
    complete("sources")
    assert sample.stat().st_mtime_ns == before


def test_completion_leaves_out_hostile_values_and_escapes_descriptions(sample: Path) -> None:
    with open_store(sample) as store:
        sessions.create_session(store, "evil\x1b]0;x\x07", "bad\x1bsource", started_at=2e9)
        sessions.create_session(store, "zz_newest", "cli", started_at=2.1e9)
    conn = sqlite3.connect(sample)
    with conn:
        conn.execute("UPDATE sessions SET title = 'T \x1b[2J' WHERE id = 'zz_newest'")
    conn.close()
    lines = complete("ids")
    assert lines[0] == "zz_newest\tT \\x1b[2J"
    assert not any("\x1b" in line for line in lines)
    assert "bad\x1bsource" not in complete("sources")
    assert complete("titles", "T ") == []


def test_completion_on_a_corrupt_store_prints_nothing(hermes_home: Path) -> None:
    (hermes_home / "state.db").write_bytes(b"not a database" * 100)
    proc = child("__complete", "ids")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


# --- bash -----------------------------------------------------------------------------------


def bash_complete(words: list[str], env: dict[str, str]) -> list[str]:
    """Complete the last word of a hermes command line in bash; return COMPREPLY."""
    line = " ".join(f"'{w}'" for w in words)
    script = (
        f"source '{REPO_ROOT / 'completions' / 'hermes.bash'}'\n"
        f"COMP_WORDS=({line}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _hermes\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return [x for x in proc.stdout.splitlines() if x]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_session_ids_newest_first(sample: Path, shell_env: dict[str, str]) -> None:
    assert bash_complete(["hermes", "sessions", "show", ""], shell_env)[:3] == NEWEST
    assert bash_complete(
        ["hermes", "sessions", "export", "--session-id", "2026113"], shell_env
    ) == ["20261130_091233_3d4e5f"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_a_title_quoted_when_no_id_matches(
    sample: Path, shell_env: dict[str, str]
) -> None:
    assert bash_complete(["hermes", "sessions", "show", "Fix"], shell_env) == [
        "Fix\\ Docker\\ build"
    ]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_sources_and_roles(sample: Path, shell_env: dict[str, str]) -> None:
    assert bash_complete(["hermes", "sessions", "list", "--source", ""], shell_env) == SOURCES
    assert bash_complete(["hermes", "sessions", "prune", "--exclude-source", "t"], shell_env) == [
        "telegram"
    ]
    assert bash_complete(["hermes", "sessions", "search", "x", "--role", ""], shell_env) == ROLES


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_ids_only_for_the_first_argument(
    sample: Path, shell_env: dict[str, str]
) -> None:
    assert bash_complete(["hermes", "sessions", "rename", "20261128", ""], shell_env) == []


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_from_the_profile_given_with_p(
    sample: Path, shell_env: dict[str, str]
) -> None:
    home.create_profile("coder")
    with open_store(home.profile_home("coder") / "state.db") as store:
        sessions.create_session(store, "coder-1", "slack")
    words = ["hermes", "-p", "coder", "sessions", "show", ""]
    assert bash_complete(words, shell_env) == ["coder-1"]
    assert bash_complete(
        ["hermes", "--profile=coder", "sessions", "list", "--source", ""], shell_env
    ) == ["slack"]


# --- zsh ------------------------------------------------------------------------------------

# The completion system's builtins, replaced by functions that print what they were given.
ZSH_STUBS = r"""
compadd() { local -a a; a=("$@"); print -l -- "${(@)a[${a[(i)--]}+1,-1]}"; }
_describe() { print -l -- "${(@P)${@[-1]}}"; }
_files() { print _files; }
_message() { print "_message $*"; }
"""


def zsh_complete(words: list[str], env: dict[str, str]) -> list[str]:
    """Run the zsh completion function for a command line; return what it offered."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    script = (
        ZSH_STUBS
        + f"words=({quoted}); CURRENT={len(words)}\n"
        + f"source '{REPO_ROOT / 'completions' / '_hermes'}'; _hermes\n"
    )
    proc = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_session_ids_with_titles_then_titles(
    sample: Path, shell_env: dict[str, str]
) -> None:
    offered = zsh_complete(["hermes", "sessions", "show", ""], shell_env)
    assert offered[:2] == [
        "20261201_171845_4e5f60:SQLite WAL checkpoint questions",
        "20261130_091233_3d4e5f:Travel plans Osaka",
    ]
    assert "Fix Docker build" in offered


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_sources_roles_and_profiles(sample: Path, shell_env: dict[str, str]) -> None:
    home.create_profile("coder")
    assert zsh_complete(["hermes", "sessions", "search", "x", "--source", ""], shell_env) == SOURCES
    assert zsh_complete(["hermes", "sessions", "show", "x", "--role", ""], shell_env) == ROLES
    assert zsh_complete(["hermes", "-p", ""], shell_env) == ["default", "coder"]
    assert zsh_complete(["hermes", "profile", "use", ""], shell_env) == ["default", "coder"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_files_for_import(sample: Path, shell_env: dict[str, str]) -> None:
    assert zsh_complete(["hermes", "sessions", "import", ""], shell_env) == ["_files"]


# --- fish -----------------------------------------------------------------------------------


def fish_complete(line: str, env: dict[str, str]) -> list[tuple[str, str]]:
    """Ask fish to complete a command line; return (value, description) pairs."""
    script = f"source '{REPO_ROOT / 'completions' / 'hermes.fish'}'; complete -C '{line}'"
    proc = subprocess.run(["fish", "-c", script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    pairs = [[*x.split("\t"), ""][:2] for x in proc.stdout.splitlines()]
    return [(value, description) for value, description in pairs]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_session_ids_newest_first_with_titles(
    sample: Path, shell_env: dict[str, str]
) -> None:
    offered = fish_complete("hermes sessions show ", shell_env)
    assert offered[:2] == [
        ("20261201_171845_4e5f60", "SQLite WAL checkpoint questions"),
        ("20261130_091233_3d4e5f", "Travel plans Osaka"),
    ]
    assert ("Fix Docker build", "") in fish_complete("hermes sessions show Fix", shell_env)


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_sources_and_roles(sample: Path, shell_env: dict[str, str]) -> None:
    sources = [v for v, _ in fish_complete("hermes sessions list --source ", shell_env)]
    assert sources == SOURCES
    roles = [v for v, _ in fish_complete("hermes sessions search x --role ", shell_env)]
    assert roles == ROLES


# An interactive zsh on a pseudo-terminal (zsh/zpty) with compinit: type a line, press TAB, then
# turn the completed line into `echo LINE: …` and run it, so the completion is printed. No pause
# after TAB is needed: zle reads the keys typed after it only once the completion has finished
# (checked with the machine's two cores kept busy).
ZPTY_SCRIPT = r"""
zmodload zsh/zpty
zpty -b z 'PS1="%% " zsh -f -i'
zpty -w z "$SETUP"
zpty -n -w z "$LINE"$'\t'
zpty -n -w z $'\x01echo LINE: \n'
out=""
for i in {1..150}; do
  sleep 0.1
  while zpty -r -t z chunk; do out+=$chunk; done
  [[ $out == *$'\nLINE: '* ]] && break
done
print -r -- "$out"
zpty -d z
"""


def zsh_interactive(
    line: str,
    env: dict[str, str],
    tmp_path: Path,
    completions: Path | None = None,
    then: str = "",
) -> str:
    """Complete line with TAB in a real interactive zsh whose compinit finds _hermes in
    completions (default: the checked-in one), after running `then`; return the line."""
    directory = completions or REPO_ROOT / "completions"
    dump = tmp_path / "zcompdump"
    setup = f"fpath=({directory} $fpath); autoload -U compinit; compinit -u -d {dump}"
    run_env = {
        **env,
        "SETUP": f"{setup}; {then}" if then else setup,
        "LINE": line,
    }
    proc = subprocess.run(
        ["zsh", "-f", "-c", ZPTY_SCRIPT], capture_output=True, text=True, env=run_env, timeout=60
    )
    clean = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", proc.stdout).replace("\r", "")
    found: list[str] = re.findall(r"^LINE: (.*)$", clean, re.MULTILINE)
    assert found, clean
    return found[-1].rstrip()


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
@pytest.mark.parametrize(
    ("typed", "completed"),
    [
        ("hermes sessions list --source d", "hermes sessions list --source discord"),
        ("hermes sessions show 20261118", "hermes sessions show 20261118_091502_a1c9e2"),
        ("hermes sessions show Fix", "hermes sessions show Fix Docker build"),
        ("hermes sessions search x --role as", "hermes sessions search x --role assistant"),
        ("hermes sessions pin 20261118", "hermes sessions pin 20261118_091502_a1c9e2"),
        (
            "hermes sessions archive 20261201_171845_4e5f60 2026113",
            "hermes sessions archive 20261201_171845_4e5f60 20261130_091233_3d4e5f",
        ),
    ],
)
def test_zsh_interactive_tab_completes_values(
    sample: Path, shell_env: dict[str, str], tmp_path: Path, typed: str, completed: str
) -> None:
    assert zsh_interactive(typed, shell_env, tmp_path) == completed


# --- every parameter that takes a session id, in every shell --------------------------------


@dataclass(frozen=True)
class SessionIdSlot:
    """A place on a command line where a session id is typed: the words before it."""

    label: str
    words: tuple[str, ...]


def _names_sessions(param: Any) -> bool:
    """Whether a parameter takes session ids, judged from its name, metavar and help (not from
    what the completion generator makes of them)."""
    if getattr(param, "is_flag", False) or getattr(getattr(param, "type", None), "choices", None):
        return False
    name = param.name or ""
    metavar = (param.metavar or "").removesuffix("...")
    help_text = getattr(param, "help", None) or ""
    return (
        "session" in name
        or metavar in ("ID", "SESSION", "SESSION_ID")
        or re.search(r"\bsession ids?\b", help_text, re.IGNORECASE) is not None
    )


def session_id_slots() -> list[SessionIdSlot]:
    """Walk the live command tree: every argument and option that takes a session id (and, for
    a variadic argument, the word after a first id too)."""
    from hermes_cli.main import get_command

    slots: list[SessionIdSlot] = []

    def walk(command: Any, path: tuple[str, ...]) -> None:
        arguments = [p for p in command.params if p.param_type_name == "argument"]
        for param in command.params:
            if getattr(param, "hidden", False) or not _names_sessions(param):
                continue
            key = " ".join(path)
            if param.param_type_name == "option":
                flag = max(param.opts, key=len)
                slots.append(SessionIdSlot(f"{key} {flag}", (*path, flag)))
                continue
            before = tuple("x" for _ in range(arguments.index(param)))
            slots.append(SessionIdSlot(f"{key} {param.name}", (*path, *before)))
            if param.nargs == -1:
                slots.append(
                    SessionIdSlot(f"{key} {param.name} (2nd)", (*path, *before, NEWEST[0]))
                )
        for name, sub in getattr(command, "commands", {}).items():
            if not getattr(sub, "hidden", False):
                walk(sub, (*path, name))

    walk(get_command(), ())
    return slots


SLOTS = session_id_slots()


def test_the_walk_finds_every_known_session_id_parameter() -> None:
    labels = {slot.label for slot in SLOTS}
    assert {
        "sessions show session",
        "sessions delete session",
        "sessions rename session",
        "sessions export --session-id",
        "sessions pin sessions",
        "sessions pin sessions (2nd)",
        "sessions unpin sessions",
        "sessions archive sessions",
        "sessions unarchive sessions (2nd)",
    } <= labels
    assert "sessions browse --print" not in labels  # a choice, not an id


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("slot", SLOTS, ids=lambda s: s.label)
def test_every_session_id_parameter_completes_ids_in_bash(
    sample: Path, shell_env: dict[str, str], slot: SessionIdSlot
) -> None:
    assert bash_complete(["hermes", *slot.words, "2026113"], shell_env) == [
        "20261130_091233_3d4e5f"
    ]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
@pytest.mark.parametrize("slot", SLOTS, ids=lambda s: s.label)
def test_every_session_id_parameter_completes_ids_in_zsh(
    sample: Path, shell_env: dict[str, str], slot: SessionIdSlot
) -> None:
    offered = zsh_complete(["hermes", *slot.words, "2026113"], shell_env)
    assert offered[0] == "20261130_091233_3d4e5f:Travel plans Osaka"


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
@pytest.mark.parametrize("slot", SLOTS, ids=lambda s: s.label)
def test_every_session_id_parameter_completes_ids_in_fish(
    sample: Path, shell_env: dict[str, str], slot: SessionIdSlot
) -> None:
    line = " ".join(["hermes", *slot.words, "2026113"])
    assert fish_complete(line, shell_env)[:1] == [("20261130_091233_3d4e5f", "Travel plans Osaka")]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_offers_nothing_after_the_last_argument_and_choices_for_a_choice_argument(
    sample: Path, shell_env: dict[str, str]
) -> None:
    assert bash_complete(["hermes", "sessions", "show", NEWEST[0], ""], shell_env) == []
    assert bash_complete(["hermes", "completion", "install", ""], shell_env) == [
        "bash",
        "zsh",
        "fish",
        "man",
    ]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_choices_of_options_and_arguments(shell_env: dict[str, str]) -> None:
    assert zsh_complete(["hermes", "sessions", "list", "--sort", ""], shell_env) == [
        "started",
        "active",
    ]
    assert zsh_complete(["hermes", "completion", "show", ""], shell_env) == [
        "bash",
        "zsh",
        "fish",
        "man",
    ]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_offers_no_file_names_for_free_text(
    sample: Path, shell_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "somefile.txt").write_text("x", encoding="utf-8")
    env = {**shell_env, "PWD": str(tmp_path)}
    script = (
        f"cd '{tmp_path}'; source '{REPO_ROOT / 'completions' / 'hermes.fish'}'; "
        "complete -C 'hermes sessions search some'"
    )
    proc = subprocess.run(["fish", "-c", script], capture_output=True, text=True, env=env)
    assert proc.stdout == ""
