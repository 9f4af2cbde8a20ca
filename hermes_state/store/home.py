"""Where Hermes keeps its files: the home directory, the profile root and named profiles."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping, MutableMapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from pathlib import Path

from hermes_state.store.errors import (
    InvalidProfileNameError,
    ProfileExistsError,
    ProfileNotFoundError,
)

DEFAULT_PROFILE = "default"
RESERVED_PROFILE_NAMES = frozenset({"hermes", "test", "tmp", "root", "sudo"})
ACTIVE_PROFILE_FILE = "active_profile"
STORE_FILE = "state.db"

# ASCII only: \Z rather than $ so a trailing newline is refused, and no re.UNICODE surprises.
_PROFILE_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\Z", re.ASCII)

# None means "no override"; a Path means every get_hermes_home() in this context returns it.
_HOME_OVERRIDE: ContextVar[Path | None] = ContextVar("hermes_home_override", default=None)


@dataclass(frozen=True)
class ProfileInfo:
    """One listed profile: name, directory, whether it is the sticky one and has a store."""

    name: str
    path: Path
    is_active: bool
    has_store: bool


def _absolute(path: str | os.PathLike[str]) -> Path:
    """Return the path with ~ expanded and made absolute, without resolving symlinks."""
    # abspath (not resolve) keeps the user's spelling, e.g. a symlinked home, while fixing cwd.
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def set_hermes_home_override(path: str | os.PathLike[str] | None) -> Token[Path | None]:
    """Make get_hermes_home() return path in the current context; returns the token to undo it."""
    return _HOME_OVERRIDE.set(None if path is None else _absolute(path))


def reset_hermes_home_override(token: Token[Path | None]) -> None:
    """Undo a set_hermes_home_override() call."""
    _HOME_OVERRIDE.reset(token)


def get_default_root() -> Path:
    """Return the platform default home: ~/.hermes, or %LOCALAPPDATA%\\hermes on Windows."""
    if os.name == "nt":
        # Imported here so POSIX start-up never pays for platformdirs.
        import platformdirs

        return Path(platformdirs.user_data_dir("hermes", appauthor=False, roaming=False))
    return Path.home() / ".hermes"


def _env_home(environ: Mapping[str, str]) -> Path | None:
    """Return HERMES_HOME from environ as an absolute path, or None when unset or empty."""
    value = environ.get("HERMES_HOME", "").strip()
    return _absolute(value) if value else None


def _explicit_home() -> Path | None:
    """Return the home chosen by the context override or HERMES_HOME, or None for the default."""
    return _HOME_OVERRIDE.get() or _env_home(os.environ)


def get_hermes_home() -> Path:
    """Return the Hermes home for this call: context override, then HERMES_HOME, then default."""
    return _explicit_home() or get_default_root()


def default_db_path() -> Path:
    """Return the path of the current profile's store file."""
    return get_hermes_home() / STORE_FILE


def named_profile_of(home: Path) -> str | None:
    """Return the profile name when home is shaped <root>/profiles/<name>, else None."""
    name = home.name
    if home.parent.name != "profiles" or name == DEFAULT_PROFILE:
        return None
    return name if _PROFILE_NAME_RE.match(name) and name not in RESERVED_PROFILE_NAMES else None


def _root_for(home: Path | None) -> Path:
    """Return the profile root for an explicit home (None means the platform default)."""
    default = get_default_root()
    if home is None:
        return default
    if named_profile_of(home) is not None:
        return home.parent.parent
    # A home inside the default root (or equal to it) still belongs to the default root.
    return default if home.is_relative_to(default) else home


def get_profiles_root() -> Path:
    """Return the root that holds the default profile, active_profile and profiles/."""
    return _root_for(_explicit_home())


def validate_profile_name(name: str) -> str:
    """Return name if it is a usable profile name ('default' included), else raise."""
    if not isinstance(name, str) or not _PROFILE_NAME_RE.match(name):
        raise InvalidProfileNameError(
            f"Invalid profile name {name!r}: use 1-64 characters, lowercase letters, digits, "
            "'-' and '_', starting with a letter or digit."
        )
    if name in RESERVED_PROFILE_NAMES:
        raise InvalidProfileNameError(
            f"Profile name {name!r} is reserved; pick another name.",
            hint="Reserved names: " + ", ".join(sorted(RESERVED_PROFILE_NAMES)) + ".",
        )
    return name


