"""Redaction of secrets in stored text: provider API keys, tokens, private keys and passwords
become ``[REDACTED:kind]``.

Pure functions over text and the JSON values text lives in; nothing here reads a store.

- :func:`redact` rewrites a whole text.
- :func:`redact_fragment` rewrites a piece cut out of a longer text (a snippet, a preview): at a
  cut edge a secret may have lost its recognisable prefix or its tail, so a token at the edge that
  starts like a secret or looks random (upper case, lower case and digits) is redacted too.
- :func:`redact_snippet` does that for a search snippet, keeping its ``>>>match<<<`` marks (a
  mark inside a secret no longer hides it from the rules).
- :func:`redact_prefix` cuts a text to a length without leaving half a secret readable.
- :func:`redact_value`, :func:`redact_message`, :func:`redact_session` and
  :func:`redact_records` apply the rules to JSON values, message rows, session rows and export
  records (message content, tool-call arguments, reasoning, titles and system prompts).

What is not caught: a secret with no known shape and no ``name=`` before it (a bare password in
prose), and the lower-case hex tail of a hex secret cut at a fragment's start (it looks exactly
like a sha256 or a git SHA, which must survive).
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hermes_state.shapes.content import STRUCTURED_SENTINEL
from hermes_state.transfer.import_target import prompt_hash

PLACEHOLDER = "[REDACTED:{kind}]"
PARTIAL = "partial"  # the kind of a secret's remains at a cut edge
MARGIN_CHARS = 4096  # redact_prefix reads this far past the cut, so a secret across it is whole
MAX_JSON_CHARS = 1 << 20  # JSON text longer than this is redacted as text, not parsed

# Message fields that hold text people or tools wrote (content, tool calls, reasoning).
MESSAGE_TEXT_FIELDS = (
    "content",
    "api_content",
    "tool_calls",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
)
SESSION_TEXT_FIELDS = ("title", "system_prompt", "preview")

_T = r"A-Za-z0-9_-"  # the characters of most key formats


@dataclass(frozen=True)
class Rule:
    """One secret shape: the match (its group ``s`` when it has one) is replaced.

    The rule runs only on text holding one of its ``needles`` (a substring test costs next to
    nothing; a regex scan of a long text does not) and, when it has a ``gate``, where that
    pattern (which starts with a literal, so its search is fast) is found: for shapes whose only
    literal is a character most texts hold (``.``, ``-``).
    """

    kind: str
    pattern: re.Pattern[str]
    needles: tuple[str, ...]
    gate: re.Pattern[str] | None = None


def _rule(kind: str, pattern: str, *needles: str, gate: str | None = None) -> Rule:
    """Return a rule with its pattern (and gate) compiled."""
    return Rule(kind, re.compile(pattern), needles, re.compile(gate) if gate else None)


def _starts(literal: str) -> str:
    """Return a pattern for a literal that starts a word: the literal first, so a scan jumps
    straight to it, and the word check behind it."""
    escaped = re.escape(literal)
    return f"{escaped}(?<![A-Za-z0-9_]{escaped})"


# Where two rules match at one place, the earlier one names the kind. Each pattern starts with
# a literal where it can, so the scan of a long text jumps from one candidate to the next.
RULES: tuple[Rule, ...] = (
    _rule(
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?=\s|\\[nr]|[A-Za-z0-9+/])[\s\S]*?"
        r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        "PRIVATE KEY",
    ),
    _rule("jwt", rf"{_starts('eyJ')}[{_T}]{{8,}}\.eyJ[{_T}]{{8,}}\.[{_T}]*", "eyJ"),
    _rule("url_password", r"://[^\s:/@?#'\"\\]*:(?P<s>[^\s@/?#'\"\\]+)(?=@)", "://"),
    _rule("slack_webhook", r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]{20,}", "hooks."),
    _rule("anthropic_key", rf"{_starts('sk-ant-')}[{_T}]{{20,}}", "sk-ant-"),
    _rule("openrouter_key", rf"{_starts('sk-or-v1-')}[A-Za-z0-9]{{20,}}", "sk-or-"),
    _rule(
        "openai_key",
        rf"{_starts('sk-')}(?:proj-|svcacct-|admin-)?(?=[{_T}]{{0,200}}\d)[{_T}]{{20,}}",
        "sk-",
    ),
    _rule("stripe_key", r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{10,}", "_live_", "_test_"),
    _rule("stripe_key", rf"{_starts('whsec_')}[A-Za-z0-9]{{20,}}", "whsec_"),
    _rule("google_api_key", rf"{_starts('AIza')}[{_T}]{{35}}(?![{_T}])", "AIza"),
    _rule("google_oauth", rf"GOCSPX-[{_T}]{{20,}}|ya29\.[{_T}]{{20,}}", "GOCSPX-", "ya29."),
    _rule(
        "github_token",
        r"\bgh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}",
        *("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _rule("gitlab_token", rf"glpat-[{_T}]{{20,}}", "glpat-"),
    _rule("slack_token", rf"{_starts('xox')}[abposre]-[A-Za-z0-9-]{{10,}}", "xox"),
    _rule(
        "aws_access_key_id",
        r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
        *("AKIA", "ASIA", "ABIA", "ACCA"),
    ),
    _rule("huggingface_token", rf"{_starts('hf_')}[A-Za-z0-9]{{30,}}", "hf_"),
    _rule("npm_token", rf"{_starts('npm_')}[A-Za-z0-9]{{36}}\b", "npm_"),
    _rule("pypi_token", rf"pypi-AgE[{_T}]{{50,}}", "pypi-"),
    _rule("sendgrid_key", rf"{_starts('SG.')}[{_T}]{{16,}}\.[{_T}]{{16,}}", "SG."),
    _rule("groq_key", rf"{_starts('gsk_')}[A-Za-z0-9]{{40,}}", "gsk_"),
    _rule("xai_key", rf"{_starts('xai-')}[A-Za-z0-9]{{40,}}", "xai-"),
    _rule("telegram_bot_token", rf"\b\d{{6,12}}:AA[{_T}]{{33}}(?![{_T}])", ":AA"),
    _rule(
        "discord_bot_token",
        rf"\b[MNO][{_T}]{{23,27}}\.[{_T}]{{6}}\.[{_T}]{{27,40}}(?![{_T}])",
        ".",
        gate=rf"\.[{_T}]{{6}}\.",
    ),
    _rule(
        "bearer_token",
        r"(?:[Bb]earer|Authorization:[ \t]*[Tt]oken)[ \t]+"
        r"(?P<s>(?=[A-Za-z._~+/-]*\d)[A-Za-z0-9._~+/-]{16,}=*)",
        "earer",
        "Authorization",
    ),
    _rule("basic_auth", r"Authorization:[ \t]*Basic[ \t]+(?P<s>[A-Za-z0-9+/]{8,}={0,2})", "Basic"),
    # Provider shapes (prefix, length and alphabet as each provider documents its keys).
    _rule("mailgun_key", r"\bkey-[0-9a-f]{32}\b", "key-"),
    _rule(
        "mailgun_key",
        r"\b[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}\b",
        "-",
        gate=r"-[0-9a-f]{8}-[0-9a-f]{8}\b",
    ),
    _rule("mailchimp_key", r"\b[0-9a-f]{32}-us[0-9]{1,2}\b", "-us"),
    _rule("shopify_token", r"\bshp(?:at|ca|pa|ss)_[0-9a-fA-F]{32}\b", "shp"),
    _rule("databricks_token", r"\bdapi[0-9a-f]{32}(?:-[0-9])?\b", "dapi"),
    _rule("digitalocean_token", r"\bdo[opr]_v1_[0-9a-f]{64}\b", "_v1_"),
    _rule("vault_token", rf"\bhv[sbr]\.[{_T}]{{24,}}", "hvs.", "hvb.", "hvr."),
    _rule("tailscale_key", r"\btskey-(?:[a-z]+-)?[A-Za-z0-9]{6,}-[A-Za-z0-9]{10,}", "tskey-"),
    _rule("linear_key", r"\blin_(?:api_[A-Za-z0-9]{40}|oauth_[0-9a-f]{64})\b", "lin_"),
    _rule(
        "square_token",
        rf"\bsq0(?:atp|csp|idp)-[{_T}]{{22,}}|\bEAAA[{_T}]{{60}}(?![{_T}])",
        "sq0",
        "EAAA",
    ),
    _rule("age_secret_key", r"AGE-SECRET-KEY-1[0-9A-Z]{58}", "AGE-SECRET-KEY-"),
    _rule("twilio_key", r"\bSK[0-9a-f]{32}\b", "SK"),
    _rule("azure_sas", r"[?&;]sig=(?P<s>[A-Za-z0-9%+/=]{20,})", "sig="),
    _rule("docker_auth", r'"auth"[ \t]*:[ \t]*"(?P<s>[A-Za-z0-9+/]{8,}={0,2})"', '"auth"'),
    # Headers named for a key or token, anywhere (inside a curl command, a log line).
    _rule(
        "api_key",
        r"(?i:\b(?:x-[a-z0-9-]*?(?:api-?key|token|secret|auth)|api-?key|private-token))"
        r"[ \t]*:[ \t]*(?P<s>(?=[^\s'\"]*[0-9])[^\s'\"]{8,})",
        "-key",
        "-Key",
        "-KEY",
        "oken",
        "OKEN",
        "ecret",
        "uth",
    ),
    # Passwords on command lines: `mysql -pSECRET`, `sshpass -p SECRET`, `curl -u user:SECRET`,
    # `docker login -p SECRET`, and `--password SECRET` (the `=` forms are assignments).
    _rule(
        "password",
        r"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\b[^\n|;&]*?[ \t]-p"
        r"['\"]?(?P<s>[^\s'\"`-][^\s'\"`]*)",
        "mysql",
        "mariadb",
    ),
    _rule(
        "password",
        r"\bsshpass\b[^\n|;&]*?[ \t]-p[ \t]*['\"]?(?P<s>[^\s'\"`-][^\s'\"`]*)",
        "sshpass",
    ),
    _rule(
        "password",
        r"\bcurl\b[^\n|;&]*?[ \t](?:-u|--user)[ \t=]*['\"]?[^\s:'\"]+:(?P<s>[^\s'\"`@]+)",
        "curl",
    ),
    _rule(
        "password",
        r"\blogin\b[^\n|;&]*?[ \t](?:-p|--password)[ \t]+['\"]?(?P<s>[^\s'\"`-][^\s'\"`]*)",
        "login",
    ),
    _rule(
        "password",
        r"[ \t]--(?:password|passwd|pass|secret|client-secret|token|api-key|apikey|access-token"
        r"|auth-token)[ \t]+['\"]?(?P<s>(?=[^\s'\"]*[0-9])[^\s'\"`-][^\s'\"`]*)",
        "--",
    ),
)

# Every needle with the rule it belongs to (for one flat pass of substring tests).
_NEEDLES = tuple((needle, i) for i, rule in enumerate(RULES) for needle in rule.needles)

# `NAME=value`, `"NAME": "value"`, `NAME: value` (a line of its own): NAME ends in one of these
# words (GITHUB_TOKEN, db_password, aws_secret_access_key), so max_tokens, token_count and
# tokenizer are left alone. `pwd` is not one: $PWD is the working directory. Found in the text
# lower-cased, then read in the text itself.
_SECRET_WORD = re.compile(
    r"(?:password|passwd|passphrase|secret|token|api[_-]?key|apikey|access[_-]?key"
    r"|private[_-]?key|auth[_-]?key|credentials?"
    r"|(?:secret|account|signing|encryption|master|app)[_-]?key"
    r"|(?<![a-z0-9])(?:pass|pw))(?![a-z0-9_])"
)
_SECRET_WORD_ANY_CASE = re.compile(_SECRET_WORD.pattern, re.IGNORECASE)
_WORD_NEEDLES = ("pass", "secret", "token", "key", "credential", "pw")
_ASSIGN = re.compile(r"(?:\\?[\"'])?[ \t]*(?P<op>[:=])(?!=)[ \t]*(?P<quote>\\?[\"'])?")
_QUOTED_VALUE = re.compile(r"[^\"'\\\n]{1,512}(?=\\?[\"'])")
# `&` ends a value only where a URL's next parameter (`&name=`) starts: `Tr0ub4dor&3` is whole.
_BARE_VALUE = re.compile(r"(?:[^\s&;,'\"`<>()\[\]{}\\]|&(?![A-Za-z_][\w.-]*=)){1,512}")
# `name: value` inside a line (prose, a log) counts when the value reads like a secret: six or
# more characters with a digit or a symbol; a type name after it (`token: str`) is code.
_INLINE_VALUE = re.compile(r"(?=\S{6})\S*[^A-Za-z_\s]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# `password: SecretStr`, `access_token: str` on a line of their own: annotations, not values.
_TYPE_NAME = re.compile(
    r"str|int|bytes|bool|float|dict|list|tuple|set|object|Any|None"
    r"|(?:[A-Z][A-Z0-9]*[a-z]+[0-9]*){2,}"  # SecretStr, Ed25519PrivateKey, PKCS7PrivateKeyTypes
)
# The targets of a tuple assignment before the name (`user, pw = ...` in code).
_TUPLE_TARGETS = re.compile(r"[ \t]*(?:[A-Za-z_][\w.]*[ \t]*,[ \t]*)+")
# A command-line or header value that stands for one (`-p PASSWORD`, `--token TOKEN`).
_PLACEHOLDER_WORD = re.compile(r"[A-Z][A-Z_]*")
_LINE_END = re.compile(r"[ \t]*(?:\r?\n|\Z)")
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
# A value that names or stands for a secret instead of being one.
_NOT_A_VALUE = re.compile(
    r"(?i:null|none|nil|true|false|undefined|[:*•]*|x+|\.\.\.|…"
    r"|pass|password|passwd|pwd|secret|token)$|[$%<{*\[]|\\?[\"']",
)
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_WORD_KIND = (("pass", "password"), ("secret", "secret"), ("token", "token"), ("key", "api_key"))

# At a cut edge: the start of a known key shape, or a token that looks random.
_EDGE_CHARS = r"A-Za-z0-9_.~+/=-"
_KEY_STARTS = (
    r"sk-|sk_|rk_|whsec_|AIza|GOCSPX-|ya29\.|gh[pousr]_|github_pat_|glpat-|xox[abposre]-"
    r"|AKIA|ASIA|ABIA|ACCA|hf_|npm_|pypi-|SG\.|gsk_|xai-|eyJ"
)
# Each in turn, anchored at the cut (the first that matches says what the remains are).
_TAILS = (
    ("key", re.compile(rf"(?<![{_EDGE_CHARS}])(?:{_KEY_STARTS})[{_EDGE_CHARS}]*\Z")),
    ("url", re.compile(r"(?<=://)[^\s:/@]*:[^\s@/]*\Z")),
    ("bearer", re.compile(rf"(?<=[Bb]earer )[{_EDGE_CHARS}]+\Z")),
    ("assigned", re.compile(r"(?<=[=:])[ \t]*[^\s&;,'\"<>()\[\]{}\\/]+\Z")),
    ("token", re.compile(rf"(?<![{_EDGE_CHARS}])[{_EDGE_CHARS}]{{10,}}\Z")),
)
_TAIL_WINDOW = 512  # a cut end is looked at this far back
_HEAD = re.compile(rf"\A[{_EDGE_CHARS}]+")
_HEAD_BEFORE_AT = re.compile(r"\A[^\s@/:]+(?=@)")
_KEY_TAIL = re.compile(r"\A[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_BEGIN = "-----BEGIN "
_NAME_BEFORE = re.compile(rf"(?i:{_SECRET_WORD.pattern})[\"'\\]*[ \t]*[=:]\Z")
_PLACEHOLDER = re.compile(r"\[REDACTED:[a-z_]+\]")

_Span = tuple[int, int, str]


def _name_start(text: str, at: int) -> int:
    """Return where the name that ends with the secret word at ``at`` starts."""
    while at > 0 and text[at - 1] in _NAME_CHARS:
        at -= 1
    return at


def _assignment_spans(text: str) -> list[tuple[int, int, int, str]]:
    """Return the spans of values assigned to a name that says it holds a secret."""
    lowered = text.lower()
    if len(lowered) == len(text):
        if not any(n in lowered for n in _WORD_NEEDLES):
            return []
        words = _SECRET_WORD.finditer(lowered)
    else:  # lower-casing changed the length (a rare letter such as İ): offsets would differ
        words = _SECRET_WORD_ANY_CASE.finditer(text)
    spans = []
    for word in words:
        assign = _ASSIGN.match(text, word.end())
        if assign is None:
            continue
        quoted = assign.group("quote") is not None
        value = (_QUOTED_VALUE if quoted else _BARE_VALUE).match(text, assign.end())
        if value is None:
            continue
        name_at = _name_start(text, word.start())
        if assign.group("op") == ":" and not quoted:
            # `name: value` counts as a line of its own (not `token: str = None`), or inside a
            # line when the value reads like a secret.
            line_at = text.rfind("\n", 0, name_at) + 1
            own_line = not text[line_at:name_at].strip(" \t-") and _LINE_END.match(
                text, value.end()
            )
            if not own_line and not _INLINE_VALUE.match(value.group()):
                continue
        if _TUPLE_TARGETS.fullmatch(text, text.rfind("\n", 0, name_at) + 1, name_at):
            continue
        kind = _assignment_kind(
            text[name_at : word.end()],
            word.group().lower(),
            value.group(),
            "" if quoted else text[value.end() : value.end() + 1],
        )
        if kind is not None:
            spans.append((value.start(), value.end(), len(RULES), PLACEHOLDER.format(kind=kind)))
    return spans


def _assignment_kind(name: str, word: str, value: str, after: str) -> str | None:
    """Return the kind an assigned value is redacted as, or None when it is not a secret."""
    if _NOT_A_VALUE.match(value):
        return None
    # Code, not a value: `api_key=os.getenv(...)`, `token=self.token`, `password=password`,
    # `self.password = password`, `token = access_token`.
    # A prefixed string literal (b"", f"...", r"..."), a type, a small number, one character.
    if after in ("(", "[", '"', "'") or _DOTTED.fullmatch(value) or _TYPE_NAME.fullmatch(value):
        return None
    if len(value) < 2 or (value.isdigit() and len(value) < 6):
        return None
    # A variable: `self._credential = credential`, `signing_key = key`, `x = _creds`.
    last = name.lower().lstrip("-").rsplit(".", 1)[-1].strip("_")
    if _IDENTIFIER.fullmatch(value) and (
        value.startswith("_")
        or "_" in value.strip("_")
        or value.lower() in last
        or keyword.iskeyword(value)
    ):
        return None
    for stem, kind in _WORD_KIND:
        if stem in word:
            return kind
    return "credential"


def _match_spans(text: str) -> list[_Span]:
    """Return the (start, end, replacement) of every secret the rules find in text, in order;
    overlapping finds are merged (the earliest, then the first rule, names the kind)."""
    found: list[tuple[int, int, int, str]] = []
    # One flat pass of substring tests picks the rules worth a scan (most texts: none).
    for priority in sorted({i for needle, i in _NEEDLES if needle in text}):
        rule = RULES[priority]
        if rule.gate is not None and rule.gate.search(text) is None:
            continue
        secret_group = "s" if "s" in rule.pattern.groupindex else 0
        for m in rule.pattern.finditer(text):
            start, end = m.span(secret_group)
            if secret_group == "s" and (
                _NOT_A_VALUE.match(m.group("s")) or _PLACEHOLDER_WORD.fullmatch(m.group("s"))
            ):
                continue
            found.append((start, end, priority, PLACEHOLDER.format(kind=rule.kind)))
    found += _assignment_spans(text)
    if not found:
        return []
    found.sort()
    spans: list[_Span] = []
    for start, end, _, replacement in found:
        if spans and start < spans[-1][1]:
            last = spans[-1]
            spans[-1] = (last[0], max(last[1], end), last[2])
        else:
            spans.append((start, end, replacement))
    return spans


def _looks_random(token: str) -> bool:
    """Tell whether a token reads as key material: upper case, lower case and digits mixed."""
    core = token.strip("._~+/=-")
    if len(core) < 10:
        return False
    upper = any(c.isupper() for c in core)
    lower = any(c.islower() for c in core)
    digit = any(c.isdigit() for c in core)
    return (upper and lower and digit) or (upper and digit and not lower)


def _head_end(text: str) -> int:
    """Return where a secret's remains end at the start of a fragment cut there (0: none)."""
    key_tail = _KEY_TAIL.match(text)
    if key_tail is not None and _BEGIN not in key_tail.group():
        return key_tail.end()  # the end of a private key whose start was cut off
    at = _HEAD_BEFORE_AT.match(text)
    if at is not None:
        return at.end()  # the tail of `user:password@` (or of an e-mail address)
    head = _HEAD.match(text)
    return head.end() if head is not None and _looks_random(head.group()) else 0


