"""Reliability: hostile input is refused cleanly and leaves nothing behind (SPEC §2, §10, §12, §17).

Fuzzed search queries (library and CLI), hostile profile names, export targets that exist,
restore archives with unsafe members, and malformed JSONL imports.
"""

from __future__ import annotations

import hashlib
import json
import stat
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from reliability_helpers import (
    build_search_store,
    child_env,
    error_lines,
    file_digest,
    fuzz_search,
    queries,
    reliability_seed,
    run_cli,
    tree_listing,
)
from support.stores import populate_store
from typer.testing import CliRunner

from hermes_cli.main import build_app
from hermes_state.backups.backup import create_backup
from hermes_state.records import messages, session_list
from hermes_state.search.search import search_messages
from hermes_state.store.connection import Store, open_store

RUNNER = CliRunner()
APP = build_app()


def invoke(argv: list[str]) -> tuple[int, str, str]:
    """Run the CLI in-process; return (exit code, stdout, stderr); a raised error fails."""
    result = RUNNER.invoke(APP, argv)
    exc = result.exception
    assert exc is None or isinstance(exc, SystemExit), f"Traceback (raised): {exc!r}"
    return result.exit_code, result.stdout, result.stderr


def assert_one_line_refusal(code: int, stdout: str, stderr: str, codes: tuple[int, ...]) -> None:
    """Exit with one of codes, exactly one `Error:` line, no traceback."""
    assert "Traceback" not in stdout + stderr, stderr
    assert code in codes, (code, stdout, stderr)
    assert len(error_lines(stderr)) == 1, stderr


# --- search queries ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def search_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with words, punctuation, CJK and tool calls for the search fuzzers."""
    return build_search_store(tmp_path_factory.mktemp("search") / "state.db")


@pytest.fixture(scope="module")
def search_store(search_db: Path) -> Iterator[Store]:
    """A read-only handle on the fuzzers' store."""
    store = open_store(search_db, read_only=True)
    yield store
    store.close()


# The `slow` variants (`pytest -m slow`) draw many more inputs from a fresh (printed) seed.
LIBRARY_FUZZ = (300, pytest.param(5_000, marks=pytest.mark.slow))
CLI_FUZZ = (150, pytest.param(1_000, marks=pytest.mark.slow))


@pytest.mark.parametrize("examples", LIBRARY_FUZZ)
def test_search_messages_never_raises_for_any_query_text(
    search_db: Path, tmp_path: Path, examples: int
) -> None:
    # In a child: a crash inside SQLite would otherwise take the whole test run down.
    seed = reliability_seed() if examples > 300 else None
    outcome = fuzz_search("library", search_db, tmp_path, examples=examples, seed=seed)
    assert outcome.returncode == 0, outcome.describe()


@pytest.mark.parametrize("examples", CLI_FUZZ)
def test_cli_search_with_any_text_exits_0_or_a_clean_usage_error(
    search_db: Path, tmp_path: Path, examples: int
) -> None:
    seed = reliability_seed() if examples > 150 else None
    outcome = fuzz_search("cli", search_db.parent, tmp_path, examples=examples, seed=seed)
    assert outcome.returncode == 0, outcome.describe()


