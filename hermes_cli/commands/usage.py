"""`hermes usage`: tokens, API calls and cost the store recorded, by period, model, provider,
task, source or session; on a terminal, periods are drawn as a bar chart.

The figures are hermes_state.reports.usage_report's (shared with `hermes sessions stats`); this
module
parses the flags, calls it once and renders the result: a table or chart for people, or
json/jsonl/csv/tsv.
"""

from __future__ import annotations

import sys
from datetime import date, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hermes_cli.rendering import output, records, render
from hermes_cli.shared.options import (
    ColorOption,
    FieldsOption,
    FormatOption,
    JsonFlag,
    NoPagerFlag,
    Sources,
    command,
    cutoff,
    fields_of,
    models_option,
    output_format,
    since_option,
    until_option,
)

if TYPE_CHECKING:
    from hermes_state.reports.usage_report import UsageReport


class By(StrEnum):
    """What `hermes usage` sums per."""

    day = "day"
    week = "week"
    month = "month"
    model = "model"
    provider = "provider"
    task = "task"
    source = "source"
    session = "session"


class Chart(StrEnum):
    """What the chart of `hermes usage --by day|week|month` draws."""

    auto = "auto"
    cost = "cost"
    tokens = "tokens"
    none = "none"


def register(root: Any) -> None:
    """Add `hermes usage` to the app."""
    command(
        root,
        "usage",
        examples=[
            "hermes usage",
            "hermes usage --by day --since 30d",
            "hermes usage --by week --chart tokens --since 'last monday'",
            "hermes usage --by task --since yesterday --source telegram",
            "hermes usage --by session --model openai/gpt-4.1 --format csv",
            "hermes usage --by month --json | jq '.totals.cost_usd'",
        ],
    )(usage)


def usage(
    since: Annotated[str | None, since_option("usage recorded")] = None,
    until: Annotated[str | None, until_option("usage recorded")] = None,
    by: Annotated[
        By,
        typer.Option(
            "--by",
            help="Sum per day, week (from Monday), month (local time), model, provider, task "
            "(the conversation itself, or a side task such as title generation), source, or "
            "session.",
        ),
    ] = By.model,
    source: Sources = None,
    model: Annotated[
        list[str] | None,
        models_option("usage of model M, as recorded (e.g. openai/gpt-4.1; repeatable)."),
    ] = None,
    chart: Annotated[
        Chart,
        typer.Option(
            "--chart",
            help="With --by day|week|month: a bar chart of cost (auto: when any cost is "
            "known, else tokens) or tokens, drawn on a terminal; cost or tokens also draws it "
            "into a pipe; none prints the table.",
        ),
    ] = Chart.auto,
    live_only: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Only the live store: leave the vault's sessions out (they count by default).",
        ),
    ] = False,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    fields: FieldsOption = None,
    color: ColorOption = output.ColorMode.auto,
    no_pager: NoPagerFlag = False,
) -> None:
    """Show input, output, cache and reasoning tokens, API calls and cost (read-only).

    Vaulted sessions (`hermes vault`) count as the live ones do: the figures cover the live
    store and every vault year (`--live` leaves the vault out, and the output says so).

    Usage is read from the per-route usage rows the agent writes (one per session, model,
    billing route and task, side tasks such as title generation included) and from what the
    sessions' own counters hold beyond those rows: in a store without per-route rows (older
    releases), the sessions' counters are all there is. Cost is the billed cost where one was
    recorded, else the estimate; a cost nobody recorded is shown as unknown, never as $0, and
    the tokens it leaves out are counted. Total tokens are input + output.

    --since and --until filter on when the usage was recorded: the time a per-route usage row
    was last added to, or, for usage only a session's own counters hold, the session's last
    activity (its newest message).
    """
    from hermes_cli.shared import stores
    from hermes_state.reports.usage_report import FIGURES, GROUP_KEYS, UsageFilter
    from hermes_state.store.errors import StoreNotFoundError

    settings = output.configure(output_format(fmt, as_json), color=color, pager=not no_pager)
    flt = UsageFilter(
        since=cutoff(since),
        until=cutoff(until),
        sources=tuple(dict.fromkeys(source or ())),
        models=tuple(dict.fromkeys(model or ())),
    )
    if flt.since is not None and flt.until is not None and flt.since >= flt.until:
        raise typer.BadParameter(
            f"--since {since!r} is not before --until {until!r}; nothing can be in between",
            param_hint="'--since'",
        )
    keys = _row_keys(GROUP_KEYS[by.value], by is By.session, FIGURES)
    picked = fields_of(fields)
    if picked is not None:
        _pick(keys, picked)
    report: UsageReport | None = None
    try:
        with stores.read_store() as store:
            _check_filters(store, flt, live_only)
            report = _report(store, by.value, flt, live_only)
    except StoreNotFoundError:
        pass  # no store yet: nothing recorded, which is an answer, not an error
    document = usage_document(report, stores.profile_name(), by.value, flt)
    rows, keys = _pick(keys, picked, document)
    if output.emit(settings, _picked_document(document, picked), rows, keys):
        return
    if report is None or not report.groups:
        render.echo(_nothing_text(report, flt))
        return
    from hermes_cli.rendering import pager

    drawn = _chart_metric(chart, report, settings)
    with pager.paging(settings):
        if drawn is not None:
            usage_chart(report, drawn, settings)
        else:
            usage_table(report, settings)
        if report.vault:
            render.echo(f"Includes the vault: {', '.join(report.vault)} (--live leaves it out).")
        elif live_only:
            render.echo("Live store only (--live): vaulted sessions are left out.")