def _tail_start(text: str) -> int:
    """Return where a secret's remains start at the end of a fragment cut there (len: none)."""
    base = max(0, len(text) - _TAIL_WINDOW)
    for kind, pattern in _TAILS:
        tail = pattern.search(text, base)
        if tail is None:
            continue
        piece = tail.group()
        if kind == "assigned":
            if not _NAME_BEFORE.search(text, base, tail.start()):
                continue  # `x=` or `x:` before it, but x is no secret's name
            return tail.start() + len(piece) - len(piece.lstrip())
        if kind == "token" and not _looks_random(piece):
            return len(text)
        return tail.start()
    return len(text)


def _edge_spans(text: str, spans: list[_Span], cut_start: bool, cut_end: bool) -> list[_Span]:
    """Add the spans of a secret's remains at the cut edges of a fragment (merged with spans)."""
    partial = PLACEHOLDER.format(kind=PARTIAL)
    out = list(spans)
    if cut_start and not (out and out[0][0] == 0):
        end = _head_end(text)
        if end:
            end = max([end, *(e for s, e, _ in out if s < end)])
            out = [(0, end, partial), *(span for span in out if span[0] >= end)]
    if cut_end and not (out and out[-1][1] == len(text)):
        start = _tail_start(text)
        if start < len(text):
            start = min([start, *(s for s, e, _ in out if e > start)])
            out = [*(span for span in out if span[1] <= start), (start, len(text), partial)]
    return out


