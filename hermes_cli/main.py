"""Entry point of `hermes`: the profile override first, then the Typer app and its error handler.

Command modules import the storage library inside their functions, so `hermes --help` and
`hermes --version` load neither sqlite3 nor rich's table machinery.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from collections.abc import Sequence
from typing import Any

from hermes_cli.shared.exitcodes import ExitCode


def apply_global_flags(args: list[str]) -> list[str]:
    """Act on -p/--profile, --wait and --no-wait from anywhere on the line; return the rest.

    A malformed flag or profile name is a usage error (exit 2); a profile that does not exist
    exits 1. Without -p, the sticky profile chosen by `profile use` applies.
    """
    from hermes_cli.shared import argv, waiting
    from hermes_state.store import home
    from hermes_state.store.errors import HermesStateError, ProfileNotFoundError

    agent_flag = argv.agent_option(list(args))
    if agent_flag is not None:
        sys.stderr.write(
            f"Error: {agent_flag} is an option of Hermes Agent's own command line, not of this "
            "tool (which reads and maintains the agent's session store)\n"
            "Hint: resume a conversation with the agent's `hermes --resume ID` (installed with "
            "hermes-agent); here, read it with: hermes sessions show ID\n"
        )
        raise SystemExit(ExitCode.USAGE)
    try:
        flags, remaining = argv.take_global_flags(list(args))
        home.select_profile(flags.profile)
    except argv.FlagError as exc:
        sys.stderr.write(f"Error: {exc} (see: hermes --help)\n")
        raise SystemExit(ExitCode.USAGE) from None
    except ProfileNotFoundError as exc:
        sys.stderr.write(f"Error: {exc.message}\n")
        raise SystemExit(ExitCode.FAILURE) from None
    except HermesStateError as exc:  # a malformed name is a bad flag value: usage
        sys.stderr.write(f"Error: {exc.message}\n")
        if exc.hint:
            sys.stderr.write(f"Hint: {exc.hint}\n")
        raise SystemExit(ExitCode.USAGE) from None
    if flags.wait is not None:
        waiting.set_patience(flags.wait)
    return remaining


def version_text() -> str:
    """Return the `hermes X.Y.Z` line."""
    from hermes_state import __version__

    return f"hermes {__version__}"


def exit_code_for(exc: BaseException) -> int:
    """Map an expected failure to its exit code: 75 store busy, 2 a bad argument, else 1."""
    from hermes_state.store.errors import (
        InvalidProfileNameError,
        SortUnavailableError,
        StoreBusyError,
        StoreLockedError,
    )

    if isinstance(exc, StoreLockedError | StoreBusyError):
        return ExitCode.BUSY
    if isinstance(exc, InvalidProfileNameError | SortUnavailableError):
        return ExitCode.USAGE  # a malformed name, or a sort the query cannot have
    return ExitCode.FAILURE


def _usage_line(exc: Any) -> str:
    """Return a usage error as one line, with where to get help."""
    message = exc.format_message()
    ctx = getattr(exc, "ctx", None)
    if ctx is not None and "--help" not in message:
        message += f" (see: {ctx.command_path} --help)"
    return " ".join(message.split())


def _json_fields_hint(args: list[str], exc: Any) -> str:
    """Return how to write fields when `--json NAME` left NAME as an unexpected argument."""
    message = exc.format_message()
    for before, after in itertools.pairwise(args):
        if before == "--json" and "extra argument" in message and f"({after})" in message:
            return f"fields follow an equals sign: --json={after}"
    return ""


class _ReaderLeft(Exception):
    """The reader of stdout closed the pipe (carried past Typer, which exits 1 on EPIPE)."""


def _reader_left() -> int:
    """`hermes sessions list | head`: the reader closed the pipe. Exit quietly, successfully.

    Whatever is still buffered for stdout goes to /dev/null, so the flush at exit cannot fail
    a second time (and print "Exception ignored").
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.__stdout__):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            os.dup2(devnull, stream.fileno())  # type: ignore[union-attr]
    os.close(devnull)
    return ExitCode.OK


def _make_group_class() -> type:
    from typer.core import TyperGroup

    class HermesGroup(TyperGroup):
        """The root group: runs the app and turns every expected failure into a message + code."""

        def invoke(self, ctx: Any) -> Any:
            try:
                return super().invoke(ctx)
            except BrokenPipeError:
                # Typer would turn this into exit 1 on its own; every command exits 0 instead.
                raise _ReaderLeft() from None

        def main(  # type: ignore[override]
            self,
            args: Sequence[str] | None = None,
            prog_name: str | None = None,
            complete_var: str | None = None,
            standalone_mode: bool = True,
            **extra: Any,
        ) -> Any:
            import typer
            from typer._click import exceptions as click_exc

            from hermes_cli.rendering import render
            from hermes_cli.shared.logfile import attached_error_log
            from hermes_state.store.errors import HermesStateError

            log_handlers = attached_error_log()
            try:
                rv = super().main(
                    args=args,
                    prog_name=prog_name or "hermes",
                    complete_var=complete_var,
                    standalone_mode=False,
                    **extra,
                )
                code = rv if isinstance(rv, int) else ExitCode.OK
            except click_exc.NoArgsIsHelpError as exc:
                # A bare group (`hermes`, `hermes sessions`) shows its help, as asked.
                render.echo(exc.format_message())
                code = ExitCode.OK
            except click_exc.UsageError as exc:
                render.echo(f"Error: {_usage_line(exc)}", err=True)
                hint = _json_fields_hint(list(args or ()), exc)
                if hint:
                    render.echo(f"Hint: {hint}", err=True)
                code = ExitCode.USAGE
            except click_exc.ClickException as exc:
                exc.show()
                code = exc.exit_code
            except typer.Abort:
                render.echo("Aborted", err=True)
                code = ExitCode.FAILURE
            except HermesStateError as exc:
                render.error(exc.message, exc.hint)
                code = exit_code_for(exc)
            except (BrokenPipeError, _ReaderLeft):
                code = _reader_left()
            except Exception as exc:
                # A damaged, locked or full store reached through a path without its own
                # handling: still one line and a hint. Anything else is a bug (a traceback).
                from hermes_state.store.errors import translate_os_error, translate_sqlite_error

                # A full disk or a permission problem met anywhere is the environment, not a bug.
                typed = translate_sqlite_error(exc) or translate_os_error(exc)
                if typed is None:
                    raise
                render.error(typed.message, typed.hint)
                code = exit_code_for(typed)
            finally:
                log_handlers.close()
                from hermes_cli.rendering import output

                output.reset()
            if standalone_mode:
                sys.exit(code)
            return code

    return HermesGroup


