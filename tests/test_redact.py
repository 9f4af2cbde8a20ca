"""Redaction (hermes_state.reports.redact): real secret shapes become [REDACTED:kind]; look-alikes
the
store is full of (hashes, git SHAs, uuids, message uids, base64 images, session ids) survive.

Every secret here is made up, and each is assembled at run time from a prefix and seeded random
characters, so this file holds no string a secret scanner would take for a live credential.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import string
import uuid

import pytest
from hypothesis import given, settings, strategies as st

from hermes_state.records.messages import new_uid
from hermes_state.reports import redact as lib

ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"


def rand(n: int, alphabet: str = ALNUM, seed: int = 0) -> str:
    """Return n seeded random characters of alphabet (with a digit, as real keys have)."""
    rng = random.Random(f"{seed}-{n}-{alphabet}")
    body = [rng.choice(alphabet) for _ in range(n)]
    body[n // 2] = str(rng.randrange(10))
    return "".join(body)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def made_jwt() -> str:
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64url(json.dumps({"sub": "1234567890", "name": "Ana", "iat": 1516239022}).encode())
    return f"{head}.{body}.{b64url(hashlib.sha256(b'made-up').digest())}"


def made_pem(label: str) -> str:
    lines = [rand(64, ALNUM + "+/", seed=i) for i in range(5)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----"


# (kind, the secret) — each shape as the provider issues it.
SECRETS = [
    ("openai_key", "sk-" + rand(48)),
    ("openai_key", "sk-proj-" + rand(156, URLSAFE)),
    ("openai_key", "sk-svcacct-" + rand(64, URLSAFE)),
    ("anthropic_key", "sk-ant-api03-" + rand(93, URLSAFE) + "AA"),
    ("anthropic_key", "sk-ant-admin01-" + rand(80, URLSAFE)),
    ("openrouter_key", "sk-or-v1-" + rand(64, "0123456789abcdef")),
    ("google_api_key", "AIza" + rand(35, URLSAFE)),
    ("github_token", "ghp_" + rand(36)),
    ("github_token", "gho_" + rand(36)),
    ("github_token", "github_pat_" + rand(22) + "_" + rand(59)),
    ("gitlab_token", "glpat-" + rand(20, URLSAFE)),
    (
        "slack_token",
        "xoxb-" + rand(12, string.digits) + "-" + rand(13, string.digits) + "-" + rand(24),
    ),
    ("slack_token", "xoxp-" + rand(12, string.digits) + "-" + rand(32, "0123456789abcdef")),
    ("aws_access_key_id", "AKIA" + rand(16, string.ascii_uppercase + string.digits)),
    ("aws_access_key_id", "ASIA" + rand(16, string.ascii_uppercase + string.digits)),
    ("stripe_key", "sk_" + "live_" + rand(24)),
    ("stripe_key", "rk_" + "live_" + rand(24)),
    ("stripe_key", "whsec_" + rand(32)),
    ("huggingface_token", "hf_" + rand(34)),
    ("npm_token", "npm_" + rand(36)),
    ("groq_key", "gsk_" + rand(52)),
    ("xai_key", "xai-" + rand(80)),
    ("sendgrid_key", "SG." + rand(22, URLSAFE) + "." + rand(43, URLSAFE)),
    ("telegram_bot_token", rand(10, string.digits) + ":AA" + rand(33, URLSAFE)),
    ("jwt", made_jwt()),
    ("private_key", made_pem("RSA PRIVATE KEY")),
    ("private_key", made_pem("OPENSSH PRIVATE KEY")),
    ("private_key", made_pem("EC PRIVATE KEY")),
    ("private_key", made_pem("PRIVATE KEY")),
    ("private_key", made_pem("PGP PRIVATE KEY BLOCK")),
]

# (text, the secret in it, the kind it is redacted as): secrets that depend on what is around.
IN_CONTEXT = [
    ("Authorization: Bearer " + (tok := rand(40, URLSAFE + ".")), tok, "bearer_token"),
    ("curl -H 'authorization: bearer " + (tok2 := rand(32)) + "'", tok2, "bearer_token"),
    (
        "Authorization: Basic " + (basic := base64.b64encode(b"ana:hunter22").decode()),
        basic,
        "basic_auth",
    ),
    (
        "postgres://ana:" + (pw := "S3cr3t-" + rand(8)) + "@db.internal:5432/shop",
        pw,
        "url_password",
    ),
    ("redis://:" + (pw2 := rand(16)) + "@cache:6379/0", pw2, "url_password"),
    ("password=" + (pw3 := "hunter2" + rand(4)) + "&user=ana", pw3, "password"),
    ("mysql --password=" + (pw4 := rand(12)) + " -u root", pw4, "password"),
    ('DB_PASSWORD="' + (pw5 := "correct horse battery") + '"', pw5, "password"),
    ("client_secret = '" + (sec := rand(30)) + "'", sec, "secret"),
    ("export GITHUB_TOKEN=" + (tok3 := rand(40)), tok3, "token"),
    ("https://api.example.com/v1?token=" + (tok4 := rand(24)) + "&page=2", tok4, "token"),
    ('{"api_key": "' + (key := rand(32)) + '", "model": "x"}', key, "api_key"),
    ("config:\n  password: " + (pw6 := "p4ss-" + rand(6)) + "\n  user: ana\n", pw6, "password"),
    ("aws_secret_access_key = " + (aws := rand(40, ALNUM + "+/")), aws, "api_key"),
]

# Text that looks like a secret to a careless rule and must come out unchanged.
LOOK_ALIKES = [
    hashlib.sha256(b"x").hexdigest(),
    "sha256:" + hashlib.sha256(b"layer").hexdigest(),
    "commit " + hashlib.sha1(b"c").hexdigest(),
    "git checkout 9fceb02",
    str(uuid.UUID(int=0x1234567890ABCDEF1234567890ABCDEF)),
    new_uid(),
    "message_uid 1d5d1f0d72705c9fb8edec0fc7788816",
    "data:image/png;base64," + base64.b64encode(random.Random(1).randbytes(3000)).decode(),
    base64.b64encode(random.Random(2).randbytes(600)).decode(),
    "session 20261118_091502_a1c9e2 and cron_20261118_0300",
    "hermes sessions show 20261118_091502_a1c9e2",
    "max_tokens=4096 and token_count: 12 and tokens=90",
    "tokenizer=cl100k_base",
    'api_key=os.environ["OPENAI_API_KEY"]',
    "password=getpass.getpass()",
    "token=self.token",
    "password=password",
    "api_key = settings.api_key",
    "export OPENAI_API_KEY=$OPENAI_API_KEY",
    "password: ${DB_PASSWORD}",
    "api_key=<your key here>",
    "token: str = None",
    "if token == expected:",
    "The password is in the vault; ask Ana for the token.",
    "Bearer authentication is configured in nginx.",
    "https://example.com:8443/path?q=1",
    "ana@example.com wrote: see https://docs.example.com/a/b",
    "risk-assessment-framework-2024-final-version",
    "sk-... (your OpenAI key)",
    "AKIA is the prefix of AWS access key ids",
    "PWD=/home/ana/src/shop-api",
    "-----BEGIN CERTIFICATE-----\nMIIB" + rand(60) + "\n-----END CERTIFICATE-----",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + rand(43) + " ana@laptop",
    "RUN pip install --require-hashes -r requirements.txt",
    "会議のパスワードは後で送ります",
]


@pytest.mark.parametrize(
    ("kind", "secret"), SECRETS, ids=[f"{k}-{i}" for i, (k, _) in enumerate(SECRETS)]
)
def test_every_secret_shape_is_redacted_with_its_kind(kind: str, secret: str) -> None:
    text = f"here it is: {secret} (keep it safe)"
    assert lib.redact(text) == f"here it is: [REDACTED:{kind}] (keep it safe)"


@pytest.mark.parametrize(("text", "secret", "kind"), IN_CONTEXT, ids=[k for *_, k in IN_CONTEXT])
def test_secrets_named_by_their_context_are_redacted(text: str, secret: str, kind: str) -> None:
    out = lib.redact(text)
    assert secret not in out
    assert out == text.replace(secret, f"[REDACTED:{kind}]")


@pytest.mark.parametrize("text", LOOK_ALIKES, ids=range(len(LOOK_ALIKES)))
def test_look_alikes_survive_unchanged(text: str) -> None:
    assert lib.redact(text) == text


@pytest.mark.parametrize("text", LOOK_ALIKES, ids=range(len(LOOK_ALIKES)))
def test_look_alikes_survive_as_whole_fragments(text: str) -> None:
    assert lib.redact_fragment(text) == text


def test_a_provider_key_assigned_to_a_name_is_named_by_its_provider() -> None:
    key = "sk-proj-" + rand(100, URLSAFE)
    assert lib.redact(f"OPENAI_API_KEY={key}") == "OPENAI_API_KEY=[REDACTED:openai_key]"


def test_a_bearer_jwt_is_named_a_jwt() -> None:
    assert (
        lib.redact(f"Authorization: Bearer {made_jwt()}") == "Authorization: Bearer [REDACTED:jwt]"
    )


def test_a_private_key_cut_before_its_end_is_redacted_to_the_end() -> None:
    pem = made_pem("RSA PRIVATE KEY")
    assert lib.redact("key: " + pem[:200]) == "key: [REDACTED:private_key]"


def test_a_key_inside_a_longer_word_is_not_a_key() -> None:
    text = "tasks-" + rand(40)
    assert lib.redact(text) == text


def test_redacting_twice_changes_nothing_more() -> None:
    text = " ".join(s for _, s in SECRETS) + " " + " ".join(t for t, *_ in IN_CONTEXT)
    once = lib.redact(text)
    assert lib.redact(once) == once


def test_several_secrets_in_one_text_are_each_redacted() -> None:
    a, b = SECRETS[0][1], SECRETS[7][1]
    assert lib.redact(f"{a}\n{b}") == "[REDACTED:openai_key]\n[REDACTED:github_token]"


# --- fragments --------------------------------------------------------------------------------


def test_a_fragment_cut_inside_a_key_hides_the_keys_tail() -> None:
    key = "sk-proj-" + rand(60, URLSAFE)
    piece = key[20:] + " was the key"
    assert lib.redact_fragment(piece, cut_start=True) == "[REDACTED:partial] was the key"


def test_a_fragment_cut_inside_a_key_hides_the_keys_start() -> None:
    piece = "the key is " + ("ghp_" + rand(36))[:9]
    assert lib.redact_fragment(piece, cut_end=True) == "the key is [REDACTED:partial]"


def test_a_fragment_cut_inside_an_assignment_hides_the_value() -> None:
    piece = "run it with password=hu"
    assert lib.redact_fragment(piece, cut_end=True) == "run it with password=[REDACTED:password]"


def test_a_fragment_cut_inside_a_url_password_hides_it() -> None:
    piece = "connect to postgres://ana:S3cr"
    out = lib.redact_fragment(piece, cut_end=True)
    assert out == "connect to postgres://[REDACTED:partial]"


def test_a_fragment_starting_with_a_private_keys_tail_hides_it() -> None:
    pem = made_pem("PRIVATE KEY")
    piece = pem[60:] + "\nthat was the key"
    assert lib.redact_fragment(piece, cut_start=True) == "[REDACTED:partial]\nthat was the key"


@pytest.mark.parametrize(
    "piece",
    [
        hashlib.sha256(b"y").hexdigest()[5:] + " is the digest",
        "e95dc970b74767f19372d61af8 is the commit",
        "ef-1234-567890abcdef is a uuid tail",
        "091502_a1c9e2 is a session",
    ],
)
def test_a_fragment_starting_with_a_hash_tail_keeps_it(piece: str) -> None:
    assert lib.redact_fragment(piece, cut_start=True, cut_end=True) == piece


def test_a_fragment_ending_in_a_hash_keeps_it() -> None:
    piece = "the digest is " + hashlib.sha256(b"z").hexdigest()[:30]
    assert lib.redact_fragment(piece, cut_end=True) == piece


def test_a_snippet_mark_inside_a_key_does_not_hide_it_from_redaction() -> None:
    key = "sk-proj-" + rand(60, URLSAFE)
    snippet = f"use >>>sk<<<-proj-{key[8:]} now"
    assert lib.redact_snippet(snippet) == "use >>>[REDACTED:openai_key]<<< now"


def test_a_snippet_keeps_its_marks_and_ellipses_around_a_redaction() -> None:
    key = "ghp_" + rand(36)
    snippet = f"...the >>>deploy<<< failed; token {key} expired..."
    assert lib.redact_snippet(snippet) == (
        "...the >>>deploy<<< failed; token [REDACTED:github_token] expired..."
    )


def test_a_snippet_cut_inside_a_key_hides_both_remains() -> None:
    key = "sk-proj-" + rand(60, URLSAFE)
    snippet = f"...{key[30:]} is >>>mine<<<, and sk-pr..."
    assert (
        lib.redact_snippet(snippet)
        == "...[REDACTED:partial] is >>>mine<<<, and [REDACTED:partial]..."
    )


def test_a_snippet_without_secrets_is_returned_as_it_is() -> None:
    snippet = "...the >>>docker<<< build failed at step 3 of 9..."
    assert lib.redact_snippet(snippet) == snippet


def test_a_prefix_never_ends_in_half_a_placeholder() -> None:
    text = "x" * 10 + " " + SECRETS[0][1] + " tail"
    assert lib.redact_prefix(text, 20) == "x" * 10 + " [REDACTED:openai_key]"


def test_a_prefix_cut_inside_a_key_redacts_the_key_whole() -> None:
    key = SECRETS[1][1]
    text = "y" * 100 + " " + key
    out = lib.redact_prefix(text, 130)
    assert key[:12] not in out and out.endswith("[REDACTED:openai_key]")


def test_a_short_text_prefix_is_the_redacted_text() -> None:
    assert lib.redact_prefix("password=abc123", 100) == "password=[REDACTED:password]"


# --- values, messages, records -------------------------------------------------------------


def test_tool_call_arguments_stay_valid_json() -> None:
    pem = made_pem("OPENSSH PRIVATE KEY")
    args = json.dumps({"path": "/home/ana/.ssh/id_ed25519", "content": pem, "mode": "0600"})
    calls = [{"id": "call_1", "type": "function", "function": {"name": "write", "arguments": args}}]
    out = lib.redact_value(calls)
    decoded = json.loads(out[0]["function"]["arguments"])
    assert decoded == {
        "path": "/home/ana/.ssh/id_ed25519",
        "content": "[REDACTED:private_key]",
        "mode": "0600",
    }


def test_structured_content_keeps_its_shape() -> None:
    key = SECRETS[7][1]
    parts = [
        {"type": "text", "text": f"token {key}"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    assert lib.redact_value(parts) == [
        {"type": "text", "text": "token [REDACTED:github_token]"},
        parts[1],
    ]


def test_stored_structured_content_stays_behind_its_marker() -> None:
    from hermes_state.shapes.content import STRUCTURED_SENTINEL, decode_content, encode_content

    stored = encode_content([{"type": "text", "text": "password=hunter22"}])
    out = lib.redact_value(stored)
    assert out.startswith(STRUCTURED_SENTINEL)
    assert decode_content(out) == [{"type": "text", "text": "password=[REDACTED:password]"}]


def test_a_message_has_content_reasoning_and_tool_calls_redacted() -> None:
    key = SECRETS[0][1]
    msg = {
        "id": 7,
        "role": "assistant",
        "content": f"I used {key}",
        "reasoning": f"the key {key} works",
        "tool_calls": [
            {
                "id": "c",
                "function": {"name": "sh", "arguments": json.dumps({"cmd": f"export K={key}"})},
            }
        ],
        "message_uid": new_uid(),
    }
    out = lib.redact_message(msg)
    assert key not in json.dumps(out)
    assert out["content"] == "I used [REDACTED:openai_key]"
    assert out["message_uid"] == msg["message_uid"] and out["id"] == 7
    assert msg["content"] == f"I used {key}"  # the row itself is left as it was


def test_a_session_title_and_prompt_are_redacted_and_the_prompt_hash_follows() -> None:
    from hermes_state.transfer.import_target import prompt_hash

    prompt = "You deploy with GITHUB_TOKEN=" + rand(40)
    row = {
        "id": "s1",
        "title": "Deploy with ghp_" + rand(36),
        "system_prompt": prompt,
        "system_prompt_hash": prompt_hash(prompt),
    }
    out = lib.redact_session(row)
    assert out["title"] == "Deploy with [REDACTED:github_token]"
    assert out["system_prompt"] == "You deploy with GITHUB_TOKEN=[REDACTED:token]"
    assert out["system_prompt_hash"] == prompt_hash(out["system_prompt"])


def test_redacted_records_get_unique_titles() -> None:
    records = [
        {"id": "a", "title": f"key {SECRETS[0][1]}", "messages": []},
        {"id": "b", "title": f"key {SECRETS[2][1]}", "messages": []},
        {"id": "c", "title": "plain", "messages": []},
    ]
    titles = [r["title"] for r in lib.redact_records(records)]
    assert titles == ["key [REDACTED:openai_key]", "key [REDACTED:openai_key] #2", "plain"]


def test_redacted_records_stream_their_messages() -> None:
    def endless() -> object:
        n = 0
        while True:
            n += 1
            yield {"role": "user", "content": f"password=pw{n}x"}

    record = next(lib.redact_records([{"id": "a", "messages": endless()}]))
    first = next(iter(record["messages"]))
    assert first["content"] == "password=[REDACTED:password]"


# --- properties -----------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_redaction_never_fails_and_is_stable(text: str) -> None:
    once = lib.redact(text)
    assert lib.redact(once) == once
    for start in (False, True):
        for end in (False, True):
            assert isinstance(lib.redact_fragment(text, cut_start=start, cut_end=end), str)
    assert isinstance(lib.redact_snippet(text), str)
    assert isinstance(lib.redact_prefix(text, 50), str)


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80),
    st.sampled_from([s for _, s in SECRETS]),
    st.text(alphabet=" \n\t.,;:()'\"", min_size=1, max_size=3),
)
def test_a_secret_set_apart_in_any_text_never_survives(before: str, secret: str, gap: str) -> None:
    out = lib.redact(f"{before}{gap}{secret}{gap}and more")
    assert secret not in out


PREFIXED = [s for _, s in SECRETS if re.match(lib._KEY_STARTS, s)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PREFIXED), st.data())
def test_a_snippet_cut_anywhere_leaves_no_readable_part_of_a_key(
    secret: str, data: st.DataObject
) -> None:
    text = f"the key {secret} was rotated"
    s0, s1 = 8, 8 + len(secret)
    a = data.draw(st.integers(0, s1 - 1), label="start")
    b = data.draw(st.integers(max(a, s0) + 1, len(text)), label="end")
    snippet = ("..." if a else "") + text[a:b] + ("..." if b < len(text) else "")
    out = lib.redact_snippet(snippet)
    piece = secret[max(a - s0, 0) : b - s0]
    known = re.match(lib._KEY_STARTS, secret)
    assert known is not None
    if (a <= s0 and len(piece) > known.end()) or lib._looks_random(piece):
        assert piece not in out, (snippet, out)
