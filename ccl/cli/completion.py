"""``ccl completion bash|zsh|fish``: a shell completion script generated from the parser.

The script knows the commands and subcommands, every option of each, the choices argparse
declares, the topology library's names for ``--topology``/``-t``, the collectives, the solver
names, and completes files where a command takes a FILE. It is generated, never hand-kept: a new
option is in the next script. No dependency beyond the shell itself (no bash-completion
package, no argcomplete).

A word extends the command path when it names a subcommand of the path so far; options and
their values are skipped. Only leaf commands take options with values, so no value is mistaken
for a subcommand.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

import topologies
from solvers import SOLVERS

from ..core.collective import BUILTIN_KINDS
from .common import command, emit

SHELLS = ("bash", "zsh", "fish")

# How an option's or a positional argument's value completes: one of these kinds or a word list.
FILE, DIR, TOPOLOGY, NONE = "@file", "@dir", "@topology", "@none"
FILE_DESTS = {"file", "files", "output", "trace", "plot", "sketch"}
DIR_DESTS = {"save_dir"}

INSTALL = """\
print a shell completion script for ccl's commands, options, choices, topologies and files.
Install it once:
  bash: ccl completion bash > ~/.local/share/bash-completion/completions/ccl
        (or add  eval "$(ccl completion bash)"  to ~/.bashrc)
  zsh:  ccl completion zsh > ~/.zfunc/_ccl, with  fpath+=(~/.zfunc)  before compinit in ~/.zshrc
        (or add  eval "$(ccl completion zsh)"  after compinit)
  fish: ccl completion fish > ~/.config/fish/completions/ccl.fish
then open a new shell. Generate it again after upgrading ccl."""


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    help: str
    values: str | None  # None: a flag; else a value kind (FILE, DIR, TOPOLOGY, NONE) or words


@dataclass(frozen=True)
class Command:
    path: str  # "" for ccl itself, "emit msccl"
    subcommands: tuple[tuple[str, str], ...]  # (name, help)
    options: tuple[Option, ...]
    positional: str | None  # value kind of its positional arguments, None if it takes none


def command_tree(parser: argparse.ArgumentParser) -> list[Command]:
    """Every command of ``parser``, parents before children, in the parser's order."""
    names = _value_words()
    out: list[Command] = []

    def walk(p: argparse.ArgumentParser, path: str) -> None:
        subs: list[tuple[str, str]] = []
        children: list[tuple[str, argparse.ArgumentParser]] = []
        options: list[Option] = []
        positional = None
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help or "" for a in action._choices_actions}
                for name, child in action.choices.items():
                    subs.append((name, _short(helps.get(name, ""))))
                    children.append((name, child))
            elif action.help == argparse.SUPPRESS:
                continue
            elif action.option_strings:
                values = None if action.nargs == 0 else _values(action, names)
                options.append(Option(tuple(action.option_strings), _short(action.help or ""), values))
            elif positional is None:
                positional = _values(action, names)
        out.append(Command(path, tuple(subs), tuple(options), positional))
        for name, child in children:
            walk(child, f"{path} {name}".strip())

    walk(parser, "")
    return out


def _value_words() -> dict[str, tuple[str, ...]]:
    return {"topology": tuple(topologies.BUILDERS), "collective": tuple(BUILTIN_KINDS),
            "solver": tuple(SOLVERS)}


def _values(action: argparse.Action, names: dict[str, tuple[str, ...]]) -> str:
    if action.choices:
        return " ".join(str(c) for c in action.choices)
    dest = action.dest
    if dest == "topology":
        return TOPOLOGY
    if dest in ("collective", "solver"):
        words = list(names[dest])
        if isinstance(action.default, str) and action.default not in words:
            words.insert(0, action.default)  # e.g. a default such as "auto" that is no registry name
        return " ".join(words)
    if dest in FILE_DESTS or str(action.metavar or "").lower().endswith("file"):
        return FILE
    if dest in DIR_DESTS:
        return DIR
    return NONE


def _short(text: str) -> str:
    """A help text cut to one short clause for the shells' description columns."""
    text = " ".join(text.split())
    for stop in ("; ", " ("):
        head = text.split(stop)[0]
        if len(head) >= 12:
            text = head
    return text if len(text) <= 70 else text[:67] + "..."


