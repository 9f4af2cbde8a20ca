"""Every command's --help shows a readable usage line, examples that really run, and only
what is true for it; sizes are printed in one unit convention."""

from __future__ import annotations

import re

import pytest
from clitools import child, run

from hermes_cli import docs
from hermes_cli.completion import command_docs
from hermes_cli.completion.command_docs import CommandDoc, OptionDoc

COMMANDS = [c for c in command_docs.all_commands(docs.app_doc()) if c.key and not c.children]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.key)
def test_every_command_help_has_examples_of_that_command(command: CommandDoc) -> None:
    result = run(*command.path, "--help")
    assert result.exit_code == 0
    assert "Examples:" in result.stdout
    assert command.examples
    assert all(e.startswith("hermes ") and command.key in e for e in command.examples)
    for example in command.examples:
        assert example in result.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.key)
def test_usage_lines_name_arguments_plainly(command: CommandDoc) -> None:
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
                "sessions resume-command",
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


# --- what the help says is true -------------------------------------------------------------

ALL_COMMANDS = command_docs.all_commands(docs.app_doc())


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=lambda c: c.key or "hermes")
def test_help_writes_a_variadic_argument_with_one_ellipsis(command: CommandDoc) -> None:
    result = run(*command.path, "--help")
    assert result.exit_code == 0
    assert "...." not in result.stdout
    for argument in command.arguments:
        if argument.variadic:
            assert f"{argument.metavar}..." in result.stdout.splitlines()[0]


def test_help_of_the_real_process_writes_variadic_arguments_with_one_ellipsis() -> None:
    for args, usage in [
        (("sessions", "search"), "Usage: hermes sessions search [OPTIONS] QUERY...\n"),
        (("sessions", "pin"), "Usage: hermes sessions pin [OPTIONS] ID...\n"),
    ]:
        proc = child(*args, "--help")
        assert proc.returncode == 0 and proc.stdout.startswith(usage), proc.stdout
        assert "...." not in proc.stdout


def _options_of(command: CommandDoc) -> dict[str, OptionDoc]:
    return {flag: o for o in command.options for flag in o.flags}


@pytest.mark.parametrize(
    "command",
    [c for c in ALL_COMMANDS if any("--json" in o.flags for o in c.options)],
    ids=lambda c: c.key,
)
def test_every_json_flag_help_is_true_for_its_command(command: CommandDoc) -> None:
    options = _options_of(command)
    text = options["--json"].help
    if "--format" in text:
        assert "--format" in options and "json" in options["--format"].choices, text
    else:
        assert "JSON" in text, text


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=lambda c: c.key or "hermes")
def test_every_same_as_in_a_help_names_an_option_and_value_the_command_has(
    command: CommandDoc,
) -> None:
    options = _options_of(command)
    for o in command.options:
        for flag, value in re.findall(r"Same as (--[\w-]+) (\w+)", o.help):
            assert flag in options and value in options[flag].choices, (o.flags, o.help)


def test_db_migrate_help_does_not_offer_a_format_it_lacks() -> None:
    proc = child("db", "migrate", "--help")
    assert proc.returncode == 0
    assert "--format" not in proc.stdout
    assert "--json      Print the result as one JSON document on stdout" in proc.stdout


# --- sizes: binary units, labelled so -------------------------------------------------------

SIZE = re.compile(r"\b(\d+(?:\.\d+)?) ?([KMGT]i?B|B)\b")


def _sizes_in(text: str) -> list[str]:
    return [unit for _, unit in SIZE.findall(text)]


def test_stats_prune_optimize_and_check_print_sizes_in_binary_units(hermes_home: object) -> None:
    from clitools import load_sample

    load_sample()
    outputs = [
        child("sessions", "stats"),
        child("sessions", "prune", "--older-than", "1d", "--dry-run"),
        child("sessions", "prune", "--older-than", "1d", "--yes", "--compact"),
        child("db", "optimize"),
        child("db", "check"),
    ]
    assert all(proc.returncode == 0 for proc in outputs), [p.stderr for p in outputs]
    text = "\n".join(proc.stdout + proc.stderr for proc in outputs)
    units = _sizes_in(text)
    assert {"KiB"} <= set(units) <= {"B", "KiB", "MiB", "GiB", "TiB"}, units
    assert re.search(r"\b[KMGT]B\b", text) is None


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (9 * 1024 + 100, "9.1 KiB"),
        (3 << 20, "3.0 MiB"),
        (int(1.5 * (1 << 30)), "1.5 GiB"),
        (2 << 40, "2.0 TiB"),
    ],
)
def test_library_messages_and_cli_output_write_sizes_alike(size: int, text: str) -> None:
    from hermes_cli.rendering import render
    from hermes_state.upkeep import reclaim

    assert render.human_bytes(size) == text
    assert reclaim._size_text(size) == text
