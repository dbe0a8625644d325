"""Plan with an engine's own recipes at every point they support and check what they produce."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from kvproof.cli import progress
from kvproof.cli.args import UsageError
from kvproof.engines import baseline, registry, shards
from kvproof.engines.interface import Narrowing
from kvproof.engines.verdict import EngineError, EngineRun, PointResult, RecipeResult
from kvproof.spec.plan_reader import padding_bound_of


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("engine", choices=sorted(registry.ENGINES), help="the engine whose planner is under test")
    parser.add_argument("--recipe", nargs="+", action="extend",
                        help="only these recipes (default: every recipe the engine registers)")
    parser.add_argument("--engine-path", metavar="DIR", help="a checkout or unpacked package (default: installed)")
    parser.add_argument("--tp", type=int, nargs="+", action="extend", help="narrow the domain to these attention tp")
    parser.add_argument("--dtype", nargs="+", action="extend",
                        help="narrow the domain to these --kv-cache-dtype values")
    parser.add_argument("--drafts", type=int, nargs="+", action="extend",
                        help="narrow the domain to these draft-layer counts")
    parser.add_argument("--algorithm", nargs="+", action="extend", metavar="ALGORITHM",
                        help="narrow the domain to these --speculative-algorithm values (recipes whose drafts differ "
                             "by more than their layer count)")
    parser.add_argument("--model", nargs="+", action="extend",
                        help="narrow the domain to these checkpoints (recipes serving several)")
    parser.add_argument("--config", metavar="FILE",
                        help="plan this config.json as the checkpoint of the one --recipe (a family's recipe "
                        "included)")
    parser.add_argument("--assume", nargs="+", action="extend", metavar="NAME=VALUE",
                        help="narrow assumption axes (a GPU or environment answer) to these values")
    parser.add_argument("--shard", metavar="K/N",
                        help="only the K-th of N parts of the recipes, each recipe whole in one part, dealt by cost "
                        "alike on every run: one part per job of a CI matrix (vllm)")
    parser.add_argument("--max-padding", metavar="X|inf", type=float,
                        help="hold plans whose engine sets no padding bound (drafts) to this bound (default: the "
                        "adapter's, vllm 0.25 (engine.PADDING_BOUND), tokenspeed and sglang none; inf: none)")
    known = parser.add_mutually_exclusive_group()
    known.add_argument("--baseline", metavar="FILE", help="known findings: fail only on new ones, list stale ones")
    known.add_argument("--write-baseline", metavar="FILE",
                       help="write this run's findings (only the points it ran) as a baseline and exit 0; "
                       "refused (exit 2) where a recipe is NOT VERIFIED (adapter), which is never baselined")
    parser.add_argument("--all", action="store_true", help="show every counterexample, not only the first per recipe")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    known = baseline.load(args.baseline) if args.baseline else set()  # a bad baseline fails before the run
    adapter = registry.adapter(args.engine)
    try:
        narrowed: Narrowing = {}
        if args.drafts:
            narrowed["drafts"] = args.drafts
        if args.algorithm:
            narrowed["algorithms"] = args.algorithm
        if args.model:
            narrowed["models"] = args.model
        if args.assume:
            narrowed["assume"] = args.assume
        if args.config:
            narrowed["config"] = args.config
        if args.shard is not None:
            narrowed["shard"] = shards.parse(args.shard)
        if args.max_padding is not None:  # else the adapter's own default
            narrowed["padding_bound"] = (None if args.max_padding == math.inf
                                         else padding_bound_of(args.max_padding, "--max-padding"))
        with progress.shown(not args.json):
            result: EngineRun = adapter.verify(args.recipe, args.tp, args.dtype, args.engine_path, **narrowed)
    except EngineError as err:
        raise UsageError(str(err)) from None
    name, version = result.engine, result.version
    found = baseline.findings(name, version, result.recipes)
    if args.write_baseline:
        gaps = baseline.adapter_gaps(found)
        if gaps:  # an adapter gap is never baselined: it would hide that nothing was checked
            raise UsageError(f"not writing {args.write_baseline}: NOT VERIFIED (adapter) is never baselined, and "
                             f"kvproof's adapter could not drive {', '.join(gaps)} at {result.source}")
        try:
            Path(args.write_baseline).write_text(baseline.dump(found), encoding="utf-8")
        except OSError as err:
            raise UsageError(f"cannot write --write-baseline {args.write_baseline}: {err.strerror}") from None
        print(f"wrote {len(set(found))} finding(s) to {args.write_baseline}")
        return 0
    cmp = baseline.compare(found, known, name, version, baseline.ran(result.recipes))
    across = set(adapter.cross_point)
    if args.json:
        doc = result.as_dict()
        doc["new_findings"] = [list(k) for k in cmp.new]
        doc["cross_point"] = sorted(across)
        doc["baselined"] = [list(k) for k in cmp.known]
        doc["stale"] = [list(k) for k in cmp.stale]
        print(json.dumps(doc, indent=1))
    else:
        print(render(result, cmp, args.all, across))
    return exit_code(cmp, across)


def exit_code(cmp: baseline.Comparison, across: set[str]) -> int:
    """0 nothing new; 1 a new finding at a point (a plan property, boots, NOT VERIFIED, NOT
    VERIFIED (adapter), which is always new); 3 only
    new findings across points (e.g. block sizes that differ between tp), which no single plan
    can violate: a deployment question, reported apart."""
    if not cmp.new:
        return 0
    return 3 if all(key[4] in across for key in cmp.new) else 1


def _axes(p: PointResult) -> str:
    return " ".join(f"{k}={v}" for k, v in p.point.items())


def _row(p: PointResult, width: int) -> str:
    axes = _axes(p)
    packing = "/".join(str(p.packing[g]) for g in sorted(p.packing)) or "-"  # groups in id order
    parent = f"{p.parent_bytes:,}" if p.parent_bytes is not None else "-"
    pad = f"{p.worst_padding:.3f}" if p.worst_padding is not None else "-"
    what = f"{p.findings[0].property}" if p.findings else ""
    return f"  {axes:<{width}} {p.verdict:<15} {packing:<14} {parent:>13} {pad:>7}  {what}"


def _not_verified(r: RecipeResult) -> str:
    return f"NOT VERIFIED (adapter): {r.not_verified}" if r.adapter else f"NOT VERIFIED ({r.not_verified})"


def _coverage(r: RecipeResult) -> list[str]:
    """What a recipe's points stand for, when not the checkpoints kvproof ships."""
    c = r.coverage
    if c is None or r.not_verified is not None:
        return []
    if c.family is None:
        return [f"{r.recipe}: VERIFIED AT --config {c.config} (a user's config.json, planned as a checkpoint)"]
    fixed = ", ".join(f"{x['key']}={_short(x['value'])}" for x in c.citations) or "nothing"
    varied = ", ".join(f"{key} in {_values(values)}" for key, values in c.family["varied"].items()) or \
        "nothing (every key the recipe reads is cited or derived)"
    return [f"{r.recipe}: VERIFIED OVER FAMILY — no published checkpoint; {c.enumerated} of {c.members} members "
            f"enumerated; fixed from citations: {fixed}; varied: {varied}; not a verdict on "
            f"{c.family['not_a_verdict_on']}; --config FILE gives one"]


