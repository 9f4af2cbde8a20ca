"""The man page (hermes.1) of a command tree: every command, the JSON vocabulary, exit codes,
the environment, files and the security note."""

from __future__ import annotations

import textwrap

from hermes_cli.completion.command_docs import (
    GENERATED,
    PROG,
    CommandDoc,
    OptionDoc,
    all_commands,
    first_line,
)
from hermes_cli.completion.targets import LOCATIONS, WHAT
from hermes_cli.rendering import records
from hermes_cli.shared.exitcodes import MEANINGS

# --- man page -------------------------------------------------------------------------------


def roff_text(text: str) -> str:
    """Escape text for roff: backslashes, dashes, non-ASCII, and control characters at BOL."""
    out = text.replace("\\", "\\e").replace("-", "\\-")
    out = "".join(ch if ord(ch) < 128 else f"\\[u{ord(ch):04X}]" for ch in out)
    lines = []
    for line in out.split("\n"):
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def _roff_flags(o: OptionDoc) -> str:
    flags = ", ".join(f"\\fB{roff_text(f)}\\fR" for f in o.flags)
    if o.takes_value:
        flags += f" \\fI{roff_text(o.metavar or 'VALUE')}\\fR"
    return flags


def _roff_epilog(text: str) -> list[str]:
    """Render an epilog: plain paragraphs, and click's \\b blocks kept line by line."""
    out: list[str] = []
    for para in text.split("\n\n"):
        lines = para.split("\n")
        if lines[0].strip() == "\b":
            block = textwrap.dedent("\n".join(ln.rstrip() for ln in lines[1:]))
            out += [".PP", ".nf", *(roff_text(ln) for ln in block.split("\n")), ".fi"]
        elif para.strip():
            out += [".PP", roff_text(" ".join(para.split()))]
    return out


def _usage(c: CommandDoc) -> str:
    parts = [f"\\fB{roff_text(' '.join((PROG, *c.path)))}\\fR"]
    if c.options:
        parts.append("[\\fIOPTIONS\\fR]")
    for a in c.arguments:
        name = f"\\fI{roff_text(a.metavar)}\\fR" + ("..." if a.variadic else "")
        parts.append(name if a.required else f"[{name}]")
    if c.children:
        parts.append("\\fICOMMAND\\fR ...")
    return " ".join(parts)


def _keys(keys: tuple[str, ...]) -> str:
    return ", ".join(keys)


JSON_VOCABULARY = (
    "Every command prints the same thing under the same key: a time is an ISO-8601 string in "
    "UTC to the second (2026-11-18T09:15:02Z) under a key ending in _at, null when unknown; a "
    "flag is a JSON boolean; counts are session_count, message_count (live messages: the "
    "current conversation) and stored_message_count (every stored row of every generation: "
    "what an export writes and a delete removes); money is cost_usd "
    "(the actual cost when known, else the estimate); a session is id inside a session object "
    "and session_id elsewhere. --json is --format json (on a command without --format it "
    "prints that command's result as one JSON document). --format jsonl prints the records "
    "listed below one compact JSON document per line; csv and tsv print a header line with "
    "those keys, then the records: csv with RFC 4180 quoting (a field may span lines), tsv one "
    "record per line with tab, newline, carriage return and backslash written as \\t, \\n, "
    "\\r and \\\\. In both, null is an empty cell, booleans are true/false, lists and objects "
    "are JSON text. JSON "
    "escapes every control character, so it is exact and safe to print; CSV and TSV are exact "
    "in a pipe or file, and sanitised like tables when printed on a terminal. Exact stored "
    "values (epoch seconds, every column) are what sessions export writes."
)

