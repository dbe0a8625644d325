"""Synthesize, per tp and dtype, the legal packing with the smallest parent (z3 Optimize).

With draft layers it answers which packing keeps every group within the bound you accept
(--max-padding, default the target bound 0.25), which the engine no longer checks."""

from __future__ import annotations

import argparse
import json

from kvproof.cli.args import accepted_bound_text, add_draft_arguments, add_model_arguments, draft_dtypes
from kvproof.spec.catalog import CACHE_DTYPES, load_model
from kvproof.spec.prover import draft_points
from kvproof.spec.synth import synthesize


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--tp", type=int, nargs="+", action="extend",
                        help="narrow the domain to these tp (default: every valid tp)")
    parser.add_argument("--dtype", nargs="+", action="extend",
                        choices=CACHE_DTYPES, help="narrow the domain to these cache dtypes")
    add_draft_arguments(parser, domain=True)


def run(args: argparse.Namespace) -> int:
    model = load_model(args.model, args.config)
    tps, dtypes = args.tp or model.tp_domain, args.dtype or CACHE_DTYPES
    for tp in tps:
        model.check_tp(tp)
    results = [synthesize(model, tp, dtype, n, draft_dtype, args.max_padding)
               for n, draft_dtype in draft_points(args.drafts, draft_dtypes(args)) for dtype in dtypes for tp in tps]
    drafts = any(s.drafts for s in results)
    if args.json:
        bound = None if args.max_padding is None else float(args.max_padding)
        print(json.dumps({"model": model.name, "max_padding": bound, "points": [
            {"tp": s.tp, "dtype": s.dtype, "drafts": s.drafts, "draft_dtype": s.draft_dtype,
             "packing": s.packing, "parent_bytes": s.parent_bytes,
             "padding": {g: float(p) for g, p in s.padding.items()},
             "violations": [v.as_dict() for v in s.violations]}
            for s in results]}, indent=1))
    else:
        print(f"{model.name}: legal packing with the smallest parent (ties: smallest worst padding), K <= 256, "
              f"padding bound {accepted_bound_text(args.max_padding)}")
        head = f"{'drafts':<11}" if drafts else ""
        print(f"{head}{'dtype':<6}{'tp':>4}  {'packing':<24}{'parent B':>16}{'worst padding':>15}")
        for s in results:
            lead = f"{f'{s.drafts} {s.draft_dtype}' if s.drafts else '0':<11}" if drafts else ""
            worst = s.worst_padding
            if s.packing is None or worst is None:
                print(f"{lead}{s.dtype:<6}{s.tp:>4}  no legal packing")
                continue
            packing = " / ".join(str(k) for k in list(s.packing.values())[:2])  # K_mla / K_lin
            print(f"{lead}{s.dtype:<6}{s.tp:>4}  {packing:<24}{s.parent_bytes:>16,}{float(worst):>15.3f}")
    return 0 if all(s.packing is not None and not s.violations for s in results) else 1