def _apply(text: str, spans: list[_Span]) -> str:
    """Return text with each span replaced."""
    if not spans:
        return text
    pieces = []
    at = 0
    for start, end, replacement in spans:
        pieces.append(text[at:start])
        pieces.append(replacement)
        at = end
    pieces.append(text[at:])
    return "".join(pieces)


def redact(text: str) -> str:
    """Return text with every secret the rules recognise replaced by ``[REDACTED:kind]``."""
    if not isinstance(text, str) or not text:
        return text
    return _apply(text, _match_spans(text))


def blank_secrets(text: str) -> str:
    """Return text with every secret the rules recognise replaced by one space (what a search
    may match against, so no match reaches inside a secret)."""
    if not isinstance(text, str) or not text:
        return text
    return _apply(text, [(start, end, " ") for start, end, _ in _match_spans(text)])


def redact_fragment(text: str, *, cut_start: bool = False, cut_end: bool = False) -> str:
    """Redact a piece cut from a longer text; a secret's remains at a cut edge go too."""
    if not isinstance(text, str) or not text:
        return text
    return _apply(text, _edge_spans(text, _match_spans(text), cut_start, cut_end))


def redact_prefix(text: str, chars: int) -> str:
    """Return the first ``chars`` characters of text, redacted (no half-secret at the cut)."""
    if not isinstance(text, str):
        return text
    if len(text) <= chars:
        return redact(text)
    head = redact(text[: chars + MARGIN_CHARS])
    if len(head) <= chars:
        return head
    for placeholder in _PLACEHOLDER.finditer(head, max(0, chars - 64), chars + 64):
        if placeholder.start() < chars < placeholder.end():
            return head[: placeholder.end()]  # the cut fell inside a placeholder: keep it whole
    return redact_fragment(head[:chars], cut_end=True)


