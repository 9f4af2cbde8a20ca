"""`hermes sessions show` and `export`: one session's transcript, or many sessions as a file."""

import collections
import functools
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from hermes_cli.commands.sessions_options import (
    ExportFormat,
    check_sources,
    setup,
)
from hermes_cli.rendering import output, records, render, session_views
from hermes_cli.shared.machines import MachineOption
from hermes_cli.shared.options import (
    WHEN_HELP,
    ColorOption,
    ExcludeSources,
    FormatOption,
    JsonFlag,
    NoPagerFlag,
    Roles,
    SessionRef,
    Sources,
    cutoff,
    validate_age,
)


def _visible(
    rows: Iterable[dict[str, Any]], *, include_all: bool, roles: list[str] | None
) -> Iterator[dict[str, Any]]:
    """Yield the messages `show` prints: live and compacted rows (all with --all), of roles."""
    wanted = set(roles or ())
    for m in rows:
        if not (include_all or m.get("active", 1) or m.get("compacted")):
            continue
        if wanted and m.get("role") not in wanted:
            continue
        yield m


def _marked(message: dict[str, Any], year: str | None) -> dict[str, Any]:
    """Mark a message just read (a dict of its own) with the vault store it came from."""
    message["vault"] = year
    return message


SHOW_EXAMPLES = [
    "hermes sessions show 20261118_091502_a1c9e2",
    'hermes sessions show "Fix Docker build" --tail 20',
    "hermes sessions show 20261118 --role user --role assistant --reasoning",
    "hermes sessions show 20261118 --color always | less -R",
    "hermes sessions show 20261118 --format jsonl | jq -r .content",
    "hermes sessions show 20261118 --redact",
]


