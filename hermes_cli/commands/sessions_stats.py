"""`hermes sessions stats` (counts per profile) and `recover` (a damaged store's sessions)."""

import functools
from pathlib import Path
from typing import Annotated, Any

import typer

from hermes_cli.commands.sessions_options import setup
from hermes_cli.rendering import output, records, render, store_views
from hermes_cli.shared.options import (
    ColorOption,
    FormatOption,
    JsonFlag,
    NoPagerFlag,
)


def _stats_one(name: str, store: Any, *, tables: bool = True) -> dict[str, Any]:
    """Return one profile's statistics over its stores: the live one and every vault year
    (``tables=False``: without the per-table row counts, which only machine output shows)."""
    from hermes_cli.shared import waiting
    from hermes_state.reports import stats as lib
    from hermes_state.vault import profile_stores

    across = profile_stores.stats_across(store, store.path.parent, waiting.current())
    by_source = across["by_source"]
    report = records.stats(
        {
            "profile": name,
            "session_count": sum(r["sessions"] for r in by_source),
            "message_count": sum(r["messages"] for r in by_source),
            "stored_message_count": sum(r["stored_messages"] for r in by_source),
            "by_source": by_source,
            "by_model": across["by_model"],
            "top_sessions": across["top_sessions"],
            "store": lib.store_stats(store, tables=tables),
        }
    )
    report["vault"] = across["vault"]
    return report


def _empty_stats(name: str, path: Path) -> dict[str, Any]:
    return records.stats(
        {
            "profile": name,
            "store": {"path": str(path), "files": {}, "total_bytes": 0},
        }
    )


STATS_EXAMPLES = [
    "hermes sessions stats",
    "hermes sessions stats --all-profiles --no-pager",
    "hermes sessions stats --format csv | grep by_model",
]


def stats(
    all_profiles: Annotated[
        bool, typer.Option("--all-profiles", help="Report the root and every named profile.")
    ] = False,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    color: ColorOption = output.ColorMode.auto,
    no_pager: NoPagerFlag = False,
) -> None:
    """Show counts by source, tokens and cost by model, top sessions and file sizes (read-only)."""
    from hermes_cli.rendering import pager
    from hermes_cli.shared import stores
    from hermes_state.store.errors import StoreNotFoundError

    settings = setup(fmt, as_json, color, pager=not no_pager)
    if all_profiles:
        reports, errors = stores.across_profiles(
            functools.partial(_stats_one, tables=settings.machine)
        )
        rows = [r for report in reports for r in records.stats_rows(report)]
        if output.emit(
            settings, {"profiles": reports, "errors": errors}, rows, records.STATS_ROW_KEYS
        ):
            return
        stores.report_profile_errors(errors)
        with pager.paging(settings):
            for i, report in enumerate(reports):
                if i:
                    render.echo()
                store_views.stats(report, title=f"Profile: {report['profile']}")
        return
    missing = False
    try:
        with stores.read_store() as store:
            report = _stats_one(stores.profile_name(), store, tables=settings.machine)
    except StoreNotFoundError:
        report = _empty_stats(stores.profile_name(), stores.db_path())
        missing = True
    if output.emit(settings, report, list(records.stats_rows(report)), records.STATS_ROW_KEYS):
        return
    if missing:
        render.echo("No sessions yet.")
        render.key_values([("Total sessions", 0), ("Total messages", 0)])
        return
    with pager.paging(settings):
        store_views.stats(report)


RECOVER_EXAMPLES = [
    "hermes sessions recover --to /tmp/recovered.db",
    "hermes sessions recover --from damaged.db --to fixed.db --allow-partial --json",
]


def recover(
    to: Annotated[
        Path,
        typer.Option("--to", metavar="NEW.db", help="The new store to write (must not exist)."),
    ],
    source: Annotated[
        Path | None,
        typer.Option("--from", metavar="PATH", help="Store to salvage (default: this profile's)."),
    ] = None,
    allow_partial: Annotated[
        bool, typer.Option("--allow-partial", help="Accept a result that lost unreadable rows.")
    ] = False,
    report: Annotated[
        Path | None,
        typer.Option("--report", metavar="PATH", help="Where to write the JSON report."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the recovery report as JSON on stdout.")
    ] = False,
) -> None:
    """Copy everything readable from a store into a new file; the source is never written."""
    from hermes_cli.shared import stores
    from hermes_state.recover import recover as lib

    src = source or stores.db_path()
    with render.progress("Recovering") as bar:

        def step(table: str, copied: int, total: int | None) -> None:
            bar.set(f"Copying {table}", copied, total)

        result = lib.recover(
            src, to, allow_partial=allow_partial, report_path=report, progress=step
        )
    if as_json:
        render.emit_json(result.to_dict())
    else:
        render.echo(result.summary())  # first line: whether anything was lost, and how much
        for line in result.details():  # per table: lost of expected, and what expected is from
            render.echo(f"  {line}")
        store_views.recovery_report(result)
    if not result.accepted:
        raise typer.Exit(1)
