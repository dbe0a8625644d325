"""Prove a policy over a family of geometries (PROVED, or the smallest counterexample and its replay)."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from kvproof.cli import progress
from kvproof.cli.args import add_model_arguments, parse_vary
from kvproof.engines.tokenspeed import family as engine_sweep
from kvproof.engines.verdict import EngineError, EngineRun
from kvproof.impl.packer import PlanError
from kvproof.impl.recipe import plan_model, recipe_groups
from kvproof.spec.catalog import CACHE_DTYPES, ConfigError, load_model
from kvproof.spec.contract import recipe_layout
from kvproof.spec.policy import POLICIES, policy_named
from kvproof.spec.sweep import ORDER, Sweep, heads_per_rank, sweep
from kvproof.spec.sweep_family import PARAMETERS, Family, Member

PATTERNED = ("num_layers", "mla_every", "kda_heads", "head_dim")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--vary", nargs="+", action="extend", metavar="NAME=RANGE", default=[],
                        help=f"ranges a..b, lists a,b,c or values a of: {', '.join(PARAMETERS)}; "
                             "unnamed parameters keep the base model's value")
    parser.add_argument("--policy", choices=list(POLICIES), help="K_mla policy (default search)")
    parser.add_argument("--dtype", nargs="+", action="extend", metavar="D",
                        help=f"narrow the cache dtypes ({'|'.join(CACHE_DTYPES)}; with --recipe R, the engine's "
                        "--kv-cache-dtype spellings)")
    parser.add_argument("--out", metavar="DIR", help="where to write the counterexample's config.json "
                                                     "(default: a new temporary folder)")
    parser.add_argument("--budget", type=float, metavar="SECONDS",
                        help="give up (exit 2, never PROVED) when z3 has not decided by then (default 600)")
    parser.add_argument("--pattern", nargs="+", action="extend", choices=PATTERNED, default=[],
                        help="also report which values of these parameters fail with the others at the "
                             "counterexample (one small query per value)")
    parser.add_argument("--engine", choices=["tokenspeed", "vllm"],
                        help="run the engine's own kimi_k3 recipe at the members instead of proving our contract "
                        "(tokenspeed), or with --recipe a stated family's every member")
    parser.add_argument("--engine-path", metavar="DIR", help="with --engine: a checkout or unpacked package "
                                                             "(default: installed)")
    parser.add_argument("--recipe", metavar="R",
                        help="with --engine: plan every member of recipe R's stated family (a recipe without a "
                        "published checkpoint; `verify engine` plans its default list; for vllm the family's name, "
                        "such as granite-4.0-h-tiny); default kimi_k3, whose family --vary sets")
    parser.add_argument("--all", action="store_true",
                        help="with --recipe: show every counterexample, not only the first per recipe")
    parser.add_argument("--examples", type=int, metavar="N",
                        help="with --engine: members hypothesis tries when the family is too large to enumerate")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="with --engine: enumerate every member over N local pytest-xdist workers")
    parser.add_argument("--tx", nargs="+", action="extend", metavar="SPEC", default=[],
                        help="with --engine: enumerate every member over these pytest-xdist hosts (execnet specs)")


def _fields_differ(family: Family, m: Member) -> str | None:
    """impl's recipe against the contract's layout at one member: the same fields, groups,
    planes, shapes and dtypes, in the same order. None when they agree."""
    model = family.model(m)
    spec = [(f.id, f.group, f.plane, f.shape, f.dtype, f.exact_stride)
            for f in recipe_layout(model, m.tp, m.dtype).fields]
    impl = [(f.id, g.id, f.plane, f.shape, f.dtype, f.exact_stride)
            for g in recipe_groups(model, m.tp, m.dtype) for f in g.fields]
    if spec == impl:
        return None
    at = next((i for i, (a, b) in enumerate(zip(spec, impl, strict=False)) if a != b), min(len(spec), len(impl)))
    return (f"{m.text()}: impl's recipe differs from the contract at field {at} "
            f"(contract {spec[at] if at < len(spec) else 'none'}, impl {impl[at] if at < len(impl) else 'none'})")


def impl_conformance(family: Family) -> tuple[int, str | None]:
    """impl's recipe builds the contract's layout for every layer pattern (num_layers x
    mla_every) and every field shape (heads per rank x head_dim, kv_lora_rank, dtype) of the
    family, enumerated: the layout is the layer pattern's fields with the shapes' sizes, so the
    two factors cover every member's layout. Returns (layouts compared, first difference)."""
    r = family.ranges
    low = {p: r[p].lo for p in PARAMETERS}
    members = [Member(layers, low["kda_heads"], low["head_dim"], low["kv_lora_rank"], every, 1, family.dtypes[0])
               for every in r["mla_every"].all() for layers in r["num_layers"].all()]
    heads = r["kda_heads"].all()
    for h in heads_per_rank(r["kda_heads"]):
        total = next(x for x in heads if x % h == 0)
        members += [Member(3, total, hd, low["kv_lora_rank"], 2, total // h, family.dtypes[0])
                    for hd in r["head_dim"].all()]
    members += [Member(3, low["kda_heads"], low["head_dim"], rank, 2, 1, d)
                for rank in r["kv_lora_rank"].all() for d in family.dtypes]
    for m in members:
        found = _fields_differ(family, m)
        if found:
            return len(members), found
    return len(members), None


def _replay(result: Sweep, out: str | None) -> tuple[Path, str]:
    folder = Path(out) if out else Path(tempfile.mkdtemp(prefix="kvproof-sweep-"))
    path = folder / "config.json"
    m = result.counterexample
    assert m is not None  # only a sweep with a counterexample gets here
    result.family.write_config(m, path)
    return path, f"verify plan --config {path} --tp {m.tp} --dtype {m.dtype} --policy {result.policy}"


def _messages(result: Sweep) -> list[str]:
    if result.refusal:
        return [result.refusal]
    assert result.point is not None  # a counterexample the policy does not refuse has its plan
    return [v.message for found in result.point.violations.values() for v in found]


def impl_verdict(result: Sweep) -> str:
    """The production packer at the counterexample (what the replay command runs)."""
    m = result.counterexample
    assert m is not None  # only a sweep with a counterexample gets here
    try:
        plan = plan_model(result.family.model(m), m.tp, m.dtype, result.policy).plan
    except PlanError as err:
        return f"refuses it too ({err})"
    if plan.accepted:
        return "ACCEPTS it: impl and the contract disagree here"
    return f"rejects it too ({', '.join(sorted({v.property for v in plan.violations}))})"


def render(result: Sweep, model: str, config: Path | None, replay: str | None,
           conformance: tuple[int, str | None]) -> str:
    fam = result.family
    how = (f"search's candidate loop run at each of {result.evaluated:,} (heads per rank, rank, head_dim, dtype) "
           "points under each layer pattern" if result.evaluated else
           "every parameter symbolic (z3, linear integer arithmetic)")
    lines = [
        f"{model} family  policy={result.policy}  {fam.describe()}  dtype {', '.join(fam.dtypes)}",
        f"domain: {result.size:,} members (geometries x each tp dividing kda_heads x dtypes); {how}, nothing sampled",
    ]
    if result.refinements:
        lines.append(f"search candidates added after a later packing booted: K_mla = "
                     f"{', '.join(map(str, result.refinements))}")
    lines.append("")
    compared, differs = conformance
    lines.append(f"impl: {differs}" if differs else
                 f"impl: its recipe builds the contract's layout at all {compared:,} layer patterns and field "
                 "shapes of the family (enumerated)")
    if result.proved:
        lines.append(f"verdict: PROVED over all {result.size:,} members in {result.seconds:.2f} s "
                     "(every member's plan is accepted: all seven properties hold, and it boots)")
        if differs:
            lines.append("exit 1: the contract is proved, but impl does not build the contract's layout")
        return "\n".join(lines)
    m = result.counterexample
    assert m is not None  # only a sweep with a counterexample gets here
    messages = _messages(result)
    more = f" (+{len(messages) - 1} more)" if len(messages) > 1 else ""
    lines += [
        f"COUNTEREXAMPLE  smallest by {', '.join(ORDER[:-1])}, dtype (fp8 first)",
        f"  member   {m.text()}",
        f"  fails    {', '.join(result.failing_properties)} (the pointwise prover at this member)",
        f"  why      {messages[0]}{more}",
        f"  config   {config}",
        f"  replay   {replay}",
        f"  impl     {impl_verdict(result)}",
    ]
    for name, text in result.patterns.items():
        lines.append(f"  pattern  {name} (others as above): {text}")
    lines.append(f"verdict: COUNTEREXAMPLE in {result.seconds:.2f} s")
    return "\n".join(lines)


def recipe_family(args: argparse.Namespace) -> int:
    """`--engine E --recipe R`: every member of R's stated family through the engine's own planner,
    reported as `verify engine` reports a run (each member's points, findings, the coverage line)."""
    from kvproof.cli.cmd_engine import exit_code, render
    from kvproof.engines import baseline, registry

    given = [flag for flag, value in (("--vary", args.vary), ("--policy", args.policy), ("--pattern", args.pattern),
                                      ("--out", args.out), ("--budget", args.budget), ("--workers", args.workers),
                                      ("--tx", args.tx), ("--examples", args.examples), ("--config", args.config))
             if value]
    if given:
        raise EngineError(f"{given[0]} does not apply to --recipe {args.recipe}: its family is stated in kvproof's "
                          "adapter, and every member runs")
    with progress.shown(not args.json):
        result = _vllm_family(args) if args.engine == "vllm" else _tokenspeed_family(args)
    found = baseline.findings(result.engine, result.version, result.recipes)
    cmp = baseline.compare(found, set(), result.engine, result.version, baseline.ran(result.recipes))
    across = set(registry.adapter(result.engine).cross_point)
    print(json.dumps(result.as_dict(), indent=1) if args.json else render(result, cmp, args.all, across))
    return exit_code(cmp, across)


def _vllm_family(args: argparse.Namespace) -> EngineRun:
    """Each member of the stated family, a recipe of its own, in one run of vLLM's planner."""
    from kvproof.engines.vllm import catalog, engine

    found = catalog.FAMILIES.get(args.recipe)
    if found is None:
        member = catalog.model(args.recipe)
        if member is not None and member.member is not None:
            raise EngineError(f"--recipe {args.recipe} is a member of family {member.member.family.name}: "
                              f"--recipe {member.member.family.name} plans every member")
        raise EngineError(f"--recipe {args.recipe}: no stated family of vllm's (its checkpoints are planned whole by "
                          f"verify engine vllm); families: {', '.join(catalog.FAMILIES)}")
    return engine.verify([m.name for m in found[0].members(everything=True)], None, args.dtype, args.engine_path)


def _tokenspeed_family(args: argparse.Namespace) -> EngineRun:
    from kvproof.engines.tokenspeed import engine, loader

    profile = engine.PROFILES.get(args.recipe)
    if profile is None or profile.family is None:
        where = "kvproof does not plan it" if profile is None else "it is planned at its published checkpoints"
        raise EngineError(f"--recipe {args.recipe}: no stated family ({where}); families: "
                          + ", ".join(["kimi_k3 (--vary)", *(n for n, p in engine.PROFILES.items() if p.family)]))
    try:
        source = loader.source_of(args.engine_path)
        only = {"dtype": args.dtype} if args.dtype else {}
        return engine.run(source, [args.recipe], only, args.engine_path, everything=True)
    except loader.SourceError as err:
        raise EngineError(str(err)) from None


def run(args: argparse.Namespace) -> int:
    if args.engine == "vllm" or (args.recipe and args.recipe != "kimi_k3"):
        if args.engine is None:
            raise EngineError("--recipe needs --engine tokenspeed or --engine vllm")
        if args.recipe is None:
            raise EngineError("--engine vllm needs --recipe FAMILY: a stated family's every member")
        return recipe_family(args)
    if args.all:
        raise ConfigError("--all applies to a stated family's --recipe R run (with --engine), not to the K3 family "
                          "--vary sets: it shows each recipe's every counterexample")
    if args.engine:
        engine_sweep.refuse_contract_flags(args)
    wrong = [d for d in args.dtype or () if d not in CACHE_DTYPES]
    if wrong:
        raise ConfigError(f"--dtype {wrong[0]}: the family's dtypes are {', '.join(CACHE_DTYPES)}")
    base = load_model(args.model, args.config)
    dtypes = tuple(d for d in CACHE_DTYPES if d in args.dtype) if args.dtype else CACHE_DTYPES  # once each
    family = Family.around(base, parse_vary(args.vary), dtypes)
    if args.engine:
        return engine_sweep.run(args, family)
    if args.engine_path or args.workers is not None or args.tx or args.examples is not None:
        raise ConfigError("--engine-path, --workers, --tx and --examples need --engine")
    budget = 600.0 if args.budget is None else args.budget
    if budget <= 0:
        raise ConfigError("--budget must be a positive number of seconds")
    with progress.shown(not args.json), progress.task(None, "sweep", "rounds") as shown:
        result = sweep(family, policy_named(args.policy or "search"), tuple(args.pattern), budget,
                       lambda now: shown.advance(1, now))
    conformance = impl_conformance(family)
    config, replay = _replay(result, args.out) if not result.proved else (None, None)
    if args.json:
        print(json.dumps({
            "model": base.name, "policy": result.policy,
            "family": {p: family.ranges[p].text() for p in PARAMETERS}, "dtypes": list(family.dtypes),
            "domain_size": result.size, "proved": result.proved, "seconds": result.seconds,
            "refinements": result.refinements, "points_evaluated": result.evaluated,
            "counterexample": None if result.counterexample is None else {
                **result.counterexample.as_dict(), "properties": result.failing_properties,
                "messages": _messages(result), "config": str(config), "replay": replay,
            },
            "patterns": result.patterns,
            "impl": {"layouts_compared": conformance[0], "differs": conformance[1],
                     "at_counterexample": None if result.proved else impl_verdict(result)},
        }, indent=1))
    else:
        print(render(result, base.name, config, replay, conformance))
    return 0 if result.proved and conformance[1] is None else 1
