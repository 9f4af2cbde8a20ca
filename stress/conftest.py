"""Stress variants of the reliability suites (not collected by the default `pytest -q` run).

Run: cd <repo> && PYTHONPATH=. pytest -p hermes_state.pytest_plugin stress -q -s
Set HERMES_RELIABILITY_SEED to replay a crash run.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The shared helpers live next to the CI suites in tests/.
TESTS_DIR = Path(__file__).resolve().parents[1] / "tests"
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))
