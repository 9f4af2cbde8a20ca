"""`hermes sessions …`: the group, and its commands in the order `--help` lists them.

Each command lives in the module of its family (list, search, browse, show and export, import,
edits, delete and prune, stats and recover); it parses its flags, calls one library operation
and hands the result to render (for people) or to output (json, jsonl, csv, tsv: the
vocabulary of hermes_cli.rendering.records).
"""

import typer

from hermes_cli.commands import (
    sessions_browse,
    sessions_edit,
    sessions_import,
    sessions_list,
    sessions_prune,
    sessions_search,
    sessions_show,
    sessions_stats,
)
from hermes_cli.shared.options import QueryCommand, command

app = typer.Typer(
    help="Browse, search, export and maintain sessions.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


command(app, "list", examples=sessions_list.LIST_EXAMPLES)(sessions_list.list_sessions)
command(
    app,
    "search",
    examples=sessions_search.SEARCH_EXAMPLES,
    keys=sessions_search.SEARCH_SYNTAX,
    cls=QueryCommand,
)(sessions_search.search)
command(app, "browse", examples=sessions_browse.BROWSE_EXAMPLES, keys=sessions_browse.BROWSE_KEYS)(
    sessions_browse.browse
)
command(app, "resume-command", examples=sessions_browse.RESUME_COMMAND_EXAMPLES)(
    sessions_browse.resume_command
)
command(app, "show", examples=sessions_show.SHOW_EXAMPLES)(sessions_show.show)
command(app, "export", examples=sessions_show.EXPORT_EXAMPLES)(sessions_show.export)
command(app, "import", examples=sessions_import.IMPORT_EXAMPLES)(sessions_import.import_)
command(app, "delete", examples=sessions_prune.DELETE_EXAMPLES)(sessions_prune.delete)
command(app, "rename", examples=sessions_edit.RENAME_EXAMPLES)(sessions_edit.rename)
command(app, "pin", examples=sessions_edit.PIN_EXAMPLES)(sessions_edit.pin)
command(app, "unpin", examples=sessions_edit.UNPIN_EXAMPLES)(sessions_edit.unpin)
command(app, "archive", examples=sessions_edit.ARCHIVE_EXAMPLES)(sessions_edit.archive)
command(app, "unarchive", examples=sessions_edit.UNARCHIVE_EXAMPLES)(sessions_edit.unarchive)
command(app, "prune", examples=sessions_prune.PRUNE_EXAMPLES)(sessions_prune.prune)
command(app, "stats", examples=sessions_stats.STATS_EXAMPLES)(sessions_stats.stats)
command(app, "recover", examples=sessions_stats.RECOVER_EXAMPLES)(sessions_stats.recover)
