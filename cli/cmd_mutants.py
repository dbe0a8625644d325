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
from typing import TypeVar

from kvproof.cli import progress
from kvproof.cli.args import UsageError
from kvproof.engines.interface import Mutant
from kvproof.impl.faults import ENV

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--only", nargs="+", action="extend", metavar="NAME", help="run only these mutants")
    parser.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)), help="checks at once")


def _run(check: str, fault: str | None = None, policy: str | None = None) -> subprocess.CompletedProcess:
    if check.startswith("verify "):
        extra = ["--json"] + (["--policy", policy, "--all"] if policy else [])
        cmd = [sys.executable, "-m", "kvproof.cli.main", *shlex.split(check)[1:], *extra]
    else:
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--no-header", check]
    # No shrinking: a kill needs a counterexample, not a minimal one.
    env = dict(os.environ, **{ENV: fault or "", "HYPOTHESIS_PROFILE": "mutants"})
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)


def _tail(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}"


def baseline(check: str) -> str | None:
    """None when the check passes with no fault; else why it proves nothing."""
    proc = _run(check)
    return None if proc.returncode == 0 else f"{check} fails without the fault ({_tail(proc)})"


def run_mutant(mutant: Mutant, description: str, broken: dict[str, str | None]) -> dict:
    """Killed when a check that passes on its own fails with the mutant: a test failure, or a
    counterexample naming the expected property. Anything else is an error, and an error counts
    as a survivor: a check that cannot run, or fails for another reason, proves nothing."""
    start = time.perf_counter()
    killed_by, errors = None, []
    for check in mutant.checks:
        if broken[check]:
            errors.append(broken[check])
            continue
        proc = _run(check, mutant.fault, mutant.policy)
        # verify engine exits 3 when its only new findings span points (a cross-point property)
        if proc.returncode in (1, 3) and mutant.expect:
            try:
                report = json.loads(proc.stdout)
                # verify prove lists counterexamples; verify engine lists new findings as keys
                # (engine, version, recipe, point, property); verify sweep --engine lists causes.
                found = ({c["property"] for c in report.get("counterexamples", [])}
                         | {key[4] for key in report.get("new_findings", [])}
                         | {c["property"] for c in report.get("causes", [])})
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError, IndexError):
                errors.append(f"{check}: no counterexample report ({_tail(proc)})")
                continue
            if mutant.expect in found:
                how = f" --policy {mutant.policy}" if mutant.policy else ""
                killed_by = f"{check}{how}: {mutant.expect}"
                break
            errors.append(f"{check}: counterexamples for {sorted(found)}, not {mutant.expect}")
        elif proc.returncode == 1:
            failed = re.findall(r"^FAILED (\S+)", proc.stdout, re.M)
            killed_by = failed[0] if failed else check
            break
        elif proc.returncode != 0:
            errors.append(f"{check}: {_tail(proc)}")
    return {
        "name": mutant.name,
        "description": description,
        "killed": killed_by is not None,
        "by": killed_by,
        "errors": errors,
        "seconds": round(time.perf_counter() - start, 2),
    }


def _counted(shown: progress.Task, name: str, result: T) -> T:
    shown.advance(1, name)
    return result


def run(args: argparse.Namespace) -> int:
    # The catalog imports every engine's adapter: here, not in every `verify` process a check starts.
    from kvproof.ci.mutants import MUTANTS, describe

    unknown = set(args.only or ()) - {m.name for m in MUTANTS}
    if unknown:
        raise UsageError(f"unknown mutant {sorted(unknown)[0]!r}; the catalog has: "
                         + ", ".join(sorted(m.name for m in MUTANTS)))
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    checks = sorted({c for m in chosen for c in m.checks})
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool, progress.shown(not args.json):
        with progress.task(len(checks), "checks as they are", "checks") as shown:
            broken = dict(zip(checks, pool.map(lambda c: _counted(shown, c, baseline(c)), checks), strict=True))
        with progress.task(len(chosen), "mutants", "mutants") as shown:
            results = list(pool.map(lambda m: _counted(shown, m.name, run_mutant(m, describe(m), broken)), chosen))
    survivors = [r for r in results if not r["killed"]]
    if args.json:
        print(json.dumps({"mutants": results, "killed": len(results) - len(survivors), "survived": len(survivors)}))
    else:
        width = max(len(r["name"]) for r in results)
        for r in results:
            verdict = "killed  " if r["killed"] else "SURVIVED"
            print(f"{r['name']:<{width}}  {verdict} {r['seconds']:>7.2f}s  {r['by'] or '; '.join(r['errors']) or '-'}")
        killed = len(results) - len(survivors)
        print(f"{killed} killed, {len(survivors)} survived (every check passed without its mutant)")
    return 1 if survivors else 0
