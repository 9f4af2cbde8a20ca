"""`hermes profile …` (CliRunner): create, list, show, use, delete and refused names."""

from __future__ import annotations

from pathlib import Path

import pytest
from clitools import run, run_json

from hermes_cli.rendering import records
from hermes_state.store import home


def test_profile_create_makes_the_directory(hermes_home: Path) -> None:
    result = run("profile", "create", "coder")
    assert result.exit_code == 0
    assert (hermes_home / "profiles" / "coder").is_dir()
    assert "Created profile 'coder'" in result.stdout


def test_profile_create_twice_fails(hermes_home: Path) -> None:
    run("profile", "create", "coder")
    result = run("profile", "create", "coder")
    assert result.exit_code == 1 and "already exists" in result.stderr


@pytest.mark.parametrize("name", ["../x", "A B", "Coder", "root", "-x"])
def test_profile_create_refuses_bad_names(hermes_home: Path, name: str) -> None:
    result = run("profile", "create", "--", name)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Error: ")
    assert not (hermes_home / "profiles").exists() or not any((hermes_home / "profiles").iterdir())


def test_profile_list_shows_default_first_then_names(hermes_home: Path) -> None:
    run("profile", "create", "zeta")
    run("profile", "create", "alpha")
    data = run_json("profile", "list")
    assert [p["name"] for p in data["profiles"]] == ["default", "alpha", "zeta"]
    assert set(data["profiles"][0]) == set(records.PROFILE_KEYS)


def test_profile_list_names_prints_one_name_per_line(hermes_home: Path) -> None:
    run("profile", "create", "coder")
    assert run("profile", "list", "--names").stdout == "default\ncoder\n"


def test_profile_use_makes_it_sticky_and_default_clears_it(hermes_home: Path) -> None:
    run("profile", "create", "coder")
    assert run("profile", "use", "coder").exit_code == 0
    assert (hermes_home / "active_profile").read_text() == "coder\n"
    assert run_json("profile", "list")["profiles"][1]["active"] is True
    run("profile", "use", "default")
    assert not (hermes_home / "active_profile").exists()


def test_profile_use_of_a_missing_profile_fails(hermes_home: Path) -> None:
    result = run("profile", "use", "ghost")
    assert result.exit_code == 1
    assert "hermes profile create ghost" in result.stderr


def test_profile_show_describes_one_profile(hermes_home: Path) -> None:
    run("profile", "create", "coder")
    data = run_json("profile", "show", "coder")
    assert data["name"] == "coder" and data["has_store"] is False
    assert data["store"] == str(hermes_home / "profiles" / "coder" / "state.db")


def test_profile_show_of_a_missing_profile_fails(hermes_home: Path) -> None:
    assert run("profile", "show", "ghost").exit_code == 1


def test_profile_delete_asks_first(hermes_home: Path) -> None:
    run("profile", "create", "coder")
    result = run("profile", "delete", "coder", input="\n")
    assert result.exit_code == 1 and "Aborted" in result.stderr
    assert (hermes_home / "profiles" / "coder").is_dir()


def test_profile_delete_yes_removes_it(hermes_home: Path) -> None:
    run("profile", "create", "coder")
    result = run("profile", "delete", "coder", "--yes")
    assert result.exit_code == 0
    assert not (hermes_home / "profiles" / "coder").exists()


def test_profile_delete_refuses_the_default_profile(hermes_home: Path) -> None:
    result = run("profile", "delete", "default", "--yes")
    assert result.exit_code == 1 and "cannot be deleted" in result.stderr
    assert hermes_home.is_dir()


def test_profile_flag_on_the_app_selects_that_store(hermes_home: Path) -> None:
    run("profile", "create", "coder")
    data = run_json("-p", "coder", "db", "path")
    assert data["path"] == str(home.profile_home("coder") / "state.db")
    assert data["profile"] == "coder"


def test_profile_flag_naming_a_missing_profile_fails(hermes_home: Path) -> None:
    result = run("-p", "ghost", "sessions", "list")
    assert result.exit_code == 1
    assert "Error: Profile 'ghost' does not exist. Create it with: hermes profile create ghost" in (
        result.stderr
    )