JSON_KEYS: tuple[tuple[str, str], ...] = (
    ("SESSION", _keys(records.SESSION_KEYS) + "."),
    ("MESSAGE", _keys(records.MESSAGE_KEYS) + "."),
    (
        "HIT",
        _keys(records.HIT_KEYS)
        + ". snippet marks matches >>>like this<<<; context is the message before the hit, "
        "the hit and the message after, each {role, content}.",
    ),
    (
        "ERROR",
        _keys(records.ERROR_KEYS) + "; error is one of missing, too_new, busy, corrupt, error.",
    ),
    (
        "sessions list",
        '{"sessions": [SESSION...], "total": N, "offset": N, "complete": B, "errors": '
        "[ERROR...]}; total counts every session the filters keep; complete is false when "
        "-n/--limit or --offset left some out. Records: SESSION. --json=F,F (or --fields F,F) "
        "keeps only those keys, in that order. With --vault each session also has vault: its "
        "vault year, or null for the live store.",
    ),
    (
        "sessions search",
        '{"query": Q, "ordering": O, "route": R, "partial": B, "ranked": N, "examined": N, '
        '"candidates": N, "searched_back_to": T, "matches": N, "sessions": N, "complete": B, '
        '"hits": [HIT...], "title_match_count": N, "title_matches": [TITLE_MATCH...]}; '
        "ordering is rank (BM25 "
        "over every match), rank_recent (BM25 over the newest `ranked` matches; more exist), "
        "newest or oldest; route is word, cjk, trigram, scan or none; partial is true when the "
        "search stopped at its work budget, having examined `examined` of `candidates` "
        "candidate messages back to `searched_back_to` (null otherwise); matches and sessions "
        "are exact counts when complete is true, else lower bounds (the search stopped at its "
        "2,000th match or its work budget; --all counts every one); ranked is how many "
        "matches were ranked by relevance (0 in time order); searched_back_to is an ISO time; "
        "a hit's vault is the "
        'vault year of the store it came from ("2025"), or null for the live store. '
        "title_matches are the sessions whose title matches the query (every wanted term in "
        "the title, no excluded one; not with --role), most recently active first, each {"
        + _keys(records.TITLE_HIT_KEYS)
        + "}; they are not counted in matches or sessions. Without -n, --json and --format "
        "jsonl/csv/tsv give every hit, and every hit (-n 0 too) is found as with --all. "
        "Records: HIT (title matches are noted on stderr).",
    ),
    (
        "sessions show",
        'SESSION plus "vault" and "messages": [MESSAGE...] (streamed; --tail and --role '
        "apply); vault is the year of the vault store the session was read from, or null for "
        "the live store, and each message carries it too. Records: MESSAGE plus vault.",
    ),
    (
        "sessions stats",
        "STATS = {"
        + _keys(records.STATS_KEYS)
        + "}; by_source: [{"
        + _keys(records.SOURCE_KEYS)
        + "}], by_model: [{"
        + _keys(records.MODEL_KEYS)
        + "}], top_sessions: [{"
        + _keys(records.TOP_SESSION_KEYS)
        + "}], store: {"
        + _keys(records.STORE_KEYS)
        + '}. With --all-profiles: {"profiles": [STATS...], "errors": [ERROR...]}. Records: '
        "one per figure, {"
        + _keys(records.STATS_ROW_KEYS)
        + "} (section is totals, by_source, by_model, top_sessions, store, files or tables).",
    ),
    (
        "sessions recover --json",
        "The recovery report: operation, source, target, report_path, summary (the first "
        "line of the human output), method (copy or salvage), wal, header_fixes, tables (per "
        "table source_rows, on_pages, copied, from_pages, to_lost_and_found, status, expected, "
        "expected_estimated, expected_basis, expected_from, recovered, lost, placeholders, "
        "figures), totals {expected, recovered, lost, estimated} (expected = recovered + lost, "
        "every table counted once), placeholder_session_ids, pages_missing, excluded, "
        "skipped_ranges, lost_and_found (rows kept aside in the target's lost_and_found table, "
        "by reason), deleted_rows_seen, verification (incomplete: checks that could not "
        "finish), complete, partial, verified, accepted, installed (always false).",
    ),
    (
        "sessions import --json",
        "{imported, replaced, appended, skipped, messages, already_there, kept_ids, "
        "renumbered, usage_rows, ok, errors: [{line, session_id, message}], warnings: "
        "[text...]}; exit 1 when errors is not empty.",
    ),
    (
        "sessions prune --json",
        "{older_than_days (to the second), until_at (the cutoff), dry_run, sessions, messages, "
        "session_ids, bytes_reclaimable, busy, kept_for_lineage, children_repointed, "
        "ledger_rows_removed, sources, exclude_sources, started_after_at, since_at (--since), "
        "details: [{id, title, last_active_at, messages, bytes}] (a dry run: its first 50 "
        "sessions), reclaimed (after a real prune: the optimize result, or null)}.",
    ),
    (
        "vault list --json",
        '{"stores": [{' + _keys(records.VAULT_STORE_KEYS) + "}...]}; path is absolute.",
    ),
    (
        "usage",
        "{"
        + _keys(records.USAGE_KEYS)
        + "}; totals and each of groups carry {"
        + _keys(records.USAGE_FIGURE_KEYS)
        + "}, a group first its key (day, week (its Monday), month, model, provider, task, "
        "source, or session_id with title, source and model); a cost no record knows is null "
        "and counted in unknown_cost_count. Records: the groups.",
    ),
    (
        "watch --once",
        "{"
        + _keys(records.WATCH_KEYS)
        + "}; records (jsonl, csv, tsv): {"
        + _keys(records.WATCH_ROW_KEYS)
        + "} per figure; without --once, one snapshot per --interval.",
    ),
    ("db path", "{path, exists, profile}; records: that object."),
    ("db check", "{path, ok, checks: [{" + _keys(records.CHECK_KEYS) + "}]}; records: checks."),
    (
        "db lockowners",
        "{path, supported, note, files, holders: [{pid, command, file, kind, access, "
        "mechanism}], open_files: [{pid, command, file}], uninspectable: [pid...]}; records: {"
        + _keys(records.LOCK_ROW_KEYS)
        + "} per holder and per lock-less opener (lock, access and mechanism null).",
    ),
    (
        "profile list",
        '{"profiles": [{' + _keys(records.PROFILE_KEYS) + "}]}; records: profiles. "
        "profile show prints one such object plus store.",
    ),
)

