"""The bash, zsh and fish completion scripts of a command tree (values are completed at
completion time by `hermes __complete KIND PREFIX`, see hermes_cli.completion.complete)."""

from __future__ import annotations

from hermes_cli.completion.command_docs import (
    GENERATED,
    PROG,
    CommandDoc,
    OptionDoc,
    all_commands,
    base_metavar,
    first_line,
)

# Metavars whose values are paths: complete file names for them.
PATH_METAVARS = frozenset({"PATH", "FILE", "NEW.db", "ARCHIVE", "DIR"})
# Positional arguments that name a profile.
PROFILE_ARG_COMMANDS = frozenset({"profile use", "profile show", "profile delete"})
# Metavars whose values come from `hermes __complete KIND` (options and positional arguments).
VALUE_KINDS = {"ID": "ids", "S": "sources", "R": "roles"}
# What a shell offers for a value (an option's or a positional argument's) is one "spec": a
# kind of `hermes __complete` (ids, titles, sources, roles, profiles), FILE_NAMES, "=" followed by
# the comma-separated choices, or FREE_TEXT (nothing to offer: not even file names).
FILE_NAMES = "files"
FREE_TEXT = ""


def _global_options(root: CommandDoc) -> list[OptionDoc]:
    return [o for o in root.options if "--profile" in o.flags]


# --- shared ---------------------------------------------------------------------------------


def _value_flags(root: CommandDoc) -> list[str]:
    """Every flag that takes a value, in any command (to skip option values on the line)."""
    flags = {f for c in all_commands(root) for o in c.options if o.takes_value for f in o.flags}
    return sorted(flags)


def _spec(metavar: str | None, choices: tuple[str, ...]) -> str:
    """What a shell offers for a value with this metavar (`ID...` is `ID`) and these choices."""
    name = base_metavar(metavar or "")
    if choices:
        return "=" + ",".join(choices)
    if name in PATH_METAVARS:
        return FILE_NAMES
    return VALUE_KINDS.get(name, FREE_TEXT)


def option_spec(o: OptionDoc) -> str:
    """What a shell offers for the value of an option (profiles for -p/--profile)."""
    return "profiles" if "--profile" in o.flags else _spec(o.metavar, o.choices)


def argument_specs(c: CommandDoc) -> list[str]:
    """What a shell offers at each positional argument of a command; when the last argument is
    variadic, its spec also holds for every word after it."""
    return [
        "profiles"
        if c.key in PROFILE_ARG_COMMANDS and a.metavar == "NAME"
        else _spec(a.metavar, a.choices)
        for a in c.arguments
    ]


def _variadic(c: CommandDoc) -> bool:
    return bool(c.arguments) and c.arguments[-1].variadic


# --- bash -----------------------------------------------------------------------------------


def _sh_words(words: list[str]) -> str:
    return " ".join(words)


