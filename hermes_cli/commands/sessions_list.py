"""`hermes sessions list`: sessions of one profile, every profile, the vault or other machines."""

from typing import Annotated, Any

import typer

from hermes_cli.commands.sessions_options import (
    ListSort,
    check_fields,
    check_models,
    check_sources,
    limit_for,
    limit_option,
    setup,
)
from hermes_cli.rendering import output, records, render, session_views
from hermes_cli.shared.machines import MachineOption
from hermes_cli.shared.options import (
    ColorOption,
    ExcludeSources,
    FieldsOption,
    FormatOption,
    JsonFlag,
    NoPagerFlag,
    Sources,
    cutoff,
    fields_of,
    models_option,
    since_option,
    until_option,
    validate_text,
)


def _list_one(
    name: str,
    store: Any,
    *,
    filters: dict[str, Any],
    counted: dict[str, Any],
    limit: int,
    offset: int,
) -> tuple[list[dict[str, Any]], int]:
    from hermes_state.records import session_list

    rows = session_list.list_sessions(store, limit=limit, offset=offset, **filters)
    total = session_list.count_sessions(store, **counted)
    counts = session_list.message_counts(store, [r["id"] for r in rows])
    for r in rows:
        r["profile"] = name
        # Counted from the rows (the agent's counter can lag behind foreign writers).
        r["message_count"], r["stored_message_count"] = counts[r["id"]].live, counts[r["id"]].stored
    return rows, total


LIST_EXAMPLES = [
    "hermes sessions list",
    "hermes sessions list --since yesterday --source telegram --source discord",
    "hermes sessions list --sort active -n 50 --no-pager",
    "hermes sessions list --reverse --since '2 weeks ago'",
    "hermes sessions list --all-profiles --format tsv | cut -f1,2,6",
    "hermes sessions list --json=id,title,source | jq -r '.sessions[].id'",
    "hermes sessions list --format jsonl | jq -r .id",
    "hermes sessions list --title 'travel plans' --model anthropic/claude-sonnet-4",
]


