"""Every generated text (bash, zsh, fish completions and the man page) of a command tree, and
the file each is kept in."""

from __future__ import annotations

import re

from hermes_cli.completion.command_docs import CommandDoc
from hermes_cli.completion.man_page import man
from hermes_cli.completion.shell_scripts import bash, fish, zsh

OUTPUTS = (
    "completions/hermes.bash",
    "completions/_hermes",
    "completions/hermes.fish",
    "man/hermes.1",
)
GENERATORS = {"bash": bash, "zsh": zsh, "fish": fish, "man": man}


def _tidy(text: str) -> str:
    return re.sub(r"[ \t]+\n", "\n", text)


def generate(what: str, root: CommandDoc) -> str:
    """Return one generated text (bash, zsh, fish or man) of a command tree."""
    return _tidy(GENERATORS[what](root))


def texts(root: CommandDoc) -> dict[str, str]:
    """Return {relative path: text} for every generated file of a command tree."""
    return {path: generate(what, root) for path, what in zip(OUTPUTS, GENERATORS, strict=True)}
