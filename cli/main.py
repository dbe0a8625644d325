"""`verify`: the command-line front door of kvproof.

Each subcommand lives in its own module kvproof.cli.cmd_<name> with `add_arguments(parser)` and
`run(args) -> int`. Exit codes: 0 accepted or proved, 1 rejected or counterexample, 2 bad input.
Bad input is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import version
from types import ModuleType
from typing import NoReturn

from kvproof.cli import (
    cmd_check,
    cmd_config,
    cmd_engine,
    cmd_mutants,
    cmd_plan,
    cmd_prove,
    cmd_report,
    cmd_sweep,
    cmd_synth,
)
from kvproof.cli.args import UsageError
from kvproof.engines.verdict import EngineError
from kvproof.impl.packer import PlanError
from kvproof.spec.catalog import ConfigError

# In the order `verify --help` lists them; imported by name, so every import-graph tool sees them.
COMMANDS: dict[str, ModuleType] = {
    "plan": cmd_plan, "check": cmd_check, "prove": cmd_prove, "synth": cmd_synth, "report": cmd_report,
    "mutants": cmd_mutants, "engine": cmd_engine, "config": cmd_config, "sweep": cmd_sweep,
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own errors exit 2 with one line too
        self.exit(2, f"verify: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="verify", description="Verify KV-cache plans of hybrid MLA + KDA models.")
    parser.add_argument("--version", action="version", version=f"kvproof {version('kvproof')}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, module in COMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=(module.__doc__ or name).splitlines()[0]))
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except (ConfigError, EngineError, PlanError, UsageError) as err:
        print(f"verify {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader stopped (`| head`): the rest is not wanted, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own flush at exit would raise again
        return 141


if __name__ == "__main__":
    sys.exit(main())
