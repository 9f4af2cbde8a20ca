"""`hermes profile …`: list, show, use, create and delete profiles (`default` is the root)."""

from typing import Annotated, Any

import typer

from hermes_cli.rendering import output, records, render
from hermes_cli.shared.options import (
    ColorOption,
    FormatOption,
    JsonFlag,
    YesFlag,
    command,
    output_format,
)

app = typer.Typer(
    help="Manage profiles: each has its own home and state.db ('default' is the root).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _info_json(info: object) -> dict[str, Any]:
    from hermes_state.backups.footprint import profile_footprint

    path = info.path  # type: ignore[attr-defined]
    return {
        "name": info.name,  # type: ignore[attr-defined]
        "path": str(path),
        "active": info.is_active,  # type: ignore[attr-defined]
        "has_store": info.has_store,  # type: ignore[attr-defined]
        **profile_footprint(path).to_dict(),
    }


@command(app, "list", examples=["hermes profile list", "hermes profile list --format tsv"])
def list_profiles(
    names: Annotated[
        bool, typer.Option("--names", hidden=True, help="Print only the names (for completion).")
    ] = False,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    color: ColorOption = output.ColorMode.auto,
) -> None:
    """List profiles: name, whether active, the disk each part takes, and where it lives.

    Store is state.db with its -wal/-shm (or -journal); Vault the vault stores (vault/);
    Backups the archives in backups/ and copies restore set aside; Total all three.
    """
    from hermes_state.store import home

    settings = output.configure(output_format(fmt, as_json), color=color)
    infos = home.list_profiles()
    if names:
        for info in infos:
            render.echo(info.name)
        return
    rows = [_info_json(i) for i in infos]
    if output.emit(settings, {"profiles": rows}, rows, records.PROFILE_KEYS):
        return
    render.table(
        [
            render.Column("Profile", style="id"),
            render.Column("Active"),
            render.Column("Store", "right"),
            render.Column("Vault", "right", drop=2),
            render.Column("Backups", "right", drop=1),
            render.Column("Total", "right"),
            render.Column("Path", shrink_to=20),
        ],
        [
            [
                r["name"],
                "*" if r["active"] else "",
                render.human_bytes(r["store_bytes"]) if r["has_store"] else "none yet",
                render.human_bytes(r["vault_bytes"]) if r["vault_bytes"] else "—",
                render.human_bytes(r["backup_bytes"]) if r["backup_bytes"] else "—",
                render.human_bytes(r["total_bytes"]),
                home.display_hermes_home(r["path"]),
            ]
            for r in rows
        ],
    )


@command(app, "show", examples=["hermes profile show", "hermes profile show coder --json"])
def show(
    name: Annotated[
        str | None,
        typer.Argument(metavar="NAME", help="Profile to show (default: the one in use)."),
    ] = None,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    color: ColorOption = output.ColorMode.auto,
) -> None:
    """Show one profile: its home, store file and whether it is the sticky choice."""
    from hermes_state.store import home

    settings = output.configure(output_format(fmt, as_json), color=color)
    chosen = name or home.current_profile_name()
    home.validate_profile_name(chosen)
    if not home.profile_exists(chosen):
        from hermes_state.store.errors import ProfileNotFoundError

        raise ProfileNotFoundError(
            f"Profile '{chosen}' does not exist. Create it with: hermes profile create {chosen}"
        )
    info = next(i for i in home.list_profiles() if i.name == chosen)
    data = _info_json(info)
    data["store"] = str(info.path / home.STORE_FILE)
    if output.emit(settings, data, [data], (*records.PROFILE_KEYS, "store")):
        return
    render.key_values(
        [
            ("Profile", data["name"]),
            ("Path", home.display_hermes_home(data["path"])),
            ("Store", home.display_hermes_home(data["store"])),
            (
                "Store size",
                render.human_bytes(data["store_bytes"]) if data["has_store"] else "none yet",
            ),
            ("Vault size", render.human_bytes(data["vault_bytes"])),
            ("Backups size", render.human_bytes(data["backup_bytes"])),
            ("Total size", render.human_bytes(data["total_bytes"])),
            ("Sticky", "yes" if data["active"] else "no"),
        ]
    )


@command(app, "use", examples=["hermes profile use coder", "hermes profile use default"])
def use(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="Profile to make sticky ('default' clears it).")
    ],
) -> None:
    """Make a profile the sticky default for later commands."""
    from hermes_state.store import home

    home.set_active_profile(name)
    path = home.display_hermes_home(home.profile_home(name))
    render.echo(f"Switched to: {name} ({path})")


@command(app, "create", examples=["hermes profile create coder"])
def create(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="New profile name: a-z, 0-9, '-', '_'.")
    ],
) -> None:
    """Create a new, empty profile."""
    from hermes_state.store import home

    path = home.create_profile(name)
    render.echo(f"Created profile '{name}' at {home.display_hermes_home(path)}")
    render.echo(f"Use it with: hermes -p {name} …  or make it sticky: hermes profile use {name}")


@command(
    app,
    "delete",
    examples=[
        "hermes profile delete old-bot",
        "hermes profile delete old-bot --yes",
        "hermes profile delete old-bot --delete-backups --yes",
    ],
)
def delete(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="Profile to delete, with everything in it.")
    ],
    yes: YesFlag = False,
    delete_backups: Annotated[
        bool,
        typer.Option(
            "--delete-backups",
            help="Also delete the backups kept inside the profile (its backups/ archives and "
            "pre-restore copies); without it, a profile holding backups is not deleted.",
        ),
    ] = False,
) -> None:
    """Delete a named profile: its store, config and logs.

    Refuses while the profile holds backups (archives in its backups/ folder, copies kept by
    a restore), unless --delete-backups: move them out first to keep them.
    """
    from hermes_state.backups.archives import backups_in
    from hermes_state.store import home
    from hermes_state.store.errors import HermesStateError, ProfileNotFoundError

    home.validate_profile_name(name)
    if name == home.DEFAULT_PROFILE:
        raise HermesStateError(
            "The default profile is the Hermes root and cannot be deleted.", hint=""
        )
    if not home.profile_exists(name):
        raise ProfileNotFoundError(
            f"Profile '{name}' does not exist.", hint="See: hermes profile list"
        )
    path = home.profile_home(name)
    held = [] if path.is_symlink() else backups_in(path)
    if held and not delete_backups:
        shown = ", ".join(home.display_hermes_home(p) for p in held[:3])
        more = f" and {len(held) - 3} more" if len(held) > 3 else ""
        raise HermesStateError(
            f"Profile '{name}' holds {len(held)} backup(s) that deleting it would delete too: "
            f"{shown}{more}",
            hint=f"Move them out of {home.display_hermes_home(path)} first, or pass "
            "--delete-backups to delete them with the profile.",
        )
    extra = f" and its {len(held)} backup(s)" if held else ""
    render.confirm(
        f"Delete profile '{name}' ({home.display_hermes_home(path)}) with all its sessions{extra}?",
        assume_yes=yes,
    )
    home.delete_profile(name)
    render.echo(f"Profile '{name}' deleted.")