# These once crashed the process inside SQLite 3.40.1 (a trigram LIKE holding '_' ANDed with
# another LIKE, e.g. content LIKE '%ab_c%' AND content LIKE '%deploy%'): run in a child.
@pytest.mark.parametrize("query", ["ab_c deploy", "b_d tool", "a_b_c model"])
def test_search_for_a_wildcard_term_next_to_another_term_does_not_crash_the_process(
    search_db: Path, query: str
) -> None:
    code = (
        "import sys; from pathlib import Path;"
        " from hermes_state.store.connection import open_store;"
        " from hermes_state.search.search import search_messages;"
        " s = open_store(Path(sys.argv[1]), read_only=True);"
        " print(len(search_messages(s, sys.argv[2], limit=5)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(search_db), query],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=queries())
def test_search_messages_never_raises_for_any_filter_text(search_store: Store, text: str) -> None:
    # The query is a plain word (the word index), so only the filters meet the hostile text.
    search_messages(search_store, "deploy", source_filter=[text])
    search_messages(search_store, "deploy", exclude_sources=[text], role_filter=text)


@pytest.fixture(scope="module")
def cli_search_home(search_db: Path) -> Path:
    """The home of the fuzzers' store."""
    return search_db.parent


def test_cli_search_with_an_undecodable_argv_byte_exits_0(cli_search_home: Path) -> None:
    # A real process gets b"\xff" as the lone surrogate "\udcff" (surrogateescape).
    proc = run_cli(["sessions", "search", "a\udcffb"], home=cli_search_home)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr


def test_cli_search_json_with_an_undecodable_argv_byte_under_a_strict_utf8_stdout(
    cli_search_home: Path,
) -> None:
    proc = run_cli(
        ["sessions", "search", "\udcff", "--json"],
        home=cli_search_home,
        extra_env={"PYTHONIOENCODING": "utf-8:strict"},
    )
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr


UNDECODABLE_ARGS = {
    "search-source": ["sessions", "search", "deploy", "--source", "\udcff"],
    "list-source": ["sessions", "list", "--source", "\udcff"],
    "show-id": ["sessions", "show", "\udcff"],
    "export-session-id": ["sessions", "export", "--session-id", "\udcff"],
}


@pytest.mark.parametrize("argv", list(UNDECODABLE_ARGS.values()), ids=list(UNDECODABLE_ARGS))
def test_cli_with_an_undecodable_argv_byte_in_a_filter_or_id_fails_without_traceback(
    cli_search_home: Path, argv: list[str]
) -> None:
    proc = run_cli(argv, home=cli_search_home)
    assert "Traceback" not in proc.stderr
    # A --source value that is not text is a bad option value (2); an id matches nothing (1).
    assert proc.returncode in (0, 1, 2), proc.stderr


# --- profile names ----------------------------------------------------------------------------

HOSTILE_PROFILES = ["../x", "a b", "café", "../../etc", "x/y", ".", "..", "UPPER", "hermes", ""]


@pytest.mark.parametrize("name", HOSTILE_PROFILES)
def test_hostile_profile_name_is_refused_with_one_error_and_creates_nothing(
    name: str, hermes_home: Path
) -> None:
    outside = hermes_home.parent
    before = tree_listing(outside)
    proc = run_cli(["-p", name, "sessions", "list"], home=hermes_home)
    assert_one_line_refusal(proc.returncode, proc.stdout, proc.stderr, (1, 2))
    assert tree_listing(outside) == before


@pytest.mark.parametrize("name", ["../x", "a b", "café", "x/../y"])
def test_hostile_long_form_profile_flag_is_refused_and_creates_nothing(
    name: str, hermes_home: Path
) -> None:
    before = tree_listing(hermes_home.parent)
    proc = run_cli([f"--profile={name}", "db", "path"], home=hermes_home)
    assert_one_line_refusal(proc.returncode, proc.stdout, proc.stderr, (1, 2))
    assert tree_listing(hermes_home.parent) == before


@pytest.mark.parametrize("name", ["../x", "a b", "café", "/tmp/abs", "x/y"])
def test_profile_create_refuses_a_hostile_name_and_creates_no_directory(
    name: str, hermes_home: Path
) -> None:
    before = tree_listing(hermes_home.parent)
    code, out, err = invoke(["profile", "create", name])
    assert_one_line_refusal(code, out, err, (1, 2))
    assert tree_listing(hermes_home.parent) == before


# --- export targets ---------------------------------------------------------------------------


@pytest.fixture
def export_home(hermes_home: Path) -> Path:
    """A store with two sessions to export, and a directory next to it to export into."""
    populate_store(hermes_home / "state.db", sessions_n=2, messages_per_session=5)
    (hermes_home.parent / "out").mkdir()
    return hermes_home


def test_export_into_an_existing_file_is_refused_and_the_file_is_untouched(
    export_home: Path,
) -> None:
    target = export_home.parent / "out" / "existing.jsonl"
    target.write_text("precious\n")
    before = tree_listing(export_home.parent)
    code, out, err = invoke(["sessions", "export", "-o", str(target)])
    assert_one_line_refusal(code, out, err, (1,))
    assert target.read_text() == "precious\n"
    assert tree_listing(export_home.parent) == before


def test_export_onto_an_existing_directory_is_refused_and_writes_nothing_in_it(
    export_home: Path,
) -> None:
    target = export_home.parent / "out"
    before = tree_listing(export_home.parent)
    code, out, err = invoke(["sessions", "export", "-o", str(target)])
    assert_one_line_refusal(code, out, err, (1,))
    assert tree_listing(export_home.parent) == before


def test_export_through_a_symlink_to_a_file_is_refused_and_the_file_is_untouched(
    export_home: Path,
) -> None:
    real = export_home.parent / "out" / "real.txt"
    real.write_text("keep me\n")
    link = export_home.parent / "out" / "link.jsonl"
    link.symlink_to(real)
    before = tree_listing(export_home.parent)
    code, out, err = invoke(["sessions", "export", "-o", str(link)])
    assert_one_line_refusal(code, out, err, (1,))
    assert real.read_text() == "keep me\n"
    assert tree_listing(export_home.parent) == before


@pytest.mark.parametrize("fmt", ["jsonl", "json", "md"])
def test_export_below_a_file_or_missing_directory_is_refused_and_creates_nothing(
    export_home: Path, fmt: str
) -> None:
    blocker = export_home.parent / "out" / "plain-file"
    blocker.write_text("x")
    before = tree_listing(export_home.parent)
    for target in (blocker / "export.jsonl", export_home.parent / "missing" / "export.jsonl"):
        code, out, err = invoke(["sessions", "export", "--format", fmt, "-o", str(target)])
        assert_one_line_refusal(code, out, err, (1,))
    assert tree_listing(export_home.parent) == before


# --- restore archives -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A genuine backup archive of a small home."""
    base = tmp_path_factory.mktemp("backup")
    home = base / "home"
    home.mkdir()
    populate_store(home / "state.db", sessions_n=2, messages_per_session=5)
    (home / "config.yaml").write_text("model: test\n")
    return create_backup(home, base / "good.zip", keep=None).archive


def rebuild_archive(
    good: Path,
    dest: Path,
    name: str,
    data: bytes,
    *,
    mode: int = stat.S_IFREG | 0o600,
    declared_size: int | None = None,
    compress: int = zipfile.ZIP_DEFLATED,
) -> Path:
    """Copy a genuine archive, add one member and list it in the manifest (as an attacker would)."""
    with zipfile.ZipFile(good) as src:
        manifest = json.loads(src.read("manifest.json"))
        members = [(i, src.read(i)) for i in src.infolist() if i.filename != "manifest.json"]
    manifest["members"][name] = {
        "size": declared_size if declared_size is not None else len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "kind": "file",
    }
    with zipfile.ZipFile(dest, "w", allowZip64=True) as out:
        for info, body in members:
            out.writestr(info, body)
        hostile = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
        hostile.external_attr = mode << 16
        hostile.compress_type = compress
        out.writestr(hostile, data)
        if declared_size is not None:
            # The central directory (what readers trust) is written at close from this object.
            out.getinfo(name).file_size = declared_size
        out.writestr("manifest.json", json.dumps(manifest))
    return dest


@pytest.fixture
def restore_home(hermes_home: Path) -> Path:
    """A home with a store a hostile restore must leave untouched."""
    populate_store(hermes_home / "state.db", sessions_n=3, messages_per_session=4, seed=9)
    return hermes_home


HOSTILE_MEMBERS: dict[str, dict] = {
    "zip-slip": {"name": "../evil.txt", "data": b"owned\n"},
    "deep-zip-slip": {"name": "profiles/../../evil.txt", "data": b"owned\n"},
    "absolute": {"name": "/tmp/hermes-evil.txt", "data": b"owned\n"},
    "symlink": {"name": "link", "data": b"/etc/passwd", "mode": stat.S_IFLNK | 0o777},
    "huge-declared": {"name": "big.bin", "data": b"\0" * 4096, "declared_size": 2**40},
    "backslash": {"name": "..\\evil.txt", "data": b"owned\n"},
    "device": {"name": "dev", "data": b"", "mode": stat.S_IFCHR | 0o600},
}


@pytest.mark.parametrize("kind", list(HOSTILE_MEMBERS))
def test_restore_refuses_an_archive_with_a_hostile_member_and_writes_nothing(
    kind: str, restore_home: Path, good_archive: Path, tmp_path: Path
) -> None:
    spec = HOSTILE_MEMBERS[kind]
    archive = rebuild_archive(
        good_archive,
        tmp_path / f"{kind}.zip",
        spec["name"],
        spec["data"],
        mode=spec.get("mode", stat.S_IFREG | 0o600),
        declared_size=spec.get("declared_size"),
    )
    db_before = file_digest(restore_home / "state.db")
    before = tree_listing(tmp_path)
    code, out, err = invoke(["restore", str(archive), "--yes"])
    assert_one_line_refusal(code, out, err, (1,))
    assert tree_listing(tmp_path) == before
    assert file_digest(restore_home / "state.db") == db_before
    assert not Path("/tmp/hermes-evil.txt").exists()


def test_restore_refuses_a_member_that_inflates_past_its_declared_size_and_writes_nothing(
    restore_home: Path, good_archive: Path, tmp_path: Path
) -> None:
    # A small compressed member that really holds 8 MiB of zeros but claims 1 KiB.
    archive = rebuild_archive(
        good_archive, tmp_path / "bomb.zip", "notes.txt", b"\0" * (8 << 20), declared_size=1024
    )
    db_before = file_digest(restore_home / "state.db")
    before = tree_listing(tmp_path)
    code, out, err = invoke(["restore", str(archive), "--yes"])
    assert_one_line_refusal(code, out, err, (1,))
    assert tree_listing(tmp_path) == before
    assert file_digest(restore_home / "state.db") == db_before


def test_restore_refuses_a_file_that_is_not_a_zip_and_writes_nothing(
    restore_home: Path, tmp_path: Path
) -> None:
    archive = tmp_path / "not-a-zip.zip"
    archive.write_bytes(b"PK\x03\x04 definitely not a zip")
    before = tree_listing(tmp_path)
    code, out, err = invoke(["restore", str(archive), "--yes"])
    assert_one_line_refusal(code, out, err, (1,))
    assert tree_listing(tmp_path) == before


# --- JSONL imports ----------------------------------------------------------------------------


def record(sid: object, messages_value: object = None, **extra: object) -> str:
    """One export line (a session with messages) as JSON text."""
    rec = {"id": sid, "source": "cli", "started_at": 1_700_000_000.0, **extra}
    rec["messages"] = (
        messages_value
        if messages_value is not None
        else [{"role": "user", "content": f"hello from {sid}", "timestamp": 1_700_000_001.0}]
    )
    return json.dumps(rec)


@pytest.fixture
def import_file(tmp_path: Path) -> Callable[[list[str]], Path]:
    """Write lines to an import file; return its path."""

    def write(lines: list[str]) -> Path:
        path = tmp_path / "import.jsonl"
        path.write_text("\n".join(lines) + "\n")
        return path

    return write


def stored(hermes_home: Path) -> dict[str, list[str]]:
    """Return each stored session's message contents (read-only)."""
    with open_store(hermes_home / "state.db", read_only=True) as store:
        ids = [r["id"] for r in session_list.list_sessions(store, limit=1000)]
        return {sid: [m["content"] for m in messages.get_messages(store, sid)] for sid in ids}


IMPORT_CASES = {
    "malformed-json": ('{"id": "bad", "source": "cli", "started_at": 1, "messages": [', None),
    "id-as-int": (record(5), None),
    "messages-as-string": (record("bad", "hello"), "bad"),
    "message-role-as-int": (
        record("bad", [{"role": "user", "content": "ok"}, {"role": 7, "content": "x"}]),
        "bad",
    ),
    "timestamp-as-string": (
        record("bad", [{"role": "user", "content": "ok", "timestamp": "yesterday"}]),
        "bad",
    ),
    "record-is-a-list": ('["bad"]', None),
}


@pytest.mark.parametrize("case", list(IMPORT_CASES))
def test_import_reports_a_bad_line_by_number_and_writes_nothing_of_that_session(
    case: str, hermes_home: Path, import_file: Callable[[list[str]], Path]
) -> None:
    bad_line, bad_id = IMPORT_CASES[case]
    path = import_file([record("good-1"), bad_line, record("good-2")])
    code, out, err = invoke(["sessions", "import", str(path)])
    assert "Traceback" not in out + err
    assert code == 1, (out, err)
    errors = error_lines(err)
    assert len(errors) == 1 and errors[0].startswith("Error: line 2"), err
    got = stored(hermes_home)
    assert sorted(got) == ["good-1", "good-2"]
    assert bad_id is None or bad_id not in got


@pytest.mark.parametrize("conflict", ["skip", "replace"])
def test_import_reports_a_duplicate_session_id_in_one_file_by_line_number(
    conflict: str, hermes_home: Path, import_file: Callable[[list[str]], Path]
) -> None:
    first = record("dup", [{"role": "user", "content": "first copy", "timestamp": 1.0}])
    second = record("dup", [{"role": "user", "content": "second copy", "timestamp": 2.0}])
    path = import_file([first, record("other"), second])
    code, out, err = invoke(["sessions", "import", str(path), "--on-conflict", conflict])
    assert "Traceback" not in out + err
    assert stored(hermes_home)["dup"] == ["first copy"]
    assert code == 1, (out, err)
    assert any(line.startswith("Error: line 3") for line in error_lines(err)), err


def test_import_of_a_duplicate_session_id_never_mixes_the_two_records(
    hermes_home: Path, import_file: Callable[[list[str]], Path]
) -> None:
    first = record("dup", [{"role": "user", "content": "first copy", "timestamp": 1.0}])
    second = record("dup", [{"role": "user", "content": "second copy", "timestamp": 2.0}] * 2)
    path = import_file([first, second])
    _, out, err = invoke(["sessions", "import", str(path)])
    assert "Traceback" not in out + err
    assert stored(hermes_home)["dup"] in (["first copy"], ["second copy", "second copy"])


def test_import_of_a_non_utf8_file_is_refused_and_creates_no_session(
    hermes_home: Path, tmp_path: Path
) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(record("x").encode() + b"\n\xff\xfe garbage\n")
    code, out, err = invoke(["sessions", "import", str(path)])
    assert "Traceback" not in out + err
    assert code == 1, (out, err)
    assert error_lines(err), err
    assert not (hermes_home / "state.db").exists() or stored(hermes_home) == {}