def redact_snippet(
    snippet: str, *, marks: tuple[str, str] = (">>>", "<<<"), ellipsis: str = "..."
) -> str:
    """Redact a search snippet: ellipses mark its cut edges, marks its matches (kept)."""
    if not isinstance(snippet, str) or not snippet:
        return snippet
    cut_start, cut_end = snippet.startswith(ellipsis), snippet.endswith(ellipsis)
    body = snippet[
        len(ellipsis) if cut_start else 0 : len(snippet) - (len(ellipsis) if cut_end else 0)
    ]
    plain, marked = _unmark(body, marks)
    spans = _edge_spans(plain, _match_spans(plain), cut_start, cut_end)
    if not spans:
        return snippet
    out = _remark(plain, spans, marked, marks)
    return (ellipsis if cut_start else "") + out + (ellipsis if cut_end else "")


def _unmark(text: str, marks: tuple[str, str]) -> tuple[str, list[tuple[int, int]]]:
    """Return text without its match marks, and the marked ranges in that plain text."""
    opening, closing = marks
    plain: list[str] = []
    ranges: list[tuple[int, int]] = []
    at = length = 0
    start: int | None = None
    while at < len(text):
        if text.startswith(opening, at) and start is None:
            start, at = length, at + len(opening)
        elif text.startswith(closing, at) and start is not None:
            ranges.append((start, length))
            start, at = None, at + len(closing)
        else:
            plain.append(text[at])
            length += 1
            at += 1
    if start is not None:
        ranges.append((start, length))
    return "".join(plain), ranges


