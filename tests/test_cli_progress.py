"""Progress on stderr when it is a terminal, with real totals and phases; nothing on pipes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from clitools import SAMPLE, child, load_sample, pty_child

SGR = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


@pytest.fixture
def sample(hermes_home: Path) -> Path:
    """The test profile's store, filled with examples/sample-sessions.jsonl."""
    return load_sample()


def shown(text: str) -> str:
    """Terminal output without cursor and colour sequences."""
    return SGR.sub("", text)


def test_export_to_a_file_shows_progress_against_the_session_count(
    sample: Path, tmp_path: Path
) -> None:
    result = pty_child("sessions", "export", "-o", str(tmp_path / "all.jsonl"))
    assert result.returncode == 0
    assert "Exporting sessions" in shown(result.output) and "12/12" in shown(result.output)


def test_import_shows_progress_against_the_records_in_the_file(hermes_home: Path) -> None:
    result = pty_child("sessions", "import", str(SAMPLE))
    assert result.returncode == 0
    assert "Importing sessions" in shown(result.output) and "12/12" in shown(result.output)


def test_prune_shows_its_phases(sample: Path) -> None:
    result = pty_child("sessions", "prune", "--older-than", "2026-11-25", "--yes")
    assert result.returncode == 0, result.output
    text = shown(result.output)
    assert "Finding sessions to prune" in text
    assert "Deleting sessions" in text and "7/7" in text
    assert "Reclaiming space" in text
    assert "0/?" not in text


@pytest.mark.parametrize(
    "args",
    [
        ("sessions", "export", "-o", "OUT"),
        ("sessions", "prune", "--older-than", "2026-11-25", "--yes"),
        ("db", "optimize"),
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_nothing_but_the_result_on_a_pipe(
    sample: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    proc = child(*[str(tmp_path / "out.jsonl") if a == "OUT" else a for a in args])
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stderr and "\r" not in proc.stderr
    assert "Exporting" not in proc.stderr and "Deleting" not in proc.stderr


def test_no_progress_on_a_dumb_terminal(sample: Path, tmp_path: Path) -> None:
    result = pty_child("sessions", "export", "-o", str(tmp_path / "a.jsonl"), env={"TERM": "dumb"})
    assert "Exporting sessions" not in result.output and "Exported 12 sessions" in result.output
