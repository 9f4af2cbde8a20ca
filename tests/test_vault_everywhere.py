"""No command forgets the vault (issue 33, item 8): every command of the app is classified here
by what it does with a profile's vaulted sessions, and each class is checked through the real
process. A new command fails the first test until someone decides its class."""

from __future__ import annotations

import json
import time

import pytest
from clitools import child
from test_vault import home, make_session

from hermes_cli import docs
from hermes_cli.completion import command_docs
from hermes_state.store.connection import open_store
from hermes_state.store.home import default_db_path
from hermes_state.vault import vault_move

# Reads of conversations that include the vault: their output names the vaulted session.
SPANS = {
    "sessions search": ("sessions", "search", "wombat", "--json"),
    "sessions show": ("sessions", "show", "vaulted_one", "--json"),
    "sessions export": ("sessions", "export", "--format", "jsonl"),
    "sessions stats": ("sessions", "stats", "--json"),
    "usage": ("usage", "--by", "session", "--json"),
    "vault list": ("vault", "list", "--json"),
    "vault check": ("vault", "check", "--json"),
}
# Reads that leave the vault out by default, and say so.
SAYS = {"sessions list": ("sessions", "list", "--no-pager")}
# Edits of a session: a vaulted one is refused, with the way back.
REFUSES = {
    "sessions delete": ("sessions", "delete", "vaulted_one", "--yes"),
    "sessions rename": ("sessions", "rename", "vaulted_one", "New title"),
    "sessions pin": ("sessions", "pin", "vaulted_one"),
    "sessions unpin": ("sessions", "unpin", "vaulted_one"),
    "sessions archive": ("sessions", "archive", "vaulted_one"),
    "sessions unarchive": ("sessions", "unarchive", "vaulted_one"),
    "sessions resume-command": ("sessions", "resume-command", "vaulted_one"),
}
# Covered by tests of their own: the full-screen browser and the MCP server (test_browse_vault,
# test_mcp_vault), the vault's move and return (test_vault*), backup and restore
# (test_vault_backup), import of a vaulted id (test_portability), prune (live store only: a
# vaulted session is never pruned), recover (one store file at a time, --from names it),
# replicate (the vault stores as snapshots beside the live one: test_replica).
OWN_TESTS = {
    "replicate",
    "sessions browse",
    "mcp",
    "vault move",
    "vault return",
    "restore",
    "backup list",
    "sessions import",
    "sessions prune",
    "sessions recover",
}
# Not about conversations: the store file, profiles, shell completions, live activity.
NOT_CONVERSATIONS = {
    "watch",
    "db path",
    "db lockowners",
    "db check",
    "db optimize",
    "db migrate",
    "db cjk-index",
    "profile list",
    "profile show",
    "profile use",
    "profile create",
    "profile delete",
    "completion show",
    "completion install",
}


def test_every_command_is_classified_by_what_it_does_with_the_vault() -> None:
    commands = {
        c.key for c in command_docs.all_commands(docs.app_doc()) if c.path and not c.children
    }
    classified = {*SPANS, *SAYS, *REFUSES, *OWN_TESTS, *NOT_CONVERSATIONS}
    assert commands - classified == set(), "classify the new command(s) in this file"
    assert classified - commands == set(), "a classified command no longer exists"


def _vault_one() -> None:
    """Give the test profile one vaulted session (with usage) and one live one."""
    store = open_store(default_db_path())
    try:
        make_session(store, "vaulted_one", text="wombat burrow")
        store.write(
            lambda c: c.execute(
                "UPDATE sessions SET input_tokens = 500, model = 'm/x' WHERE id = 'vaulted_one'"
            )
        )
        make_session(store, "live_one", time.time())
        vault_move.move_sessions(store, home(), 90)
    finally:
        store.close()


@pytest.mark.parametrize("name", sorted(SPANS))
def test_reads_of_conversations_include_the_vault(name: str) -> None:
    _vault_one()
    done = child(*SPANS[name])
    assert done.returncode == 0, done.stderr
    if name == "sessions stats":
        assert json.loads(done.stdout)["vault"]["sessions"] == 1
    elif name == "vault check":
        assert json.loads(done.stdout)["stores"][0]["sessions"] == 1
    elif name == "vault list":
        assert json.loads(done.stdout)["stores"][0]["session_count"] == 1
    else:
        assert "vaulted_one" in done.stdout, name


@pytest.mark.parametrize("name", sorted({**SAYS, **REFUSES}))
def test_other_commands_say_what_they_do_with_the_vault(name: str) -> None:
    _vault_one()
    argv = {**SAYS, **REFUSES}[name]
    done = child(*argv)
    if name in SAYS:
        assert done.returncode == 0, done.stderr
        assert "vaulted session" in done.stdout and "--vault" in done.stdout
    else:
        assert done.returncode != 0, name
        assert "hermes vault return vaulted_one" in done.stderr, done.stderr