def _remark(
    plain: str, spans: list[_Span], marked: list[tuple[int, int]], marks: tuple[str, str]
) -> str:
    """Rebuild a snippet from plain text: spans replaced, marks around what they marked (a mark
    that touched a secret grows to cover its placeholder)."""
    grown = []
    for lo, hi in marked:
        for start, end, _ in spans:
            if start < hi and lo < end:
                lo, hi = min(lo, start), max(hi, end)
        if hi > lo:
            grown.append((lo, hi))
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(grown):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    opens = {lo for lo, _ in merged}
    closes = {hi for _, hi in merged}
    by_start = {start: (end, replacement) for start, end, replacement in spans}
    out: list[str] = []
    at = 0
    depth = 0
    while at <= len(plain):
        if at in closes and depth:
            out.append(marks[1])
            depth = 0
        if at in opens and not depth:
            out.append(marks[0])
            depth = 1
        if at == len(plain):
            break
        if at in by_start:
            end, replacement = by_start[at]
            out.append(replacement)
            at = end
            continue
        out.append(plain[at])
        at += 1
    if depth:
        out.append(marks[1])
    return "".join(out)


def _redact_json_text(text: str) -> str:
    """Redact a string holding JSON (tool-call arguments) value by value, so it stays JSON."""
    if len(text) <= MAX_JSON_CHARS:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, dict | list):
            redacted = redact_value(value)
            return text if redacted == value else json.dumps(redacted, ensure_ascii=False)
    return redact(text)