def bash(root: CommandDoc) -> str:
    """Return the bash completion script."""
    commands = all_commands(root)
    known = [c.key for c in commands if c.key]
    value_flags = " | ".join(f for f in _value_flags(root) if f not in ("-p", "--profile"))
    lines = [
        f"# bash completion for {PROG}; {GENERATED}.",
        "# Install: hermes completion install bash (or source this file from ~/.bashrc).",
        "",
        "# Values from the store of the profile named on the line (read-only, one short process).",
        "_hermes_values() {",
        '    command hermes "${_hermes_profile[@]}" __complete "$@" 2>/dev/null | cut -f1',
        "}",
        "",
        "_hermes_reply() {",
        "    # Keep the order the values come in (recent sessions first) where bash can, and",
        "    # offer no file names when there are none: a file name is never one of these values.",
        "    compopt -o nosort +o default 2>/dev/null",
        '    mapfile -t COMPREPLY < <(_hermes_values "$@")',
        "}",
        "",
        "# Offer what a value is: a kind of `hermes __complete`, files, =choice,choice, or free",
        "# text (empty: nothing to offer).",
        "_hermes_offer() {",
        '    local spec="$1" cur="$2" words title',
        '    case "$spec" in',
        '        "") compopt +o default 2>/dev/null ;;',
        "        files)",
        "            compopt -o filenames 2>/dev/null",
        '            mapfile -t COMPREPLY < <(compgen -f -- "$cur") ;;',
        "        =*)",
        '            words="${spec#=}"',
        '            COMPREPLY=($(compgen -W "${words//,/ }" -- "$cur")) ;;',
        "        *)",
        '            _hermes_reply "$spec" "$cur"',
        '            if [[ "$spec" == ids ]] && ((${#COMPREPLY[@]} == 0)) && [[ -n "$cur" ]]; then',
        "                # No id starts so: offer titles, quoted for the shell.",
        "                while IFS= read -r title; do",
        '                    COMPREPLY+=("$(printf "%q" "$title")")',
        '                done < <(_hermes_values titles "$cur")',
        "            fi ;;",
        "    esac",
        "}",
        "",
        "_hermes() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local cmdpath="" word candidate i skip=0 npos=0',
        "    _hermes_profile=()",
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        word="${COMP_WORDS[i]}"',
        "        if ((skip)); then skip=0; continue; fi",
        '        case "$word" in',
        "            -p | --profile)",
        "                # The profile's value, unless it is the word being completed.",
        '                ((i + 1 < COMP_CWORD)) && _hermes_profile=(-p "${COMP_WORDS[i+1]}")',
        "                skip=1; continue ;;",
        '            --profile=*) _hermes_profile=(-p "${word#--profile=}"); continue ;;',
        f"            {value_flags}) skip=1; continue ;;",
        "            -*) continue ;;",
        "        esac",
        '        candidate="${cmdpath:+$cmdpath }$word"',
        '        case "$candidate" in',
        "            " + " | ".join(f'"{k}"' for k in known) + ') cmdpath="$candidate" ;;',
        "            *) npos=$((npos + 1)) ;;",
        "        esac",
        "    done",
        '    case "$prev" in',
        "        -p | --profile)",
        '            _hermes_reply profiles "$cur"',
        "            return ;;",
        "    esac",
        '    case "$cmdpath:$prev" in',
    ]
    for c in commands:
        for o in c.options:
            if not o.takes_value or "--profile" in o.flags:
                continue
            pattern = " | ".join(f'"{c.key}:{f}"' for f in o.flags)
            lines.append(f'        {pattern}) _hermes_offer "{option_spec(o)}" "$cur"; return ;;')
    lines += [
        "    esac",
        '    local opts="" subs="" spec="" variadic=0',
        "    local -a args=()",
        '    case "$cmdpath" in',
    ]
    for c in commands:
        opts = [f for o in c.options for f in o.flags]
        if c.key:
            opts += [f for o in _global_options(root) for f in o.flags]
        subs = [child.path[-1] for child in c.children]
        body = f'opts="{_sh_words(opts)}"'
        if subs:
            body += f'; subs="{_sh_words(subs)}"'
        specs = argument_specs(c)
        if specs:
            body += "; args=(" + " ".join(f'"{s}"' for s in specs) + ")"
        if _variadic(c):
            body += "; variadic=1"
        lines.append(f'        "{c.key}") {body} ;;')
    lines += [
        "    esac",
        '    if [[ "$cur" == -* ]]; then',
        '        COMPREPLY=($(compgen -W "$opts" -- "$cur"))',
        '    elif [[ -n "$subs" ]]; then',
        '        COMPREPLY=($(compgen -W "$subs" -- "$cur"))',
        "    else",
        "        # The spec of the positional argument being typed; a variadic last one repeats.",
        "        if ((npos < ${#args[@]})); then",
        '            spec="${args[npos]}"',
        "        elif ((variadic)); then",
        '            spec="${args[${#args[@]}-1]}"',
        "        fi",
        '        _hermes_offer "$spec" "$cur"',
        "    fi",
        "}",
        "",
        "complete -o default -F _hermes hermes",
        "",
    ]
    return "\n".join(lines)


# --- zsh ------------------------------------------------------------------------------------


def _zsh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _zsh_desc(text: str) -> str:
    # ':' separates the word from its description in _describe lists.
    return first_line(text).replace(":", "\\:")


