"""A planted corpus for redaction: made-up secrets in the shapes providers issue and the forms
people paste them in, and look-alikes that must survive (commit SHAs, UUIDs, session ids, prose
that says "password", code).

Every secret is assembled at run time from a prefix and seeded random characters, so this file
holds no string a secret scanner would take for a live credential. Each case's text carries a
marker word (``caseNNN``) a search can find it by, close to the secret so a snippet shows it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import string
import uuid
from dataclasses import dataclass

ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"
HEX = "0123456789abcdef"
UPPER = string.ascii_uppercase + string.digits
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"
PLACEHOLDER = re.compile(r"\[REDACTED:[a-z_]+\]")


@dataclass(frozen=True)
class Case:
    """One planted message: its text, and the secret that must not show (or, for a
    look-alike, the part that must show unchanged)."""

    name: str
    text: str
    secret: str = ""
    keep: str = ""


def rand(n: int, alphabet: str = ALNUM, seed: str = "") -> str:
    """Return n seeded random characters of alphabet (with a digit where it has digits)."""
    rng = random.Random(f"{seed}-{n}-{alphabet}")
    body = [rng.choice(alphabet) for _ in range(n)]
    digits = [c for c in alphabet if c.isdigit()]
    if digits and n > 4:
        body[n // 2] = rng.choice(digits)
    return "".join(body)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt() -> str:
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = _b64(json.dumps({"sub": "42", "name": "Ana", "iat": 1516239022}).encode())
    return f"{head}.{body}.{_b64(hashlib.sha256(b'corpus').digest())}"


def _pem() -> str:
    lines = [rand(64, ALNUM + "+/", seed=f"pem{i}") for i in range(4)]
    label = "RSA PRIVATE KEY"
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----"


def _provider_keys() -> list[tuple[str, str]]:
    """(name, key) in each provider's documented shape."""
    r = rand
    return [
        ("openai", "sk-" + r(48, seed="o1")),
        ("openai-proj", "sk-" + "proj-" + r(120, URLSAFE, "o2")),
        ("anthropic", "sk-" + "ant-api03-" + r(93, URLSAFE, "a1") + "AA"),
        ("openrouter", "sk-" + "or-v1-" + r(64, HEX, "or")),
        ("google", "AI" + "za" + r(35, URLSAFE, "g1")),
        ("google-oauth", "GOCSPX-" + r(28, URLSAFE, "g2")),
        ("google-access", "ya29." + r(60, URLSAFE, "g3")),
        ("github-pat", "gh" + "p_" + r(36, seed="gh1")),
        ("github-oauth", "gh" + "o_" + r(36, seed="gh2")),
        ("github-fine", "github_" + "pat_" + r(22, seed="gh3") + "_" + r(59, seed="gh4")),
        ("gitlab", "gl" + "pat-" + r(20, URLSAFE, "gl")),
        ("slack-bot", "xo" + "xb-" + r(12, string.digits, "s1") + "-" + r(24, seed="s2")),
        (
            "slack-webhook",
            "https://hooks.slack.com/services/T"
            + r(10, UPPER, "w1")
            + "/B"
            + r(10, UPPER, "w2")
            + "/"
            + r(24, seed="w3"),
        ),
        ("aws-key-id", "AK" + "IA" + r(16, UPPER, "aws")),
        ("huggingface", "h" + "f_" + r(34, seed="hf")),
        ("npm", "np" + "m_" + r(36, seed="npm")),
        ("pypi", "pypi-" + "AgEIcHlwaS5vcmc" + r(70, URLSAFE, "pypi")),
        ("sendgrid", "S" + "G." + r(22, URLSAFE, "sg1") + "." + r(43, URLSAFE, "sg2")),
        ("groq", "gs" + "k_" + r(52, seed="groq")),
        ("xai", "xa" + "i-" + r(80, seed="xai")),
        ("telegram", r(10, string.digits, "tg") + ":AA" + r(33, URLSAFE, "tg2")),
        ("stripe-live", "sk" + "_live_" + r(24, seed="st1")),
        ("stripe-restricted", "rk" + "_live_" + r(24, seed="st2")),
        ("stripe-webhook", "wh" + "sec_" + r(32, seed="st3")),
        ("jwt", _jwt()),
        ("mailgun-legacy", "ke" + "y-" + r(32, HEX, "mg1")),
        ("mailgun", r(32, HEX, "mg2") + "-" + r(8, HEX, "mg3") + "-" + r(8, HEX, "mg4")),
        ("mailchimp", r(32, HEX, "mc") + "-us" + "14"),
        ("shopify", "shp" + "at_" + r(32, HEX, "shop")),
        ("shopify-secret", "shp" + "ss_" + r(32, HEX, "shop2")),
        ("databricks", "da" + "pi" + r(32, HEX, "dbx")),
        ("digitalocean", "do" + "p_v1_" + r(64, HEX, "do")),
        ("vault", "hv" + "s." + r(90, URLSAFE, "hv")),
        ("tailscale", "ts" + "key-auth-" + r(12, seed="ts1") + "CNTRL-" + r(30, seed="ts2")),
        ("linear", "lin" + "_api_" + r(40, seed="lin")),
        ("square", "sq0" + "atp-" + r(22, URLSAFE, "sq1")),
        ("square-secret", "sq0" + "csp-" + r(43, URLSAFE, "sq2")),
        ("age", "AGE-" + "SECRET-KEY-1" + r(58, BECH32, "age")),
        ("twilio-api-key", "S" + "K" + r(32, HEX, "tw")),
    ]


