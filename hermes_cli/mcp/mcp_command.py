"""`hermes mcp`: the command that starts the MCP server (hermes_cli.mcp.mcp_server, imported only
when it runs, so `hermes --help` loads none of the server, its tools or the SDK)."""

from __future__ import annotations

from typing import Annotated, Any

import typer


def mcp(
    redact: Annotated[
        bool,
        typer.Option(
            "--redact/--no-redact",
            help="Replace API keys, tokens, private keys and passwords in what the tools return "
            "with [REDACTED:kind] (the default); --no-redact returns stored text as it is.",
        ),
    ] = True,
) -> None:
    """Serve this profile's sessions to an AI client over MCP (stdio; read-only).

    Tools: search_messages, list_sessions, get_session, get_usage. The store is opened for
    each call the way every read command opens it (never created, migrated or written) and
    closed before the answer. Answers are bounded (a limit and 64 KiB of JSON) and continue
    with next_cursor. Register it with a client as the command `hermes mcp` (with `-p NAME`
    for a profile).
    """
    from hermes_cli.mcp.mcp_calls import Call
    from hermes_cli.mcp.mcp_server import serve

    serve(Call(redact=redact))


def register(app: Any) -> None:
    """Add the top-level mcp command to the app."""
    from hermes_cli.shared.options import command

    command(
        app,
        "mcp",
        examples=[
            "hermes mcp",
            "hermes -p coder mcp",
            "hermes mcp --no-redact",
        ],
    )(mcp)
