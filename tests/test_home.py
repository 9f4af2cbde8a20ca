"""Home resolution, profile roots, profile management and the -p/--profile pre-parse."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_cli.shared.argv import FlagError, take_global_flags
from hermes_state.store import home
from hermes_state.store.errors import (
    InvalidProfileNameError,
    ProfileExistsError,
    ProfileNotFoundError,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
posix_only = pytest.mark.skipif(os.name == "nt", reason="HOME decides the default only on POSIX")

BAD_NAMES = ["../x", "A B", "", "Hermes", "café", "a" * 65, "-x", "x/y", "coder\n", ".hidden"]


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake user home with HERMES_HOME unset, so the platform default applies."""
    path = tmp_path / "user"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    monkeypatch.delenv("HERMES_HOME")
    return path


def tree(path: Path) -> set[Path]:
    """Every path below path, to prove nothing was created."""
    return set(path.rglob("*"))


# --- resolution order ------------------------------------------------------------------------


def test_hermes_home_env_is_used(hermes_home: Path) -> None:
    assert home.get_hermes_home() == hermes_home


@posix_only
def test_default_home_is_dot_hermes_in_user_home(user_home: Path) -> None:
    assert home.get_hermes_home() == user_home / ".hermes"


@posix_only
def test_empty_hermes_home_means_unset(user_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_HOME", "")
    assert home.get_hermes_home() == user_home / ".hermes"


@posix_only
def test_hermes_home_expands_tilde(user_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_HOME", "~/elsewhere")
    assert home.get_hermes_home() == user_home / "elsewhere"


@posix_only
def test_home_does_not_affect_explicit_hermes_home(
    hermes_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "someone-else"))
    assert home.get_hermes_home() == hermes_home


@posix_only
def test_home_is_read_at_call_time(user_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(user_home / "later"))
    assert home.get_hermes_home() == user_home / "later" / ".hermes"


def test_override_wins_over_hermes_home(tmp_path: Path) -> None:
    token = home.set_hermes_home_override(tmp_path / "override")
    try:
        assert home.get_hermes_home() == tmp_path / "override"
    finally:
        home.reset_hermes_home_override(token)


def test_override_does_not_touch_os_environ(hermes_home: Path, tmp_path: Path) -> None:
    before = dict(os.environ)
    token = home.set_hermes_home_override(tmp_path / "override")
    try:
        assert dict(os.environ) == before
    finally:
        home.reset_hermes_home_override(token)


def test_reset_override_restores_previous_home(hermes_home: Path, tmp_path: Path) -> None:
    token = home.set_hermes_home_override(tmp_path / "override")
    home.reset_hermes_home_override(token)
    assert home.get_hermes_home() == hermes_home


def test_default_db_path_follows_home_at_call_time(
    hermes_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert home.default_db_path() == hermes_home / "state.db"
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "other"))
    assert home.default_db_path() == tmp_path / "other" / "state.db"


# --- roots -----------------------------------------------------------------------------------


@posix_only
def test_root_is_platform_default_without_hermes_home(user_home: Path) -> None:
    assert home.get_profiles_root() == user_home / ".hermes"
    assert home.get_default_root() == user_home / ".hermes"


def test_hermes_home_outside_default_is_its_own_root(hermes_home: Path) -> None:
    assert home.get_profiles_root() == hermes_home


def test_profile_shaped_hermes_home_has_its_grandparent_as_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "x" / "profiles" / "coder"))
    assert home.get_profiles_root() == tmp_path / "x"


