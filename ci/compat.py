"""`make compat`: the compatibility matrix, release or revision x recipe.

Runs `verify engine ENGINE --engine-path DIR --json` against each vLLM release on the index, each
tokenspeed release and, given a tokenspeed git directory, every revision from the recipes' pipeline
API (upstream #1117) on. A release is unpacked from its wheel (its `.py` files only, as
docs/engines/vllm-releases.md says); a revision from `git archive`. The results go to a JSON file
and render docs/engines/compatibility.md, which nobody writes by hand.

    python -m kvproof.ci.compat [--tokenspeed-git DIR] [--jobs N]
    python -m kvproof.ci.compat --render reports/compat/compat.json
"""

from __future__ import annotations

import argparse
import fcntl
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from kvproof.cli import progress
from kvproof.engines.tokenspeed.engine import NO_CONFIG

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "reports" / "compat"
PAGE = ROOT / "docs" / "engines" / "compatibility.md"
# 0.29.0 stands for the releases before the oldest the adapter follows: its row is the refusal.
RELEASES = {"vllm": ("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"), "tokenspeed": ("0.1.1",)}
FIRST_REVISION = "(#1117)"  # tokenspeed's one-pipeline-per-family recipes (docs/engines/tokenspeed.md)
# What the tokenspeed adapter loads from a revision (engines/tokenspeed/loader.py skips these packages'
# __init__ and imports their modules): two revisions with the same trees here plan the same.
PLANNING_TREES = ("python/pyproject.toml", *(f"python/tokenspeed/runtime/{package}" for package in
                                             ("layers", "configs", "utils", "distributed", "cache", "execution")))
RUN_TIMEOUT_S = 3600


@dataclass
class Target:
    """One row: an engine's release or revision, and the folder `--engine-path` gets."""

    engine: str
    label: str  # the release, or the revision's short hash
    folder: str
    date: str = ""
    upstream: str = ""  # the revision's pull request, from its subject
    same_as: str | None = None  # a revision whose planning trees equal this one's: not run again


@dataclass
class Row:
    target: Target
    exit: int | None = None
    error: str | None = None  # the one line of an exit 2 (unsupported, ...)
    version: str = ""
    seconds: float = 0.0
    cells: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)  # recipe -> why NOT VERIFIED
    kvproof: str = ""  # the kvproof commit and day it ran at


