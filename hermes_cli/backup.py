"""`hermes backup` and `hermes restore`: consistent archives of a profile home; full restores."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from hermes_cli import render
from hermes_cli.options import ForceFlag, YesFlag


def backup(
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            metavar="PATH",
            help="Archive file, or directory to put it in (default: <home>/backups).",
        ),
    ] = None,
    keep: Annotated[
        int,
        typer.Option("--keep", min=1, metavar="N", help="Keep the newest N archives there."),
    ] = 3,
    all_profiles: Annotated[
        bool, typer.Option("--all-profiles", help="Archive the root with every named profile.")
    ] = False,
) -> None:
    """Write a consistent zip of this profile's home (stores copied with SQLite's backup API)."""
    from hermes_state import backup as lib
    from hermes_state.home import get_hermes_home

    if output is not None and output.exists() and not output.is_dir():
        raise lib.BackupError(
            f"Refusing to overwrite existing file {output}",
            hint="Remove it, pick another name, or give a directory.",
        )
    # create_backup reports no progress of its own: a spinner with elapsed time.
    with render.progress("Backing up (SQLite backup, zip, checksums)"):
        result = lib.create_backup(get_hermes_home(), output, keep=keep, all_profiles=all_profiles)
    render.backup_result(result)


def restore(
    archive: Annotated[
        Path,
        typer.Argument(
            metavar="ARCHIVE", exists=True, dir_okay=False, help="An archive from hermes backup."
        ),
    ],
    yes: YesFlag = False,
    force: ForceFlag = False,
) -> None:
    """Restore an archive into this profile's home: every store (ledger included) and file."""
    from hermes_state import backup as lib
    from hermes_state.home import display_hermes_home, get_hermes_home

    home = get_hermes_home()
    render.confirm(
        f"Restore {archive} into {display_hermes_home(home)}? Its stores replace the current ones.",
        assume_yes=yes,
    )
    with render.progress("Restoring (verify, copy into place)"):
        result = lib.restore_backup(archive, home, force=force)
    render.restore_result(result)


def register(app: Any) -> None:
    """Add the top-level backup and restore commands to the app."""
    from hermes_cli.options import command

    command(
        app,
        "backup",
        examples=[
            "hermes backup",
            "hermes backup -o /mnt/usb/ --keep 5",
            "hermes backup --all-profiles",
        ],
    )(backup)
    command(
        app,
        "restore",
        examples=["hermes restore ~/.hermes/backups/hermes-backup-20261202-153602.zip"],
    )(restore)
