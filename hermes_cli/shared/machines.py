"""`--machine NAME|all` of the sessions commands: read the copy of another machine's store that
`hermes replicate --follow URL --as NAME` keeps under <home>/machines/NAME, beside this one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

ALL = "all"

MachineOption = Annotated[
    str | None,
    typer.Option(
        "--machine",
        metavar="NAME",
        help="Read another machine's sessions: the copy `hermes replicate --follow URL --as "
        "NAME` keeps; 'all' reads this machine's and every followed one's, each marked "
        '[machine NAME] ("machine" in machine formats).',
    ),
]


def homes(machine: str | None) -> list[tuple[str | None, Path]]:
    """Return (machine name or None for this one, home to read) for a --machine value."""
    from hermes_state.store.home import get_hermes_home

    home = get_hermes_home()
    if machine is None:
        return [(None, home)]
    # Only now: replica brings the vault's move machinery, which this machine's reads never need.
    from hermes_state.backups import replica

    known = replica.machine_names(home)
    if machine == ALL:
        return [(None, home), *[(n, replica.machine_home(home, n)) for n in known]]
    where = replica.machine_home(home, machine)
    if machine not in known:
        raise replica.ReplicaError(
            f"No copy of machine {machine!r} here ({where} has no state.db)",
            hint=(f"Followed here: {', '.join(known)}. " if known else "")
            + "Keep one with: hermes replicate --follow URL --as NAME",
        )
    return [(machine, where)]


@contextlib.contextmanager
def reading(home: Path) -> Iterator[None]:
    """Make home the one the commands read, for the block (a machine's copy, or this one)."""
    from hermes_state.store.home import reset_hermes_home_override, set_hermes_home_override

    token = set_hermes_home_override(home)
    try:
        yield
    finally:
        reset_hermes_home_override(token)


def mark(name: str | None, text: str | None) -> str | None:
    """Return a title led by the machine's mark (unchanged for this machine)."""
    if name is None:
        return text
    return f"[machine {name}] {text or ''}".rstrip()