EXIT_CODES = tuple((str(int(code)), text) for code, text in MEANINGS.items())

ENVIRONMENT = (
    (
        "HERMES_HOME",
        "The Hermes home (default ~/.hermes). A value shaped <root>/profiles/<name> selects "
        "that profile; -p/--profile sets it for the command and for its children.",
    ),
    (
        "NO_COLOR",
        "When set (to anything), print without colours. Only colour changes: the layout is the "
        "same. --color always overrides it.",
    ),
    (
        "FORCE_COLOR",
        "When set, colour output even when it is not a terminal (FORCE_COLOR=0: never). "
        "--color overrides it; it overrides NO_COLOR.",
    ),
    (
        "HERMES_PAGER, PAGER",
        "The pager for long output on a terminal (first set one wins; default less). An empty "
        "value or cat turns paging off, as does --no-pager.",
    ),
    (
        "LESS",
        "Options for less; when unset hermes runs it with FRX (keep colours, leave the last "
        "screen on the terminal).",
    ),
    (
        "COLUMNS, LINES",
        "Override the terminal size hermes lays tables out for (on a terminal only).",
    ),
    ("TERM", "TERM=dumb turns colours and progress bars off."),
    (
        "SHELL",
        "The shell hermes completion show and install are for when none is named (bash, zsh "
        "or fish).",
    ),
    (
        "XDG_DATA_HOME, XDG_CONFIG_HOME, BASH_COMPLETION_USER_DIR",
        "Where hermes completion install puts the completions and this page (see FILES); "
        "unset, ~/.local/share and ~/.config.",
    ),
    (
        "HERMES_STATE_DB_GUARD_BYPASS",
        "Test-only escape hatch: lets a process started by a test open a production state.db. "
        "Never set it for ordinary use.",
    ),
)

FILES = (
    ("$HERMES_HOME/state.db", "The session store (SQLite, WAL mode, mode 0600)."),
    ("$HERMES_HOME/state.db-wal, state.db-shm", "SQLite's write-ahead log and shared memory."),
    ("<root>/active_profile", "The sticky profile chosen by hermes profile use."),
    ("<root>/profiles/<name>/", "A named profile: its own state.db, logs and config."),
    (
        "$HERMES_HOME/logs/errors.log",
        "Warnings and errors of hermes commands (created on the first one, mode 0600).",
    ),
    *(
        (location, f"The {WHAT[target]}, as hermes completion install {target} writes it.")
        for target, location in LOCATIONS.items()
    ),
)


SECURITY_NOTE = (
    "Titles, message content, sources, models and tool names are written by whoever talks to "
    "the agent, so hermes treats them as untrusted. In every human layout (on a terminal, "
    "piped, with or without colour) control characters and escape sequences in stored text "
    "are printed as visible escapes (\\x1b, \\r, \\u009b, \\u202e) instead of being sent to "
    "the terminal, and stored text is never read as markup. --format json keeps the data exact "
    "(JSON escapes); CSV and TSV are exact in a pipe or file and escaped on a terminal."
)