def list_sessions(
    source: Sources = None,
    exclude_source: ExcludeSources = None,
    title: Annotated[
        str | None,
        typer.Option(
            "--title",
            metavar="TEXT",
            callback=validate_text,
            help="Only sessions whose title contains TEXT (case folded for ASCII letters).",
        ),
    ] = None,
    model: Annotated[
        list[str] | None,
        models_option("sessions of model M, as `sessions stats` names it (repeatable)."),
    ] = None,
    since: Annotated[str | None, since_option("sessions active")] = None,
    until: Annotated[str | None, until_option("sessions last active")] = None,
    limit: Annotated[int | None, limit_option("sessions")] = None,
    offset: Annotated[
        int, typer.Option("--offset", min=0, metavar="N", help="Skip the first N sessions.")
    ] = 0,
    archived: Annotated[
        bool, typer.Option("--archived", help="Include archived sessions.")
    ] = False,
    sort: Annotated[
        ListSort, typer.Option("--sort", help="Newest start first, or most recently active first.")
    ] = ListSort.started,
    reverse: Annotated[
        bool, typer.Option("--reverse", help="Oldest first (reverses --sort).")
    ] = False,
    all_profiles: Annotated[
        bool,
        typer.Option(
            "--all-profiles", help="List the root and every named profile (adds Profile)."
        ),
    ] = False,
    vaulted: Annotated[
        bool,
        typer.Option(
            "--vault",
            help='Include vaulted sessions, marked [vault 2025] ("vault": "2025" in machine '
            "formats, null for live ones).",
        ),
    ] = False,
    machine: MachineOption = None,
    fmt: FormatOption = None,
    as_json: JsonFlag = False,
    fields: FieldsOption = None,
    color: ColorOption = output.ColorMode.auto,
    no_pager: NoPagerFlag = False,
) -> None:
    """List sessions (read-only): id, title or preview, source, model, size, last active.

    --since and --until filter on when a session was last active (its newest message), as in
    every command. Archived sessions are left out unless --archived. A person sees 20 rows by
    default; --json and --format jsonl/csv/tsv print every row unless -n/--limit is given, and
    a limited answer says so (a note on stderr; "total" and "complete" in --json).

    On a narrow terminal the title and model are cut first, then whole columns are left out in
    this order: Model, Source, Tokens, Msgs, Profile, Last active. The ID is never cut.

    Vaulted sessions: search, show and export include them; list and browse only with --vault;
    search --live leaves them out.
    """
    from hermes_cli.rendering import pager
    from hermes_cli.shared import stores, waiting
    from hermes_state.store.errors import StoreNotFoundError
    from hermes_state.vault import profile_stores

    settings = setup(fmt, as_json, color, pager=not no_pager)
    picked = fields_of(fields)
    session_keys = (*records.SESSION_KEYS, "vault") if vaulted else records.SESSION_KEYS
    if machine is not None:
        if vaulted or all_profiles:
            raise typer.BadParameter(
                "--machine reads each machine's store; leave out --vault and --all-profiles",
                param_hint="--machine",
            )
        session_keys = (*session_keys, "machine")
    left_out: int | None = None  # vaulted sessions a live-only listing leaves out
    if picked is not None:
        check_fields(picked, session_keys)
    limit = limit_for(limit, settings)
    filters = {
        "sources": source or None,
        "exclude_sources": exclude_source or None,
        "include_archived": archived,
        "order": sort.value,
        "reverse": reverse,
        "active_since": cutoff(since),
        "active_before": cutoff(until),
        "title_contains": title or None,
        "models": model or None,
    }
    counted = {k: v for k, v in filters.items() if k not in ("order", "reverse")}
    errors: list[dict[str, Any]] = []
    if vaulted and all_profiles:
        raise typer.BadParameter(
            "--vault lists one profile's vault; leave out --all-profiles", param_hint="--vault"
        )
    if vaulted:
        from hermes_state.vault import vault_search

        wanted: dict[str, Any] = dict(filters)
        try:
            with stores.read_store() as store:
                spanned = vault_search.list_spanning(
                    store, store.path.parent, limit=limit, offset=offset, **wanted
                )
        except StoreNotFoundError:
            spanned = vault_search.SpanningList([], 0)
        rows, total = spanned.rows, spanned.total
        for r in rows:
            r["profile"] = stores.profile_name()
    elif machine is not None:
        from hermes_cli.shared import machines

        pages = []
        for machine_name, where in machines.homes(machine):
            with machines.reading(where):
                try:
                    with stores.read_store() as store:
                        got = _list_one(
                            stores.profile_name(),
                            store,
                            filters=filters,
                            counted=counted,
                            limit=limit + offset,
                            offset=0,
                        )
                except StoreNotFoundError:
                    got = ([], 0)
            for r in got[0]:
                r["machine"] = machine_name
            pages.append(got)
        key = "last_active" if sort is ListSort.active else "started_at"
        merged = [r for rows, _ in pages for r in rows]
        merged.sort(key=lambda r: (r.get(key) or 0, r["id"]), reverse=not reverse)
        rows = merged[offset : offset + limit]
        total = sum(t for _, t in pages)
    elif all_profiles:
        pages, errors = stores.across_profiles(
            lambda name, store: _list_one(
                name, store, filters=filters, counted=counted, limit=limit + offset, offset=0
            )
        )
        key = "last_active" if sort is ListSort.active else "started_at"
        merged = [r for rows, _ in pages for r in rows]
        merged.sort(key=lambda r: (r.get(key) or 0, r["id"]), reverse=not reverse)
        rows = merged[offset : offset + limit]
        total = sum(t for _, t in pages)
    else:
        try:
            with stores.read_store() as store:
                check_sources(store, source)
                check_models(store, model)
                rows, total = _list_one(
                    stores.profile_name(),
                    store,
                    filters=filters,
                    counted=counted,
                    limit=limit,
                    offset=offset,
                )
                left_out = profile_stores.vault_only_count(
                    store, store.path.parent, waiting.current()
                )
        except StoreNotFoundError:
            rows, total = [], 0
    shaped, keys = records.pick(
        (
            {**records.session(r), "vault": r.get("vault")}
            if vaulted
            else {**records.session(r), "machine": r.get("machine")}
            if machine is not None
            else records.session(r)
            for r in rows
        ),
        session_keys,
        picked,
    )
    complete = offset + len(rows) >= total
    document = {
        "sessions": shaped,
        "total": total,
        "offset": offset,
        "complete": complete,
        "errors": errors,
    }
    if left_out is not None:
        document["vault_not_listed"] = left_out
    vault_note = (
        f"Not listed: {left_out:,} vaulted session(s) (--vault includes them)."
        if left_out
        else None
    )
    if settings.machine:
        output.emit(settings, document, shaped, keys)
        if not complete:
            session_views.more_rows_hint(len(rows), offset, total, limit)
        if vault_note and settings.format is not output.Format.json:
            render.echo(vault_note, err=True)
        return
    stores.report_profile_errors(errors)
    if not rows:
        render.echo("No sessions found." if total or _filtered(filters) else "No sessions yet.")
        if vault_note:
            render.echo(vault_note)
        return
    if vaulted:
        # The mark leads the title / preview: the ID stays whole, ready to copy.
        rows = [
            {**r, "title": f"[vault {r['vault']}] {session_views.session_label(r)}"}
            if r.get("vault")
            else r
            for r in rows
        ]
    if machine is not None:
        rows = [
            {**r, "title": f"[machine {r['machine']}] {session_views.session_label(r)}"}
            if r.get("machine")
            else r
            for r in rows
        ]
    with pager.paging(settings):
        session_views.session_list(rows, with_profile=all_profiles)
    session_views.more_rows_hint(len(rows), offset, total, limit)
    if vault_note:
        render.echo(vault_note)


def _filtered(filters: dict[str, Any]) -> bool:
    """Tell whether a listing asked for a subset (so an empty answer is not an empty store)."""
    return any(
        filters.get(k)
        for k in (
            "sources",
            "exclude_sources",
            "active_since",
            "active_before",
            "title_contains",
            "models",
        )
    )
