"""`hermes sessions import`: sessions from an export file into the store (or its vault)."""

import dataclasses
import io
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from hermes_cli.commands.sessions_options import (
    Conflict,
    TitleClash,
)
from hermes_cli.rendering import render


def _count_records(path: Path) -> int | None:
    """Count the records of a JSONL export (its non-blank lines); None for a JSON array."""
    try:
        with open(path, "rb") as fp:
            head = fp.read(4096).lstrip()
            if head[:1] != b"{":
                return None
            fp.seek(0)
            n = 0
            last = b"\n"
            while chunk := fp.read(1 << 20):
                n += chunk.count(b"\n")
                last = chunk[-1:]
            return n + (last != b"\n")
    except OSError:
        return None


IMPORT_EXAMPLES = [
    "hermes sessions import all.jsonl",
    "hermes -p copy sessions import all.jsonl --on-conflict replace",
    "hermes sessions import theirs.jsonl --on-title-clash rename",
    "hermes sessions export | hermes -p copy sessions import -",
]


def import_(
    source: Annotated[
        str,
        typer.Argument(metavar="FILE", help="A jsonl or json export; - reads standard input."),
    ],
    on_conflict: Annotated[
        Conflict,
        typer.Option("--on-conflict", help="For ids already in the store: keep or replace them."),
    ] = Conflict.skip,
    on_title_clash: Annotated[
        TitleClash,
        typer.Option(
            "--on-title-clash",
            help="For a title another session here has: fail (report that session, import the "
            "rest), rename (import it as 'Title #2', numbered as compression numbers a "
            "continuation) or skip it.",
        ),
    ] = TitleClash.fail,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print what was imported as one JSON object (counts, errors, warnings)."
        ),
    ] = False,
) -> None:
    """Import an export made by `sessions export` (each session all or nothing).

    A session the profile's vault holds is present (skipped, "in vault 2025"). Message ids are
    kept when above every id the profile's stores have used, else renumbered above them all.
    """
    from hermes_cli.shared import stores
    from hermes_state.transfer import portability
    from hermes_state.vault import vault_import

    if source == "-":
        # Exports are UTF-8 whatever the locale says; bytes that are not are reported.
        data: Any = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline="")
        total = None
    else:
        data = Path(source)
        if not data.is_file():
            what = "a directory" if data.is_dir() else "not found"
            raise typer.BadParameter(f"{source}: {what}", param_hint="'FILE'")
        total = _count_records(data) if render.progress_wanted() else None
    with (
        stores.write_store(create=True) as store,
        render.progress("Importing sessions", total=total) as bar,
    ):
        result = portability.import_sessions(
            store,
            data,
            on_conflict=on_conflict.value,
            on_title_clash=on_title_clash.value,
            progress=bar.advance,
            others=vault_import.other_stores(store),
        )
    if as_json:
        render.emit_json(dataclasses.asdict(result) | {"ok": result.ok})
        if result.errors:
            raise typer.Exit(1)
        return
    appended = f"; appended to {result.appended}" if result.appended else ""
    away = ", ".join(f"{n} in {where}" for where, n in sorted(result.elsewhere.items()))
    titled = f"; {result.title_skipped} left out for their title" if result.title_skipped else ""
    render.echo(
        f"Imported {result.imported} session{'s' if result.imported != 1 else ''} "
        f"({result.messages} messages); replaced {result.replaced}{appended}; "
        f"skipped {result.skipped} already present" + (f" ({away})" if away else "") + f"{titled}."
    )
    if result.kept_ids and not result.renumbered:
        render.echo(f"Every message kept its id ({result.kept_ids}).")
    for note in result.warnings:
        render.warn(note)
    for issue in result.errors:
        where = f" (session {issue.session_id})" if issue.session_id else ""
        render.echo(f"Error: line {issue.line}{where}: {issue.message}", err=True)
    if result.errors:
        render.echo(
            f"Hint: {len(result.errors)} session(s) were not imported; fix those lines and "
            "re-run (sessions already imported are skipped).",
            err=True,
        )
        raise typer.Exit(1)
