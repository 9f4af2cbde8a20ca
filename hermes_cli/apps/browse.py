"""`hermes sessions browse`: what the full-screen browser shows, read and changed via the library.

The command's entry: it opens the store, reads the first results and runs the screen
(`browse_app`, Textual, imported only when the command runs), then says which session was
chosen. The parts: `browse_model` (requests and results), `browse_store` (the library reads and
edits), `browse_text` (drawing), `browse_widgets`/`browse_transcript`/`browse_app` (the screens).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence

from hermes_cli.apps.browse_model import Filters, Request
from hermes_cli.apps.browse_store import Browser
from hermes_cli.rendering import output, render

PRINT_CHOICES = ("id", "resume")


def resume_line(session_id: str) -> str:
    """Return the line that resumes the session in Hermes Agent: the agent's own command line,
    `/path/to/agent/hermes --resume ID` (with -p for a named profile), not this tool's."""
    from hermes_cli.shared.agent_command import resume_command
    from hermes_state.store.home import DEFAULT_PROFILE, current_profile_name

    name = current_profile_name()
    return resume_command(session_id, None if name == DEFAULT_PROFILE else name).line


def chosen_line(session_id: str, what: str) -> str:
    """Return what the command prints for the chosen session."""
    text = resume_line(session_id) if what == "resume" else session_id
    # Exact for a pipe or $(...); a person's terminal gets control characters escaped.
    return render.visible(text, newlines=False) if output.isatty(sys.stdout) else text


def initial_filters(
    *, sources: Sequence[str], roles: Sequence[str], since: str | None, archived: bool
) -> Filters:
    """Return the filters the screen starts with: archived sessions too with --archived."""
    scope = "all" if archived else "unarchived"
    return Filters(sources=tuple(sources), roles=tuple(roles), since=since, scope=scope)


def run(
    *,
    query: str,
    sources: Sequence[str],
    roles: Sequence[str],
    since: str | None,
    archived: bool = False,
    prints: str = "id",
    vaulted: bool = False,
) -> str | None:
    """Open the store, read the first results (so a broken store fails before the screen
    starts), run the browser (the vault's sessions too when vaulted) and return the chosen
    session id (None when quit)."""
    from hermes_cli.shared import stores
    from hermes_state.store.errors import HermesStateError

    filters = initial_filters(sources=sources, roles=roles, since=since, archived=archived)
    with stores.read_store() as store:
        browser = Browser(store, vault_home=store.path.parent if vaulted else None)
        try:
            initial = browser.load(Request(0, "hits", query, filters))
            if not (output.isatty(sys.stdin) and output.isatty(sys.stderr)):
                raise HermesStateError(
                    "sessions browse needs a terminal (stdin and stderr)",
                    hint="In scripts, use hermes sessions search QUERY or hermes sessions list.",
                )
            from hermes_cli.apps.browse_app import BrowseApp

            with _terminal_size_from_the_terminal():
                # Built in here: rich reads COLUMNS/LINES when the app makes its consoles.
                chosen = BrowseApp(browser, initial=initial, prints=prints).run()
        finally:
            browser.close()
    return chosen


@contextlib.contextmanager
def _terminal_size_from_the_terminal() -> Iterator[None]:
    """While the screen runs, let Textual read the size of the real terminal.

    Textual draws on stderr but reads the size through shutil.get_terminal_size(), which
    prefers COLUMNS/LINES from the environment (stale after a resize) and otherwise asks
    stdout, which under $(...) or a redirect is no terminal (80x24). So those variables are
    hidden and file descriptor 1 points at the terminal until the screen closes; the chosen id
    is printed after the original stdout is back.
    """
    hidden = {k: os.environ.pop(k) for k in ("COLUMNS", "LINES") if k in os.environ}
    saved = None
    if not output.isatty(sys.stdout):
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
    try:
        yield
    finally:
        if saved is not None:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        os.environ.update(hidden)