def _key_kind(key: str, value: str) -> str | None:
    """Return the kind a JSON object's string value is redacted as for its key (`"password"`,
    `"api_key"`, `"client_secret"`, docker's `"auth"`), or None when the key names no secret
    or the value is none (a placeholder, a reference)."""
    lowered = key.lower()
    if lowered == "auth":
        return None if _NOT_A_VALUE.match(value) or not value else "docker_auth"
    word = _SECRET_WORD.search(lowered)
    if word is None or word.end() != len(lowered) or not value:
        return None
    return _assignment_kind(key, word.group(), value, "")


def redact_value(value: Any) -> Any:
    """Return a JSON value with every string in it redacted (object keys are kept; the string
    value of a key that names a secret goes whole)."""
    if isinstance(value, str):
        if value.startswith(STRUCTURED_SENTINEL):
            inner = _redact_json_text(value[len(STRUCTURED_SENTINEL) :])
            return STRUCTURED_SENTINEL + inner
        if value and value[0] in "{[" and value[-1] in "}]":
            return _redact_json_text(value)
        return redact(value)
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            kind = _key_kind(k, v) if isinstance(k, str) and isinstance(v, str) else None
            out[k] = PLACEHOLDER.format(kind=kind) if kind is not None else redact_value(v)
        return out
    return value