def secret_cases() -> list[Case]:
    """Every planted secret, each in a message of its own."""
    out: list[Case] = []

    def add(text: str, secret: str) -> None:
        n = len(out)
        out.append(Case(f"case{n:03d}", text.replace("MARK", f"case{n:03d}"), secret))

    # Provider keys, bare in prose, and assigned in a .env line.
    for name, key in _provider_keys():
        add(f"MARK the {name} key I used was {key} yesterday", key)
    for name, key in _provider_keys()[::3]:
        add(f"MARK .env has {name.upper().replace('-', '_')}_KEY={key}", key)
    add("MARK here is the key\n" + _pem() + "\nkeep it", _pem())
    pw = "S3cr3t-" + rand(8, seed="u1")
    add(f"MARK connect with postgres://ana:{pw}@db.internal:5432/shop", pw)
    pw = rand(16, seed="u2")
    add(f"MARK cache at redis://:{pw}@cache:6379/0", pw)
    pw = "p4" + rand(10, seed="u3")
    add(f"MARK clone https://deploy:{pw}@git.example.com/shop.git", pw)
    # name=value, name: value, env lines.
    forms = [
        ("password={}", "hunter2" + rand(4, seed="f1")),
        ("password={}", "Tr0ub4dor&3"),
        ("SECRET_KEY={}", "django-insecure-" + rand(40, URLSAFE, "f2")),
        ("export DB_PASS={}", "s3cretvalue99"),
        ("export SMTP_PASSWORD='{}'", "correct horse " + rand(6, seed="f3")),
        ("export GITHUB_TOKEN={}", rand(40, seed="f4")),
        ('DB_PASSWORD="{}"', "correct horse battery " + rand(4, seed="f5")),
        ("client_secret = '{}'", rand(30, seed="f6")),
        ("aws_secret_access_key = {}", rand(40, ALNUM + "+/", "f7")),
        ("https://api.example.com/v1?token={}&page=2", rand(24, seed="f8")),
        (
            "DefaultEndpointsProtocol=https;AccountName=shop;AccountKey={};EndpointSuffix=core",
            rand(86, ALNUM + "+/", "f9") + "==",
        ),
        (
            "https://shop.blob.core.windows.net/c?sv=2022-11-02&ss=b&sp=r&sig={}",
            rand(43, ALNUM + "%", "f10") + "%3D",
        ),
        ("config:\n  password: {}\n  user: ana", "p4ss-" + rand(6, seed="f11")),
        ("my router password: {} since May", "Tr0ub4dor&3x"),
        ("api_key: {}", rand(32, seed="f12")),
        ("TWILIO_AUTH_TOKEN={}", rand(32, HEX, "f13")),
    ]
    for form, secret in forms:
        add("MARK " + form.format(secret), secret)
    # JSON documents (a message that is one, as tool output or arguments are).
    for key in ("password", "api_key", "token", "client_secret", "apiKey", "access_token"):
        secret = rand(20, seed=f"j-{key}") + "!x"
        add(json.dumps({"note": "MARK", key: secret, "model": "gpt"}), secret)
    auth = base64.b64encode(b"ana:" + rand(14, seed="dock").encode()).decode()
    add(
        json.dumps({"note": "MARK", "auths": {"https://index.docker.io/v1/": {"auth": auth}}}), auth
    )
    # Command lines.
    commands = [
        ("mysql -u root -p{} shop", rand(12, seed="c1")),
        ("sshpass -p {} ssh deploy@web1", "Pa55" + rand(8, seed="c2")),
        ("curl -u ana:{} https://api.example.com/v1", rand(14, seed="c3")),
        ("docker login -u ana -p {} registry.example.com", rand(20, seed="c4")),
        ("psql --password {} -h db", "pw" + rand(10, seed="c5")),
        ('curl -H "X-API-Key: {}" https://api.example.com', rand(32, seed="c6")),
        ('curl -H "Authorization: Bearer {}" https://api.example.com', rand(40, seed="c7")),
        ("curl -H 'Authorization: Basic {}' https://x", base64.b64encode(b"ana:pw1234").decode()),
    ]
    for form, secret in commands:
        add("MARK ran " + form.format(secret), secret)
    return out


