"""Project tools behind one CLI (`python -m tools <command>`): tools.preview is the offline preview engine,
tools.live the commands against a live stack, tools.staging the weight copier the staging Job ships.

What every command's parser shares lives here, standard library only (the staging Job ships this file)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

SCRIPT = "kimi"
"""The console script pyproject.toml installs ([project.scripts]); tests/test_cli.py holds the two equal."""
MODULE = "python -m tools"


def program() -> str:
    """The program the user typed: `kimi` when the console script runs, else `python -m tools` (also for the
    modules' own `python -m tools.<room>.<module>` entry points, whose documented spelling is the CLI's)."""
    return SCRIPT if os.path.splitext(os.path.basename(sys.argv[0] or ""))[0] == SCRIPT else MODULE


def prog(command: str) -> str:
    """argparse's `prog` of a subcommand, so its usage line and errors name what the user typed."""
    return f"{program()} {command}"


def deprecated(parser: argparse.ArgumentParser, old: str, new: str, **kwargs: Any) -> None:
    """Accept `old`, the earlier spelling of option `new`, for one release: hidden from --help (the new
    option's help names it), it sets the same value and says once on stderr what to type instead."""
    dest = new.lstrip("-").replace("-", "_")

    class Renamed(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:
            print(f"{parser.prog}: note: {old} is now {new}; {old} goes away in the next release", file=sys.stderr)
            setattr(namespace, dest, values)

    parser.add_argument(old, dest=dest, action=Renamed, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **kwargs)
