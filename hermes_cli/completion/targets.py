"""What `hermes completion` prints or installs (a shell's completion, or the man page), what
each is called, and where install puts it."""

from __future__ import annotations

from enum import StrEnum

SHELLS = ("bash", "zsh", "fish")

# Where each text goes, as the man page writes it (resolved by target_path).
LOCATIONS = {
    "bash": "$XDG_DATA_HOME/bash-completion/completions/hermes",
    "zsh": "$XDG_DATA_HOME/zsh/site-functions/_hermes",
    "fish": "$XDG_CONFIG_HOME/fish/completions/hermes.fish",
    "man": "$XDG_DATA_HOME/man/man1/hermes.1",
}
WHAT = {
    "bash": "bash completion",
    "zsh": "zsh completion",
    "fish": "fish completion",
    "man": "man page",
}


class Target(StrEnum):
    """What `hermes completion` prints or installs: a shell's completion, or the man page."""

    bash = "bash"
    zsh = "zsh"
    fish = "fish"
    man = "man"
