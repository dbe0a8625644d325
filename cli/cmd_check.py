"""Check a plan emitted by any engine (plan JSON) against every named property."""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path

from kvproof.cli.args import UsageError
from kvproof.spec.catalog import ConfigError, read_json
from kvproof.spec.check import check
from kvproof.spec.plan_reader import padding_bound_of
from kvproof.spec.properties import NAME_WIDTH, PROPERTIES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan", metavar="PLAN.json", help="a bound plan in the schema of the README")
    parser.add_argument("--property", nargs="+", action="extend",
                        choices=sorted(PROPERTIES), help="check only these properties")
    parser.add_argument("--max-padding", metavar="X|inf", type=float,
                        help="impose this padding bound (overrides the plan's max_padding, null included; "
                        "inf: no bound)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def load_plan(path: str) -> dict:
    plan = read_json(Path(path), "plan")
    if not isinstance(plan, dict):
        raise UsageError(f"{path}: a plan is a JSON object")
    return plan


def run(args: argparse.Namespace) -> int:
    checked = args.property or sorted(PROPERTIES)
    plan = load_plan(args.plan)
    if args.max_padding == math.inf:  # no bound, as plan/prove/synth/config take it: the plan's null
        plan, imposed = {**plan, "max_padding": None}, None
    else:
        try:
            imposed = padding_bound_of(args.max_padding, "--max-padding")
        except ConfigError as err:
            raise UsageError(str(err)) from None
    result = check(plan, checked, imposed)
    violations, bound = result.violations, result.max_padding
    if args.json:
        print(json.dumps({"plan": args.plan, "properties": checked, "ok": not violations,
                          "max_padding": None if bound is None else float(bound), "violations": violations}))
    else:
        failing = Counter(v["property"] for v in violations)
        for prop in checked:
            note = " (no bound)" if prop == "padding_bound" and bound is None else ""
            print(f"{prop:<{NAME_WIDTH}} {'FAIL' if failing[prop] else 'ok'}{note}")
        for v in violations:
            print(f"  {v['property']}: {v['message']}")
        print(f"verdict: {'OK' if not violations else 'VIOLATED'} ({args.plan})")
    return 1 if violations else 0
