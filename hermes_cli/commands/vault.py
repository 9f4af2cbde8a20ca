"""`hermes vault …`: move old sessions out of the live store into per-year vault stores, bring
them back, and list and check the vault.

The vault is `<home>/vault/<YYYY>.db`, one store per UTC year of a session group's last
activity, in the live store's own layout. The agent never reads it: a vaulted session is
invisible to the agent until `hermes vault return` brings it back. `sessions search`, `show` and
`export` read it too (each hit marked with its vault year); `sessions list` and `browse` only
with --vault.
"""

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from hermes_cli.rendering import records, render, store_views
from hermes_cli.shared.options import AGE_HELP, JsonFlag, Sources, YesFlag, command, validate_age

app = typer.Typer(
    help="Move old sessions into the vault (per-year stores beside state.db), and back.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _home() -> Any:
    from hermes_cli.shared import stores

    return stores.db_path().parent


@command(
    app,
    "move",
    examples=[
        "hermes vault move --older-than 180d --dry-run",
        "hermes vault move --older-than 365d --source cron --yes",
    ],
)
def move(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            metavar="AGE",
            callback=validate_age,
            help=f"Move ended sessions last active before AGE ago. {AGE_HELP}",
        ),
    ] = "180d",
    source: Sources = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would move; move nothing.")
    ] = False,
    compact: Annotated[
        bool,
        typer.Option(
            "--compact",
            help="Always rewrite the live file afterwards (otherwise as prune does: when a "
            "quarter of it moved, or it is small).",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Rewrite the live file even while another process has it."),
    ] = False,
    yes: YesFlag = False,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print the plan (with --dry-run) or what moved as JSON."),
    ] = False,
) -> None:
    """Move whole session groups that may go into the vault, verified, then tidy the live file.

    A group (a compression chain with its delegated runs and branch children) moves only when
    every member is ended, unpinned, last active before the cutoff, free of open ledger work and
    not in use by the agent. Each session is verified in the vault before its rows leave the live
    store; a killed move leaves every session visible in exactly one place, and running it again
    finishes it. Vaulted sessions are invisible to the agent until `hermes vault return`.
    """
    from hermes_cli.shared import stores
    from hermes_cli.shared.durations import cutoff_to_days
    from hermes_cli.shared.options import cutoff
    from hermes_state.vault import vault_move

    days = cutoff_to_days(cutoff(older_than) or 0.0)
    sources = tuple(source or ())
    opener = stores.read_store if dry_run else stores.write_store
    with opener() as store:
        home = store.path.parent
        with render.progress("Finding sessions to move"):
            preview = vault_move.move_sessions(store, home, days, sources=sources, dry_run=True)
        if as_json and (dry_run or not preview.sessions):
            render.emit_json(records.prune(preview.to_dict()))
            return
        if not as_json:
            _plan_view(preview)
        if dry_run:
            render.echo("Dry run: nothing moved.")
            return
        if not preview.sessions:
            return
        render.confirm(
            f"Move these {preview.sessions} session(s) ({preview.messages} stored messages) "
            "into the vault? The agent will not see them until they are returned.",
            assume_yes=yes,
        )
        with render.progress("Moving sessions", total=preview.sessions) as bar:
            result = vault_move.move_sessions(
                store,
                home,
                days,
                sources=sources,
                progress=lambda done, total: bar.set(completed=done, total=total),
            )
            optimized = stores.reclaim_after_delete(
                store, bar, result, compact=compact, force=force
            )
    if as_json:
        store_views.deletion_json(result, optimized, shape=records.prune)
        return
    render.echo(
        f"Moved {result.sessions} session(s) ({result.messages} stored messages) into the vault."
    )
    for year, n in sorted(result.by_year.items()):
        render.echo(f"  vault/{year}.db: {n['sessions']} session(s), {n['messages']} messages")
    if result.changed:
        render.warn(f"{len(result.changed)} session(s) changed while moving and stayed live")
    if result.finished:
        render.echo(f"Finished {result.finished} session(s) an interrupted run had left.")
    _resumed_note(result.resumed)
    if optimized is not None:
        store_views.optimize_result(optimized)


