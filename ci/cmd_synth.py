"""Synthesize, per tp and dtype, the legal packing with the smallest parent (z3 Optimize)."""

from __future__ import annotations

import argparse
import json

from kvproof.ci.cmd_plan import add_model_arguments
from kvproof.spec.catalog import CACHE_DTYPES, load_model
from kvproof.spec.synth import synthesize


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--tp", type=int, nargs="+", help="narrow the domain to these tp (default: every valid tp)")
    parser.add_argument("--dtype", nargs="+", choices=CACHE_DTYPES, help="narrow the domain to these cache dtypes")


def run(args: argparse.Namespace) -> int:
    model = load_model(args.model, args.config)
    tps, dtypes = args.tp or model.tp_domain, args.dtype or CACHE_DTYPES
    results = [synthesize(model, tp, dtype) for dtype in dtypes for tp in tps]
    if args.json:
        print(json.dumps({"model": model.name, "points": [
            {"tp": s.tp, "dtype": s.dtype, "packing": s.packing, "parent_bytes": s.parent_bytes,
             "padding": {g: float(p) for g, p in s.padding.items()},
             "violations": [v.as_dict() for v in s.violations]}
            for s in results]}, indent=1))
    else:
        print(f"{model.name}: legal packing with the smallest parent (ties: smallest worst padding), K <= 256")
        print(f"{'dtype':<6}{'tp':>4}  {'packing':<24}{'parent B':>16}{'worst padding':>15}")
        for s in results:
            if s.packing is None:
                print(f"{s.dtype:<6}{s.tp:>4}  no legal packing")
                continue
            packing = " / ".join(str(k) for k in list(s.packing.values())[:2])  # K_mla / K_lin
            print(f"{s.dtype:<6}{s.tp:>4}  {packing:<24}{s.parent_bytes:>16,}{float(s.worst_padding):>15.3f}")
    return 0 if all(s.packing is not None and not s.violations for s in results) else 1
