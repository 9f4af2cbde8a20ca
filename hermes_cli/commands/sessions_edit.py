"""`hermes sessions rename`, `pin`, `unpin`, `archive`, `unarchive`: a session's title and flags."""

from typing import Annotated

import typer

from hermes_cli.rendering import render
from hermes_cli.shared.options import ExactSessionRef

RENAME_EXAMPLES = [
    "hermes sessions rename 20261128_220940 WAL vs DELETE",
    'hermes sessions rename 20261128 ""',
]


def rename(
    session: ExactSessionRef,
    title: Annotated[list[str], typer.Argument(metavar="TITLE", help="The new title.")],
) -> None:
    """Give a session a new (unique) title; an empty title clears it."""
    from hermes_cli.commands import vault
    from hermes_cli.shared import stores
    from hermes_state.records import sessions as lib

    text = " ".join(title)
    with stores.write_store(check="sessions") as store:
        sid = vault.editable_session(store, session)
        stored = lib.set_session_title(store, sid, text)
    if stored is None:
        render.echo(f"Session '{sid}' title cleared.")
    else:
        render.echo(f"Session '{sid}' renamed to: {stored}")


SessionRefs = Annotated[
    list[str],
    typer.Argument(metavar="ID...", help="Session ids, unique id prefixes or exact titles."),
]


def _set_flag(refs: list[str], flag: str, value: bool) -> None:
    """Set pinned/archived on every named session; an unknown one fails before any change."""
    from hermes_cli.commands import vault
    from hermes_cli.shared import stores
    from hermes_state.records import sessions as lib
    from hermes_state.store.errors import SessionNotFoundError

    setter = lib.set_session_pinned if flag == "pinned" else lib.set_session_archived
    done = {
        ("pinned", True): "Pinned",
        ("pinned", False): "Unpinned",
        ("archived", True): "Archived",
        ("archived", False): "Unarchived",
    }[(flag, value)]
    with stores.write_store(check="sessions") as store:
        rows = [lib.require_session(store, vault.editable_session(store, ref)) for ref in refs]
        for row in dict((r["id"], r) for r in rows).values():
            sid = row["id"]
            label = f" ({render.visible(row['title'], newlines=False)})" if row.get("title") else ""
            shown = render.visible(sid, newlines=False)
            if bool(row.get(flag)) == value:
                render.echo(f"Session '{shown}'{label} is already {done.lower()}.")
                continue
            if not setter(store, sid, value):
                raise SessionNotFoundError(f"No session with id {sid}")
            render.echo(f"{done} session '{shown}'{label}.")


PIN_EXAMPLES = ["hermes sessions pin 20261118_091502_a1c9e2"]


def pin(sessions: SessionRefs) -> None:
    """Pin sessions: prune never deletes a pinned session."""
    _set_flag(sessions, "pinned", True)


UNPIN_EXAMPLES = ["hermes sessions unpin 20261118"]


def unpin(sessions: SessionRefs) -> None:
    """Unpin sessions."""
    _set_flag(sessions, "pinned", False)


ARCHIVE_EXAMPLES = ["hermes sessions archive 20261118 20261119"]


def archive(sessions: SessionRefs) -> None:
    """Archive sessions: hidden from listings (list --archived shows them), nothing deleted."""
    _set_flag(sessions, "archived", True)


UNARCHIVE_EXAMPLES = ["hermes sessions unarchive 20261118"]


def unarchive(sessions: SessionRefs) -> None:
    """Unarchive sessions."""
    _set_flag(sessions, "archived", False)
