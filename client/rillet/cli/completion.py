"""``rillet completion bash|zsh``: a completion script generated from the parser itself, so it never
falls behind the commands (plugins such as ``rillet standalone`` included)."""

from __future__ import annotations

import argparse


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(o for action in parser._actions for o in action.option_strings if o.startswith("--"))


def value_option_spellings(parser: argparse.ArgumentParser) -> list[str]:
    """Every spelling of the parser's own options that take a value (``--endpoint``, ``--as``): their
    names and the abbreviations argparse accepts for them (a prefix of that long option only), so that
    finding the command word skips the option's value too."""
    longs = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
    spellings = set()
    for action in parser._actions:
        if action.nargs == 0:
            continue  # a flag (--json, --help, --version)
        for option in action.option_strings:
            spellings.add(option)
            if parser.allow_abbrev and option.startswith("--"):
                spellings.update(option[:end] for end in range(3, len(option))
                                 if [o for o in longs if o.startswith(option[:end])] == [option])
    return sorted(spellings)


def bash_script(parser: argparse.ArgumentParser) -> str:
    """A bash function completing ``rillet COMMAND ACTION --option``; zsh runs it through bashcompinit."""
    cases = []
    commands = _subcommands(parser)
    for name, command in commands.items():
        actions = _subcommands(command)
        words = " ".join(actions) if actions else " ".join(_options(command))
        cases.append(f"        {name}) words=\"{words}\" ;;")
        for action, sub in actions.items():
            cases.append(f"        {name}/{action}) words=\"{' '.join(_options(sub))}\" ;;")
    return "\n".join([
        "# rillet completion (bash; zsh: autoload -U bashcompinit && bashcompinit first)",
        "_rillet() {",
        "    local cur=${COMP_WORDS[COMP_CWORD]} path= words= i",
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        "        case ${COMP_WORDS[i]} in",
        f"            {'|'.join(value_option_spellings(parser))}) ((i++)) ;;",
        "            -*) ;;",
        "            *) if [[ -z $path ]]; then path=${COMP_WORDS[i]};",
        "               elif [[ $path != */* ]]; then path=$path/${COMP_WORDS[i]}; fi ;;",
        "        esac",
        "    done",
        "    case $path in",
        f"        '') words=\"{' '.join(commands)} {' '.join(_options(parser))}\" ;;",
        *cases,
        "    esac",
        "    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))",
        "}",
        "complete -F _rillet rillet",
        "",
    ])


def register(commands: argparse._SubParsersAction, root: argparse.ArgumentParser) -> None:
    p = commands.add_parser("completion", help="print a shell completion script: eval \"$(rillet completion bash)\"")
    p.add_argument("shell", choices=["bash", "zsh"])
    p.set_defaults(func=lambda args: print(bash_script(root), end=""))
