"""`hermes sessions browse` (the full-screen app) and `resume-command` (the agent's line)."""

from typing import Annotated

import typer

from hermes_cli.commands.sessions_options import PrintWhat
from hermes_cli.rendering import render
from hermes_cli.shared.options import (
    WHEN_HELP,
    ExactSessionRef,
    JsonFlag,
    Sources,
    validate_age,
    validate_roles,
)

BROWSE_KEYS = """Keys:

\b
  typing          search as you type (empty: the session list)
  Up/Down, PgUp/PgDn, ^P/^N   move
  Enter           choose: leave and print the session id (with --print resume,
                  the line that resumes it in Hermes Agent)
  Esc             clear the query; with an empty query, leave
  Tab             one row per hit / one row per session
  ^S ^R ^T        cycle the source, role and time (active since) filters
  ^G              not archived / all, archived too / archived only / pinned only
  F1              list every key on the screen
  F3 or ^O        open the whole transcript (there: Up/Down, PgUp/PgDn or
                  b/Space, Home/End, h back to the hit, Esc or q back, Enter choose)
  F6              expand tool calls and reasoning
  F2 rename  F4 export  F7 pin/unpin  F8 delete  F9 archive/unarchive
  F5 or ^L        refresh (new messages of a running gateway)
  ^Q or ^C        quit without choosing
"""


BROWSE_EXAMPLES = [
    "hermes sessions browse",
    "hermes sessions browse docker --source cli --archived",
    'hermes sessions show "$(hermes sessions browse --print-id)"',
    "hermes sessions browse --print resume",
]


def browse(
    query: Annotated[
        str,
        typer.Argument(
            metavar="QUERY", help='Start with this search: words, "a phrase", prefix*, CJK.'
        ),
    ] = "",
    source: Sources = None,
    role: Annotated[
        list[str] | None,
        typer.Option(
            "--role",
            metavar="R",
            callback=validate_roles,
            help="Only role R: user, assistant, tool (repeatable).",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="WHEN",
            callback=validate_age,
            help=(
                "Only sessions active since WHEN (searching: messages written since WHEN). "
                + WHEN_HELP
            ),
        ),
    ] = None,
    archived: Annotated[
        bool, typer.Option("--archived", help="Include archived sessions.")
    ] = False,
    print_what: Annotated[
        PrintWhat,
        typer.Option(
            "--print",
            help=(
                "On Enter, print the session id, or the line that resumes it in Hermes Agent "
                "(the agent's own `hermes --resume ID`, by its path; see sessions "
                "resume-command)."
            ),
        ),
    ] = PrintWhat.id,
    print_id: Annotated[
        bool, typer.Option("--print-id", help="Same as --print id (for $(...) in scripts).")
    ] = False,
    vaulted: Annotated[
        bool,
        typer.Option(
            "--vault",
            help=(
                "Include vaulted sessions (marked [vault 2025]; read-only here: "
                "`hermes vault return ID` brings one back)."
            ),
        ),
    ] = False,
) -> None:
    """Browse and search sessions full-screen; Enter prints the chosen session id.

    Read-only unless you act on a session (each action is confirmed first). Quitting without
    choosing prints nothing and exits 1. Archived sessions are left out unless --archived
    (^G changes that on the screen). --print resume prints Hermes Agent's own command line
    for the session (`/path/to/agent/hermes --resume ID`: the agent's executable by its path,
    as `sessions resume-command` finds it, since this tool is called `hermes` too). Vaulted
    sessions (`hermes vault`) are browsed only with --vault: the list and the hits then span
    the live store and the vault, and a vaulted session can be previewed, opened and exported
    but not renamed, pinned, archived or deleted.
    """
    from hermes_cli.apps import browse as tui

    what = PrintWhat.id if print_id else print_what
    chosen = tui.run(
        query=query,
        sources=source or (),
        roles=role or (),
        since=since,
        archived=archived,
        prints=what.value,
        vaulted=vaulted,
    )
    if chosen is None:
        raise typer.Exit(1)
    render.echo(tui.chosen_line(chosen, what.value))


RESUME_COMMAND_EXAMPLES = [
    "hermes sessions resume-command 20261118_091502_a1c9e2",
    'hermes sessions resume-command "Fix Docker build"',
    "hermes -p coder sessions resume-command 20261118 --json",
]


def resume_command(session: ExactSessionRef, as_json: JsonFlag = False) -> None:
    """Print the line that resumes a session in Hermes Agent (read-only), for scripts.

    The line runs the agent's own `hermes` by its path (this tool is also called `hermes`, so
    a bare `hermes --resume ID` would run whichever comes first on PATH): $HERMES_AGENT_BIN
    when set, else the first `hermes` on PATH whose Python environment holds the agent's
    run_agent.py. When neither is found the line says `hermes` and a note on stderr says so.
    `-p NAME` is added for a named profile. A vaulted session is refused: the agent resumes
    sessions of the live store (`hermes vault return ID` first).
    """
    from hermes_cli.commands import vault
    from hermes_cli.shared import agent_command, stores
    from hermes_state.records import sessions as lib
    from hermes_state.store.home import DEFAULT_PROFILE

    with stores.read_store() as live, vault.session_store(live, session) as (store, sid, year):
        lib.require_session(store, sid)
    if year is not None:
        from hermes_state.store.errors import HermesStateError

        raise HermesStateError(
            f"session {sid} is in the vault (vault/{year}.db); the agent resumes live sessions",
            hint=f"bring it back first: hermes vault return {sid}",
        )
    name = stores.profile_name()
    command_line = agent_command.resume_command(sid, None if name == DEFAULT_PROFILE else name)
    if as_json:
        render.emit_json(
            {
                "session_id": sid,
                "command": command_line.line,
                "argv": list(command_line.argv),
                "agent_found": bool(command_line.found),
            }
        )
    else:
        render.write(command_line.line + "\n")
    if not command_line.found:
        render.echo(
            "Note: Hermes Agent's `hermes` was not found on PATH; the line runs whichever "
            f"`hermes` comes first (set {agent_command.AGENT_BIN_ENV} to the agent's).",
            err=True,
        )
