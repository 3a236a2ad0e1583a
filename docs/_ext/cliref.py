"""The command-line reference, read from the parser the `clpatch` command itself builds
(`clpatch.cli.main.build_parser`), so the page cannot drift from `clpatch COMMAND --help`.

Pure Python (no Sphinx import): `commands()` returns what each command's page section shows;
`clpatch_docs.py` turns it into document nodes and tests/test_docs_site.py checks that every
command is there.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Argument:
    """One argument: how it is written (`-k K, --k K` or `input`) and its expanded help."""

    invocation: str
    help: str


@dataclass(frozen=True)
class Command:
    """One command (the top level's name is `clpatch`): its usage line, one-line summary,
    description, argument groups [(title, [Argument])] and epilog."""

    name: str
    summary: str
    usage: str
    description: str
    groups: list[tuple[str, list[Argument]]] = field(default_factory=list)
    epilog: str = ""


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    # A wide formatter, so usage lines wrap only where they are long.
    return argparse.HelpFormatter(parser.prog, width=100, max_help_position=40)


def _arguments(parser: argparse.ArgumentParser) -> list[tuple[str, list[Argument]]]:
    formatter = _formatter(parser)
    out = []
    for group in parser._action_groups:
        args = []
        for action in group._group_actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
                continue
            invocation = formatter._format_action_invocation(action)
            text = formatter._expand_help(action) if action.help else ""
            args.append(Argument(invocation, " ".join(text.split())))
        if args:
            out.append((group.title or "arguments", args))
    return out


def _walk(parser: argparse.ArgumentParser, name: str, summary: str) -> list[Command]:
    usage = _formatter(parser)
    usage.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    found = [Command(name, summary, usage.format_help().strip(), parser.description or "",
                     _arguments(parser), parser.epilog or "")]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for sub, subparser in action.choices.items():
                found += _walk(subparser, f"{name} {sub}", helps.get(sub, ""))
    return found


def commands(parser: argparse.ArgumentParser | None = None) -> list[Command]:
    """The `clpatch` command and every subcommand, in the parser's order."""
    if parser is None:
        from clpatch.cli.main import build_parser

        parser = build_parser()
    return _walk(parser, parser.prog, "")