# ---------------------------------------------------------------------- bash
def bash_script(tree: list[Command], prog: str = "ccl") -> str:
    fn = f"_{prog}"
    topo_names = " ".join(_topology_names())
    lines = [f"# bash completion for {prog} (generated by `{prog} completion bash`; generate it again after upgrading)",
             "", f"{fn}_commands() {{", '    case "$1" in']
    for c in tree:
        if c.subcommands:
            lines.append(f'        {_case(c.path)}) echo "{" ".join(n for n, _ in c.subcommands)}" ;;')
    lines += ["    esac", "}", "", f"{fn}_options() {{", '    case "$1" in']
    for c in tree:
        lines.append(f'        {_case(c.path)}) echo "{" ".join(f for o in c.options for f in o.flags)}" ;;')
    lines += ["    esac", "}", "", "# the value kind of option $2 of command $1 (nothing: a flag)", f"{fn}_values() {{",
              '    case "$1 $2" in']
    for c in tree:
        for o in c.options:
            if o.values is not None:
                pattern = "|".join(_case(f"{c.path} {f}") for f in o.flags)
                lines.append(f'        {pattern}) echo "{o.values}" ;;')
    lines += ["    esac", "}", "", f"{fn}_positional() {{", '    case "$1" in']
    for c in tree:
        if c.positional is not None:
            lines.append(f'        {_case(c.path)}) echo "{c.positional}" ;;')
    lines += ["    esac", "}", "", f"""{fn}_complete_values() {{
    local IFS=$'\\n'
    case "$1" in
        {FILE}) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$2")) ;;
        {DIR}) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- "$2")) ;;
        {TOPOLOGY}) compopt -o filenames 2>/dev/null
            COMPREPLY=($(IFS=' ' compgen -W "{topo_names}" -- "$2") $(compgen -f -- "$2")) ;;
        {NONE}) COMPREPLY=() ;;
        *) COMPREPLY=($(IFS=' ' compgen -W "$1" -- "$2")) ;;
    esac
}}

{fn}() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="" cmdpath="" word subs kind i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        [[ "$word" == -* ]] && continue
        subs=" $({fn}_commands "$cmdpath") "
        [[ "$subs" == *" $word "* ]] && cmdpath="${{cmdpath:+$cmdpath }}$word"
    done
    ((COMP_CWORD > 1)) && prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    if [[ "$cur" == "=" && "$prev" == -* ]]; then
        cur=""  # --option=<TAB>: bash splits the word at '='
    elif [[ "$prev" == "=" ]] && ((COMP_CWORD > 2)); then
        prev="${{COMP_WORDS[COMP_CWORD-2]}}"
    fi
    if [[ "$prev" == -* ]]; then
        kind="$({fn}_values "$cmdpath" "$prev")"
        if [[ -n "$kind" ]]; then
            {fn}_complete_values "$kind" "$cur"
            return 0
        fi
    fi
    subs="$({fn}_commands "$cmdpath")"
    if [[ "$cur" != -* && -n "$subs" ]]; then
        COMPREPLY=($(compgen -W "$subs" -- "$cur"))
        return 0
    fi
    kind="$({fn}_positional "$cmdpath")"
    if [[ "$cur" != -* && -n "$kind" ]]; then
        {fn}_complete_values "$kind" "$cur"
        return 0
    fi
    COMPREPLY=($(compgen -W "$({fn}_options "$cmdpath")" -- "$cur"))
}}

complete -F {fn} {prog}"""]
    return "\n".join(lines) + "\n"


def _case(path: str) -> str:
    return f'"{path}"'


def _topology_names() -> tuple[str, ...]:
    return tuple(topologies.BUILDERS)


