"""`hermes completion show|install`: the scripts and the man page, from the real process, put
where each shell (and man) looks for them, never over a file the user changed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clitools import load_sample
from support.children import REPO_ROOT, child_env, hermes_argv
from test_cli_complete import NEWEST, zsh_interactive

from hermes_cli import docs
from hermes_cli.completion import completion_install, generators, man_page, targets

BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")


@pytest.fixture
def user(tmp_path: Path, hermes_home: Path) -> dict[str, str]:
    """The environment of a user whose home is a temporary directory (no XDG variables set),
    with a `hermes` on PATH that runs this checkout."""
    home = tmp_path / "home"
    home.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "hermes"
    script.write_text(
        f'#!/bin/sh\nPYTHONSAFEPATH=1 PYTHONPATH="{REPO_ROOT}" exec "{sys.executable}" '
        '-m hermes_cli "$@"\n',
        encoding="utf-8",
    )
    script.chmod(0o755)
    env = {
        k: v
        for k, v in child_env().items()
        if not k.startswith(("XDG_", "BASH_COMPLETION")) and k != "ZDOTDIR"
    }
    return {**env, "HOME": str(home), "SHELL": "/bin/bash", "PATH": f"{bin_dir}:{env['PATH']}"}


def hermes(env: dict[str, str], *args: str) -> Any:
    """Run `python -m hermes_cli ARGS` as that user (exactly that environment)."""
    return subprocess.run(
        hermes_argv(*args),
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def home_of(env: dict[str, str]) -> Path:
    return Path(env["HOME"])


# --- show -----------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["bash", "zsh", "fish", "man"])
def test_show_prints_the_text_generated_from_the_live_app(
    user: dict[str, str], target: str
) -> None:
    # The checked-in files are this same text (test_cli_docs checks they are current).
    proc = hermes(user, "completion", "show", target)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == generators.generate(target, docs.app_doc())


def test_show_without_a_shell_prints_the_script_of_the_shell_in_SHELL(
    user: dict[str, str],
) -> None:
    proc = hermes({**user, "SHELL": "/usr/bin/fish"}, "completion", "show")
    assert proc.returncode == 0
    assert proc.stdout.startswith("# fish completion for hermes")


# --- install: where each file goes ----------------------------------------------------------


def test_install_puts_the_bash_script_where_bash_completion_looks(user: dict[str, str]) -> None:
    proc = hermes(user, "completion", "install")
    path = home_of(user) / ".local/share/bash-completion/completions/hermes"
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == (
        "Wrote ~/.local/share/bash-completion/completions/hermes (bash completion)."
    )
    assert "source ~/.local/share/bash-completion/completions/hermes" in proc.stdout
    text = path.read_text(encoding="utf-8")
    assert text.startswith(generators.generate("bash", docs.app_doc()))
    assert completion_install.written_by_hermes("bash", text)
    assert path.stat().st_mode & 0o777 == 0o644


def test_install_honours_xdg_data_home_and_bash_completion_user_dir(
    user: dict[str, str], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    assert hermes({**user, "XDG_DATA_HOME": str(data)}, "completion", "install").returncode == 0
    assert (data / "bash-completion/completions/hermes").is_file()
    mine = tmp_path / "mine"
    env = {**user, "BASH_COMPLETION_USER_DIR": str(mine)}
    assert hermes(env, "completion", "install", "bash").returncode == 0
    assert (mine / "completions/hermes").is_file()


@pytest.mark.skipif(
    shutil.which("bash") is None or not BASH_COMPLETION.is_file(),
    reason="bash with bash-completion is not installed",
)
def test_bash_completion_loads_the_installed_script_and_it_completes_ids(
    user: dict[str, str],
) -> None:
    load_sample()
    assert hermes(user, "completion", "install", "bash").returncode == 0
    # bash-completion's own loader (2.12 calls it _comp_load, earlier __load_completion).
    script = (
        f"source {BASH_COMPLETION}\n"
        "{ type _comp_load && _comp_load hermes; } >/dev/null 2>&1 || __load_completion hermes\n"
        "complete -p hermes\n"
        "COMP_WORDS=(hermes sessions unpin 2026113); COMP_CWORD=3; _hermes\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=user)
    assert proc.stdout.splitlines() == ["complete -o default -F _hermes hermes", NEWEST[1]]


def test_install_zsh_prints_the_fpath_line_while_the_directory_is_not_on_fpath(
    user: dict[str, str],
) -> None:
    proc = hermes({**user, "SHELL": "/usr/bin/zsh"}, "completion", "install")
    assert proc.returncode == 0, proc.stderr
    assert (home_of(user) / ".local/share/zsh/site-functions/_hermes").is_file()
    assert proc.stdout.splitlines() == [
        "Wrote ~/.local/share/zsh/site-functions/_hermes (zsh completion).",
        "~/.local/share/zsh/site-functions is not on zsh's $fpath yet: add this line to "
        "~/.zshrc, before compinit runs:",
        "  fpath=(~/.local/share/zsh/site-functions $fpath)",
        "  autoload -Uz compinit && compinit",
    ]


def test_install_zsh_says_it_is_loaded_when_zshrc_puts_the_directory_on_fpath(
    user: dict[str, str],
) -> None:
    zshrc = "fpath=($HOME/.local/share/zsh/site-functions $fpath)\nautoload -U compinit\ncompinit\n"
    (home_of(user) / ".zshrc").write_text(zshrc, encoding="utf-8")
    proc = hermes(user, "completion", "install", "zsh")
    assert proc.stdout.splitlines()[1:] == ["New zsh shells load it (its directory is on $fpath)."]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_compinit_finds_the_installed_function_and_tab_completes_ids(
    user: dict[str, str], tmp_path: Path
) -> None:
    load_sample()
    assert hermes(user, "completion", "install", "zsh").returncode == 0
    directory = home_of(user) / ".local/share/zsh/site-functions"
    typed = "hermes sessions pin 20261118"
    assert zsh_interactive(typed, user, tmp_path, directory) == (
        "hermes sessions pin 20261118_091502_a1c9e2"
    )


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_ids_after_sourcing_what_show_prints(
    user: dict[str, str], tmp_path: Path
) -> None:
    load_sample()
    # An fpath without _hermes: only the sourced script can complete.
    empty = tmp_path / "empty"
    empty.mkdir()
    completed = zsh_interactive(
        "hermes sessions show 2026113",
        user,
        tmp_path,
        empty,
        then="source <(hermes completion show zsh)",
    )
    assert completed == f"hermes sessions show {NEWEST[1]}"


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_loads_the_installed_script_by_itself(user: dict[str, str]) -> None:
    load_sample()
    proc = hermes({**user, "SHELL": "/usr/bin/fish"}, "completion", "install")
    assert proc.stdout.splitlines() == [
        "Wrote ~/.config/fish/completions/hermes.fish (fish completion).",
        "New fish shells load it.",
    ]
    # No `source`: fish finds ~/.config/fish/completions/hermes.fish on its own.
    run = subprocess.run(
        ["fish", "-c", "complete -C 'hermes sessions archive 2026113'"],
        capture_output=True,
        text=True,
        env=user,
    )
    assert run.stdout.splitlines()[:1] == [f"{NEWEST[1]}\tTravel plans Osaka"]


def test_install_man_writes_the_page_where_man_finds_it(user: dict[str, str]) -> None:
    proc = hermes(user, "completion", "install", "man")
    page = home_of(user) / ".local/share/man/man1/hermes.1"
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[0] == "Wrote ~/.local/share/man/man1/hermes.1 (man page)."
    assert page.read_text(encoding="utf-8").startswith(generators.generate("man", docs.app_doc()))
    if shutil.which("man"):
        env = {**user, "MANPATH": f"{page.parent.parent}:"}
        found = subprocess.run(["man", "-w", "hermes"], capture_output=True, text=True, env=env)
        assert found.stdout.strip() == str(page)


def test_install_with_man_installs_the_shell_script_and_the_page(user: dict[str, str]) -> None:
    proc = hermes(user, "completion", "install", "fish", "--man")
    assert proc.returncode == 0
    assert (home_of(user) / ".config/fish/completions/hermes.fish").is_file()
    assert (home_of(user) / ".local/share/man/man1/hermes.1").is_file()


# --- install: which shell --------------------------------------------------------------------


@pytest.mark.parametrize("shell", ["/bin/tcsh", ""])
def test_install_refuses_a_shell_it_cannot_tell_with_a_hint(
    user: dict[str, str], shell: str
) -> None:
    proc = hermes({**user, "SHELL": shell}, "completion", "install")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "Error: cannot tell your shell from SHELL='/bin/tcsh'"
        if shell
        else "Error: SHELL is not set",
        "Hint: name one: bash, zsh or fish (or man for the man page)",
    ]
    assert not (home_of(user) / ".local").exists()


def test_install_refuses_an_unknown_shell_name_in_one_line(user: dict[str, str]) -> None:
    proc = hermes(user, "completion", "install", "tcsh")
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1
    assert "'tcsh' is not one of 'bash', 'zsh', 'fish', 'man'" in proc.stderr
    assert "Traceback" not in proc.stderr


# --- install: never over a file the user changed ---------------------------------------------


def test_installing_again_leaves_an_up_to_date_file_alone(user: dict[str, str]) -> None:
    hermes(user, "completion", "install", "fish")
    path = home_of(user) / ".config/fish/completions/hermes.fish"
    before = path.stat().st_mtime_ns
    proc = hermes(user, "completion", "install", "fish")
    assert proc.returncode == 0
    assert proc.stdout.startswith("Up to date: ~/.config/fish/completions/hermes.fish")
    assert path.stat().st_mtime_ns == before


def test_install_updates_a_file_an_older_hermes_wrote(user: dict[str, str]) -> None:
    path = home_of(user) / ".config/fish/completions/hermes.fish"
    path.parent.mkdir(parents=True)
    path.write_text(completion_install.with_checksum("fish", "# an older script\n"), "utf-8")
    proc = hermes(user, "completion", "install", "fish")
    assert proc.returncode == 0
    assert proc.stdout.startswith("Updated ~/.config/fish/completions/hermes.fish")
    assert path.read_text(encoding="utf-8").startswith(generators.generate("fish", docs.app_doc()))


def test_install_refuses_to_replace_an_edited_file_unless_forced(user: dict[str, str]) -> None:
    hermes(user, "completion", "install", "bash")
    path = home_of(user) / ".local/share/bash-completion/completions/hermes"
    edited = path.read_text(encoding="utf-8").replace("_hermes()", "_hermes()  # mine", 1)
    path.write_text(edited, encoding="utf-8")
    proc = hermes(user, "completion", "install", "bash")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "Error: ~/.local/share/bash-completion/completions/hermes was not written by hermes "
        "(or was changed since); left as it is",
        "Hint: compare: hermes completion show bash | diff "
        "~/.local/share/bash-completion/completions/hermes -; replace it: hermes completion "
        "install bash --force",
    ]
    assert path.read_text(encoding="utf-8") == edited
    forced = hermes(user, "completion", "install", "bash", "--force")
    assert forced.returncode == 0
    assert forced.stdout.startswith("Replaced ~/.local/share/bash-completion/completions/hermes")
    assert completion_install.written_by_hermes("bash", path.read_text(encoding="utf-8"))


def test_install_never_writes_through_a_symbolic_link(user: dict[str, str], tmp_path: Path) -> None:
    dotfile = tmp_path / "dotfiles-hermes.fish"
    dotfile.write_text("# my own\n", encoding="utf-8")
    path = home_of(user) / ".config/fish/completions/hermes.fish"
    path.parent.mkdir(parents=True)
    path.symlink_to(dotfile)
    proc = hermes(user, "completion", "install", "fish")
    assert proc.returncode == 1 and "is a symbolic link" in proc.stderr
    assert hermes(user, "completion", "install", "fish", "--force").returncode == 0
    assert not path.is_symlink() and dotfile.read_text(encoding="utf-8") == "# my own\n"


# --- documented -----------------------------------------------------------------------------


def test_help_and_man_page_tell_how_to_install_completions_and_the_page(
    user: dict[str, str],
) -> None:
    top = hermes(user, "--help").stdout
    assert "completion" in top and "Print or install the shell completions" in top
    usage = hermes(user, "completion", "install", "--help").stdout
    for location in targets.LOCATIONS.values():
        assert location in usage
    assert "unless --force" in " ".join(usage.split())
    page = (REPO_ROOT / "man" / "hermes.1").read_text(encoding="utf-8")
    assert man_page.roff_text("hermes completion install") in page
    for location in targets.LOCATIONS.values():
        assert f"\\fI{man_page.roff_text(location)}\\fR" in page  # under FILES