def _resumed_note(resumed: Any) -> None:
    """Say which sessions stay live because the agent resumed them after they were vaulted."""
    if resumed:
        render.echo(
            f"  kept: {len(resumed)} session(s) the agent resumed after they were vaulted (first:"
            f" {resumed[0]}); `hermes vault return {resumed[0]}` joins its two parts, then it"
            " can move"
        )


def _plan_view(plan: Any) -> None:
    render.echo(
        f"{plan.sessions} session(s) in {plan.groups} group(s), {plan.messages} stored "
        f"messages, last active before {render.local_time(plan.cutoff)}."
    )
    for year, n in sorted(plan.by_year.items()):
        render.echo(f"  to vault/{year}.db: {n['sessions']} session(s), {n['messages']} messages")
    for b in plan.busy:
        render.echo(f"  kept: {b['message']}")
    for sid in plan.in_use:
        render.echo(f"  kept: session {sid} is in use by the agent")
    if plan.held_back:
        render.echo(
            f"  kept: {plan.held_back} group(s) with a member that may not move yet "
            "(still open, pinned, recent or busy)"
        )


@command(
    app,
    "return",
    examples=["hermes vault return 20250114_101500_ab12cd", "hermes vault return ID1 ID2 --json"],
)
def return_(
    ids: Annotated[
        list[str],
        typer.Argument(
            metavar="ID...",
            help="Vaulted sessions: an id, a unique id prefix or an exact title each.",
        ),
    ],
    as_json: JsonFlag = False,
) -> None:
    """Bring vaulted sessions back into the live store, each with its whole group.

    Session ids, message ids and uids are kept; a message id the live store has given to another
    message meanwhile gets a new id (the count is reported). The agent sees them again at once.
    A session the agent resumed after it was vaulted (one conversation in two stores) is joined:
    its vaulted history goes into the live session. A session already live is left as it is,
    so running a finished return again does nothing and exits 0.
    """
    from hermes_cli.shared import stores
    from hermes_state.vault import vault_return

    with stores.write_store() as store:
        result = vault_return.return_sessions(store, store.path.parent, ids)
    if as_json:
        render.emit_json(result.to_dict())
        return
    if result.sessions or not result.already_live:
        render.echo(
            f"Returned {result.sessions} session(s) ({result.messages} messages) to the live store."
        )
    if result.joined:
        render.echo(
            f"  joined {len(result.joined)} session(s) the agent had resumed: their vaulted"
            f" history is in the live session now ({', '.join(result.joined)})"
        )
    if result.already_live:
        render.echo(
            f"Nothing left to return for {len(result.already_live)} session(s): already in the"
            f" live store ({', '.join(result.already_live)})."
        )
    if result.with_group:
        render.echo(f"  with their group: {', '.join(result.with_group)}")
    if result.renumbered:
        render.echo(
            f"  {result.renumbered} message(s) got new ids (theirs were taken); "
            f"{result.kept_ids} kept theirs"
        )
    if result.title_clashes:
        render.echo(f"  {result.title_clashes} title(s) were in use and got the session id added")
    for ref in result.not_found:
        render.warn(f"no vaulted session {ref!r}")
    if result.not_found:
        raise typer.Exit(1)


@command(app, "list", examples=["hermes vault list", "hermes vault list --json"])
def list_(as_json: JsonFlag = False) -> None:
    """List the vault stores: sessions, messages, size and date range of each (read-only)."""
    from hermes_cli.rendering.layout import Column
    from hermes_cli.shared import stores
    from hermes_state.store.errors import StoreNotFoundError
    from hermes_state.store.home import display_hermes_home
    from hermes_state.vault import vault_list

    try:
        with stores.read_store() as store:
            infos = vault_list.list_vault(store.path.parent, store)
    except StoreNotFoundError:
        infos = vault_list.list_vault(_home(), None)
    if as_json:
        render.emit_json({"stores": [records.vault_store(i.to_dict()) for i in infos]})
        return
    if not infos:
        render.echo("The vault is empty.")
        return
    rows = [
        [
            i.year,
            f"{i.sessions:,}",
            f"{i.messages:,}",
            render.human_bytes(i.bytes),
            render.local_time(i.first_started, "%Y-%m-%d"),
            render.local_time(i.last_active, "%Y-%m-%d"),
            display_hermes_home(i.path),
        ]
        for i in infos
    ]
    columns = [
        Column("Year", style="id"),
        Column("Sessions", justify="right"),
        Column("Messages", justify="right"),
        Column("Size", justify="right"),
        Column("First started"),
        Column("Last active"),
        Column("Path", shrink_to=10),
    ]
    render.table(columns, rows)
    for i in infos:
        if i.hidden:
            render.echo(
                f"{i.year}.db: {i.hidden} session(s) hidden: the live store has them too, every"
                " message (an interrupted move or return; `hermes vault move` finishes it)"
            )
        if i.resumed:
            render.echo(
                f"{i.year}.db: {i.resumed} session(s) the agent resumed: read with their live"
                " part; `hermes vault return ID` joins them"
            )


