"""`hermes sessions …`: the group, and its commands in the order `--help` lists them.

Each command lives in the module of its family (list, search, browse, show and export, import,
edits, delete and prune, stats and recover); it parses its flags, calls one library operation
and hands the result to render (for people) or to output (json, jsonl, csv, tsv: the
vocabulary of hermes_cli.rendering.records).
"""

import typer

from hermes_cli.shared.options import QueryCommand, command

NAMES = (
    "list",
    "search",
    "browse",
    "resume-command",
    "show",
    "export",
    "import",
    "delete",
    "rename",
    "pin",
    "unpin",
    "archive",
    "unarchive",
    "prune",
    "stats",
    "recover",
)


def make_app(only: str | None = None) -> typer.Typer:
    """Return the group with every command, or with command `only` alone when it is one of
    NAMES (a command line naming one need not import and convert its siblings)."""
    only = only if only in NAMES else None
    app = typer.Typer(
        help="Browse, search, export and maintain sessions.",
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    if only in (None, "list"):
        from hermes_cli.commands import sessions_list

        command(app, "list", examples=sessions_list.LIST_EXAMPLES)(sessions_list.list_sessions)
    if only in (None, "search"):
        from hermes_cli.commands import sessions_search

        command(
            app,
            "search",
            examples=sessions_search.SEARCH_EXAMPLES,
            keys=sessions_search.SEARCH_SYNTAX,
            cls=QueryCommand,
        )(sessions_search.search)
    if only in (None, "browse"):
        from hermes_cli.commands import sessions_browse

        command(
            app,
            "browse",
            examples=sessions_browse.BROWSE_EXAMPLES,
            keys=sessions_browse.BROWSE_KEYS,
        )(sessions_browse.browse)
    if only in (None, "resume-command"):
        from hermes_cli.commands import sessions_browse

        command(app, "resume-command", examples=sessions_browse.RESUME_COMMAND_EXAMPLES)(
            sessions_browse.resume_command
        )
    if only in (None, "show"):
        from hermes_cli.commands import sessions_show

        command(app, "show", examples=sessions_show.SHOW_EXAMPLES)(sessions_show.show)
    if only in (None, "export"):
        from hermes_cli.commands import sessions_show

        command(app, "export", examples=sessions_show.EXPORT_EXAMPLES)(sessions_show.export)
    if only in (None, "import"):
        from hermes_cli.commands import sessions_import

        command(app, "import", examples=sessions_import.IMPORT_EXAMPLES)(sessions_import.import_)
    if only in (None, "delete"):
        from hermes_cli.commands import sessions_prune

        command(app, "delete", examples=sessions_prune.DELETE_EXAMPLES)(sessions_prune.delete)
    if only in (None, "rename"):
        from hermes_cli.commands import sessions_edit

        command(app, "rename", examples=sessions_edit.RENAME_EXAMPLES)(sessions_edit.rename)
    if only in (None, "pin"):
        from hermes_cli.commands import sessions_edit

        command(app, "pin", examples=sessions_edit.PIN_EXAMPLES)(sessions_edit.pin)
    if only in (None, "unpin"):
        from hermes_cli.commands import sessions_edit

        command(app, "unpin", examples=sessions_edit.UNPIN_EXAMPLES)(sessions_edit.unpin)
    if only in (None, "archive"):
        from hermes_cli.commands import sessions_edit

        command(app, "archive", examples=sessions_edit.ARCHIVE_EXAMPLES)(sessions_edit.archive)
    if only in (None, "unarchive"):
        from hermes_cli.commands import sessions_edit

        command(app, "unarchive", examples=sessions_edit.UNARCHIVE_EXAMPLES)(
            sessions_edit.unarchive
        )
    if only in (None, "prune"):
        from hermes_cli.commands import sessions_prune

        command(app, "prune", examples=sessions_prune.PRUNE_EXAMPLES)(sessions_prune.prune)
    if only in (None, "stats"):
        from hermes_cli.commands import sessions_stats

        command(app, "stats", examples=sessions_stats.STATS_EXAMPLES)(sessions_stats.stats)
    if only in (None, "recover"):
        from hermes_cli.commands import sessions_stats

        command(app, "recover", examples=sessions_stats.RECOVER_EXAMPLES)(sessions_stats.recover)
    return app
