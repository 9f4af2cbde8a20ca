"""A session's ``model_config``: JSON the agent keeps per session (its route, and the markers
that say how a child session came to be: ``_delegate_from``, ``_branched_from``, ``_reset_from``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

DELEGATE_MARKER = "_delegate_from"
BRANCH_MARKER = "_branched_from"
RESET_MARKER = "_reset_from"
ORPHANED = "__orphaned__"  # the delegate marker of a run whose parent is unknown


def parse(raw: Any) -> dict[str, Any]:
    """Return the stored config as a dict (text that is not a JSON object reads as {})."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, (str, bytes)) and raw:
        try:
            value = json.loads(raw)
        except (ValueError, TypeError):
            return {}
        return dict(value) if isinstance(value, dict) else {}
    return {}


def dump(config: Mapping[str, Any]) -> str:
    """Return config as the compact JSON text the store holds."""
    return json.dumps(dict(config), ensure_ascii=False, separators=(",", ":"))


def marker_sql(alias: str, marker: str) -> str:
    """SQL reading one marker of ``<alias>.model_config`` (NULL when absent or not JSON)."""
    column = f"{alias}.model_config" if alias else "model_config"
    return (
        f"json_extract(CASE WHEN json_valid({column}) THEN {column} ELSE '{{}}' END, '$.{marker}')"
    )