def _profile_dir(root: Path, name: str) -> Path:
    """Return the directory of a validated profile name under root."""
    return root if name == DEFAULT_PROFILE else root / "profiles" / name


def _not_found(name: str) -> ProfileNotFoundError:
    """Build the error for a named profile whose directory is missing."""
    return ProfileNotFoundError(
        f"Profile '{name}' does not exist. Create it with: hermes profile create {name}"
    )


def profile_home(name: str) -> Path:
    """Return the directory of profile name ('default' is the root); it may not exist yet."""
    return _profile_dir(get_profiles_root(), validate_profile_name(name))


def profile_exists(name: str) -> bool:
    """Tell whether profile name exists; 'default' always does."""
    path = profile_home(name)
    return name == DEFAULT_PROFILE or path.is_dir()


def _read_active(root: Path) -> str:
    """Return the sticky profile name recorded under root, or 'default'."""
    try:
        name = (root / ACTIVE_PROFILE_FILE).read_text(encoding="utf-8-sig").strip()
        return validate_profile_name(name)
    except (OSError, UnicodeDecodeError, InvalidProfileNameError):
        # An unreadable or hand-mangled file must never block start-up.
        return DEFAULT_PROFILE


def get_active_profile() -> str:
    """Return the sticky active profile name, or 'default' when none is set."""
    return _read_active(get_profiles_root())


def set_active_profile(name: str) -> None:
    """Make name the sticky active profile ('default' clears it); the profile must exist."""
    validate_profile_name(name)
    root = get_profiles_root()
    target = root / ACTIVE_PROFILE_FILE
    if name == DEFAULT_PROFILE:
        target.unlink(missing_ok=True)
        return
    if not _profile_dir(root, name).is_dir():
        raise _not_found(name)
    import tempfile  # here: every command imports this module, few choose a profile

    # Write a sibling temp file and rename it over, so readers never see a half-written name.
    fd, tmp = tempfile.mkstemp(prefix=f".{ACTIVE_PROFILE_FILE}.", suffix=".tmp", dir=root)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(name + "\n")
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def list_profiles() -> list[ProfileInfo]:
    """Return the default profile, then the named profiles sorted by name."""
    root = get_profiles_root()
    active = _read_active(root)
    names: list[str] = []
    profiles_dir = root / "profiles"
    if profiles_dir.is_dir():
        names = sorted(
            entry.name
            for entry in profiles_dir.iterdir()
            if entry.is_dir() and named_profile_of(entry) is not None
        )
    infos = []
    for name in [DEFAULT_PROFILE, *names]:
        path = _profile_dir(root, name)
        infos.append(ProfileInfo(name, path, name == active, (path / STORE_FILE).is_file()))
    return infos


def create_profile(name: str) -> Path:
    """Create the directory of a new named profile (mode 0700) and return it."""
    validate_profile_name(name)
    if name == DEFAULT_PROFILE:
        raise ProfileExistsError("Profile 'default' always exists: it is the Hermes root.")
    root = get_profiles_root()
    path = _profile_dir(root, name)
    ensure_private_dir(path.parent)
    try:
        path.mkdir(mode=PRIVATE_DIR_MODE)
    except FileExistsError:
        raise ProfileExistsError(
            f"Profile '{name}' already exists.", hint=f"Its directory is {path}"
        ) from None
    # mkdir's mode is filtered by the umask; profiles hold private transcripts.
    os.chmod(path, PRIVATE_DIR_MODE)
    return path


def delete_profile(name: str) -> Path:
    """Remove a named profile's directory tree and return the path it had."""
    validate_profile_name(name)
    if name == DEFAULT_PROFILE:
        raise InvalidProfileNameError(
            "The default profile is the Hermes root and cannot be deleted.", hint=""
        )
    root = get_profiles_root()
    path = _profile_dir(root, name)
    if not path.is_dir():
        raise _not_found(name)
    # Clear the sticky choice first so it never points at a half-removed profile.
    if _read_active(root) == name:
        (root / ACTIVE_PROFILE_FILE).unlink(missing_ok=True)
    if path.is_symlink():
        path.unlink()  # remove the link, never the tree it points to
    else:
        import shutil  # here: every command imports this module, one deletes a profile

        shutil.rmtree(path)
    return path