def _short(value: object) -> str:
    """A cited value on the coverage line: a long list by its length (the JSON has it whole)."""
    return f"[{len(value)} values]" if isinstance(value, list) and len(value) > 4 else str(value)


def _values(values: list) -> str:
    if len(values) > 2 and all(isinstance(v, int) for v in values) and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}..{values[-1]}"
    return "{" + ", ".join(map(_short, values)) + "}"


def render_recipe(r: RecipeResult, show_all: bool) -> list[str]:
    if r.not_verified is not None and not r.points:
        return [f"{r.recipe}: {_not_verified(r)}", ""]
    bad = [p for p in r.points if p.verdict == "counterexample"]
    refused = [p for p in r.points if p.verdict == "refused"]
    head = (f"{r.recipe}: {len(r.points)} points, {len(bad)} counterexample(s), {len(refused)} refused"
            + (f" — {_not_verified(r)}" if r.not_verified else "")
            + (f"; {r.limits}" if r.limits else ""))
    width = max((len(_axes(p)) for p in r.points), default=5)
    lines = [*_coverage(r), head,
             f"  {'point':<{width}} {'verdict':<15} {'packing':<14} {'parent bytes':>13} {'pad':>7}  property"]
    lines += [_row(p, width) for p in r.points]
    for p in bad if show_all else bad[:1]:
        for f in p.findings:
            lines.append(f"  COUNTEREXAMPLE {f.property} at {' '.join(f'{k}={v}' for k, v in p.point.items())}: "
                         f"{f.message}")
        lines.append(f"    replay: {p.replay}")
    if not show_all and len(bad) > 1:
        lines.append(f"  {len(bad) - 1} more counterexample(s); --all shows every one")
    for message in sorted({p.findings[0].message for p in refused}):
        lines.append(f"  refused (unsupported): {message}")
    return [*lines, ""]


def render(result: EngineRun, cmp: baseline.Comparison, show_all: bool, across: set[str]) -> str:
    lines = [f"engine: {result.source}", ""]
    for r in result.recipes:
        lines += render_recipe(r, show_all)
    if cmp.known:
        lines.append(f"{len(cmp.known)} finding(s) known in the baseline")
    for k in cmp.stale:
        lines.append(f"STALE baseline entry (no longer found): {' '.join(k)}")
    verified = [r for r in result.recipes if r.not_verified is None]
    family = sum(r.over_family for r in verified)
    # vLLM's members are recipes of their own: say how many families they stand for
    stated = {r.coverage.family["name"] for r in verified if r.coverage and r.coverage.family}
    of = f", members of {len(stated)} {'family' if len(stated) == 1 else 'families'}" if len(stated) < family else ""
    split = f" ({len(verified) - family} at a checkpoint, {family} over a family{of})" if family else ""
    word = {0: "OK", 1: "FINDINGS", 3: "CROSS-POINT FINDINGS"}[exit_code(cmp, across)]
    lines.append(f"verdict: {word}: {len(cmp.new)} new finding(s); "
                 f"{len(verified)} of {len(result.recipes)} recipes verified{split}; {result.seconds:.2f} s")
    return "\n".join(lines)
