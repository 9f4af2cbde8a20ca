"""`hermes db …`: where the store is, who holds it, integrity checks, space reclaim, migration."""

from enum import StrEnum
from typing import Annotated

import typer

from hermes_cli.rendering import output, records, render, store_views
from hermes_cli.shared.options import (
    ColorOption,
    ForceFlag,
    FormatOption,
    JsonFlag,
    command,
    output_format,
)

app = typer.Typer(
    help="Inspect and maintain this profile's store file (state.db).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@command(app, "path", examples=["hermes db path", "hermes -p coder db path --json"])
def path(
    fmt: FormatOption = None, as_json: JsonFlag = False, color: ColorOption = output.ColorMode.auto
) -> None:
    """Print where this profile's store is (whether or not it exists yet)."""
    from hermes_cli.shared import stores

    settings = output.configure(output_format(fmt, as_json), color=color)
    db = stores.db_path()
    data = {"path": str(db), "exists": db.is_file(), "profile": stores.profile_name()}
    if output.emit(settings, data, [data], tuple(data)):
        return
    render.echo(str(db))


@command(app, "lockowners", examples=["hermes db lockowners", "hermes db lockowners --json"])
def lockowners(
    fmt: FormatOption = None, as_json: JsonFlag = False, color: ColorOption = output.ColorMode.auto
) -> None:
    """Show which processes hold locks on, or have open, this profile's store (read-only)."""
    from hermes_cli.shared import stores
    from hermes_state.store import lockowners as lib

    settings = output.configure(output_format(fmt, as_json), color=color)
    report = lib.lock_holders(stores.db_path())
    data = report.to_dict()
    data = {"path": data.pop("db_path"), **data}  # the store path is `path` everywhere
    if output.emit(settings, data, records.lock_rows(data), records.LOCK_ROW_KEYS):
        return
    store_views.lock_report(report)


@command(app, "check", examples=["hermes db check", "hermes db check --format tsv"])
def check(
    fmt: FormatOption = None, as_json: JsonFlag = False, color: ColorOption = output.ColorMode.auto
) -> None:
    """Check integrity, foreign keys, search indexes, schema version and file modes (read-only).

    On a damaged store it says which tables, indexes and search indexes are affected, on
    which pages, whether the -wal is readable, and what to run: a rebuild of the indexes in
    place when only they are inconsistent, else `hermes sessions recover` into a new file and
    `hermes restore` of that file. Exits 1 when anything is damaged.
    """
    from hermes_cli.shared import stores
    from hermes_state.store.errors import NotAHermesStoreError, StoreCorruptError
    from hermes_state.upkeep import store_check

    settings = output.configure(output_format(fmt, as_json), color=color)
    try:
        with stores.read_store() as store:
            result = store_check.check_store(store).to_dict()
    except NotAHermesStoreError:
        raise  # another application's database: nothing of ours to diagnose
    except StoreCorruptError as exc:
        # SQLite cannot open the file or read its schema: say what can be known of it.
        result = store_check.check_unopenable(stores.db_path(), exc.message).to_dict()
    if not output.emit(settings, result, result["checks"], records.CHECK_KEYS):
        store_views.check_report(result)
    if result.get("problems"):
        # Damage is an error like any other: one line and what to run, on stderr.
        hint = result["advice"]["hint"]
        raise StoreCorruptError(store_views.damage_line(result), hint=hint)
    if not result["ok"]:
        raise typer.Exit(1)


@command(
    app,
    "optimize",
    examples=[
        "hermes db optimize",
        "hermes db optimize --force",
        "hermes db optimize --reindex",
        "hermes db optimize --json",
    ],
)
def optimize(
    force: ForceFlag = False,
    reindex: Annotated[
        bool,
        typer.Option(
            "--reindex",
            help="First rebuild every index from its table and the search indexes from the "
            "messages: repairs indexes that disagree with their tables (db check says when). "
            "Refuses while another process has the store open, unless --force.",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Merge search-index segments and VACUUM to give space back to the file system."""
    from hermes_cli.shared import stores
    from hermes_state.upkeep import reclaim

    what = "Reindexing, then optimizing" if reindex else "Optimizing (search indexes, VACUUM)"
    with stores.write_store() as store, render.progress(what):
        result = reclaim.optimize(store, vacuum=True, force=force, reindex=reindex)
    if as_json:
        render.emit_json(result.to_dict())
        return
    store_views.optimize_result(result)


@command(
    app,
    "migrate",
    examples=["hermes db migrate", "hermes -p coder db migrate", "hermes db migrate --force"],
)
def migrate(force: ForceFlag = False, as_json: JsonFlag = False) -> None:
    """Create or upgrade this profile's store to schema 31 (the agent must be stopped).

    Keeps the agent's own layout (tables, columns and search indexes stay in the shape the
    agent made them) and adds what this hermes needs under its own names. Afterwards every
    known Hermes Agent release can still use the store. Refuses while another process has the
    store open, unless --force.
    """
    from hermes_cli.shared import stores
    from hermes_state.upkeep import migrate

    with render.progress("Reindexing") as bar:
        outcome = migrate.migrate_store(
            stores.db_path(),
            force=force,
            on_progress=lambda _phase, done, total: bar.set(completed=done, total=total),
        )
    if as_json:
        render.emit_json(outcome.to_dict())
        return
    store_views.migrate_result(outcome)


class Switch(StrEnum):
    """What `db cjk-index` turns the index to."""

    on = "on"
    off = "off"


@command(
    app,
    "cjk-index",
    examples=["hermes db cjk-index", "hermes db cjk-index off", "hermes db cjk-index on --json"],
)
def cjk_index(
    switch: Annotated[
        Switch | None,
        typer.Argument(
            metavar="[on|off]",
            help="Turn the index on or off; without it, say where the index stands.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Show, or turn on or off, hermes' index of 1- and 2-character CJK words (東京, 会議).

    The index is hermes' own addition to the store (about 7 % of the size of the message
    text). Off, it is dropped, and no later migration adds it back; CJK words are then found
    by the agent's substring index (3 or more characters) or by a scan, which on a big store
    stops at the search's work budget (--all searches every message). `db optimize` gives the
    freed pages back to the file system. On, it is created and filled from every message; a
    store without hermes' additions gets them, this index included, from `db migrate`.
    """
    from hermes_cli.shared import stores
    from hermes_state.upkeep import cjk_index as lib

    if switch is None:
        with stores.read_store() as store:
            state = lib.cjk_index_state(store)
        if as_json:
            render.emit_json(state.to_dict())
            return
        store_views.cjk_index_state(state)
        return
    with stores.write_store() as store, render.progress("Indexing CJK words") as bar:
        total: list[int] = []  # the messages left at the first step: the bar's length

        def step(left: int) -> None:
            total[:] = total or [left]
            bar.set(completed=max(0, total[0] - left), total=total[0])

        change = lib.set_cjk_index(store, switch is Switch.on, on_progress=step)
    if as_json:
        render.emit_json(change.to_dict())
        return
    store_views.cjk_index_change(change)