# --- reading --------------------------------------------------------------------------------


def _report(store: Any, by: str, flt: Any, live_only: bool) -> UsageReport:
    from hermes_cli.shared import waiting
    from hermes_state.reports import usage_report
    from hermes_state.vault import profile_stores

    if live_only:
        return usage_report.usage_report(store, by, flt)
    return profile_stores.usage_across(store, store.path.parent, by, flt, waiting=waiting.current())


def _check_filters(store: Any, flt: Any, live_only: bool) -> None:
    """Refuse a --source or --model no store counted has usage of, naming the ones they have."""
    if not (flt.sources or flt.models):
        return  # nothing to check: listing the models is a pass over every usage record
    import difflib

    from hermes_cli.shared import waiting
    from hermes_state.records import session_list
    from hermes_state.reports import usage_report
    from hermes_state.vault import profile_stores

    if not live_only:
        sources, models = profile_stores.sources_and_models(
            store, store.path.parent, waiting.current()
        )

    for flag, wanted in (("--source", flt.sources), ("--model", flt.models)):
        if not wanted:
            continue
        if flag == "--source":
            what = "session comes from"
            have = sources if not live_only else session_list.distinct_sources(store)
        else:
            what = "usage is recorded for"
            have = models if not live_only else usage_report.models_with_usage(store)
        unknown = [w for w in wanted if w not in have]
        if unknown:
            close = difflib.get_close_matches(unknown[0], have, n=1)
            guess = f" (did you mean {close[0]!r}?)" if close else ""
            listed = ", ".join(have) if have else "none yet"
            raise typer.BadParameter(
                f"no {what} {unknown[0]!r}{guess}; this store has: {listed}",
                param_hint=f"'{flag}'",
            )


# --- the machine formats --------------------------------------------------------------------


def _row_keys(key: str, session: bool, figures: tuple[str, ...]) -> tuple[str, ...]:
    """Return the keys of one group row: its key, the session's columns, then the figures."""
    return (key, *(("title", "source", "model") if session else ()), *figures)


def usage_document(report: UsageReport | None, profile: str, by: str, flt: Any) -> dict[str, Any]:
    """Return the --json document: the filters, where the figures come from, totals, groups."""
    from hermes_state.reports.usage_report import FIGURES

    zero = dict.fromkeys(FIGURES, 0) | {
        "estimated_cost_usd": None,
        "actual_cost_usd": None,
        "cost_usd": None,
    }
    return {
        "profile": profile,
        "by": by,
        "basis": report.basis if report is not None else None,
        "since_at": records.iso_utc(flt.since),
        "until_at": records.iso_utc(flt.until),
        "sources": list(flt.sources),
        "models": list(flt.models),
        "totals": dict(report.totals) if report is not None else zero,
        # Which stores the figures cover: the vault years summed in, or null when --live.
        "vault": list(report.vault) if report is not None and report.vault is not None else None,
        "groups": [dict(g) for g in report.groups] if report is not None else [],
    }


