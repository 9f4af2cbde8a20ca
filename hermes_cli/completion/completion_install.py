"""`hermes completion show|install`: the shell completion scripts and the man page, for a user.

The texts are generated at run time from the running command tree (the root of the click
context, through hermes_cli.completion.generators), so what is installed always matches the
hermes that installed it. Every installed file ends with a line holding the sha256 of the text
above it: a file whose text no longer matches it (or that has no such line) was changed by
someone else, and is replaced only with --force.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from hermes_cli.completion.targets import SHELLS, WHAT, Target
from hermes_cli.rendering import render
from hermes_cli.shared.exitcodes import ExitCode
from hermes_cli.shared.options import command

CHECKSUM_LABEL = "hermes completion install: sha256 "


class InstallRefused(Exception):
    """An existing file that hermes did not write (or that was changed since) was left alone."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Installed:
    """One file install wrote (or found up to date), and what the user still has to do."""

    target: str
    path: Path
    status: str  # written, updated, replaced or unchanged
    notes: tuple[str, ...] = ()


# --- which shell, which file ----------------------------------------------------------------


def detect_shell(environ: Mapping[str, str] = os.environ) -> str | None:
    """Return the user's shell (bash, zsh or fish) named by $SHELL, or None."""
    name = Path(environ.get("SHELL", "")).name
    return name if name in SHELLS else None


def _base_dir(environ: Mapping[str, str], variable: str, default: str) -> Path:
    # The XDG spec: an unset, empty or relative value means the default.
    value = environ.get(variable, "")
    if value and Path(value).is_absolute():
        return Path(value)
    return Path.home() / default


def target_path(target: str, environ: Mapping[str, str] = os.environ) -> Path:
    """Return the file a target is installed to, for this user."""
    data = _base_dir(environ, "XDG_DATA_HOME", ".local/share")
    if target == "bash":
        # bash-completion's own lookup: $BASH_COMPLETION_USER_DIR, else $XDG_DATA_HOME's.
        user_dir = environ.get("BASH_COMPLETION_USER_DIR", "")
        base = Path(user_dir) if user_dir else data / "bash-completion"
        return base / "completions" / "hermes"
    if target == "zsh":
        return data / "zsh" / "site-functions" / "_hermes"
    if target == "fish":
        return _base_dir(environ, "XDG_CONFIG_HOME", ".config") / "fish/completions/hermes.fish"
    return data / "man" / "man1" / "hermes.1"


def shown(path: Path) -> str:
    """Return a path as ~/... under the user's home, for messages."""
    from hermes_state.store.home import display_hermes_home

    return display_hermes_home(path)


# --- the texts ------------------------------------------------------------------------------


def generated(target: str, app: Any) -> str:
    """Return the completion script (or man page) of a click command tree: the running app's,
    found from the command's context (this module never imports the app that registers it)."""
    from hermes_cli.completion import command_docs, generators

    return generators.generate(target, command_docs.walk(app))


def _comment(target: str) -> str:
    return '.\\" ' if target == "man" else "# "


def with_checksum(target: str, text: str) -> str:
    """Return text followed by the line that records what hermes wrote."""
    import hashlib  # here, not at the top: `hermes --help` builds this module's commands

    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return f"{text}{_comment(target)}{CHECKSUM_LABEL}{digest}\n"


def written_by_hermes(target: str, text: str) -> bool:
    """Whether text is exactly what an install wrote (its checksum line matches the rest)."""
    body, _, last = text.rstrip("\n").rpartition("\n")
    prefix = _comment(target) + CHECKSUM_LABEL
    if not last.startswith(prefix):
        return False
    return with_checksum(target, body + "\n") == text