def redact_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of a message row with its text fields redacted."""
    out = dict(message)
    for key in MESSAGE_TEXT_FIELDS:
        if out.get(key) is not None:
            out[key] = redact_value(out[key])
    return out


def redact_session(row: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of a session row with its title, system prompt and preview redacted."""
    out = dict(row)
    for key in SESSION_TEXT_FIELDS:
        if isinstance(out.get(key), str):
            out[key] = (
                redact_fragment(out[key], cut_end=out[key].endswith("…"))
                if key == "preview"
                else redact(out[key])
            )
    if out.get("system_prompt_hash") and out.get("system_prompt") != row.get("system_prompt"):
        # The prompt's content address follows its text, as an import would compute it.
        out["system_prompt_hash"] = prompt_hash(out["system_prompt"])
    return out


def redact_records(records: Iterable[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    """Yield export records redacted: sessions' text and every message's (streamed, lazily).

    Titles are unique in a store, so a redacted title that an earlier record already has gets
    `` #2``, `` #3``… and the export still imports whole.
    """
    seen: set[str] = set()
    for record in records:
        out = redact_session(record)
        title = out.get("title")
        if isinstance(title, str):
            if title != record.get("title"):
                n = 2
                base = title
                while title in seen:
                    title = f"{base} #{n}"
                    n += 1
                out["title"] = title
            seen.add(title)
        messages = record.get("messages")
        if messages is not None:
            out["messages"] = (redact_message(m) for m in messages)
        yield out
