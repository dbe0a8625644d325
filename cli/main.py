"""`verify`: the command-line front door of kvproof.

Each subcommand lives in its own module kvproof.cli.cmd_<name> with `add_arguments(parser)` and
`run(args) -> int`. Exit codes: 0 accepted or proved, 1 rejected or counterexample, 2 bad input.
Bad input is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from importlib.metadata import version
from types import ModuleType
from typing import NoReturn

from kvproof.cli.args import UsageError
from kvproof.engines.verdict import EngineError
from kvproof.impl.packer import PlanError
from kvproof.spec.catalog import ConfigError

# In the order `verify --help` lists them. A run imports its own command's module only: one
# command's start-up never pays for another's imports (`verify config` answers in half a second).
COMMANDS = ("plan", "check", "prove", "synth", "report", "mutants", "engine", "config", "sweep")


def command(name: str) -> ModuleType:
    return importlib.import_module(f"kvproof.cli.cmd_{name}")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own errors exit 2 with one line too
        self.exit(2, f"verify: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="verify", description="Verify KV-cache plans of hybrid MLA + KDA models.")
    parser.add_argument("--version", action="version", version=f"kvproof {version('kvproof')}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    given = argv if argv is not None else sys.argv[1:]
    wanted = [n for n in COMMANDS if given[:1] == [n]] or COMMANDS  # --help and typos list every command
    for name in wanted:
        module = command(name)
        module.add_arguments(sub.add_parser(name, help=(module.__doc__ or name).splitlines()[0]))
    args = parser.parse_args(argv)
    try:
        return command(args.command).run(args)
    except (ConfigError, EngineError, PlanError, UsageError) as err:
        print(f"verify {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader stopped (`| head`): the rest is not wanted, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own flush at exit would raise again
        return 141


if __name__ == "__main__":
    sys.exit(main())