# ---------------------------------------------------------------------- zsh
def zsh_script(tree: list[Command], prog: str = "ccl") -> str:
    fn = f"_{prog}"
    lines = [f"#compdef {prog}",
             f"# zsh completion for {prog} (generated by `{prog} completion zsh`; generate it again after upgrading)",
             "", f"{fn}_commands() {{", "    reply=()", '    case "$1" in']
    for c in tree:
        if c.subcommands:
            items = " ".join(_zsh_quote(f"{n}:{h}") for n, h in c.subcommands)
            lines.append(f'        {_case(c.path)}) reply=({items}) ;;')
    lines += ["    esac", "}", "", f"{fn}_options() {{", "    reply=()", '    case "$1" in']
    for c in tree:
        items = " ".join(_zsh_quote(f"{f}:{o.help}") for o in c.options for f in o.flags)
        lines.append(f'        {_case(c.path)}) reply=({items}) ;;')
    lines += ["    esac", "}", "", f"{fn}_values() {{", "    REPLY=", '    case "$1 $2" in']
    for c in tree:
        for o in c.options:
            if o.values is not None:
                pattern = "|".join(_case(f"{c.path} {f}") for f in o.flags)
                lines.append(f'        {pattern}) REPLY="{o.values}" ;;')
    lines += ["    esac", "}", "", f"{fn}_positional() {{", "    REPLY=", '    case "$1" in']
    for c in tree:
        if c.positional is not None:
            lines.append(f'        {_case(c.path)}) REPLY="{c.positional}" ;;')
    topo_names = " ".join(_topology_names())
    lines += ["    esac", "}", "", f"""{fn}_complete_values() {{
    case "$1" in
        {FILE}) _files ;;
        {DIR}) _files -/ ;;
        {TOPOLOGY}) compadd -- {topo_names}; _files ;;
        {NONE}) _message 'value' ;;
        *) compadd -- ${{=1}} ;;
    esac
}}

{fn}() {{
    local cmdpath="" word i
    local -a reply names
    for (( i = 2; i < CURRENT; i++ )); do
        word="${{words[i]}}"
        [[ "$word" == -* ]] && continue
        {fn}_commands "$cmdpath"
        names=(${{reply%%:*}})
        (( ${{names[(Ie)$word]}} )) && cmdpath="${{cmdpath:+$cmdpath }}$word"
    done
    local cur="${{words[CURRENT]}}" prev="${{words[CURRENT-1]}}"
    if [[ "$prev" == -* ]]; then
        {fn}_values "$cmdpath" "$prev"
        if [[ -n "$REPLY" ]]; then
            {fn}_complete_values "$REPLY"
            return
        fi
    fi
    {fn}_commands "$cmdpath"
    if [[ "$cur" != -* ]] && (( $#reply )); then
        _describe -t commands 'command' reply
        return
    fi
    {fn}_positional "$cmdpath"
    if [[ "$cur" != -* && -n "$REPLY" ]]; then
        {fn}_complete_values "$REPLY"
        return
    fi
    {fn}_options "$cmdpath"
    _describe -t options 'option' reply
}}

if [[ "$funcstack[1]" == "{fn}" ]]; then
    {fn} "$@"
else
    compdef {fn} {prog}
fi"""]
    return "\n".join(lines) + "\n"


def _zsh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# ---------------------------------------------------------------------- fish
def fish_script(tree: list[Command], prog: str = "ccl") -> str:
    fn = f"__{prog}"
    lines = [f"# fish completion for {prog} (generated by `{prog} completion fish`; generate it again after upgrading)",
             "", f"function {fn}_commands", '    switch "$argv[1]"']
    for c in tree:
        if c.subcommands:
            lines += [f"        case {_fish_quote(c.path)}",
                      f"            printf '%s\\n' {' '.join(n for n, _ in c.subcommands)}"]
    lines += ["    end", "end", "", f"""# the command path of the line being completed ("emit msccl")
function {fn}_path
    set -l cmdpath
    set -l tokens (commandline -opc)
    set -e tokens[1]
    for word in $tokens
        string match -q -- '-*' $word; and continue
        if contains -- $word ({fn}_commands (string join ' ' $cmdpath))
            set cmdpath $cmdpath $word
        end
    end
    string join ' ' $cmdpath
end

function {fn}_at
    set -l cmdpath ({fn}_path)
    test "$cmdpath" = "$argv[1]"
end

complete -c {prog} -f"""]
    topo_names = " ".join(_topology_names())
    for c in tree:
        at = f"-n {_fish_quote(f'{fn}_at {_fish_quote(c.path)}')}"
        for name, help in c.subcommands:
            lines.append(f"complete -c {prog} {at} -a {name} -d {_fish_quote(help)}")
        for o in c.options:
            flags = " ".join(f"-l {f[2:]}" if f.startswith("--") else f"-s {f[1:]}" for f in o.flags)
            value = "" if o.values is None else " -r" + _fish_values(o.values, topo_names)
            lines.append(f"complete -c {prog} {at} {flags}{value} -d {_fish_quote(o.help)}")
        if c.positional is not None and c.positional != NONE:
            lines.append(f"complete -c {prog} {at}{_fish_values(c.positional, topo_names)}")
    return "\n".join(lines) + "\n"


def _fish_values(kind: str, topo_names: str) -> str:
    if kind in (FILE, DIR):
        return " -F"
    if kind == TOPOLOGY:
        return f" -F -a {_fish_quote(topo_names)}"
    if kind == NONE:
        return ""
    return f" -f -a {_fish_quote(kind)}"


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


SCRIPTS = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script of ``shell`` for ``parser`` (the ``ccl`` command's: ``ccl.cli.build_parser()``)."""
    return SCRIPTS[shell](command_tree(parser), parser.prog)


def cmd_completion(args: argparse.Namespace) -> int:
    text = script(args.shell, args.root_parser)
    emit(args, {"shell": args.shell, "script": text}, text.rstrip("\n"))
    return 0


def register(sub: Any) -> None:
    p = command(sub, "completion", "print a shell completion script for bash, zsh or fish", cmd_completion)
    p.description = INSTALL
    p.add_argument("shell", choices=SHELLS, help="the shell: bash, zsh or fish")
