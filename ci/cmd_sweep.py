"""Prove a policy over a family of geometries (PROVED, or the smallest counterexample and its replay)."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from kvproof.ci.cmd_plan import add_model_arguments
from kvproof.spec.catalog import CACHE_DTYPES, ConfigError, load_model
from kvproof.spec.policy import POLICIES, policy_named
from kvproof.spec.sweep import ORDER, Sweep, sweep
from kvproof.spec.sweep_family import PARAMETERS, Family, Range, parse_range

PATTERNED = ("num_layers", "mla_every", "kda_heads", "head_dim")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--vary", nargs="+", metavar="NAME=RANGE", default=[],
                        help=f"ranges a..b, lists a,b,c or values a of: {', '.join(PARAMETERS)}; "
                             "unnamed parameters keep the base model's value")
    parser.add_argument("--policy", choices=list(POLICIES), default="search", help="K_mla policy")
    parser.add_argument("--dtype", nargs="+", choices=CACHE_DTYPES, help="narrow the cache dtypes")
    parser.add_argument("--out", metavar="DIR", help="where to write the counterexample's config.json "
                                                     "(default: a new temporary folder)")
    parser.add_argument("--pattern", nargs="+", choices=PATTERNED, default=[],
                        help="also report which values of these parameters fail with the others at the "
                             "counterexample (one small query per value)")


def parse_vary(items: list[str]) -> dict[str, Range]:
    out: dict[str, Range] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or name not in PARAMETERS:
            raise ConfigError(f"--vary {item!r}: expected NAME=RANGE with NAME one of {', '.join(PARAMETERS)}")
        if name in out:
            raise ConfigError(f"--vary names {name} twice")
        out[name] = parse_range(name, text)
    return out


def _replay(result: Sweep, out: str | None) -> tuple[Path, str]:
    folder = Path(out) if out else Path(tempfile.mkdtemp(prefix="kvproof-sweep-"))
    path = folder / "config.json"
    m = result.counterexample
    result.family.write_config(m, path)
    return path, f"verify plan --config {path} --tp {m.tp} --dtype {m.dtype} --policy {result.policy}"


def _messages(result: Sweep) -> list[str]:
    if result.refusal:
        return [result.refusal]
    return [v.message for found in result.point.violations.values() for v in found]


def render(result: Sweep, model: str, config: Path | None, replay: str | None) -> str:
    fam = result.family
    lines = [
        f"{model} family  policy={result.policy}  {fam.describe()}  dtype {', '.join(fam.dtypes)}",
        f"domain: {result.size:,} members (geometries x each tp dividing kda_heads x dtypes); "
        "every parameter symbolic (z3, linear integer arithmetic), nothing sampled",
    ]
    if result.refinements:
        lines.append(f"search candidates added after a later packing booted: K_mla = "
                     f"{', '.join(map(str, result.refinements))}")
    lines.append("")
    if result.proved:
        lines.append(f"verdict: PROVED over all {result.size:,} members in {result.seconds:.2f} s "
                     "(every member's plan is accepted: all seven properties hold, and it boots)")
        return "\n".join(lines)
    m = result.counterexample
    messages = _messages(result)
    more = f" (+{len(messages) - 1} more)" if len(messages) > 1 else ""
    lines += [
        f"COUNTEREXAMPLE  smallest by {', '.join(ORDER[:-1])}, dtype (fp8 first)",
        f"  member   {m.text()}",
        f"  fails    {', '.join(result.failing_properties)} (the pointwise prover at this member)",
        f"  why      {messages[0]}{more}",
        f"  config   {config}",
        f"  replay   {replay}",
    ]
    for name, text in result.patterns.items():
        lines.append(f"  pattern  {name} (others as above): {text}")
    lines.append(f"verdict: COUNTEREXAMPLE in {result.seconds:.2f} s")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    base = load_model(args.model, args.config)
    family = Family.around(base, parse_vary(args.vary), tuple(args.dtype or CACHE_DTYPES))
    result = sweep(family, policy_named(args.policy), tuple(args.pattern))
    config, replay = _replay(result, args.out) if not result.proved else (None, None)
    if args.json:
        print(json.dumps({
            "model": base.name, "policy": result.policy,
            "family": {p: family.ranges[p].text() for p in PARAMETERS}, "dtypes": list(family.dtypes),
            "domain_size": result.size, "proved": result.proved, "seconds": result.seconds,
            "refinements": result.refinements,
            "counterexample": None if result.proved else {
                **result.counterexample.as_dict(), "properties": result.failing_properties,
                "messages": _messages(result), "config": str(config), "replay": replay,
            },
            "patterns": result.patterns,
        }, indent=1))
    else:
        print(render(result, base.name, config, replay))
    return 0 if result.proved else 1