def _pick(
    keys: tuple[str, ...], fields: list[str] | None, document: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """Return the rows (the groups) with only the chosen fields; refuse unknown fields."""
    try:
        return records.pick(document["groups"] if document else (), keys, fields)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fields") from None


def _picked_document(document: dict[str, Any], fields: list[str] | None) -> dict[str, Any]:
    """Return the --json document with --fields applied to its groups (and totals)."""
    if not fields:
        return document
    groups = [{k: g.get(k) for k in fields} for g in document["groups"]]
    totals = {k: v for k, v in document["totals"].items() if k in fields}
    return {**document, "totals": totals, "groups": groups}


# --- for people -----------------------------------------------------------------------------

HEADERS = {
    "day": "Day",
    "week": "Week of",
    "month": "Month",
    "model": "Model",
    "provider": "Provider",
    "task": "Task",
    "source": "Source",
    "session_id": "Session",
}


def cost_text(value: float | None, unknown: int = 0) -> str:
    """Return a cost for people: $1.23 ($0.0042 below a cent), unknown, or $1.23 + ? when some
    of it is unknown."""
    if value is None:
        return "unknown" if unknown else render.MISSING
    shown = render.money(value) if value == 0 or abs(value) >= 0.01 else f"${value:.4f}"
    return f"{shown} + ?" if unknown else shown


def _label(by: str, value: Any) -> str:
    """Return a group's name for people (the conversation's own task, an unnamed provider)."""
    if by == "task":
        return value or "(conversation)"
    if value is None or value == "":
        return "(none)" if by != "model" else "unknown"
    return str(value)


def _scope_text(report: UsageReport) -> str:
    """Say what the figures cover: the time range and the filters."""
    flt = report.filter
    parts = []
    if flt.since is not None:
        parts.append(f"since {render.local_time(flt.since)}")
    if flt.until is not None:
        parts.append(f"before {render.local_time(flt.until)}")
    if not parts:
        parts.append("all time")
    if flt.sources:
        parts.append("source " + ", ".join(flt.sources))
    if flt.models:
        parts.append("model " + ", ".join(flt.models))
    return ", ".join(parts)


def _nothing_text(report: UsageReport | None, flt: Any) -> str:
    """Say that there is nothing to show, and why."""
    if report is None:
        return "No usage recorded yet (no store)."
    return f"No usage recorded ({_scope_text(report)})."


def _notes(report: UsageReport) -> list[str]:
    """Return the footnotes: unknown costs, and where the figures come from."""
    from hermes_state.reports.usage_report import BASIS_SESSIONS

    notes = []
    totals = report.totals
    if totals["unknown_cost_count"]:
        notes.append(
            f"? = cost unknown for {_counted(totals['unknown_cost_count'], 'usage record')}"
            f" ({totals['unknown_cost_tokens']:,} tokens): not in the cost figures."
        )
    if report.basis == BASIS_SESSIONS:
        notes.append(
            "This store has no per-route usage rows (an older release wrote it): the figures "
            "are the sessions' own counters, at each session's last activity."
        )
    return notes


# Token columns a terminal leaves out when they are 0 in every row (named under the table).
ZERO_HIDEABLE = ("Calls", "Cache read", "Cache write", "Reasoning")


def usage_table(report: UsageReport, settings: output.Settings) -> None:
    """Print the groups as a table with a total line, then the footnotes."""
    from hermes_state.reports.usage_report import GROUP_KEYS

    key = GROUP_KEYS[report.by]
    session = report.by == "session"
    Column = render.Column
    # Estimated and Billed are shown when some row has a billed cost: otherwise Cost is the
    # estimate, and a second column with the same figures would only take a title's room.
    billed = any(g.get("actual_cost_usd") is not None for g in [*report.groups, report.totals])
    columns = [
        Column(HEADERS[key], style="id" if session else None, shrink_to=None if session else 12),
        # A session's own row would say "1 session": the column only counts in other groupings.
        *([Column("Title", style="title", shrink_to=10, prefer=30)] if session else []),
        *([] if session else [Column("Sessions", "right", drop=7)]),
        Column("Calls", "right", drop=6),
        Column("Input", "right", drop=9),
        Column("Output", "right", drop=8),
        Column("Cache read", "right", drop=3),
        Column("Cache write", "right", drop=1),
        Column("Reasoning", "right", drop=2),
        *(
            [Column("Estimated", "right", drop=5), Column("Billed", "right", drop=4)]
            if billed
            else []
        ),
        Column("Cost", "right"),
    ]

    def cells(name: str, extra: list[Any], g: dict[str, Any], exact: bool) -> list[Any]:
        unknown = g["unknown_cost_count"]

        def n(value: Any) -> str:
            return render.exact_count(value) if exact else render.count(value, settings)

        return [
            name,
            *extra,
            *([] if session else [n(g["session_count"])]),
            n(g["api_call_count"]),
            n(g["input_tokens"]),
            n(g["output_tokens"]),
            n(g["cache_read_tokens"]),
            n(g["cache_write_tokens"]),
            n(g["reasoning_tokens"]),
            *(
                [cost_text(g["estimated_cost_usd"]), cost_text(g["actual_cost_usd"])]
                if billed
                else []
            ),
            cost_text(g["cost_usd"], unknown),
        ]

    def rendered(exact: bool) -> list[list[Any]]:
        rows = [
            cells(
                _label(report.by, g[key]),
                [g.get("title") or render.MISSING] if session else [],
                g,
                exact,
            )
            for g in report.groups
        ]
        if len(report.groups) > 1:
            rows.append(cells("Total", [""] if session else [], report.totals, exact))
        return rows

    # On a terminal, exact counts (6,021) when every column fits with them, else 6.0k; a
    # token column that is 0 in every row gives its room to the titles (and is named below).
    variants = [rendered(True), rendered(False)] if settings.terminal else [rendered(False)]
    zero = [
        i
        for i, c in enumerate(columns)
        if settings.terminal
        and c.header in ZERO_HIDEABLE
        and all(row[i] == "0" for row in variants[0])
    ]
    hidden = [columns[i].header for i in zero]
    if zero:
        columns = [c for i, c in enumerate(columns) if i not in zero]
        variants = [
            [[v for i, v in enumerate(r) if i not in zero] for r in rows] for rows in variants
        ]
    render.table_fitting(
        columns, variants, title=f"Usage by {report.by}, {_scope_text(report)}", settings=settings
    )
    if hidden and report.groups:
        render.echo(f"Not shown: {', '.join(hidden)} (0 in every row).")
    for note in _notes(report):
        render.echo(note)


def _counted(n: int, word: str) -> str:
    """Return `1 session`, `30,888 sessions`."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _chart_metric(chart: Chart, report: UsageReport, settings: output.Settings) -> str | None:
    """Return what to chart ("cost" or "tokens"), or None for the table."""
    from hermes_state.reports.usage_report import PERIODS

    if report.by not in PERIODS or chart is Chart.none:
        return None
    if chart is Chart.auto:
        if not settings.terminal:
            return None
        return "cost" if report.totals["cost_usd"] is not None else "tokens"
    return chart.value


def periods_between(by: str, first: str, last: str) -> list[str]:
    """Return every period label from first to last (days, Mondays or months), in order."""
    if by == "month":
        year, month = (int(x) for x in first.split("-"))
        out = []
        while f"{year:04d}-{month:02d}" <= last:
            out.append(f"{year:04d}-{month:02d}")
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        return out
    step = timedelta(days=7 if by == "week" else 1)
    day, end = date.fromisoformat(first), date.fromisoformat(last)
    out = []
    while day <= end:
        out.append(day.isoformat())
        day += step
    return out


def usage_chart(report: UsageReport, metric: str, settings: output.Settings) -> None:
    """Draw the periods as horizontal bars of cost or tokens, each with its figures beside it;
    periods without usage get an empty line, so the time axis stays true."""
    from rich.bar import Bar
    from rich.table import Table
    from rich.text import Text

    from hermes_cli.rendering import sanitize
    from hermes_state.reports.usage_report import GROUP_KEYS

    key = GROUP_KEYS[report.by]
    found = {g[key]: g for g in report.groups if g[key] is not None}
    labels = periods_between(report.by, min(found), max(found)) if found else []
    empty: dict[str, Any] = {"cost_usd": None, "total_tokens": 0, "unknown_cost_count": 0}

    def value(g: dict[str, Any]) -> float:
        return float((g["cost_usd"] or 0) if metric == "cost" else g["total_tokens"])

    peak = max((value(g) for g in found.values()), default=0.0) or 1.0
    console = render.stdout_console(settings, settings.width or 80)
    with console.capture() as captured:
        what = "Cost" if metric == "cost" else "Tokens (input + output)"
        console.print(Text(f"{what} by {report.by}, {_scope_text(report)}", style="bold underline"))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(ratio=1)
        grid.add_column(justify="right", no_wrap=True)
        grid.add_column(justify="right", no_wrap=True)
        for label in labels:
            g = found.get(label, empty)
            cost = cost_text(g["cost_usd"], g["unknown_cost_count"]) if label in found else ""
            tokens = f"{render.compact_number(g['total_tokens'])} tok" if label in found else ""
            first, second = (cost, tokens) if metric == "cost" else (tokens, cost)
            grid.add_row(
                Text(sanitize.one_line(label)),
                Bar(peak, 0, value(g), color="cyan"),
                Text(first),
                Text(second, style="dim"),
            )
        console.print(grid)
        totals = report.totals
        console.print(
            Text(
                f"Total: {cost_text(totals['cost_usd'], totals['unknown_cost_count'])} · "
                f"{render.compact_number(totals['total_tokens'])} tokens · "
                f"{_counted(totals['session_count'], 'session')} · "
                f"{_counted(totals['api_call_count'], 'API call')}"
            )
        )
        for note in _notes(report):
            console.print(Text(note, style="dim"))
    # Rich pads every line to the width; into a pipe or a file that is only noise.
    sys.stdout.write("".join(line.rstrip(" ") + "\n" for line in captured.get().splitlines()))