def _version_callback(value: bool) -> None:
    import typer

    if value:
        sys.stdout.write(version_text() + "\n")
        raise typer.Exit()


# Each top-level command and the module that adds it. A command line naming one builds that
# module's part of the app only: the other groups' imports were most of a command's start-up.
# `completion` is left out on purpose: it writes the scripts and the man page of the whole app
# (from the click context's root), so it is built whole.
GROUP_OF = {
    "sessions": "sessions",
    "db": "db",
    "profile": "profile",
    "vault": "vault",
    "backup": "backup",
    "restore": "backup",
    "replicate": "replicate",
    "usage": "usage",
    "watch": "watch",
    "mcp": "mcp",
}


def build_app(only: str | None = None, sub: str | None = None) -> Any:
    """Assemble the Typer app from one sub-app per command group (only group `only`, if given;
    of `hermes sessions`, only its command `sub`, if given)."""
    import typer

    app = typer.Typer(
        name="hermes",
        cls=_make_group_class(),
        help="Browse, search, export and maintain Hermes Agent's session store (state.db).",
        add_completion=False,
        no_args_is_help=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def root(
        profile_name: str | None = typer.Option(
            None,
            "-p",
            "--profile",
            metavar="NAME",
            help="Use profile NAME for this command (works anywhere on the line).",
        ),
        wait: float | None = typer.Option(
            None,
            "--wait",
            metavar="SECONDS",
            min=0,
            help="Wait up to SECONDS for another process's lock on the store (default: 20 "
            "for edits, 5 to open for reading); after a second, say who holds it. Works "
            "anywhere on the line.",
        ),
        no_wait: bool = typer.Option(
            False, "--no-wait", help="Give up at once when another process holds the store."
        ),
        version: bool = typer.Option(
            False,
            "--version",
            is_eager=True,
            callback=_version_callback,
            help="Print the version and exit.",
        ),
    ) -> None:
        """Browse, search, export and maintain Hermes Agent's session store (state.db)."""
        if profile_name is not None:
            # Reached only when the app runs without main() (tests); main() strips the flag.
            apply_global_flags(["hermes", "--profile", profile_name])
        if wait is not None or no_wait:
            from hermes_cli.shared import waiting

            waiting.set_patience(0.0 if no_wait else wait)

    if only in (None, "sessions"):
        from hermes_cli.commands import sessions

        app.add_typer(sessions.make_app(sub), name="sessions")
    if only in (None, "db"):
        from hermes_cli.commands import db

        app.add_typer(db.app, name="db")
    if only in (None, "profile"):
        from hermes_cli.commands import profile

        app.add_typer(profile.app, name="profile")
    if only in (None, "vault"):
        from hermes_cli.commands import vault

        app.add_typer(vault.app, name="vault")
    if only in (None, "backup"):
        from hermes_cli.commands import backup

        backup.register(app)
    if only in (None, "replicate"):
        from hermes_cli.commands import replicate

        replicate.register(app)
    if only in (None, "usage"):
        from hermes_cli.commands import usage

        usage.register(app)
    if only in (None, "watch"):
        from hermes_cli.apps import watch

        watch.register(app)
    if only in (None, "mcp"):
        from hermes_cli.mcp import mcp_command

        mcp_command.register(app)
    if only in (None, "completion"):
        from hermes_cli.completion import completion_install

        app.add_typer(completion_install.app, name="completion")
    return app


def get_command(only: str | None = None, sub: str | None = None) -> Any:
    """Return the click command tree of the app (for docs, completions and tests), or of the
    part that adds top-level command `only` (and its subcommand `sub`; unknown names: all)."""
    import typer.main

    group = GROUP_OF.get(only) if only else None
    return typer.main.get_command(build_app(group, sub if group else None))


def main(argv: list[str] | None = None) -> None:
    """Run `hermes` with argv (default: sys.argv[1:]) and exit with its code."""
    args = apply_global_flags(sys.argv if argv is None else ["hermes", *argv])
    rest = args[1:]
    if rest[:1] == ["--version"]:
        # Fast path: no app, no storage, no rich.
        sys.stdout.write(version_text() + "\n")
        raise SystemExit(ExitCode.OK)
    if rest[:1] == ["__complete"]:
        # Fast path for shell completion: no Typer app, a read-only store at most.
        from hermes_cli.completion.complete import main as complete

        raise SystemExit(complete(rest[1:]))
    from hermes_cli.shared.environment import beside_agent_warning

    warning = beside_agent_warning()
    if warning:
        sys.stderr.write(warning)
    named = [*rest[:2], None, None]
    get_command(named[0], named[1]).main(args=rest, prog_name="hermes")


if __name__ == "__main__":  # pragma: no cover
    main()
