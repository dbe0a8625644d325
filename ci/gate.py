"""The merge gate: prove every catalog model, run the suite, run the seeded bugs; say merge or not.

Writes into --out (default reports/): junit.xml, summary.json and summary.md (fit for a pull
request comment). Exits 0 only when every model proves, every test passes and no mutant survives.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from kvproof.cli import progress
from kvproof.engines import registry
from kvproof.spec.catalog import BUILTIN_MODELS

ROOT = Path(__file__).resolve().parent.parent


def _verify(*argv: str) -> tuple[int, dict | None, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "kvproof", *argv, "--json"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    try:
        return proc.returncode, json.loads(proc.stdout), proc.stderr
    except json.JSONDecodeError:
        return proc.returncode, None, (proc.stderr or proc.stdout)[-2000:]


# Draft layers widen the domain; the engine checks no padding with them, so that run proves every
# other property and the padding with drafts is a finding of `verify prove --drafts`, not a gate.
DRAFT_DOMAIN = ("--drafts", "0-8", "--draft-dtype", "fp8", "bf16", "--max-padding", "inf")


def prove_all() -> list[dict]:
    out = []
    runs = [(model, drafts, extra) for model in BUILTIN_MODELS for drafts, extra in (("0", ()), ("0-8", DRAFT_DOMAIN))]
    with progress.task(len(runs), "gate: proofs", "proofs") as shown:
        for model, drafts, extra in runs:
            code, result, err = _verify("prove", "--model", model, "--all", *extra)
            out.append({"model": model, "drafts": drafts, "exit": code, "proved": code == 0, "result": result,
                        "error": err.strip()})
            shown.advance(1, f"{model} drafts {drafts}")
    return out


def check_engines() -> list[dict]:
    """Every registered engine against its baseline of known findings in a released version."""
    out = []
    adapters = registry.adapters()
    with progress.task(len(adapters), "gate: engines", "engines") as shown:
        for adapter in adapters:
            engine = adapter.name
            code, result, err = _verify("engine", engine, "--baseline", str(adapter.baseline))
            out.append({"engine": engine, "exit": code, "passed": code == 0, "result": result, "error": err.strip()})
            shown.advance(1, engine)
    return out


def run_tests(out: Path, pytest_args: list[str]) -> dict:
    junit = out / "junit.xml"
    env = dict(os.environ, HYPOTHESIS_PROFILE=os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "auto", "-p", "no:cacheprovider", f"--junitxml={junit}", *pytest_args],
        cwd=ROOT, env=env, check=False,
    )
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    if junit.exists():
        for suite in ET.parse(junit).getroot().iter("testsuite"):
            for key in counts:
                counts[key] += int(suite.get(key, 0))
    seconds = round(time.perf_counter() - start, 1)
    return {"exit": proc.returncode, "passed": proc.returncode == 0, "seconds": seconds} | counts


def run_mutants() -> dict:
    with progress.task(1, "gate: seeded bugs (verify mutants)", "runs") as shown:
        code, result, err = _verify("mutants")
        shown.advance()
    return {"exit": code, "passed": code == 0, "result": result, "error": err.strip()}


def verdict(summary: dict) -> bool:
    """Merge only when every model proves, every engine has no new finding, every test passes and
    no mutant survives."""
    return (all(p["proved"] for p in summary["prove"]) and all(e["passed"] for e in summary.get("engines", []))
            and summary["tests"]["passed"] and summary["mutants"]["passed"])


def markdown(summary: dict) -> str:
    mark = {True: "pass", False: "**FAIL**"}
    lines = [f"## kvproof gate: {'MERGE' if summary['passed'] else 'DO NOT MERGE'}", "", "### Proofs", "",
             "| model | policy | verdict | counterexamples | seconds |", "| --- | --- | --- | ---: | ---: |"]
    for p in summary["prove"]:
        r = p["result"] or {}
        seconds = f"{r['seconds']:.2f}" if "seconds" in r else "?"
        drafts = f" (drafts {p['drafts']})" if p.get("drafts", "0") != "0" else ""
        lines.append(f"| {p['model']}{drafts} | {r.get('policy', '?')} | {mark[p['proved']]} | "
                     f"{len(r.get('counterexamples', []))} | {seconds} |")
        for cx in r.get("counterexamples", [])[:5]:
            draft = f" drafts={cx['drafts']} {cx.get('draft_dtype')}" if cx.get("drafts") else ""
            lines.append(f"|  | tp={cx.get('tp')} {cx.get('dtype')}{draft} | {cx.get('property')} | | |")
        if p["error"] and not r:
            lines.append(f"|  | error | {p['error'][:200]} | | |")
    lines += ["", "### Engines", "", "| engine | version | verdict | new findings | baselined | stale |",
              "| --- | --- | --- | ---: | ---: | ---: |"]
    for e in summary.get("engines", []):
        r = e["result"] or {}
        lines.append(f"| {e['engine']} | {r.get('version', '?')} | {mark[e['passed']]} | "
                     f"{len(r.get('new_findings', []))} | {len(r.get('baselined', []))} | {len(r.get('stale', []))} |")
        for k in r.get("new_findings", [])[:5]:
            lines.append(f"|  | {k[2]} {k[3]} | {k[4]} | | | |")
        if e["error"] and not r:
            lines.append(f"|  | error | {e['error'][:200]} | | | |")
    t = summary["tests"]
    lines += ["", "### Tests", "", f"{mark[t['passed']]}: {t['tests']} tests, {t['failures']} failures, "
              f"{t['errors']} errors, {t['skipped']} skipped in {t['seconds']} s (JUnit: junit.xml)", ""]
    m = summary["mutants"]
    lines += ["### Seeded bugs", ""]
    if m["result"]:
        lines += ["| mutant | verdict | killed by | seconds |", "| --- | --- | --- | ---: |"]
        for r in m["result"]["mutants"]:
            verdict = "killed" if r["killed"] else "**SURVIVED**"
            lines.append(f"| {r['name']} | {verdict} | {r['by'] or '-'} | {r['seconds']} |")
    else:
        lines.append(f"**FAIL**: verify mutants did not run: {m['error'][:300]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvproof.ci.gate", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="reports", help="folder for junit.xml, summary.json, summary.md")
    parser.add_argument("--skip-mutants", action="store_true", help="leave out the seeded bugs (not for merges)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with progress.shown(True):  # pytest, between the two, draws its own
        summary: dict = {"prove": prove_all(), "engines": check_engines(),
                         "tests": run_tests(out.resolve(), args.pytest_args)}
        summary["mutants"] = (
            {"exit": None, "passed": False, "result": None, "error": "skipped with --skip-mutants"}
            if args.skip_mutants else run_mutants()
        )
    summary["passed"] = verdict(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "summary.md").write_text(markdown(summary))
    print(markdown(summary))
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