def show(
    session: SessionRef,
    include_all: Annotated[
        bool, typer.Option("--all", help="Also show rewound/superseded (inactive) messages.")
    ] = False,
    tail: Annotated[
        int | None,
        typer.Option("--tail", min=1, metavar="N", help="Only the last N messages shown."),
    ] = None,
    role: Roles = None,
    reasoning: Annotated[
        bool, typer.Option("--reasoning", help="Also print the model's reasoning text.")
    ] = False,
    redact: Annotated[
        bool,
        typer.Option(
            "--redact",
            help="Replace API keys, tokens, private keys and passwords in the title, message "
            "text, tool calls and reasoning with [REDACTED:kind].",
        ),
    ] = False,
    machine: MachineOption = None,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    color: ColorOption = output.ColorMode.auto,
    no_pager: NoPagerFlag = False,
) -> None:
    """Print the transcript of one session (read-only); long ones go through the pager.

    A session the live store does not have is shown from the vault, marked with its year
    (`[vault 2025]`; "vault": "2025" in machine formats, null for live sessions). A session the
    agent resumed after it was vaulted is one conversation: its vaulted history first, then the
    live part, each message marked with where it is.
    """
    from hermes_cli.commands import vault
    from hermes_cli.rendering import pager
    from hermes_cli.shared import machines, stores
    from hermes_state.records import messages, session_list, sessions as lib, transcript
    from hermes_state.reports import redact as redaction

    settings = setup(fmt, as_json, color, pager=not no_pager)
    # People see a few columns of each message: read only those (machine formats and --redact
    # get every field).
    read = (
        transcript.iter_transcript
        if not (settings.machine or redact)
        else functools.partial(messages.iter_messages, include_inactive=True)
    )
    machine_name, where = _session_home(machine, session)
    # A session the live store lacks is looked up in the vault (marked with its year).
    with (
        machines.reading(where),
        stores.read_store() as live,
        vault.session_parts(live, session) as (sid, parts),
    ):
        store, year = parts[-1]
        row = lib.require_session(store, sid)
        if redact:
            row = redaction.redact_session(row)
        later = lib.continued_as(store, sid)
        if later is not None and not settings.machine:
            titled = lib.require_session(store, later).get("title")
            titled = redaction.redact(titled) if redact and titled else titled
            render.echo(
                f"Note: compression continued this session as {later}"
                + (f" ({titled!r})" if titled else "")
                + f"; see it with: hermes sessions show {later}",
                err=True,
            )
        each = [session_list.message_counts(part, [sid])[sid] for part, _year in parts]
        counts = each[-1]._replace(
            live=sum(c.live for c in each), stored=sum(c.stored for c in each)
        )
        row["message_count"], row["stored_message_count"] = counts.live, counts.stored
        older = [y for _part, y in parts[:-1]]
        rows: Iterable[dict[str, Any]] = _visible(
            (_marked(m, part_year) for part, part_year in parts for m in read(part, sid)),
            include_all=include_all,
            roles=role,
        )
        if redact:
            rows = map(redaction.redact_message, rows)
        skipped = 0
        if tail is not None:
            # Bounded memory: only the last N rows are ever held.
            seen = 0

            def counted(items: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
                nonlocal seen
                for item in items:
                    seen += 1
                    yield item

            rows = list(collections.deque(counted(rows), maxlen=tail))
            skipped = seen - len(rows)
        if settings.machine:
            head = {**records.session(row, stores.profile_name()), "vault": year}
            if older:
                head["vault_parts"] = older
            if machine is not None:
                head["machine"] = machine_name
            shaped = ({**records.message(m, sid), "vault": m.get("vault")} for m in rows)
            if settings.format is output.Format.json:
                output.emit_json_stream(head, "messages", shaped)
            else:
                output.emit(settings, None, shaped, (*records.MESSAGE_KEYS, "vault"))
            return
        with pager.paging(settings):
            if machine_name is not None:
                render.echo(f"[machine {machine_name}] from the copy in {where} (read-only)")
            if year is not None:
                render.echo(f"[vault {year}] this session is in vault/{year}.db (read-only)")
            for part, part_year in parts[:-1]:
                n = session_list.message_counts(part, [sid])[sid].stored
                render.echo(
                    f"[vault {part_year}] resumed: its first {n} message(s) are in"
                    f" vault/{part_year}.db (read-only), shown before the live ones; the agent"
                    f" sees only the live part (`hermes vault return {sid}` joins them)"
                )
            session_views.session_header(row, counts, include_all=include_all)
            render.echo()
            shown = session_views.transcript(rows, reasoning=reasoning, skipped=skipped)
            if not shown:
                render.echo("(no messages)")


def _session_home(machine: str | None, session: str) -> tuple[str | None, Path]:
    """Return the machine (None: this one) and home that have the session, this one first."""
    from hermes_cli.commands import vault
    from hermes_cli.shared import machines, stores
    from hermes_state.store.errors import SessionNotFoundError, StoreNotFoundError

    found = machines.homes(machine)
    if len(found) == 1:
        return found[0]
    for name, where in found:
        with machines.reading(where):
            try:
                with stores.read_store() as live, vault.session_store(live, session):
                    return name, where
            except (SessionNotFoundError, StoreNotFoundError):
                continue
    raise SessionNotFoundError(f"No session {session!r} on this machine or a followed one")


EXPORT_EXAMPLES = [
    "hermes sessions export -o all.jsonl",
    "hermes sessions export --until 90d -o old.jsonl",
    "hermes sessions export --since 2026-01-01 --source telegram --format md -o tg.md",
    "hermes sessions export --session-id 20261118 --format json | jq '.[0].title'",
    "hermes sessions export --after-id 58213 -o new.jsonl",
    "hermes sessions export --session-id 20261118 --redact -o for-support.jsonl",
]


def export(
    output_path: Annotated[
        str,
        typer.Option(
            "-o",
            "--output",
            metavar="PATH",
            help="New file to write (never overwritten); - for stdout.",
        ),
    ] = "-",
    fmt: Annotated[ExportFormat, typer.Option("--format", help="Output format.")] = (
        ExportFormat.jsonl
    ),
    session_ids: Annotated[
        list[str] | None,
        typer.Option("--session-id", metavar="ID", help="Export this session (repeatable)."),
    ] = None,
    source: Sources = None,
    exclude_source: ExcludeSources = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            "--newer-than",
            metavar="WHEN",
            callback=validate_age,
            help="Only sessions last active at or after WHEN. --newer-than is the older name. "
            f"{WHEN_HELP}",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            "--older-than",
            metavar="WHEN",
            callback=validate_age,
            help="Only sessions last active before WHEN. --older-than is the older name. "
            f"{WHEN_HELP}",
        ),
    ] = None,
    after_id: Annotated[
        int | None,
        typer.Option(
            "--after-id",
            metavar="N",
            min=0,
            help="A change feed: only messages with a row id above N, in records of their "
            "sessions (importing one appends them). The summary names the feed's high-water "
            "mark, the N of the next run: every message committed later has a higher id, so "
            "no message is missed or exported twice.",
        ),
    ] = None,
    redact: Annotated[
        bool,
        typer.Option(
            "--redact",
            help="Replace API keys, tokens, private keys and passwords in titles, system "
            "prompts, message text, tool calls and reasoning with [REDACTED:kind]. The file "
            "still imports: prompt hashes are recomputed for the redacted text, and a title "
            "that redaction makes the same as an earlier one gets #2.",
        ),
    ] = False,
) -> None:
    """Export sessions with every message, exactly (read-only, streamed: memory stays flat).

    Records keep every column of the store, message row ids, per-model usage rows and system
    prompts; `sessions import` puts them into any profile, of any Hermes Agent release.
    """
    from hermes_cli.shared import stores
    from hermes_state.records import session_list
    from hermes_state.reports import redact as redaction
    from hermes_state.store.errors import StoreNotFoundError
    from hermes_state.transfer import export as export_lib
    from hermes_state.vault import vault_export

    before = cutoff(until)
    after = cutoff(since)
    writer = {
        ExportFormat.jsonl: export_lib.write_jsonl,
        ExportFormat.json: export_lib.write_json,
        ExportFormat.md: export_lib.write_markdown,
    }[fmt]
    to_stdout = output_path == "-"
    target = None if to_stdout else export_lib.check_export_target(Path(output_path))
    stdout = output.terminal_safe(sys.stdout, markdown=fmt is ExportFormat.md)
    mark: int | None = None
    try:
        with stores.read_store() as store:
            check_sources(store, source)
            named = session_ids or []
            ids, vaulted = _split_refs(store, named) if named else (None, None)
            span: dict[str, Any] = {
                "sources": source or None,
                "exclude_sources": exclude_source or None,
                "active_after": after,
                "active_before": before,
                "after_id": after_id,
            }
            if after_id is not None:
                # Taken first: the feed is exactly the ids in (N, mark] (see feed_mark).
                mark = export_lib.feed_mark(store)
                span["upto_id"] = mark
            records_iter = export_lib.export_all(store, session_ids=ids, **span)
            # Vaulted sessions are exported too, each record marked with its vault year.
            records_iter = vault_export.export_spanning(
                store, records_iter, session_ids=vaulted, **span
            )
            if redact:
                records_iter = redaction.redact_records(records_iter)
            if target is None:
                counts = writer(records_iter, stdout)
            else:
                total = (
                    len(dict.fromkeys(ids))
                    if ids is not None
                    else None
                    if after_id is not None
                    else session_list.count_sessions(
                        store,
                        sources=source or None,
                        exclude_sources=exclude_source or None,
                        include_archived=True,
                        active_since=after,
                        active_before=before,
                    )
                )
                with render.progress("Exporting sessions", total=total) as bar:
                    counts = export_lib.export_to_path(
                        records_iter, target, writer, progress=bar.advance
                    )
    except StoreNotFoundError:
        # A profile that never recorded anything exports an empty (but valid) file.
        if target is None:
            writer(iter(()), stdout)
        else:
            export_lib.export_to_path(iter(()), target, writer)
        render.echo("No store yet: nothing to export.", err=True)
        return
    where = "stdout" if to_stdout else str(target)
    what = (
        "stored messages, every generation" if after_id is None else f"messages above id {after_id}"
    )
    render.echo(
        f"Exported {counts.sessions} session{'s' if counts.sessions != 1 else ''} "
        f"({counts.messages} {what}) to {where}",
        err=True,
    )
    if after_id is not None:
        top = max(after_id, mark or 0)
        render.echo(f"Highest message id: {top} (next run: --after-id {top})", err=True)


def _split_refs(store: Any, refs: list[str]) -> tuple[list[str], list[str]]:
    """Resolve session refs across the profile's stores to (live ids, vault-only ids)."""
    from hermes_cli.shared import waiting
    from hermes_state.vault import profile_stores

    live: list[str] = []
    vaulted: list[str] = []
    for ref in refs:
        found = profile_stores.locate(store, store.path.parent, ref, waiting.current())
        (live if found.live else vaulted).append(found.session_id)
    return live, vaulted