def release_folder(engine: str, release: str, cache: Path) -> Path:
    """The release's `.py` files, unpacked once into the cache (one process at a time: test workers
    share it)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{engine}-{release}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _unpacked_release(engine, release, cache)


def _unpacked_release(engine: str, release: str, cache: Path) -> Path:
    folder = cache / f"{engine}-{release}"
    if (folder / engine / "__init__.py").is_file():
        return folder
    wheels = cache / "wheels"
    found = sorted(wheels.glob(f"{engine}-{release}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{engine}=={release}",
                        "-d", str(wheels)], check=True)
        found = sorted(wheels.glob(f"{engine}-{release}-*.whl"))
    part = folder.with_name(folder.name + ".part")  # renamed when whole: an interrupted unpack is not reused
    shutil.rmtree(part, ignore_errors=True)
    with zipfile.ZipFile(found[0]) as wheel:
        # vllm/_version.py is among the .py files: the version the adapter reads
        wheel.extractall(part, [name for name in wheel.namelist() if name.endswith(".py")])
    part.rename(folder)
    return folder


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True,
                          check=True).stdout


def revisions(git_dir: Path, cache: Path) -> list[Target]:
    """Every revision from the first of the pipeline API on, newest first; each planned revision
    unpacked into the cache, each other one marked the same as the revision it equals."""
    first = _git(git_dir, "log", "--format=%H", "--fixed-strings", f"--grep={FIRST_REVISION}").split()
    if not first:
        raise SystemExit(f"compat: {git_dir} has no commit whose subject holds {FIRST_REVISION}")
    log = _git(git_dir, "log", "--topo-order", "--format=%H%x09%cs%x09%s", f"{first[-1]}^..HEAD")
    seen: dict[tuple[str, ...], str] = {}
    targets = []
    for line in log.splitlines()[::-1]:  # oldest first, so a row names the first revision of its trees
        rev, day, subject = line.split("\t", 2)
        trees = tuple(_tree(git_dir, rev, path) for path in PLANNING_TREES)
        pr = re.findall(r"\(#(\d+)\)", subject)
        target = Target("tokenspeed", rev[:8], str(cache / f"tokenspeed-{rev[:8]}"), day,
                        f"#{pr[-1]}" if pr else "", seen.get(trees))
        if target.same_as is None:
            seen[trees] = target.label
            _unpack(git_dir, rev, Path(target.folder))
        targets.append(target)
    return targets[::-1]


def _tree(git_dir: Path, rev: str, path: str) -> str:
    """The object id of `path` at `rev`, empty where the revision has no such path."""
    found = subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", "--verify", "-q", f"{rev}:{path}"],
                           capture_output=True, text=True, check=False)
    return found.stdout.strip()


def _unpack(git_dir: Path, rev: str, folder: Path) -> None:
    if folder.is_dir():
        return
    archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", rev, "python/tokenspeed",
                              "python/pyproject.toml"], capture_output=True, check=True).stdout
    part = folder.with_name(folder.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(part, filter="data")
    part.rename(folder)


def run(target: Target, kvproof: str = "") -> Row:
    """`verify engine` on one target, without a baseline: every finding is counted."""
    command = [sys.executable, "-m", "kvproof.cli.main", "engine", target.engine, "--engine-path", target.folder,
               "--json"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return Row(target, None, f"no verdict within {RUN_TIMEOUT_S} s", kvproof=kvproof)
    row = Row(target, done.returncode, kvproof=kvproof)
    if done.returncode == 2 or not done.stdout.strip():
        lines = done.stderr.strip().splitlines()
        row.error = lines[-1].removeprefix("verify engine: error: ") if lines else f"exit {done.returncode}, no output"
        return row
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError as err:
        row.error = f"exit {done.returncode}, output not JSON: {err}"
        return row
    row.version, row.seconds = doc["version"], doc["seconds"]
    for recipe in doc["recipes"]:
        row.cells[recipe["recipe"]], reason = cell(recipe)
        if reason:
            row.reasons[recipe["recipe"]] = reason
    return row


def cell(recipe: dict[str, Any]) -> tuple[str, str | None]:
    """A recipe's cell: points planned, refused and findings (the baseline's unit: a point and a
    property), or NOT VERIFIED and why."""
    reason = recipe["reason"]
    if not recipe["verified"]:
        kind = " (adapter)" if reason.startswith("adapter: ") else " (no config)" if NO_CONFIG in reason else ""
        return f"NV{kind}", reason
    points = recipe["points"]
    refused = sum(p["verdict"] == "refused" for p in points)
    found = Counter(prop for p in points if p["verdict"] == "counterexample"
                    for prop in {f["property"] for f in p["findings"]})
    text = f"✓ {len(points)}"
    if refused:
        text += f", {refused} refused"
    if found:
        text += ", " + ", ".join(f"{count} {prop}" for prop, count in sorted(found.items()))
    return text, None


def render(rows: list[Row]) -> str:
    lines = ["# Compatibility", "",
             "<!-- generated by `make compat` (ci/compat.py); do not edit by hand -->", "",
             "What `verify engine` gives on each release and revision it follows, recipe by recipe, generated by "
             "`make compat` (a tokenspeed git directory from `TOKENSPEED_GIT=DIR` adds its revisions).",
             "How a release's folder is made: [vLLM releases](vllm-releases.md); a revision's: "
             "[tokenspeed revisions](tokenspeed-revisions.md).", "",
             "`✓ N`: verified, N points planned and checked; `k refused`: points the engine declines; `k PROPERTY`: "
             "findings (a point and a property, the baseline's unit) without a baseline; `NV`: NOT VERIFIED, "
             "its reason under the table; `–`: not registered there; `″`: the same planning sources as the row "
             "named, not run again.",
             "Each row's command, with `--recipe R` added, reproduces one cell.", ""]
    for engine in ("vllm", "tokenspeed"):
        ours = [row for row in rows if row.target.engine == engine]
        if ours:
            lines += _table(engine, ours)
    return "\n".join(lines).rstrip() + "\n"


def _table(engine: str, rows: list[Row]) -> list[str]:
    recipes = sorted({recipe for row in rows for recipe in row.cells})
    head = ["release or revision", "date", "upstream", "exit", "seconds", *([f"`{r}`" for r in recipes] or ["recipes"])]
    # a revision's stamp is its run's and the snapshot's ("A; B"): each part once
    ran = sorted({part for row in rows if row.kvproof for part in row.kvproof.split("; ")})
    lines = [f"## {engine}", "", f"Run at kvproof {'; '.join(ran) or 'an unrecorded commit'}.", "",
             "| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    notes: dict[str, int] = {}  # a NOT VERIFIED reason and its note's number
    for row in rows:
        t = row.target
        if t.same_as:
            cells = [f"= `{t.same_as}`", "", *("″" for _ in recipes)]
        elif row.error:
            cells = ["–" if row.exit is None else str(row.exit), "", row.error, *("" for _ in recipes[1:])]
        else:
            cells = [str(row.exit), f"{row.seconds:.0f}"]
            for recipe in recipes:
                text = row.cells.get(recipe, "–")
                if recipe in row.reasons:
                    text += f" [{notes.setdefault(row.reasons[recipe], len(notes) + 1)}]"
                cells.append(text)
        name = f"`{t.label}`" if t.upstream else t.label
        lines.append("| " + " | ".join([name, t.date, t.upstream, *cells]) + " |")
    lines += ["", "Commands (each folder as `make compat` unpacks it):", ""]
    lines += [f"- {row.target.label}: `verify engine {engine} --engine-path {_shown(row.target.folder)}`"
              for row in rows if not row.target.same_as]
    if notes:
        lines += ["", "NOT VERIFIED:", "", *(f"{number}. {reason}" for reason, number in notes.items())]
    return [*lines, ""]


def _shown(folder: str) -> str:
    path = Path(folder)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvproof.ci.compat", description=__doc__.splitlines()[0])
    parser.add_argument("--tokenspeed-git", type=Path, metavar="DIR", help="a tokenspeed git directory: its revisions")
    parser.add_argument("--engine", choices=sorted(RELEASES), nargs="+", default=sorted(RELEASES))
    parser.add_argument("--release", nargs="+", help="only these releases (default: every one of RELEASES)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="targets run at once (default 1: each `verify engine vllm` spreads over the cores itself)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where wheels and unpacked folders go")
    parser.add_argument("--out", type=Path, help="the results as JSON (default: CACHE/compat.json)")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page rendered")
    parser.add_argument("--render", type=Path, nargs="+", metavar="JSON",
                        help="render the page from saved results only (several: their rows in order)")
    args = parser.parse_args(argv)
    try:
        return _main(args)
    except Refused as err:
        print(f"compat: {err}", file=sys.stderr)
        return 2


class Refused(Exception):
    """Bad input: one line, exit 2."""


def _main(args: argparse.Namespace) -> int:
    if args.render:
        missing = [str(path) for path in args.render if not path.is_file()]
        if missing:
            raise Refused(f"--render {missing[0]}: no such file")
        saved = [Row(Target(**r.pop("target")), **r) for path in args.render
                 for r in json.loads(path.read_text())["rows"]]
        args.page.write_text(render(saved))
        return 0
    unknown = sorted(set(args.release or ()) - {r for engine in args.engine for r in RELEASES[engine]})
    if unknown:
        raise Refused(f"--release {unknown[0]}: not a release of {', '.join(args.engine)} the adapters follow; "
                      f"they follow {', '.join(r for engine in args.engine for r in RELEASES[engine])}")
    if args.page == PAGE and (args.release or not args.tokenspeed_git or args.engine != sorted(RELEASES)):
        raise Refused(f"{PAGE.relative_to(ROOT)} holds every release and tokenspeed revision: give "
                      "--tokenspeed-git DIR and no narrowing, or --page FILE for a partial page")
    if args.tokenspeed_git and subprocess.run(["git", f"--git-dir={args.tokenspeed_git}", "rev-parse"],
                                              capture_output=True, check=False).returncode:
        raise Refused(f"--tokenspeed-git {args.tokenspeed_git}: not a git directory (give a clone's .git)")
    commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=7"],
                            capture_output=True, text=True, check=False).stdout.strip() or "unknown"
    stamp = f"`{commit}` ({date.today().isoformat()}, {os.cpu_count()} cores, {args.jobs} target(s) at once)"
    rows: list[Row] = []
    targets = []
    for engine in args.engine:
        for release in RELEASES[engine]:
            if not args.release or release in args.release:
                try:
                    targets.append(Target(engine, release, str(release_folder(engine, release, args.cache))))
                except (subprocess.CalledProcessError, OSError, zipfile.BadZipFile) as err:
                    rows.append(Row(Target(engine, release, ""), None, f"not unpacked: {err}", kvproof=stamp))
    stamp_of: dict[int, str] = {}
    if args.tokenspeed_git and "tokenspeed" in args.engine:
        head = _git(args.tokenspeed_git, "log", "-1", "--format=%h %cs").strip()
        targets += revisions(args.tokenspeed_git, args.cache)
        stamp_of = {id(t): f"{stamp}; tokenspeed snapshot at `{head}`" for t in targets if t.upstream}
    planned = [t for t in targets if not t.same_as]
    def counted(target: Target) -> Row:
        row = run(target, stamp_of.get(id(target), stamp))
        shown.advance(1, f"{target.engine} {target.label}")
        return row

    with ThreadPoolExecutor(args.jobs) as pool, progress.shown(True), \
            progress.task(len(planned), "compat", "targets") as shown:
        ran = dict(zip(map(id, planned), pool.map(counted, planned), strict=True))
    rows += [ran.get(id(t)) or Row(t) for t in targets]
    for row in rows:
        print(f"{row.target.engine} {row.target.label}: exit {row.exit} {row.error or ''}", file=sys.stderr)
    out = args.out or args.cache / "compat.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": [asdict(r) for r in rows]}, indent=1))
    args.page.write_text(render(rows))
    print(f"wrote {out} and {args.page}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
