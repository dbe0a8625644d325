"""Run every seeded bug against the checks that must kill it; a survivor fails."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kvproof.ci.cli import UsageError
from kvproof.ci.mutants import MUTANTS, Mutant
from kvproof.impl.faults import ENV

ROOT = Path(__file__).resolve().parent.parent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutants")
    parser.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)), help="mutants at once")


def _command(check: str) -> list[str]:
    if check.startswith("verify "):
        return [sys.executable, "-m", "kvproof.ci.cli", *shlex.split(check)[1:]]
    return [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--no-header", check]


def run_mutant(mutant: Mutant) -> dict:
    """Killed when a check exits 1 (a failed test or a counterexample); any other failure is an
    error, which counts as a survivor: a check that cannot run proves nothing."""
    env = dict(os.environ)
    env[ENV] = mutant.fault or ""
    env["HYPOTHESIS_PROFILE"] = "mutants"
    start = time.perf_counter()
    killed_by, errors = [], []
    for check in mutant.checks:
        proc = subprocess.run(_command(check), cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        if proc.returncode == 1:
            failed = re.findall(r"^FAILED (\S+)", proc.stdout, re.M)
            killed_by.append(failed[0] if failed else check)
            break
        if proc.returncode != 0:
            errors.append(f"{check}: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}")
    return {
        "name": mutant.name,
        "description": mutant.description,
        "killed": bool(killed_by),
        "by": killed_by[0] if killed_by else None,
        "errors": errors,
        "seconds": round(time.perf_counter() - start, 2),
    }


def run(args: argparse.Namespace) -> int:
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    unknown = set(args.only or ()) - {m.name for m in MUTANTS}
    if unknown:
        raise UsageError(f"unknown mutant {sorted(unknown)[0]!r}; see `verify mutants --json` for the catalog")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(run_mutant, chosen))
    survivors = [r for r in results if not r["killed"]]
    if args.json:
        print(json.dumps({"mutants": results, "killed": len(results) - len(survivors), "survived": len(survivors)}))
    else:
        width = max(len(r["name"]) for r in results)
        for r in results:
            verdict = "killed  " if r["killed"] else "SURVIVED"
            print(f"{r['name']:<{width}}  {verdict} {r['seconds']:>7.2f}s  {r['by'] or '; '.join(r['errors']) or '-'}")
        print(f"{len(results) - len(survivors)} killed, {len(survivors)} survived")
    return 1 if survivors else 0
