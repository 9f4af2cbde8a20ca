"""`hermes backup`, `hermes backup list` and `hermes restore`: consistent archives of a profile
home, the archives a profile holds, and full restores (of an archive or a recovered store)."""

from pathlib import Path
from typing import Annotated, Any

import typer

from hermes_cli.commands.replicate import EndpointOption
from hermes_cli.rendering import render, store_views
from hermes_cli.shared.options import (
    JSON_ONLY_HELP,
    ForceFlag,
    JsonFlag,
    YesFlag,
    command,
    examples_epilog,
)

BACKUP_EXAMPLES = [
    "hermes backup",
    "hermes backup -o /mnt/usb/hermes/ --keep 5",
    "hermes backup -o ~/before-upgrade.zip",
    "hermes backup --all-profiles --keep 0",
    "hermes backup --no-vault",
    "hermes backup --json",
]

NoVaultFlag = Annotated[
    bool,
    typer.Option(
        "--no-vault",
        help="Leave the vault (vault/<YYYY>.db of each profile) out; by default it is included.",
    ),
]

app = typer.Typer(
    invoke_without_command=True,
    no_args_is_help=False,
    subcommand_metavar="[list [DIR]]",
    rich_markup_mode=None,
)


@app.callback(epilog=examples_epilog(BACKUP_EXAMPLES))
def backup(
    ctx: typer.Context,
    output: Annotated[
        str | None,
        typer.Option(
            "-o",
            "--output",
            metavar="PATH",
            help="Archive file (.zip is added), or a directory to put it in: an existing one, "
            "or a path ending in '/' whose parent exists (only its last directory is created, "
            "so a drive that is not mounted is an error, not a new directory). "
            "Default: <home>/backups.",
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
    no_vault: NoVaultFlag = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_ONLY_HELP)] = False,
) -> None:
    """Write a consistent zip of this profile's home (stores copied with SQLite's backup API).

    The vault stores (vault/<YYYY>.db, sessions `hermes vault move` took out of the store) are
    archived the same way and listed in the manifest with their counts, unless --no-vault.

    While it copies the stores it holds the vault lock, so no `hermes vault move` or `return`
    runs between their copies (a running one is waited for). A store or vault another process
    keeps locked is waited for up to --wait SECONDS (default 20), saying who holds it.

    Exits 1 when the store cannot be read (no archive is written) and when any other file
    could not be archived or a database is damaged (the archive is written, marked
    incomplete, and no older archive is removed); 75 when a lock outlasted the wait (no
    archive is written). `hermes backup list` shows the archives.
    """
    if ctx.invoked_subcommand is not None:
        given = [
            flag
            for flag, used in (
                ("--output", output is not None),
                ("--keep", keep != 3),
                ("--all-profiles", all_profiles),
                ("--compress", compress),
                ("--no-vault", no_vault),
                ("--json", as_json),
            )
            if used
        ]
        if given:
            raise typer.BadParameter(
                f"{', '.join(given)}: options of making a backup, not of "
                f"`hermes backup {ctx.invoked_subcommand}`"
            )
        return
    from hermes_cli.shared import waiting
    from hermes_state.backups import backup as lib
    from hermes_state.store.home import get_hermes_home

    # create_backup reports no progress of its own: a spinner with elapsed time.
    with render.progress("Backing up (SQLite backup, zip, checksums)"):
        result = lib.create_backup(
            get_hermes_home(),
            output,
            keep=keep,
            all_profiles=all_profiles,
            compress=compress,
            vault=not no_vault,
            waiting=waiting.current(),
        )
    if as_json:
        render.emit_json(result.to_dict())
    else:
        store_views.backup_result(result)
    if not result.complete:
        raise typer.Exit(1)


