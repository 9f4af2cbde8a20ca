"""Start-up: a command line builds only the part of the app it names, the whole app otherwise."""

from __future__ import annotations

from hermes_cli import main
from hermes_cli.commands import sessions


def test_an_unknown_name_builds_the_whole_app_whose_commands_are_all_known() -> None:
    # The whole app (for the unknown name's suggestions) has exactly the commands GROUP_OF maps,
    # and `completion`, which is always built whole (its scripts describe the whole app).
    assert sorted(main.get_command("sesions").commands) == sorted([*main.GROUP_OF, "completion"])


def test_completion_builds_the_whole_app_it_describes() -> None:
    assert sorted(main.get_command("completion").commands) == sorted(
        main.get_command("sesions").commands
    )


def test_a_command_line_naming_a_command_builds_that_command() -> None:
    for name in main.GROUP_OF:
        assert name in main.get_command(name).commands, name


def test_sessions_builds_the_named_command_alone_or_every_command() -> None:
    one = main.get_command("sessions", "show").commands["sessions"]
    every = main.get_command("sessions", "--help").commands["sessions"]
    assert list(one.commands) == ["show"]
    assert list(every.commands) == list(sessions.NAMES)