@command(app, "check", examples=["hermes vault check", "hermes vault check --json"])
def check(as_json: JsonFlag = False) -> None:
    """Check every vault store: integrity, search indexes, each vaulted session stored once and
    absent from the live store. Exits 1 when anything is wrong."""
    from hermes_cli.shared import stores
    from hermes_state.store.errors import StoreNotFoundError
    from hermes_state.vault import vault_check

    try:
        with stores.read_store() as store:
            report = vault_check.check_vault(store.path.parent, store)
    except StoreNotFoundError:
        report = vault_check.check_vault(_home(), None)
    if as_json:
        render.emit_json(report.to_dict())
    else:
        if not report.stores:
            render.echo("The vault is empty.")
        for s in report.stores:
            render.echo(f"{s['year']}.db: {'ok' if s['ok'] else 'PROBLEMS'}")
            for c in s["checks"]:
                render.echo(f"  {c['name']}: {c['detail']}")
    if not report.ok:
        raise typer.Exit(1)


@contextlib.contextmanager
def session_parts(live: Any, ref: str) -> Iterator[tuple[str, list[tuple[Any, str | None]]]]:
    """Yield (session id, its parts) of the session a reader asked for, named as every command
    names one across the profile's stores: each part is (store, vault year or None for live),
    oldest first — a session the agent resumed after it was vaulted has a vault part and a live
    part. Vault stores are opened read-only for the block."""
    from hermes_cli.shared import waiting
    from hermes_state.vault import profile_stores, vault_stores  # not vault: moving is heavy

    found = profile_stores.locate(live, live.path.parent, ref, waiting.current())
    opened: list[tuple[Any, str | None]] = []
    try:
        for year in found.vault:
            path = vault_stores.vault_dir(live.path.parent) / f"{year}.db"
            opened.append(
                (vault_stores.open_vault(path, read_only=True, waiting=waiting.current()), year)
            )
        if found.live:
            yield found.session_id, [*opened, (live, None)]
        else:
            yield found.session_id, opened[-1:]
    finally:
        for store, _year in opened:
            store.close()


@contextlib.contextmanager
def session_store(live: Any, ref: str) -> Iterator[tuple[Any, str, str | None]]:
    """Yield (store, session id, vault year or None) of the session a reader asked for: the
    live store's when it has it, else the newest vault store holding it (opened read-only)."""
    with session_parts(live, ref) as (sid, parts):
        store, year = parts[-1]
        yield store, sid, year


def editable_session(live: Any, ref: str, *, whole: bool = False) -> str:
    """Return the id of the live session an edit acts on, named as every command names one
    across the profile's stores; refuse a vaulted one (read-only) with the way back, and with
    whole (a deletion) a session the agent resumed, whose history is in two stores."""
    from hermes_cli.shared import waiting
    from hermes_state.vault import profile_stores
    from hermes_state.vault.vault import VaultError

    found = profile_stores.locate(live, live.path.parent, ref, waiting.current())
    sid = found.session_id
    if not found.live:
        raise VaultError(
            f"session {sid} is in the vault ({found.year}.db), which is read-only",
            hint=f"Bring it back first: hermes vault return {sid}",
        )
    if whole and found.vault:
        raise VaultError(
            f"session {sid} was resumed after it was vaulted: part of its history is in"
            f" vault/{found.vault[0]}.db",
            hint=f"Join its parts first, then delete it: hermes vault return {sid}",
        )
    return str(sid)