@posix_only
def test_profile_of_default_root_keeps_default_root(
    user_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HOME", str(user_home / ".hermes" / "profiles" / "coder"))
    assert home.get_profiles_root() == user_home / ".hermes"


def test_override_follows_root_rules(tmp_path: Path) -> None:
    token = home.set_hermes_home_override(tmp_path / "y" / "profiles" / "coder")
    try:
        assert home.get_profiles_root() == tmp_path / "y"
    finally:
        home.reset_hermes_home_override(token)


# --- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "coder", "my-bot_2", "0x", "a" * 64, "default"])
def test_valid_profile_names_are_accepted(name: str) -> None:
    assert home.validate_profile_name(name) == name


@pytest.mark.parametrize("name", BAD_NAMES)
def test_invalid_profile_name_is_refused_before_any_path_is_built(
    name: str, hermes_home: Path, tmp_path: Path
) -> None:
    before = tree(tmp_path)
    for action in (home.create_profile, home.profile_home, home.delete_profile):
        with pytest.raises(InvalidProfileNameError):
            action(name)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("name", sorted(home.RESERVED_PROFILE_NAMES))
def test_reserved_profile_name_is_refused(name: str, hermes_home: Path) -> None:
    with pytest.raises(InvalidProfileNameError, match="reserved"):
        home.create_profile(name)
    assert not (hermes_home / "profiles").exists()


def test_invalid_name_error_names_the_name() -> None:
    with pytest.raises(InvalidProfileNameError, match=r"'A B'"):
        home.validate_profile_name("A B")


# --- profiles --------------------------------------------------------------------------------


def test_profile_home_of_default_is_root(hermes_home: Path) -> None:
    assert home.profile_home("default") == hermes_home


def test_profile_home_of_named_profile_is_under_profiles(hermes_home: Path) -> None:
    assert home.profile_home("coder") == hermes_home / "profiles" / "coder"


def test_create_profile_makes_private_directory(hermes_home: Path) -> None:
    path = home.create_profile("coder")
    assert path == hermes_home / "profiles" / "coder"
    assert path.is_dir()
    if os.name != "nt":
        assert stat.S_IMODE(path.stat().st_mode) == 0o700


def test_create_existing_profile_raises(hermes_home: Path) -> None:
    home.create_profile("coder")
    with pytest.raises(ProfileExistsError):
        home.create_profile("coder")


def test_create_default_profile_is_refused(hermes_home: Path) -> None:
    with pytest.raises(ProfileExistsError):
        home.create_profile("default")
    assert tree(hermes_home) == set()


def test_profile_exists_only_after_create(hermes_home: Path) -> None:
    assert not home.profile_exists("coder")
    home.create_profile("coder")
    assert home.profile_exists("coder")


def test_default_profile_always_exists(hermes_home: Path) -> None:
    assert home.profile_exists("default")


def test_list_profiles_puts_default_first_then_sorted_names(hermes_home: Path) -> None:
    for name in ("zeta", "alpha", "mid"):
        home.create_profile(name)
    assert [p.name for p in home.list_profiles()] == ["default", "alpha", "mid", "zeta"]
    assert home.list_profiles()[0].path == hermes_home


def test_list_profiles_skips_entries_that_are_not_valid_profiles(hermes_home: Path) -> None:
    profiles = hermes_home / "profiles"
    for junk in ("Bad Name", ".deleted", "hermes", "default"):
        (profiles / junk).mkdir(parents=True)
    (profiles / "notadir").write_text("x")
    home.create_profile("coder")
    assert [p.name for p in home.list_profiles()] == ["default", "coder"]


def test_list_profiles_reports_store_and_sticky_profile(hermes_home: Path) -> None:
    (home.create_profile("coder") / "state.db").write_bytes(b"")
    home.create_profile("writer")
    home.set_active_profile("coder")
    info = {p.name: p for p in home.list_profiles()}
    assert (info["coder"].is_active, info["coder"].has_store) == (True, True)
    assert (info["writer"].is_active, info["writer"].has_store) == (False, False)
    assert (info["default"].is_active, info["default"].has_store) == (False, False)


def test_delete_profile_removes_its_tree(hermes_home: Path) -> None:
    path = home.create_profile("coder")
    (path / "logs").mkdir()
    (path / "logs" / "a.log").write_text("x")
    assert home.delete_profile("coder") == path
    assert not path.exists()


def test_delete_missing_profile_raises(hermes_home: Path) -> None:
    with pytest.raises(ProfileNotFoundError, match="Profile 'ghost' does not exist"):
        home.delete_profile("ghost")


def test_delete_default_profile_is_refused(hermes_home: Path) -> None:
    (hermes_home / "state.db").write_bytes(b"keep")
    with pytest.raises(InvalidProfileNameError):
        home.delete_profile("default")
    assert (hermes_home / "state.db").read_bytes() == b"keep"


def test_delete_sticky_profile_clears_sticky_choice(hermes_home: Path) -> None:
    home.create_profile("coder")
    home.set_active_profile("coder")
    home.delete_profile("coder")
    assert not (hermes_home / "active_profile").exists()
    assert home.get_active_profile() == "default"


def test_delete_other_profile_keeps_sticky_choice(hermes_home: Path) -> None:
    home.create_profile("coder")
    home.create_profile("writer")
    home.set_active_profile("coder")
    home.delete_profile("writer")
    assert home.get_active_profile() == "coder"


# --- sticky active profile -------------------------------------------------------------------


def test_active_profile_is_default_without_file(hermes_home: Path) -> None:
    assert home.get_active_profile() == "default"


def test_set_active_profile_writes_name_and_newline(hermes_home: Path) -> None:
    home.create_profile("coder")
    home.set_active_profile("coder")
    assert (hermes_home / "active_profile").read_bytes() == b"coder\n"
    assert home.get_active_profile() == "coder"


def test_set_active_profile_leaves_no_temp_file(hermes_home: Path) -> None:
    home.create_profile("coder")
    home.set_active_profile("coder")
    assert sorted(p.name for p in hermes_home.iterdir()) == ["active_profile", "profiles"]


def test_set_active_default_removes_file(hermes_home: Path) -> None:
    home.create_profile("coder")
    home.set_active_profile("coder")
    home.set_active_profile("default")
    assert not (hermes_home / "active_profile").exists()


def test_set_active_missing_profile_raises(hermes_home: Path) -> None:
    with pytest.raises(ProfileNotFoundError):
        home.set_active_profile("ghost")
    assert not (hermes_home / "active_profile").exists()


def test_active_profile_with_invalid_content_is_default(hermes_home: Path) -> None:
    (hermes_home / "active_profile").write_text("../etc\n")
    assert home.get_active_profile() == "default"


def test_sticky_file_lives_in_root_not_in_profile(
    hermes_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = home.create_profile("coder")
    monkeypatch.setenv("HERMES_HOME", str(path))
    home.set_active_profile("coder")
    assert (hermes_home / "active_profile").is_file()
    assert not (path / "active_profile").exists()


# --- current profile -------------------------------------------------------------------------


def test_current_profile_of_root_is_default(hermes_home: Path) -> None:
    assert home.current_profile_name() == "default"


def test_current_profile_of_profile_home_is_its_name(
    hermes_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HOME", str(home.create_profile("coder")))
    assert home.current_profile_name() == "coder"


def test_current_profile_of_custom_home_is_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "opt" / "data"))
    assert home.current_profile_name() == "default"


# --- display ---------------------------------------------------------------------------------


@posix_only
def test_display_home_is_relative_to_user_home(
    user_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HOME", str(user_home / ".hermes" / "profiles" / "coder"))
    assert home.display_hermes_home() == "~/.hermes/profiles/coder"


@posix_only
def test_display_home_is_absolute_outside_user_home(user_home: Path, hermes_home: Path) -> None:
    assert home.display_hermes_home(hermes_home) == str(hermes_home)


@posix_only
def test_display_of_given_path_under_user_home(user_home: Path) -> None:
    assert home.display_hermes_home(user_home / "x" / "y") == "~/x/y"


# --- -p/--profile (hermes_cli.shared.argv) and select_profile ------------------------------


def _apply(argv: list[str], env: dict[str, str]) -> list[str]:
    """Do what `hermes` does with its command line: take -p, select the profile."""
    flags, rest = take_global_flags(argv)
    home.select_profile(flags.profile, env)
    return rest


@pytest.mark.parametrize(
    "argv",
    [
        ["hermes", "-p", "coder", "sessions", "list"],
        ["hermes", "--profile", "coder", "sessions", "list"],
        ["hermes", "--profile=coder", "sessions", "list"],
        ["hermes", "sessions", "list", "-p", "coder"],
        ["hermes", "sessions", "--profile=coder", "list"],
    ],
)
def test_profile_flag_sets_home_and_is_removed(argv: list[str], hermes_home: Path) -> None:
    path = home.create_profile("coder")
    env = {"HERMES_HOME": str(hermes_home)}
    assert _apply(argv, env) == ["hermes", "sessions", "list"]
    assert env["HERMES_HOME"] == str(path)


def test_profile_flag_after_double_dash_is_left_alone(hermes_home: Path) -> None:
    home.create_profile("coder")
    env = {"HERMES_HOME": str(hermes_home)}
    argv = ["hermes", "sessions", "search", "--", "-p", "coder"]
    assert _apply(argv, env) == argv
    assert env == {"HERMES_HOME": str(hermes_home)}


def test_profile_flag_for_missing_profile_raises_exact_message(hermes_home: Path) -> None:
    env = {"HERMES_HOME": str(hermes_home)}
    with pytest.raises(ProfileNotFoundError) as caught:
        _apply(["hermes", "-p", "x", "db", "path"], env)
    assert (
        str(caught.value) == "Profile 'x' does not exist. Create it with: hermes profile create x"
    )
    assert env == {"HERMES_HOME": str(hermes_home)}


def test_profile_flag_default_selects_root(hermes_home: Path) -> None:
    env = {"HERMES_HOME": str(hermes_home / "profiles" / "coder")}
    assert _apply(["hermes", "-p", "default"], env) == ["hermes"]
    assert env["HERMES_HOME"] == str(hermes_home)


def test_profile_flag_without_value_raises(hermes_home: Path) -> None:
    with pytest.raises(FlagError, match="-p needs a profile name"):
        _apply(["hermes", "sessions", "list", "-p"], {})


def test_profile_flag_followed_by_option_raises(hermes_home: Path) -> None:
    with pytest.raises(FlagError, match="--profile needs a profile name"):
        _apply(["hermes", "--profile", "--json"], {})


def test_profile_flag_with_invalid_name_raises_before_any_path(
    hermes_home: Path, tmp_path: Path
) -> None:
    before = tree(tmp_path)
    with pytest.raises(InvalidProfileNameError, match=r"'\.\./x'"):
        _apply(["hermes", "-p", "../x"], {"HERMES_HOME": str(hermes_home)})
    assert tree(tmp_path) == before


def test_profile_flag_replaces_profile_shaped_hermes_home(hermes_home: Path) -> None:
    coder = home.create_profile("coder")
    writer = home.create_profile("writer")
    env = {"HERMES_HOME": str(coder)}
    _apply(["hermes", "-p", "writer"], env)
    assert env["HERMES_HOME"] == str(writer)


def test_profile_shaped_hermes_home_is_kept_over_sticky(hermes_home: Path) -> None:
    coder = home.create_profile("coder")
    home.create_profile("writer")
    home.set_active_profile("writer")
    env = {"HERMES_HOME": str(coder)}
    assert _apply(["hermes", "db", "path"], env) == ["hermes", "db", "path"]
    assert env["HERMES_HOME"] == str(coder)


def test_sticky_profile_is_applied_without_flag(hermes_home: Path) -> None:
    writer = home.create_profile("writer")
    home.set_active_profile("writer")
    env = {"HERMES_HOME": str(hermes_home)}
    _apply(["hermes", "db", "path"], env)
    assert env["HERMES_HOME"] == str(writer)


def test_missing_sticky_profile_is_ignored(hermes_home: Path) -> None:
    (hermes_home / "active_profile").write_text("ghost\n")
    env = {"HERMES_HOME": str(hermes_home)}
    assert _apply(["hermes", "db", "path"], env) == ["hermes", "db", "path"]
    assert env == {"HERMES_HOME": str(hermes_home)}


@posix_only
def test_sticky_profile_of_default_root_is_applied(user_home: Path) -> None:
    root = user_home / ".hermes"
    (root / "profiles" / "coder").mkdir(parents=True)
    (root / "active_profile").write_text("coder\n")
    env: dict[str, str] = {}
    _apply(["hermes"], env)
    assert env == {"HERMES_HOME": str(root / "profiles" / "coder")}


def test_apply_profile_override_leaves_os_environ_alone_when_given_a_mapping(
    hermes_home: Path,
) -> None:
    home.create_profile("coder")
    _apply(["hermes", "-p", "coder"], {"HERMES_HOME": str(hermes_home)})
    assert os.environ["HERMES_HOME"] == str(hermes_home)


# --- children --------------------------------------------------------------------------------


def test_child_environment_carries_resolved_home_and_extras(tmp_path: Path) -> None:
    token = home.set_hermes_home_override(tmp_path / "override")
    try:
        env = home.child_environment({"EXTRA": "1"})
    finally:
        home.reset_hermes_home_override(token)
    assert env["HERMES_HOME"] == str(tmp_path / "override")
    assert env["EXTRA"] == "1"


def test_child_process_resolves_parent_override(tmp_path: Path) -> None:
    token = home.set_hermes_home_override(tmp_path / "override")
    try:
        env = home.child_environment({"PYTHONPATH": str(REPO_ROOT)})
    finally:
        home.reset_hermes_home_override(token)
    code = "from hermes_state.store.home import get_hermes_home; print(get_hermes_home())"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == str(tmp_path / "override")
