"""`hermes db …`: where the store is, who holds it, integrity checks, space reclaim, migration."""

from __future__ import annotations

import typer

from hermes_cli import render
from hermes_cli.options import ForceFlag, JsonFlag

app = typer.Typer(
    help="Inspect and maintain this profile's store file (state.db).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@app.command("path")
def path(as_json: JsonFlag = False) -> None:
    """Print where this profile's store is (whether or not it exists yet)."""
    from hermes_cli import stores

    db = stores.db_path()
    if as_json:
        render.emit_json(
            {"path": str(db), "exists": db.is_file(), "profile": stores.profile_name()}
        )
        return
    render.echo(str(db))


@app.command("lockowners")
def lockowners(as_json: JsonFlag = False) -> None:
    """Show which processes hold locks on, or have open, this profile's store (read-only)."""
    from hermes_cli import stores
    from hermes_state import lockowners as lib

    report = lib.lock_holders(stores.db_path())
    if as_json:
        render.emit_json(report.to_dict())
        return
    render.lock_report(report)


@app.command("check")
def check(as_json: JsonFlag = False) -> None:
    """Check integrity, foreign keys, search indexes, schema version and file modes (read-only)."""
    from hermes_cli import stores
    from hermes_state import maintenance

    with stores.read_store() as store:
        result = maintenance.check_store(store).to_dict()
    if as_json:
        render.emit_json(result)
    else:
        render.check_report(result)
    if not result["ok"]:
        raise typer.Exit(1)


@app.command("optimize")
def optimize(force: ForceFlag = False) -> None:
    """Merge search-index segments and VACUUM to give space back to the file system."""
    from hermes_cli import stores
    from hermes_state import maintenance

    with stores.write_store() as store:
        result = maintenance.optimize(store, vacuum=True, force=force)
    render.optimize_result(result)


@app.command("migrate")
def migrate(force: ForceFlag = False, as_json: JsonFlag = False) -> None:
    """Create or upgrade this profile's store to schema 31 (the agent must be stopped).

    Keeps the agent's own layout (tables, columns and search indexes stay in the shape the
    agent made them) and adds what this hermes needs under its own names. Afterwards every
    known Hermes Agent release can still use the store. Refuses while another process has the
    store open, unless --force.
    """
    from hermes_cli import stores
    from hermes_state import maintenance

    with render.progress("Reindexing") as bar:
        outcome = maintenance.migrate_store(
            stores.db_path(),
            force=force,
            on_progress=lambda _phase, done, total: bar.set(completed=done, total=total),
        )
    if as_json:
        render.emit_json(outcome.to_dict())
        return
    render.migrate_result(outcome)