def look_alike_cases() -> list[Case]:
    """Text that looks like a secret to a careless rule and must come out unchanged."""
    rng = random.Random("look")
    sha1 = hashlib.sha1(b"commit").hexdigest()
    keeps = [
        f"commit {sha1}",
        f"git checkout {sha1[:7]}",
        "sha256:" + hashlib.sha256(b"layer").hexdigest(),
        hashlib.md5(b"file").hexdigest(),
        str(uuid.UUID(int=rng.getrandbits(128))),
        "session 20261118_091502_a1c9e2 and cron_20261118_0300",
        "message_uid 1d5d1f0d72705c9fb8edec0fc7788816",
        "the password policy wants 12 characters and a digit",
        "reset your password from the settings page",
        "I forgot my password again",
        "the token count was 1234 and max_tokens=4096",
        "password_hint: the dog",
        "self.password = password",
        "access_token: str",
        "password: SecretStr",
        "def login(user: str, password: str) -> Token:",
        "api_key = os.environ['OPENAI_API_KEY']",
        "token = self._token",
        "https://example.com/path?page=2&sort=desc",
        "mail ana@example.com about it",
        "git@github.com:org/repo.git",
        "arn:aws:iam::123456789012:role/deploy",
        "version 1.2.3-beta.4",
        "SKU-2026-ABC",
        "see https://docs.example.com/api-keys for how to make one",
        "export PATH=$HOME/bin:$PATH",
        "set PASSWORD=<your password>",
        "key-value store",
        "AKIA is how AWS key ids start",
        "the Secret Manager holds them",
        "Task 7 done: deploy with --token-file ./tok",
        "datetime 2026-12-06T16:30:00Z",
        "ip 192.168.10.254 and fe80::1ff:fe23:4567:890a",
        "color #1a2b3c and #ffffff",
    ]
    return [Case(f"look{n:03d}", f"look{n:03d} {keep}", keep=keep) for n, keep in enumerate(keeps)]


def leaked(secret: str, shown: str, text: str) -> bool:
    """Tell whether output shown gives away part of a secret: any piece of it (6 characters,
    or all of a shorter one) that the message's other text does not hold."""
    shown = PLACEHOLDER.sub("\0", shown)  # a placeholder's name is no piece of a secret
    rest = text.replace(secret, "\0")
    width = min(6, len(secret))
    for at in range(len(secret) - width + 1):
        piece = secret[at : at + width]
        if piece in shown and piece not in rest:
            return True
    return False