def _write(path: Path, text: str) -> None:
    """Write text to path atomically (a temp file beside it, then rename), mode 0644."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def install(
    target: str, app: Any, *, force: bool = False, environ: Mapping[str, str] = os.environ
) -> Installed:
    """Write a target's text (of the click command tree app) to its place; refuse to replace a
    file hermes did not write."""
    path = target_path(target, environ)
    text = with_checksum(target, generated(target, app))
    status = "written"
    if path.is_symlink() or path.exists():
        current = None if path.is_symlink() else path.read_text(encoding="utf-8", errors="replace")
        if current == text:
            return Installed(target, path, "unchanged", _notes(target, path, environ))
        if current is not None and written_by_hermes(target, current):
            status = "updated"
        elif force:
            status = "replaced"
        else:
            how = "is a symbolic link" if current is None else "was not written by hermes"
            raise InstallRefused(
                f"{shown(path)} {how} (or was changed since); left as it is",
                f"compare: hermes completion show {target} | diff {shown(path)} -; "
                f"replace it: hermes completion install {target} --force",
            )
        if path.is_symlink():
            path.unlink()  # --force replaces the link itself, never the file it points to
    _write(path, text)
    return Installed(target, path, status, _notes(target, path, environ))


# --- what the user still has to do -----------------------------------------------------------


def _zsh_default_fpath() -> list[str]:
    """Return zsh's fpath before any startup file runs (empty when zsh cannot be run)."""
    import subprocess

    zsh = shutil.which("zsh")
    if zsh is None:
        return []
    try:
        proc = subprocess.run(
            [zsh, "-f", "-c", "print -rl -- $fpath"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return proc.stdout.splitlines()


def _zshrc(environ: Mapping[str, str]) -> str:
    path = Path(environ.get("ZDOTDIR") or Path.home()) / ".zshrc"
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _spellings(directory: Path, environ: Mapping[str, str]) -> set[str]:
    """Return ways a startup file may write directory: absolute, ~/..., $HOME/..., $XDG_..."""
    out = {str(directory)}
    try:
        rel = directory.relative_to(Path.home()).as_posix()
        out |= {f"~/{rel}", f"$HOME/{rel}", f"${{HOME}}/{rel}"}
    except ValueError:
        pass
    data = environ.get("XDG_DATA_HOME", "")
    if data and directory.is_relative_to(data):
        rel = directory.relative_to(data).as_posix()
        out |= {f"$XDG_DATA_HOME/{rel}", f"${{XDG_DATA_HOME}}/{rel}"}
    return out


def _on_manpath(directory: Path) -> bool | None:
    """Whether man searches directory (None when that cannot be told: no `manpath`)."""
    import subprocess

    manpath = shutil.which("manpath")
    if manpath is None:
        return None
    try:
        proc = subprocess.run(
            [manpath, "-q"], capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return str(directory) in proc.stdout.strip().split(":")


def _notes(target: str, path: Path, environ: Mapping[str, str]) -> tuple[str, ...]:
    """Return what the user still has to do for the installed file to be used."""
    if target == "bash":
        return (
            "New bash shells load it through bash-completion. Without bash-completion, add "
            "this line to ~/.bashrc:",
            f"  source {shown(path)}",
        )
    if target == "zsh":
        directory = path.parent
        zshrc = _zshrc(environ)
        if str(directory) in _zsh_default_fpath() or any(
            s in zshrc for s in _spellings(directory, environ)
        ):
            return ("New zsh shells load it (its directory is on $fpath).",)
        lines = [
            f"{shown(directory)} is not on zsh's $fpath yet: add this line to ~/.zshrc, "
            "before compinit runs:",
            f"  fpath=({shown(directory)} $fpath)",
        ]
        if "compinit" not in zshrc:
            lines.append("  autoload -Uz compinit && compinit")
        return tuple(lines)
    if target == "fish":
        return ("New fish shells load it.",)
    directory = path.parent.parent
    if _on_manpath(directory):
        return ("`man hermes` shows it.",)
    written = shown(directory)
    if written.startswith("~/"):
        written = "$HOME" + written[1:]  # ~ is not expanded inside quotes
    return (
        "If `man hermes` does not find it, add this line to your shell's startup file:",
        f'  export MANPATH="{written}:$MANPATH"',
    )


# --- the commands ---------------------------------------------------------------------------

app = typer.Typer(
    help="Print or install the shell completions (bash, zsh, fish) and the man page.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

TargetArgument = Annotated[
    Target | None,
    typer.Argument(
        metavar="SHELL",
        help="bash, zsh or fish (default: the shell named by $SHELL), or man for the man page.",
        show_default=False,
    ),
]


def _chosen(target: Target | None) -> str:
    """Return the target asked for, or the user's shell; exit 2 when that cannot be told."""
    if target is not None:
        return target.value
    shell = detect_shell()
    if shell is None:
        named = os.environ.get("SHELL", "")
        render.error(
            f"cannot tell your shell from SHELL={named!r}" if named else "SHELL is not set",
            "name one: bash, zsh or fish (or man for the man page)",
        )
        raise typer.Exit(ExitCode.USAGE)
    return shell


@command(
    app,
    "show",
    examples=[
        "hermes completion show bash",
        "hermes completion show fish | source",
        "hermes completion show man | man -l -",
    ],
)
def show(ctx: typer.Context, target: TargetArgument = None) -> None:
    """Print a shell's completion script (or the man page) on stdout.

    To load it into the shell you are in, without installing it: bash, and zsh after
    compinit, `source <(hermes completion show bash)` (or zsh); fish, `hermes completion show
    fish | source`.
    """
    render.write(generated(_chosen(target), ctx.find_root().command))


@command(
    app,
    "install",
    examples=[
        "hermes completion install",
        "hermes completion install zsh --man",
        "hermes completion install man",
        "hermes completion install fish --force",
    ],
)
def install_command(
    ctx: typer.Context,
    target: TargetArgument = None,
    man: Annotated[
        bool, typer.Option("--man", help="Also install the man page (hermes.1).")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace a file there that hermes did not write, or that was changed since "
            "it did.",
        ),
    ] = False,
) -> None:
    """Install a shell's completion script (or the man page) for this user.

    \b
      bash  $XDG_DATA_HOME/bash-completion/completions/hermes
            (or $BASH_COMPLETION_USER_DIR/completions/hermes)
      zsh   $XDG_DATA_HOME/zsh/site-functions/_hermes
      fish  $XDG_CONFIG_HOME/fish/completions/hermes.fish
      man   $XDG_DATA_HOME/man/man1/hermes.1

    $XDG_DATA_HOME defaults to ~/.local/share and $XDG_CONFIG_HOME to ~/.config. It says what
    is left to do, such as the fpath line for ~/.zshrc when that directory is not on zsh's
    $fpath. The texts are generated from this hermes: run it again after an upgrade to update
    them. A file there that hermes did not write, or that was edited since, is left alone
    unless --force.
    """
    targets = [_chosen(target)]
    if man and targets[0] != "man":
        targets.append("man")
    for name in targets:
        try:
            done = install(name, ctx.find_root().command, force=force)
        except InstallRefused as exc:
            render.error(exc.message, exc.hint)
            raise typer.Exit(ExitCode.FAILURE) from None
        verb = {
            "written": "Wrote",
            "updated": "Updated",
            "replaced": "Replaced",
            "unchanged": "Up to date:",
        }[done.status]
        render.echo(f"{verb} {shown(done.path)} ({WHAT[name]}).")
        for note in done.notes:
            render.echo(note)
