"""`hermes backup` and `hermes restore`: consistent archives of a profile home; full restores."""

from pathlib import Path
from typing import Annotated, Any

import typer

from hermes_cli import render, store_views
from hermes_cli.options import ForceFlag, YesFlag


def backup(
    output: Annotated[
        str | None,
        typer.Option(
            "-o",
            "--output",
            metavar="PATH",
            help="Archive file (.zip is added), or a directory to put it in: an existing one, "
            "or any path ending in '/' (created). Default: <home>/backups.",
        ),
    ] = None,
    keep: Annotated[
        int,
        typer.Option(
            "--keep",
            min=0,
            metavar="N",
            help="Keep the newest N archives of this profile there; 0 keeps all. Archives of "
            "other profiles and other files are never touched.",
        ),
    ] = 3,
    all_profiles: Annotated[
        bool, typer.Option("--all-profiles", help="Archive the root with every named profile.")
    ] = False,
    compress: Annotated[
        bool,
        typer.Option(
            "--compress",
            help="Deflate the archive (zlib's fastest level): about half the size, at about "
            "four times the time of a stored copy.",
        ),
    ] = False,
) -> None:
    """Write a consistent zip of this profile's home (stores copied with SQLite's backup API).

    Exits 1 when the store cannot be read (no archive is written) and when any other file
    could not be archived or a database is damaged (the archive is written, marked
    incomplete, and no older archive is removed).
    """
    from hermes_state import backup as lib
    from hermes_state.home import get_hermes_home

    # create_backup reports no progress of its own: a spinner with elapsed time.
    with render.progress("Backing up (SQLite backup, zip, checksums)"):
        result = lib.create_backup(
            get_hermes_home(), output, keep=keep, all_profiles=all_profiles, compress=compress
        )
    store_views.backup_result(result)
    if not result.complete:
        raise typer.Exit(1)


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
    """Restore an archive into this profile's home: every store (ledger included) and file.

    Every member is checked first (paths, sizes, checksums; each database must be intact, and
    a store a Hermes store without foreign triggers). Shows what each store holds now and
    what it will hold, asks, keeps the replaced store as state.db.pre-restore-<date>, and
    puts everything back if any step fails.
    """
    from hermes_state import restore as lib
    from hermes_state.home import get_hermes_home

    home = get_hermes_home()
    with render.progress("Checking the archive (checksums, integrity, schema)"):
        prepared = lib.prepare_restore(archive, home, force=force)
    with prepared:
        store_views.restore_plan(prepared.plan)
        render.confirm("Replace them with the archive's?", assume_yes=yes)
        with render.progress("Restoring (copy of the current store, then the archive's)"):
            result = prepared.apply()
    store_views.restore_result(result)


def register(app: Any) -> None:
    """Add the top-level backup and restore commands to the app."""
    from hermes_cli.options import command

    command(
        app,
        "backup",
        examples=[
            "hermes backup",
            "hermes backup -o /mnt/usb/hermes/ --keep 5",
            "hermes backup -o ~/before-upgrade.zip",
            "hermes backup --all-profiles --keep 0",
        ],
    )(backup)
    command(
        app,
        "restore",
        examples=["hermes restore ~/.hermes/backups/hermes-backup-default-20261202-153602.zip"],
    )(restore)