def zsh(root: CommandDoc) -> str:
    """Return the zsh completion script (#compdef hermes)."""
    commands = all_commands(root)
    known = [c.key for c in commands if c.key]
    value_flags = "|".join(f for f in _value_flags(root) if f not in ("-p", "--profile"))
    lines = [
        "#compdef hermes",
        f"# zsh completion for {PROG}; {GENERATED}.",
        "# Install: hermes completion install zsh (or put this file, named _hermes, in a",
        "# directory on $fpath; or, after compinit, source <(hermes completion show zsh)).",
        "",
        "# Values from the store of the profile named on the line (read-only, one short process).",
        "_hermes_values() {",
        '    command hermes "${_hermes_profile[@]}" __complete "$@" 2>/dev/null',
        "}",
        "",
        "_hermes_complete() {",
        "    local kind=$1 line",
        "    local -a found described",
        '    found=(${(f)"$(_hermes_values $kind "${words[CURRENT]}")"})',
        "    if [[ $kind == ids ]]; then",
        "        for line in $found; do",
        "            # id<TAB>title becomes id:title for _describe (':' in the id escaped).",
        "            if [[ $line == *$'\\t'* ]]; then",
        "                described+=(\"${${line%%$'\\t'*}//:/\\\\:}:${line#*$'\\t'}\")",
        "            else",
        '                described+=("${line//:/\\\\:}")',
        "            fi",
        "        done",
        "        _describe -V -t sessions session described",
        '        found=(${(f)"$(_hermes_values titles "${words[CURRENT]}")"})',
        "        if (( ${#found} )); then compadd -V titles -- $found; fi",
        "    else",
        "        compadd -V $kind -- $found",
        "    fi",
        "}",
        "",
        "# Offer what a value is: a kind of `hermes __complete`, files, =choice,choice, or free",
        "# text (empty: nothing to offer).",
        "_hermes_offer() {",
        "    case $1 in",
        "        ('') ;;",
        "        (files) _files ;;",
        "        ('='*) compadd -- ${(s:,:)${1#=}} ;;  # quoted: =word is a command's path",
        "        (*) _hermes_complete $1 ;;",
        "    esac",
        "}",
        "",
        "_hermes() {",
        '    local cmdpath="" word candidate prev="${words[CURRENT-1]}" spec=""',
        "    local -i i skip=0 npos=0 variadic=0",
        "    local -a opts subs args",
        "    _hermes_profile=()",
        "    for ((i = 2; i < CURRENT; i++)); do",
        '        word="${words[i]}"',
        "        if ((skip)); then skip=0; continue; fi",
        '        case "$word" in',
        "            -p|--profile)",
        '                ((i + 1 < CURRENT)) && _hermes_profile=(-p "${words[i+1]}")',
        "                skip=1; continue ;;",
        '            --profile=*) _hermes_profile=(-p "${word#--profile=}"); continue ;;',
        f"            {value_flags}) skip=1; continue ;;",
        "            -*) continue ;;",
        "        esac",
        '        candidate="${cmdpath:+$cmdpath }$word"',
        '        case "$candidate" in',
        "            (" + "|".join(_zsh_quote(k) for k in known) + ') cmdpath="$candidate" ;;',
        "            (*) npos=$((npos + 1)) ;;",
        "        esac",
        "    done",
        '    case "$prev" in',
        "        -p|--profile) _hermes_complete profiles; return ;;",
        "    esac",
        '    case "$cmdpath:$prev" in',
    ]
    for c in commands:
        for o in c.options:
            if not o.takes_value or "--profile" in o.flags:
                continue
            pattern = "|".join(_zsh_quote(f"{c.key}:{f}") for f in o.flags)
            spec = option_spec(o)
            if spec == FREE_TEXT:
                action = f"_message {_zsh_quote(o.metavar or 'value')}"
            else:
                action = f"_hermes_offer {_zsh_quote(spec)}"
            lines.append(f"        ({pattern}) {action}; return ;;")
    lines += ["    esac", '    case "$cmdpath" in']
    for c in commands:
        entries = [
            _zsh_quote(f"{f}:{_zsh_desc(o.help)}")
            for o in [*c.options, *(_global_options(root) if c.key else [])]
            for f in o.flags
        ]
        subs = [_zsh_quote(f"{ch.path[-1]}:{_zsh_desc(ch.help)}") for ch in c.children]
        body = f"opts=({' '.join(entries)})"
        body += f"; subs=({' '.join(subs)})"
        specs = argument_specs(c)
        if specs:
            body += "; args=(" + " ".join(_zsh_quote(s) for s in specs) + ")"
        if _variadic(c):
            body += "; variadic=1"
        lines.append(f"        ({_zsh_quote(c.key)}) {body} ;;")
    lines += [
        "    esac",
        '    if [[ "${words[CURRENT]}" == -* ]]; then',
        "        _describe -t options option opts",
        "    elif (( ${#subs} )); then",
        "        _describe -t commands command subs",
        "    else",
        "        # The spec of the positional argument being typed; a variadic last one repeats.",
        "        if (( npos < ${#args} )); then",
        "            spec=${args[npos+1]}",
        "        elif (( variadic )); then",
        "            spec=${args[-1]}",
        "        fi",
        '        _hermes_offer "$spec"',
        "    fi",
        "}",
        "",
        "# Autoloaded by compinit: complete now. Sourced: register for the hermes command.",
        'if [[ "$funcstack[1]" == _hermes ]]; then',
        '    _hermes "$@"',
        "elif (( $+functions[compdef] )); then",
        "    compdef _hermes hermes",
        "fi",
        "",
    ]
    return "\n".join(lines)


