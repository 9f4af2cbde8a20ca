"""Completions and the man page: generated from the live app, checked in, never stale."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.children import REPO_ROOT

from hermes_cli import docs
from hermes_cli.completion import command_docs, generators, man_page, readme_tables
from hermes_cli.shared.exitcodes import ExitCode
from hermes_state.store import home


def test_checked_in_completions_man_page_and_readme_tables_are_current(tmp_path: Path) -> None:
    docs.write_all(tmp_path, readme_from=REPO_ROOT / readme_tables.README)
    stale = [
        rel
        for rel in (*generators.OUTPUTS, readme_tables.README)
        if (tmp_path / rel).read_text(encoding="utf-8")
        != (REPO_ROOT / rel).read_text(encoding="utf-8")
    ]
    assert stale == [], "regenerate with: python -m hermes_cli.docs"


def test_readme_tables_name_every_command_and_exit_code() -> None:
    readme = (REPO_ROOT / readme_tables.README).read_text(encoding="utf-8")
    for command in command_docs.all_commands(docs.app_doc()):
        if command.path and not command.children:
            assert f"`hermes {command.key}" in readme, command.key
    for code in ExitCode:
        assert f"| {int(code)} |" in readme


def test_update_readme_refuses_a_readme_without_its_markers() -> None:
    with pytest.raises(ValueError, match="marker"):
        readme_tables.update_readme("# no tables here\n", docs.app_doc())


def test_man_page_lists_every_command_and_option() -> None:
    page = (REPO_ROOT / "man" / "hermes.1").read_text(encoding="utf-8")
    for command in command_docs.all_commands(docs.app_doc()):
        if command.key:
            assert man_page.roff_text(f"hermes {command.key}") in page, command.key
        for option in command.options:
            for flag in option.flags:
                assert man_page.roff_text(flag) in page, (command.key, flag)


@pytest.mark.parametrize(
    "heading", ["EXIT STATUS", "ENVIRONMENT", "FILES", "JSON OUTPUT", "COMMANDS"]
)
def test_man_page_has_the_reference_sections(heading: str) -> None:
    assert f".SH {heading}\n" in (REPO_ROOT / "man" / "hermes.1").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "word",
    [
        "HERMES_HOME",
        "NO_COLOR",
        "HERMES_STATE_DB_GUARD_BYPASS",
        "state.db",
        "active_profile",
        "errors.log",
        "\\fB75\\fR",
    ],
)
def test_man_page_documents_environment_files_and_exit_codes(word: str) -> None:
    page = (REPO_ROOT / "man" / "hermes.1").read_text(encoding="utf-8")
    assert word in page.replace("\\-", "-")


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_man_page_renders_without_groff_warnings() -> None:
    proc = subprocess.run(
        ["groff", "-man", "-ww", "-Tutf8", str(REPO_ROOT / "man" / "hermes.1")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stderr == ""
    text = re.sub(".\b", "", proc.stdout)  # drop overstrike bold/underline
    assert "hermes sessions search" in text


def _hermes_on_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has a `hermes` that runs this checkout."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "hermes"
    script.write_text(
        f'#!/bin/sh\nPYTHONPATH="{REPO_ROOT}" exec "{sys.executable}" -m hermes_cli "$@"\n',
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _bash_complete(words: list[str], env: dict[str, str]) -> list[str]:
    line = " ".join(f"'{w}'" for w in words)
    script = (
        f"source '{REPO_ROOT / 'completions' / 'hermes.bash'}'\n"
        f"COMP_WORDS=({line}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _hermes\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    proc = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_lists_the_real_profiles_under_hermes_home(
    tmp_path: Path, hermes_home: Path
) -> None:
    home.create_profile("coder")
    home.create_profile("writer")
    env = _hermes_on_path(tmp_path)
    assert _bash_complete(["hermes", "-p", ""], env) == ["default", "coder", "writer"]
    assert _bash_complete(["hermes", "profile", "use", ""], env) == ["default", "coder", "writer"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_knows_commands_options_and_choices(tmp_path: Path) -> None:
    env = _hermes_on_path(tmp_path)
    assert "sessions" in _bash_complete(["hermes", ""], env)
    assert _bash_complete(["hermes", "-p", "x", "sessions", "se"], env) == ["search"]
    assert _bash_complete(["hermes", "sessions", "list", "--sort", ""], env) == [
        "started",
        "active",
    ]
    assert "--older-than" in _bash_complete(["hermes", "sessions", "prune", "--"], env)


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completion_lists_profiles(tmp_path: Path, hermes_home: Path) -> None:
    home.create_profile("coder")
    env = _hermes_on_path(tmp_path)
    script = f"source '{REPO_ROOT / 'completions' / 'hermes.fish'}'; complete -C 'hermes -p '"
    proc = subprocess.run(["fish", "-c", script], capture_output=True, text=True, env=env)
    # In the order hermes gives them (the root first), not sorted by fish.
    assert [line.split("\t")[0] for line in proc.stdout.splitlines()] == ["default", "coder"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completion_is_valid_zsh() -> None:
    proc = subprocess.run(["zsh", "-n", str(REPO_ROOT / "completions" / "_hermes")])
    assert proc.returncode == 0


@pytest.mark.parametrize(("shell", "script"), [("bash", "hermes.bash"), ("fish", "hermes.fish")])
def test_bash_and_fish_completions_are_valid_syntax(shell: str, script: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    proc = subprocess.run([shell, "-n", str(REPO_ROOT / "completions" / script)])
    assert proc.returncode == 0