def _paragraphs(text: str) -> str:
    """Return help text as roff paragraphs (blank lines become .PP; \\b blocks kept as set)."""
    return "\n".join(_roff_epilog(text or "")[1:])


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def man(root: CommandDoc) -> str:
    """Return the hermes(1) man page in roff (man macros)."""
    from hermes_state import __version__

    out = [
        f'.\\" hermes(1); {roff_text(GENERATED)}.',
        f'.TH HERMES 1 "" "hermes {__version__}" "User Commands"',
        ".SH NAME",
        "hermes \\- " + roff_text(_lower_first(first_line(root.help).rstrip("."))),
        ".SH SYNOPSIS",
        "\\fBhermes\\fR [\\fB\\-p\\fR \\fINAME\\fR] [\\fB\\-\\-version\\fR] "
        "\\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        roff_text(
            "hermes is the operator's command line over Hermes Agent's session store: one SQLite "
            "file per profile holding every conversation. Browsing commands (sessions list, "
            "search, show, stats, export; db path, check, lockowners) open the store read-only: "
            "they never create, migrate or write it. Errors go to stderr as 'Error: ...' and a "
            "hint line."
        ),
        ".SS Output for people and for programs",
        roff_text(
            "On a terminal, tables are fitted to its width: long titles and models are cut "
            "first, then whole columns are left out in a fixed order (named in a note under the "
            "table); session ids and numbers are never cut. Times are relative (3h ago). Long "
            "output goes through a pager (see HERMES_PAGER). Piped or redirected, the same "
            "layout is printed whole: nothing cut, absolute local times, exact counts, no "
            "colour, no pager. Colour follows --color auto|always|never, FORCE_COLOR and "
            "NO_COLOR; it changes nothing but a search match's look (reverse video, or "
            ">>>marked<<< without colour). --format json|jsonl|csv|tsv (and --json) "
            "print data for programs, described under JSON OUTPUT, and nothing else on stdout."
        ),
        ".SS Stored text",
        roff_text(SECURITY_NOTE),
        ".PP",
        roff_text(
            "-p NAME (or --profile NAME, --profile=NAME) may appear anywhere on the line. AGE "
            "values are a number of days (90), a duration (90d, 12h, 30m, 2w) or an ISO date "
            "(2026-01-31, 2026-01-31T14:30, local time)."
        ),
        ".SH COMMANDS",
    ]
    for c in all_commands(root):
        if not c.key:
            out += [".SS Global options"]
        else:
            out += [f".SS {_usage(c)}", _paragraphs(c.help)]
            # A group is documented by its subcommands, unless it runs on its own (`backup`).
            if c.children and not c.options:
                continue
            if c.epilog:
                out += _roff_epilog(c.epilog)
        for a in c.arguments:
            text = a.help + (" One of: " + ", ".join(a.choices) + "." if a.choices else "")
            out += [".TP", f"\\fI{roff_text(a.shown)}\\fR", roff_text(text.strip())]
        for o in c.options:
            text = o.help
            if o.choices:
                text += " One of: " + ", ".join(o.choices) + "."
            if o.default is not None:
                text += f" Default: {o.default}."
            if o.multiple and "repeatable" not in text:
                text += " May be given more than once."
            out += [".TP", _roff_flags(o), roff_text(text.strip())]
        if c.examples:
            out += [".PP", "Examples:", ".PP", ".RS 4", ".nf"]
            out += [roff_text(e) for e in c.examples]
            out += [".fi", ".RE"]
    out += [".SH JSON OUTPUT", roff_text(JSON_VOCABULARY)]
    for name, text in JSON_KEYS:
        out += [".TP", f"\\fB{roff_text(name)}\\fR", roff_text(text)]
    out.append(".SH EXIT STATUS")
    for code, text in EXIT_CODES:
        out += [".TP", f"\\fB{code}\\fR", roff_text(text)]
    out.append(".SH ENVIRONMENT")
    for name, text in ENVIRONMENT:
        out += [".TP", f"\\fB{roff_text(name)}\\fR", roff_text(text)]
    out.append(".SH FILES")
    for name, text in FILES:
        out += [".TP", f"\\fI{roff_text(name)}\\fR", roff_text(text)]
    out += [
        ".SH EXAMPLES",
        ".nf",
        roff_text('hermes -p coder sessions search "chat-send"'),
        roff_text("hermes sessions list --source telegram --sort active --since 7d"),
        roff_text("hermes sessions show 20261118 --tail 20 --role assistant"),
        roff_text("hermes sessions list --format jsonl | jq -r .id"),
        roff_text("hermes sessions export --until 90d -o old.jsonl"),
        roff_text('hermes sessions show "$(hermes sessions browse --print-id docker)"'),
        roff_text("hermes --json=id,title sessions list --since yesterday"),
        roff_text("hermes sessions prune --older-than 90d --dry-run"),
        roff_text("hermes sessions recover --to /tmp/recovered.db"),
        roff_text("hermes db lockowners --json"),
        ".fi",
        ".SH SEE ALSO",
        "\\fBsqlite3\\fR(1)",
        "",
    ]
    return "\n".join(out)