# --- fish -----------------------------------------------------------------------------------


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_values(spec: str) -> list[str]:
    """Return the `complete` arguments that offer a spec's values (one line each; ids first)."""
    if spec == FREE_TEXT:
        return []
    if spec == FILE_NAMES:
        return ["-F"]
    if spec.startswith("="):
        return [f"-a {_fish_quote(' '.join(spec[1:].split(',')))}"]
    values = [f"-k -a '(__hermes_values {spec})'"]
    if spec == "ids":
        values.append("-a '(__hermes_values titles)'")  # titles name sessions too
    return values


def fish(root: CommandDoc) -> str:
    """Return the fish completion script."""
    commands = all_commands(root)
    known = [c.key for c in commands if c.key]
    value_flags = " ".join(f for f in _value_flags(root) if f not in ("-p", "--profile"))
    lines = [
        f"# fish completion for {PROG}; {GENERATED}.",
        "# Install: hermes completion install fish (or copy this file to",
        "# ~/.config/fish/completions/hermes.fish).",
        "",
        "set -g __hermes_known " + " ".join(_fish_quote(k) for k in known),
        "set -g __hermes_value_flags " + value_flags,
        "",
        "# The -p NAME on the line, as arguments for hermes (empty when there is none).",
        "function __hermes_profile_args",
        "    set -l tokens (commandline -opc)",
        "    set -l next 0",
        "    for t in $tokens",
        "        if test $next = 1",
        "            echo -p",
        "            echo $t",
        "            return",
        "        end",
        "        switch $t",
        "            case -p --profile",
        "                set next 1",
        "            case '--profile=*'",
        "                echo -p",
        "                string replace -- --profile= '' $t",
        "                return",
        "        end",
        "    end",
        "end",
        "",
        "# Values from the store of that profile (read-only, one short process).",
        "function __hermes_values",
        "    command hermes (__hermes_profile_args) __complete $argv (commandline -ct) 2>/dev/null",
        "end",
        "",
        "function __hermes_walk",
        "    set -l tokens (commandline -opc)",
        "    set -e tokens[1]",
        "    set -l cmdpath",
        "    set -l npos 0",
        "    set -l skip 0",
        "    for t in $tokens",
        "        if test $skip = 1",
        "            set skip 0",
        "            continue",
        "        end",
        "        if contains -- $t -p --profile $__hermes_value_flags",
        "            set skip 1",
        "            continue",
        "        end",
        "        switch $t",
        "            case '-*'",
        "                continue",
        "        end",
        "        set -l candidate (string join ' ' $cmdpath $t)",
        "        if contains -- $candidate $__hermes_known",
        "            set cmdpath $cmdpath $t",
        "        else",
        "            set npos (math $npos + 1)",
        "        end",
        "    end",
        "    echo $npos",
        "    string join ' ' $cmdpath",
        "end",
        "",
        "function __hermes_at",
        "    set -l walked (__hermes_walk)",
        '    test "$walked[2]" = "$argv[1]"',
        "end",
        "",
        "# At command $argv[1], typing its positional argument number $argv[2] (from 0), or any",
        "# after it when $argv[3] is given (a variadic last argument).",
        "function __hermes_arg",
        "    set -l walked (__hermes_walk)",
        '    test "$walked[2]" = "$argv[1]"; or return 1',
        "    if set -q argv[3]",
        "        test $walked[1] -ge $argv[2]",
        "    else",
        "        test $walked[1] -eq $argv[2]",
        "    end",
        "end",
        "",
        "complete -c hermes -f",
        "complete -c hermes -s p -l profile -x -k -a '(__hermes_values profiles)' -d "
        + _fish_quote(first_line(_global_options(root)[0].help)),
    ]
    for c in commands:
        cond = f"-n {_fish_quote('__hermes_at ' + _fish_quote(c.key))}"
        for ch in c.children:
            lines.append(
                f"complete -c hermes {cond} -a {ch.path[-1]} -d {_fish_quote(ch.short_help)}"
            )
        specs = argument_specs(c)
        for i, spec in enumerate(specs):
            more = " more" if i == len(specs) - 1 and _variadic(c) else ""
            at = f"-n {_fish_quote(f'__hermes_arg {_fish_quote(c.key)} {i}{more}')}"
            for values in _fish_values(spec):
                lines.append(f"complete -c hermes {at} {values}")
        for o in c.options:
            if "--profile" in o.flags:
                continue
            parts = []
            for f in o.flags:
                parts.append(f"-l {f[2:]}" if f.startswith("--") else f"-s {f[1:]}")
            flags = " ".join(parts)
            if o.takes_value:
                spec = option_spec(o)
                if spec == FILE_NAMES:
                    flags += " -r -F"
                else:
                    flags += " -x" + "".join(f" {v}" for v in _fish_values(spec)[:1])
            lines.append(f"complete -c hermes {cond} {flags} -d {_fish_quote(first_line(o.help))}")
    lines.append("")
    return "\n".join(lines)
