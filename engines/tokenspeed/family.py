"""`verify sweep --engine tokenspeed`: a family of geometries through the engine's own recipe.

There is no formula to prove, only the engine's code to run at each member; the verdict says how
many members ran and whether that was all of them (enumerated) or a search, never PROVED.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvproof.cli import progress
from kvproof.engines.verdict import EngineError
from kvproof.impl import faults
from kvproof.spec.sweep_family import PARAMETERS, Family, Member

if TYPE_CHECKING:
    from kvproof.engines.tokenspeed.sweep import EngineSweep

ENGINE_MODEL = "kimi-k3"  # the family the engine's kimi_k3 recipe plans (engines/tokenspeed/sweep.py)
DISTRIBUTE_UP_TO = 2_000_000  # members a distributed sweep enumerates; larger: narrow the ranges or search
CHUNKS = 256  # tests in the work list: enough for xdist to balance, few enough to load the engine once each
EXAMPLES = 200  # members hypothesis tries by default on a family too large to enumerate
MAX_EXAMPLES = 100_000


def refuse_contract_flags(args: argparse.Namespace) -> None:
    """Flags that steer our contract's prover mean nothing to the engine's recipe: say so."""
    if args.config or args.model != ENGINE_MODEL:
        raise EngineError(f"--engine tokenspeed sweeps its kimi_k3 recipe around {ENGINE_MODEL}'s published "
                         "config: drop --model/--config")
    for flag, given in (("--policy", args.policy), ("--pattern", args.pattern), ("--out", args.out)):
        if given:
            raise EngineError(f"{flag} is for our contract's sweep; the engine's recipe chooses its own packing "
                             "and every cause's pattern is reported")
    if args.budget is not None:
        raise EngineError("--budget bounds z3 in our contract's sweep; the engine's recipe runs member by member")
    if args.examples is not None and not 1 <= args.examples <= MAX_EXAMPLES:
        raise EngineError(f"--examples must be between 1 and {MAX_EXAMPLES:,}")
    most = min(CHUNKS, 4 * (os.cpu_count() or 1))
    if args.workers is not None and not 1 <= args.workers <= most:
        raise EngineError(f"--workers must be between 1 and {most} (4 per core here); --tx for more hosts")
    if args.workers and args.tx:
        raise EngineError("--workers spreads over local cores, --tx over the hosts named: pick one")
    if (args.workers or args.tx) and args.examples is not None:
        raise EngineError("--examples sizes a search; --workers and --tx enumerate every member")
    for spec in args.tx:
        _check_spec(spec)


def _check_spec(spec: str) -> None:
    """An execnet spec that names a gateway (popen, ssh or socket), before any worker starts."""
    from execnet import XSpec

    try:
        parsed = XSpec(spec)
    except Exception:  # execnet's own parse errors have no common type
        parsed = None
    if not spec or parsed is None or not (parsed.popen or parsed.ssh or parsed.socket):
        raise EngineError(f"--tx {spec!r}: not an execnet spec (e.g. 4*popen, ssh=user@host//python=PATH)")


def distributed(args: argparse.Namespace, family: Family) -> EngineSweep:
    """Every member, spread over pytest-xdist workers (family_job.py): local ones with
    --workers, or the execnet specs of --tx (each host needs this checkout and the engine at the
    same paths). The failing members come back; patterns are then computed here."""
    from kvproof.engines.tokenspeed import family_job as job
    from kvproof.engines.tokenspeed import loader, mutants, sweep

    try:
        source = loader.source_of(args.engine_path)
    except loader.SourceError as err:
        raise EngineError(str(err)) from None
    size = family.size()
    if size > DISTRIBUTE_UP_TO:
        raise EngineError(f"{size:,} members: a distributed sweep enumerates at most {DISTRIBUTE_UP_TO:,}; narrow "
                         "the ranges, or drop --workers/--tx to search")
    text = job.encode({"engine_path": args.engine_path, "vary": {p: family.ranges[p].text() for p in PARAMETERS},
                       "dtypes": list(family.dtypes), "chunks": min(size, CHUNKS)})
    env = {job.JOB_ENV: text, faults.ENV: os.environ.get(faults.ENV, "")}
    if args.workers:
        spread = ["-n", str(args.workers)]
    else:
        suffix = "".join(f"//env:{k}={v}" for k, v in env.items() if v)
        spread = ["-d", *(a for spec in args.tx for a in ("--tx", spec + suffix))]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kvproof-family-") as folder:
        report = Path(folder) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-o", "addopts=", *spread,
               f"--junitxml={report}", job.__file__]
        done = Path(folder) / "done"
        with progress.task(min(size, CHUNKS), "sweep tokenspeed kimi_k3", "chunks") as shown, \
                subprocess.Popen(cmd, env=dict(os.environ, **env, **{job.DONE_ENV: str(done)}), text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as running:
            output = _waiting(running, done, shown)
        proc = subprocess.CompletedProcess(cmd, running.returncode, output, "")
        tree = ET.parse(report) if report.exists() else None
        if proc.returncode != 0 or tree is None:
            failures = [f.get("message", "") for f in tree.iter("failure")] if tree is not None else []
            why = failures[0] if failures else ((proc.stdout + proc.stderr).strip().splitlines() or ["no output"])[-1]
            why = " ".join(why.replace(text, "<job>").split())[:400]
            raise EngineError(f"the distributed sweep failed (pytest exit {proc.returncode}): {why}")
        chunks = [json.loads(p.get("value", "")) for p in tree.iter("property") if p.get("name") == job.PROPERTY]
    found: sweep.Failing = {}
    for doc in chunks:
        for member, prop, stem in doc["failing"]:
            found.setdefault((prop, stem), []).append(Member(**member))
    tried = sum(doc["tried"] for doc in chunks)
    if tried != size:
        raise EngineError(f"the distributed sweep ran {tried:,} of {size:,} members; a worker's result is missing")
    source = mutants.mutated(source)
    refused = sum(doc["refused"] for doc in chunks)
    return sweep.summary(source, sweep.Runner(source, family), found, tried, refused, True, start)


def _waiting(running: subprocess.Popen[str], done: Path, shown: progress.Task) -> str:
    """The workers' output once they end; meanwhile each chunk a local worker finished is counted (a remote
    --tx worker writes its file on its own host, so its chunks count only in the result)."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(running.stdout or ()), daemon=True)
    reader.start()
    counted = 0
    while running.poll() is None:
        reader.join(0.5)
        finished = len(done.read_text(encoding="utf-8").splitlines()) if done.exists() else 0
        shown.advance(finished - counted)
        counted = finished
    reader.join()
    return "".join(lines)


