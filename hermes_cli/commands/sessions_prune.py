"""`hermes sessions delete` and `prune`: removing one session, or every old one."""

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from hermes_cli.commands.sessions_options import check_sources
from hermes_cli.rendering import records, render, store_views
from hermes_cli.shared.exitcodes import ExitCode
from hermes_cli.shared.options import (
    AGE_HELP,
    ExactSessionRef,
    ExcludeSources,
    ForceFlag,
    Sources,
    YesFlag,
    cutoff,
    since_option,
    validate_age,
)

DELETE_EXAMPLES = [
    "hermes sessions delete 20261118_091502_a1c9e2",
    'hermes sessions delete "Grocery list" --yes',
]


def delete(session: ExactSessionRef, yes: YesFlag = False) -> None:
    """Delete one session and all its messages."""
    from hermes_cli.commands import vault
    from hermes_cli.shared import stores
    from hermes_state.records import session_list, sessions as lib
    from hermes_state.upkeep import deletion

    with stores.write_store() as store:
        sid = vault.editable_session(store, session, whole=True)
        row = lib.require_session(store, sid)
        counts = session_list.message_counts(store, [sid])[sid]
        label = f"'{sid}'" + (f" ({row['title']})" if row.get("title") else "")
        pinned = " (it is PINNED)" if row.get("pinned") else ""
        render.confirm(
            f"Delete session {label}{pinned} and its {counts.stored} stored messages "
            f"({counts.live} live, the rest earlier generations)?",
            assume_yes=yes,
        )
        deleted = deletion.delete_session(store, sid)
    render.echo(f"Deleted session '{sid}' ({deleted} messages).")


PRUNE_EXAMPLES = [
    "hermes sessions prune --dry-run",
    "hermes sessions prune --older-than 30d --source cron --yes",
    "hermes sessions prune --since 2025-01-01 --until 2025-07-01 --exclude-source telegram",
]


def prune(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            "--until",
            metavar="AGE",
            callback=validate_age,
            help=f"Delete ended sessions last active before AGE ago (--until is the same). "
            f"{AGE_HELP}",
        ),
    ] = "90d",
    since: Annotated[str | None, since_option("sessions last active")] = None,
    source: Sources = None,
    exclude_source: ExcludeSources = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be deleted; delete nothing.")
    ] = False,
    compact: Annotated[
        bool,
        typer.Option(
            "--compact",
            help="Always rewrite the file afterwards to give the freed space back to the disk "
            "(otherwise only when a quarter of the file was freed, or the file is small: the "
            "rewrite takes time in proportion to the whole store).",
        ),
    ] = False,
    yes: YesFlag = False,
    force: ForceFlag = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the plan (with --dry-run) or what was deleted and reclaimed as one JSON "
            "object.",
        ),
    ] = False,
) -> None:
    """Delete old ended sessions (never pinned ones), then tidy up.

    The freed pages stay in the file for new rows unless they are a quarter of it, the file is
    small, or --compact asks for the rewrite that gives them back to the disk.
    """
    from hermes_cli.shared import stores
    from hermes_cli.shared.durations import cutoff_to_days
    from hermes_state.upkeep import prune as pruning

    days = cutoff_to_days(cutoff(older_than) or time.time())
    sources, excluded, active_after = source or None, exclude_source or None, cutoff(since)
    opener = stores.read_store if dry_run else stores.write_store  # a preview never writes
    with opener() as store:
        check_sources(store, sources)
        with render.progress("Finding sessions to prune"):
            preview = pruning.prune_sessions(
                store,
                days,
                dry_run=True,
                sources=sources,
                exclude_sources=excluded,
                active_after=active_after,
            )
        if as_json and (dry_run or not preview.sessions):
            render.emit_json(records.prune(preview.to_dict()))
            return
        if not as_json:
            store_views.prune_preview(preview)
        if dry_run:
            render.echo("Dry run: nothing deleted.")
            return
        if not preview.sessions:
            return
        render.confirm(
            f"Delete these {preview.sessions:,} session(s) ({preview.messages:,} stored messages)?",
            assume_yes=yes,
        )

        def step(done: int, total: int) -> None:
            bar.set(completed=done, total=total)
            _pause_for_tests("prune", done)

        scope: dict[str, Any] = {
            "sources": sources,
            "exclude_sources": excluded,
            "active_after": active_after,
        }
        try:
            with render.progress("Deleting sessions", total=preview.sessions) as bar:
                result = pruning.prune_sessions(store, days, progress=step, **scope)
        except KeyboardInterrupt:
            _interrupted_prune(store, days, preview.sessions, scope)
        try:
            with render.progress("Reclaiming space") as bar:
                optimized = stores.reclaim_after_delete(
                    store, bar, result, compact=compact, force=force
                )
        except KeyboardInterrupt:
            render.echo(
                f"Interrupted while giving space back to the disk: pruned {result.sessions:,} "
                "session(s), and the store is healthy (the rewrite is all or nothing); "
                "`hermes db optimize` gives the space back.",
                err=True,
            )
            raise typer.Exit(ExitCode.INTERRUPTED) from None
    if as_json:
        store_views.deletion_json(result, optimized, shape=records.prune)
        return
    store_views.prune_result(result, optimized)


# Tests stop a long write at a known point: "prune:N:PATH" creates PATH once N sessions are
# done, then waits (at most 60 s) for the signal the test sends.
PAUSE_ENV = "HERMES_CLI_PAUSE_AT"


def _pause_for_tests(step: str, done: int) -> None:
    """Wait at a step named by HERMES_CLI_PAUSE_AT (tests only; unset, it does nothing)."""
    import os

    name, _, rest = os.environ.get(PAUSE_ENV, "").partition(":")
    at, _, path = rest.partition(":")
    if name != step or not at.isdigit() or done < int(at) or not path:
        return
    Path(path).touch()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.05)


def _interrupted_prune(store: Any, days: float, planned: int, scope: dict[str, Any]) -> None:
    """Say what an interrupted prune did (counted again from the store) and exit 130."""
    from hermes_state.upkeep import prune as pruning

    try:
        left = pruning.prune_sessions(store, days, dry_run=True, **scope).sessions
        did = f"deleted {max(0, planned - left):,} of {planned:,} sessions"
    except (KeyboardInterrupt, Exception):  # a second Ctrl-C, or the count failed: say less
        did = f"deleted some of {planned:,} sessions"
    render.echo(
        f"Interrupted: {did}; the store is healthy (each batch of deletions is all or "
        "nothing); run the same command again to finish.",
        err=True,
    )
    raise typer.Exit(ExitCode.INTERRUPTED)
