"""Every command's --help shows a readable usage line and examples that really run."""

from __future__ import annotations

import pytest
from clitools import run

from hermes_cli import docs

COMMANDS = [c for c in docs.all_commands(docs.app_doc()) if c.key and not c.children]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.key)
def test_every_command_help_has_examples_of_that_command(command: docs.CommandDoc) -> None:
    result = run(*command.path, "--help")
    assert result.exit_code == 0
    assert "Examples:" in result.stdout
    assert command.examples
    assert all(e.startswith("hermes ") and command.key in e for e in command.examples)
    for example in command.examples:
        assert example in result.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.key)
def test_usage_lines_name_arguments_plainly(command: docs.CommandDoc) -> None:
    usage = run(*command.path, "--help").stdout.splitlines()[0]
    assert "{" not in usage and "}" not in usage
    for argument in command.arguments:
        assert argument.metavar in usage


def test_variadic_arguments_show_an_ellipsis() -> None:
    assert run("sessions", "rename", "--help").stdout.startswith(
        "Usage: hermes sessions rename [OPTIONS] ID TITLE..."
    )


@pytest.mark.parametrize(
    "example",
    [
        e
        for c in COMMANDS
        if c.key.startswith(
            (
                "sessions list",
                "sessions search",
                "sessions show",
                "sessions stats",
                "db check",
                "db path",
            )
        )
        for e in c.examples
        if "|" not in e and ">" not in e
    ],
)
def test_read_only_examples_parse_and_run(example: str, hermes_home: object) -> None:
    import shlex

    from clitools import load_sample

    load_sample()
    args = shlex.split(example)[1:]
    if args[:2] == ["-p", "coder"]:
        args = args[2:]
    result = run(*args)
    assert result.exit_code == 0, (example, result.stderr)