def replay(m: Member, engine_path: str | None) -> str:
    """The one-geometry family holding the member (every tp of its heads, its dtype)."""
    vary = " ".join(f"{p}={getattr(m, p)}" for p in PARAMETERS)
    path = f" --engine-path {engine_path}" if engine_path else ""
    return f"verify sweep --engine tokenspeed{path} --vary {vary} --dtype {m.dtype}"


def run(args: argparse.Namespace, family: Family) -> int:
    """After refuse_contract_flags(args), which runs before the family is built."""
    from kvproof.engines.tokenspeed import sweep  # needs torch: the engine's recipes import it

    try:
        with progress.shown(not args.json):
            if args.workers or args.tx:
                result = distributed(args, family)
            else:
                result = sweep.verify(args.engine_path, family, args.examples or EXAMPLES)
    except EngineError as err:
        raise EngineError(str(err)) from None
    verdict = result.verdict()
    if args.json:
        doc: dict[str, Any] = {
            "engine": result.engine, "family": {p: family.ranges[p].text() for p in PARAMETERS},
            "dtypes": list(family.dtypes), "domain_size": result.members, "tried": result.tried,
            "refused": result.refused, "enumerated": result.enumerated, "verdict": verdict,
            "seconds": result.seconds,
            "causes": [{**c.as_dict(), "replay": replay(c.member, args.engine_path)} for c in result.causes],
        }
        print(json.dumps(doc, indent=1))
    else:
        spread = f" over {args.workers} pytest-xdist workers" if args.workers else \
            f" over pytest-xdist --tx {' '.join(args.tx)}" if args.tx else ""
        how = f"enumerated{spread}: every member" if result.enumerated else \
            f"searched by hypothesis ({args.examples or EXAMPLES} examples, derandomised), failures shrunk"
        lines = [f"{result.engine}: kimi_k3 recipe over {family.describe()}  dtype {', '.join(family.dtypes)}",
                 f"domain: {result.members:,} members; {how}", ""]
        for i, c in enumerate(result.causes, 1):
            seen = f"{c.count:,} of {result.members:,} members" if result.enumerated else \
                "found by the search, then minimised"
            label = "smallest " if result.enumerated else "minimised"
            lines += [f"cause {i}: {c.property}  ({seen})",
                      f"  {label} {c.member.text()}",
                      f"  why       {c.message}",
                      f"  replay    {replay(c.member, args.engine_path)}"]
            lines += [f"  pattern   {name} (others as above): {text}" for name, text in c.patterns.items()
                      if len(family.ranges[name].all()) > 1]
        lines.append(f"verdict: {verdict} in {result.seconds:.1f} s")
        print("\n".join(lines))
    return 1 if result.failed else 0
