"""A maintained secret scanner (detect-secrets, from PyPI) as an oracle beside our own corpus:
every value it finds in the planted corpus (tests/support/secret_corpus.py) is one redaction
hides. Its rules are its own; ours are written from the providers' key formats, so this checks
ours against an independent reading of the same text. Where it flags a look-alike we keep on
purpose (a sha256, code, prose), the case is named here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.secret_corpus import Case, look_alike_cases, secret_cases

from hermes_state.reports import redact

detect_secrets = pytest.importorskip(
    "detect_secrets", reason="detect-secrets: pip install '.[test]'"
)

# Look-alikes the scanner flags and redaction keeps, on purpose: a sha256 digest (hex entropy),
# `password_hint: the dog`, `self.password = password`, `password: SecretStr` (keywords).
KEPT_ON_PURPOSE = {"look002", "look011", "look012", "look014"}


def scanner_finds(cases: list[Case], where: Path) -> dict[str, list[str]]:
    """Return, per case, the secret values detect-secrets finds in its text (default plugins
    and filters, each case in a file of its own)."""
    from detect_secrets import SecretsCollection
    from detect_secrets.settings import default_settings

    found: dict[str, list[str]] = {}
    with default_settings():
        collection = SecretsCollection()
        for case in cases:
            path = where / f"{case.name}.txt"
            path.write_text(case.text, encoding="utf-8")
            collection.scan_file(str(path))
        for filename, secret in collection:
            if secret.secret_value:
                found.setdefault(Path(filename).stem, []).append(secret.secret_value)
    return found


def shown(case: Case) -> str:
    """Return a case's text as `sessions show --redact` shows it (JSON documents by key)."""
    if case.text.startswith("{"):
        return json.dumps(redact.redact_value(json.loads(case.text)), ensure_ascii=False)
    return redact.redact(case.text)


def test_every_secret_the_scanner_finds_is_redacted(tmp_path: Path) -> None:
    secrets = secret_cases()
    found = scanner_finds(secrets, tmp_path)
    assert len(found) >= len(secrets) // 3  # the oracle works at all
    shown_values = [
        (c.name, value) for c in secrets for value in found.get(c.name, []) if value in shown(c)
    ]
    assert shown_values == []


def test_the_scanner_flags_only_the_look_alikes_we_keep_on_purpose(tmp_path: Path) -> None:
    looks = look_alike_cases()
    found = scanner_finds(looks, tmp_path)
    assert set(found) == KEPT_ON_PURPOSE
    assert all(c.keep in shown(c) for c in looks)
