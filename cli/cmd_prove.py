"""Prove the named properties of a policy's plans for every tp and dtype a model accepts."""

from __future__ import annotations

import argparse
import json

from kvproof.cli.args import accepted_bound_text, add_draft_arguments, add_model_arguments, draft_dtypes
from kvproof.spec.catalog import CACHE_DTYPES, load_model
from kvproof.spec.policy import POLICIES, policy_named
from kvproof.spec.properties import DECLARED_BY, NAME_WIDTH, PROPERTIES
from kvproof.spec.prover import Counterexample, Proof, prove


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--policy", choices=list(POLICIES), default="search", help="K_mla policy")
    parser.add_argument("--property", nargs="+", action="extend",
                        choices=list(PROPERTIES), help="prove only these properties")
    parser.add_argument("--tp", type=int, nargs="+", action="extend",
                        help="narrow the domain to these tp (default: every valid tp)")
    parser.add_argument("--dtype", nargs="+", action="extend",
                        choices=CACHE_DTYPES, help="narrow the domain to these cache dtypes")
    parser.add_argument("--all", action="store_true", help="show every failing point, not only the first")
    add_draft_arguments(parser, domain=True)


def _point(c: Counterexample) -> tuple:
    return c.tp, c.dtype, c.drafts, c.draft_dtype


def render_counterexample(c: Counterexample) -> list[str]:
    sizes = sorted(set(c.plane_bytes.values()), reverse=True)
    planes = ", ".join(f"{sum(1 for b in c.plane_bytes.values() if b == s)} x {s:,} B" for s in sizes)
    packing = " / ".join(f"{g}={k}" for g, k in c.packing.items())
    more = f" (+{len(c.messages) - 1} more)" if len(c.messages) > 1 else ""
    draft = f" drafts={c.drafts} draft_dtype={c.draft_dtype}" if c.drafts else ""
    return [
        f"COUNTEREXAMPLE  {c.property}  tp={c.tp} dtype={c.dtype}{draft}",
        f"  packing  {packing}",
        f"  planes   {planes}; parent {c.parent_bytes:,} B",
        f"  why      {c.messages[0]}{more}",
        f"  means    {PROPERTIES[c.property]}",
        f"  replay   {c.replay}",
    ]


def render(proof: Proof, show_all: bool, bound: str) -> str:
    tps = sorted({p.tp for p in proof.points})
    dtypes = sorted({p.dtype for p in proof.points})
    drafts = sorted({p.drafts for p in proof.points})
    drafted = sorted({p.draft_dtype for p in proof.points if p.drafts})
    draft = f" x drafts {drafts[0]}..{drafts[-1]}" if len(drafts) > 1 else f" x drafts {drafts[0]}" if drafts[0] else ""
    draft += f" ({', '.join(drafted)})" if drafted else ""
    lines = [f"{proof.model}  policy={proof.policy}  domain: tp {', '.join(map(str, tps))} x "
             f"{', '.join(dtypes)}{draft} ({len(proof.points)} points); padding bound {bound}; "
             "N parents and page ids symbolic", ""]
    failing = {c.property for c in proof.counterexamples}
    verdicts: dict[str, str] = {}
    for prop in proof.properties:
        points = len({_point(c) for c in proof.counterexamples if c.property == prop})
        verdicts[prop] = f"FAILS at {points} point(s)" if prop in failing else \
            f"vacuous: no plan declares {DECLARED_BY[prop]}" if prop in proof.vacuous else "proved"
    width = max(map(len, verdicts.values()), default=0)
    lines += [f"  {prop:<{NAME_WIDTH}} {verdict:<{width}} solver {proof.solver_seconds[prop]:.3f} s"
              for prop, verdict in verdicts.items()]
    lines.append("")
    shown = proof.counterexamples if show_all else proof.counterexamples[:1]
    for c in shown:
        lines += [*render_counterexample(c), ""]
    if len(shown) < len(proof.counterexamples):
        lines.append(f"{len(proof.counterexamples) - len(shown)} more counterexample(s); --all shows every one")
    lines.append(f"verdict: {'PROVED' if proof.proved else 'COUNTEREXAMPLE'} in {proof.seconds:.2f} s")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    model = load_model(args.model, args.config)
    proof = prove(model, policy_named(args.policy), tuple(args.property or PROPERTIES), args.tp,
                  tuple(args.dtype or CACHE_DTYPES), args.config, args.drafts, draft_dtypes(args),
                  args.max_padding)
    if args.json:
        shown = proof.counterexamples if args.all else proof.counterexamples[:1]
        print(json.dumps({
            "model": proof.model, "policy": proof.policy, "proved": proof.proved,
            "properties": list(proof.properties), "vacuous": list(proof.vacuous),
            "domain": {"tp": sorted({p.tp for p in proof.points}), "dtype": sorted({p.dtype for p in proof.points}),
                       "drafts": sorted({p.drafts for p in proof.points}),
                       "draft_dtype": sorted({p.draft_dtype for p in proof.points if p.drafts})},
            "max_padding": None if args.max_padding is None else float(args.max_padding),
            "solver_seconds": proof.solver_seconds,
            "counterexamples": [c.as_dict() for c in shown],
            "failing_points": len({_point(c) for c in proof.counterexamples}),
            "seconds": proof.seconds,
        }, indent=1))
    else:
        print(render(proof, args.all, accepted_bound_text(args.max_padding)))
    return 0 if proof.proved else 1