@command(
    app,
    "list",
    examples=[
        "hermes backup list",
        "hermes backup list /mnt/usb/hermes",
        "hermes backup list --json",
    ],
)
def list_backups(
    folder: Annotated[
        Path | None,
        typer.Argument(
            metavar="DIR",
            file_okay=False,
            help="The folder to list (default: <home>/backups, where hermes backup writes).",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List the backup archives in this profile's backup folder, newest first (read-only).

    Shows each archive's date, size, and the sessions and messages its stores held, as its
    manifest recorded them (the archive is not unpacked).
    """
    from hermes_state.backups import archives as lib
    from hermes_state.store.home import get_hermes_home

    where = (folder or get_hermes_home() / "backups").expanduser().absolute()
    archives = lib.list_archives(where)
    if as_json:
        render.emit_json({"folder": str(where), "archives": [a.to_dict() for a in archives]})
        return
    store_views.backup_list(where, archives)


def restore(
    archive: Annotated[
        Path | None,
        typer.Argument(
            metavar="ARCHIVE",
            exists=True,
            dir_okay=False,
            help="An archive from hermes backup, or a store file: the copy `hermes sessions "
            "recover --to NEW.db` wrote, or a state.db.pre-restore-* copy.",
        ),
    ] = None,
    from_url: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="URL",
            help="Restore the store from a replica `hermes replicate --to URL` wrote, instead "
            "of an archive.",
        ),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            metavar="WHEN",
            help="With --from: the store as it was then (2026-12-01T14:30, 2h, yesterday, "
            "'3 days ago'); default: its latest.",
        ),
    ] = None,
    endpoint: EndpointOption = None,
    yes: YesFlag = False,
    force: ForceFlag = False,
    no_vault: NoVaultFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Restore an archive into this profile's home: every store (ledger included) and file.

    The archive's vault stores are restored with the same checks, each replaced one kept as
    vault/<YYYY>.db.pre-restore-<date>; --no-vault leaves them out and the vault as it is (a
    session the restored store has is then the one the agent and readers see).

    Every member is checked first (paths, sizes, checksums; each database must be intact, and
    a store a Hermes store without foreign triggers, with sound search indexes). Shows what
    each store holds now and what it will hold, asks, keeps the replaced store as
    state.db.pre-restore-<date>, and puts everything back if any step fails. Refuses while
    another process (the agent) has the store open, unless --force.

    Given a store file instead (a recovered copy from `hermes sessions recover --to NEW.db`),
    it installs that file as this profile's state.db with the same checks and the same
    safety: checked on a copy, the current store kept aside, refused while the agent runs.
    With --json the plan and the question go to stderr and the result to stdout.

    With --from URL the store is fetched from a replica `hermes replicate` wrote (as of --at,
    Litestream's point-in-time restore) and installed with the same checks and safety.
    """
    if (archive is None) == (from_url is None):
        raise typer.BadParameter("give an ARCHIVE or --from URL (one of them)")
    if from_url is None and (at is not None or endpoint is not None):
        raise typer.BadParameter("--at and --endpoint go with --from URL")
    if from_url is not None:
        from hermes_cli.commands.replicate import restore_from

        restore_from(from_url, at=at, endpoint=endpoint, yes=yes, force=force, as_json=as_json)
        return
    assert archive is not None
    from hermes_state.backups import restore as lib
    from hermes_state.store.home import get_hermes_home

    home = get_hermes_home()
    with render.progress("Checking (checksums, integrity, schema, search indexes)"):
        prepared = lib.prepare_restore(archive, home, force=force, vault=not no_vault)
    with prepared:
        store_views.restore_plan(prepared.plan, err=as_json)
        plan = prepared.plan
        replaces = plan.files_replaced or any(
            d.before is not None or d.before_problem for d in plan.databases
        )
        if not replaces:  # an empty home: nothing to replace, so nothing to ask about replacing
            question = "Nothing here is replaced. Restore " + (
                "this file as the store?" if plan.source == "database" else "the archive here?"
            )
        elif plan.source == "database":
            question = "Replace it with this file?"
        else:
            question = "Replace them with the archive's?"
        render.confirm(question, assume_yes=yes)
        with render.progress("Restoring (copy of the current store, then the new one)"):
            result = prepared.apply()
    if as_json:
        render.emit_json({**result.to_dict(), "plan": prepared.plan.to_dict()})
        return
    store_views.restore_result(result)


def register(root: Any) -> None:
    """Add the backup group (backup, backup list) and the restore command to the app."""
    root.add_typer(app, name="backup")
    command(
        root,
        "restore",
        examples=[
            "hermes restore ~/.hermes/backups/hermes-backup-default-20261202-153602.zip",
            "hermes restore ~/.hermes/state-recovered-20261202.db",
            "hermes restore ARCHIVE --yes --json",
            "hermes restore --from file:///mnt/nas/hermes --at yesterday",
        ],
    )(restore)
