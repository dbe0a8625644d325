"""`verify`: the command-line front door of kvproof.

Each subcommand lives in its own module kvproof.cli.cmd_<name> with `add_arguments(parser)` and
`run(args) -> int`. Exit codes: 0 accepted or proved, 1 rejected or counterexample, 2 bad input.
Bad input is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import version
from typing import NoReturn

from kvproof.cli.args import UsageError
from kvproof.engines.verdict import EngineError
from kvproof.impl.packer import PlanError
from kvproof.spec.catalog import ConfigError

COMMANDS = ("plan", "check", "prove", "synth", "report", "mutants", "engine", "config", "sweep")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own errors exit 2 with one line too
        self.exit(2, f"verify: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="verify", description="Verify KV-cache plans of hybrid MLA + KDA models.")
    parser.add_argument("--version", action="version", version=f"kvproof {version('kvproof')}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    modules = {}
    for name in COMMANDS:
        module = importlib.import_module(f"kvproof.cli.cmd_{name}")
        module.add_arguments(sub.add_parser(name, help=(module.__doc__ or name).splitlines()[0]))
        modules[name] = module
    args = parser.parse_args(argv)
    try:
        return modules[args.command].run(args)
    except (ConfigError, EngineError, PlanError, UsageError) as err:
        print(f"verify {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
