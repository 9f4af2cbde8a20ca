"""Fixtures of the interop suite: each release's virtualenv, a store it built, its baseline."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interop.harness import copy_store, exercise
from interop.releases import RELEASES, Release, ReleaseUnavailable, python_for, run_probe


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of this directory `interop` (run with: pytest -m interop)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.interop)


@pytest.fixture(scope="session", params=RELEASES, ids=[r.key for r in RELEASES])
def release(request: pytest.FixtureRequest) -> Release:
    """Each field release in turn (skipped, with pip's reason, when it cannot be installed)."""
    rel: Release = request.param
    try:
        python_for(rel)
    except ReleaseUnavailable as exc:
        pytest.skip(str(exc))
    return rel


@pytest.fixture(scope="session")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per release, a home whose store that release built (made once per session)."""
    return {}


@pytest.fixture
def built(
    release: Release,
    templates: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
) -> Path:
    """A fresh copy of a store the release built; returns its home."""
    if release.key not in templates:
        base = tmp_path_factory.mktemp(f"template-{release.key}")
        home = base / "home"
        home.mkdir()
        run_probe(release, "build", home)
        templates[release.key] = home
    home = tmp_path / f"{release.key}-home"
    copy_store(templates[release.key], home)
    return home


@pytest.fixture(scope="session")
def baselines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Per release, what it can do with its own untouched store (filled on first use)."""
    return {}


@pytest.fixture
def baseline(
    release: Release, built: Path, baselines: dict[str, dict[str, Any]], tmp_path: Path
) -> dict[str, Any]:
    """The release's exercise of an untouched copy of its store."""
    if release.key not in baselines:
        home = tmp_path / "baseline-home"
        copy_store(built, home)
        baselines[release.key] = exercise(release, home, "base")
    return baselines[release.key]


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory for a test's extra homes and files."""
    path = tmp_path / "scratch"
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)