def profile_name_of(home: str | os.PathLike[str]) -> str:
    """Return the profile name a home directory belongs to ('default' for a root)."""
    # Anything not shaped <root>/profiles/<name> is a root (or acts as one: a custom HERMES_HOME).
    return named_profile_of(_absolute(home)) or DEFAULT_PROFILE


def current_profile_name() -> str:
    """Return the name of the profile get_hermes_home() resolves to ('default' for a root)."""
    return profile_name_of(get_hermes_home())


PRIVATE_DIR_MODE = 0o700


def make_output_dir(path: str | os.PathLike[str]) -> Path:
    """Make sure a directory to write output into exists, creating its last component only.

    A missing parent means a wrong path or a drive that is not mounted: that is refused
    (OutputDirectoryError) rather than silently creating the whole path on the wrong disk. A
    directory created here is 0700 (it receives transcripts); an existing one keeps its mode.
    """
    from hermes_state.store.errors import OutputDirectoryError

    target = _absolute(path)
    if target.is_dir():
        return target
    if os.path.lexists(target):
        raise OutputDirectoryError(f"{target} exists and is not a directory")
    if not target.parent.is_dir():
        raise OutputDirectoryError(
            f"{target.parent} does not exist; nothing was created there",
        )
    return ensure_private_dir(target)


def ensure_private_dir(path: str | os.PathLike[str]) -> Path:
    """Create a directory and any missing parents as 0700 (whatever the umask); return it.

    Directories that already exist keep their mode: they are the user's, not ours.
    """
    target = _absolute(path)
    missing: list[Path] = []
    probe = target
    while not probe.exists() and not probe.is_symlink():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue  # a sibling process made it first: it is theirs to set up
        # mkdir's mode is filtered by the umask; these hold private transcripts and archives.
        os.chmod(directory, PRIVATE_DIR_MODE)
    if not target.is_dir():
        raise NotADirectoryError(20, "Not a directory", str(target))
    return target


def display_hermes_home(path: str | os.PathLike[str] | None = None) -> str:
    """Return the home (or path) as ~/... under the user's home, else absolute; for messages."""
    target = get_hermes_home() if path is None else _absolute(path)
    try:
        relative = target.relative_to(Path.home())
    except ValueError:
        return str(target)
    # as_posix so Windows messages do not mix separators.
    return "~" if relative == Path() else "~/" + relative.as_posix()


def select_profile(name: str | None, environ: MutableMapping[str, str] = os.environ) -> None:
    """Point environ['HERMES_HOME'] at profile name, or at the sticky profile when None.

    A name is validated first (InvalidProfileNameError) and must exist (ProfileNotFoundError),
    except ``default``, the root. Without a name, a HERMES_HOME that already is a profile is
    trusted; otherwise the sticky choice of ``profile use`` applies, when its profile exists.
    """
    env_home = _env_home(environ)
    root = _root_for(env_home)
    if name is None:
        if env_home is not None and named_profile_of(env_home) is not None:
            return  # already a specific profile; trust it
        sticky = _read_active(root)
        sticky_dir = _profile_dir(root, sticky)
        # A stale sticky name must not stop the tool; `profile use default` repairs it.
        if sticky != DEFAULT_PROFILE and sticky_dir.is_dir():
            environ["HERMES_HOME"] = str(sticky_dir)
        return
    chosen = validate_profile_name(name)
    target = _profile_dir(root, chosen)
    if chosen != DEFAULT_PROFILE and not target.is_dir():
        raise _not_found(chosen)
    environ["HERMES_HOME"] = str(target)


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return a copy of os.environ for a child process, with HERMES_HOME set explicitly."""
    env = dict(os.environ)
    # Children must not fall back to the default root when this process runs in a profile.
    env["HERMES_HOME"] = str(get_hermes_home())
    if extra:
        env.update(extra)
    return env
