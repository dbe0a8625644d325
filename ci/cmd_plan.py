"""Plan one (model, tp, dtype, policy) point with the production packer and show its verdict."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from kvproof.ci.cli import UsageError
from kvproof.impl.export import plan_document
from kvproof.impl.packer import Binding
from kvproof.impl.recipe import POLICIES, RecipePlan, plan_model
from kvproof.spec.catalog import BUILTIN_MODELS, CACHE_DTYPES, load_model
from kvproof.spec.check import check_plan


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="kimi-k3", help=f"built-in model: {', '.join(BUILTIN_MODELS)}")
    parser.add_argument("--config", metavar="FILE", help="HF-style config.json (overrides --model)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--tp", type=int, default=8, help="attention tensor-parallel size")
    parser.add_argument("--dtype", choices=CACHE_DTYPES, default="fp8", help="MLA cache dtype")
    parser.add_argument("--policy", choices=POLICIES, default="search", help="K_mla policy")
    parser.add_argument("--emit-plan", metavar="FILE", help="write the bound plan as plan JSON (verify check's schema)")
    parser.add_argument("--parents", type=int, default=1, help="usable parents to bind for --emit-plan (default 1)")


def spec_findings(rp: RecipePlan) -> list[dict]:
    """The spec's own check of the plan bound to one parent: every named property, judged by the
    prover's encoding rather than by the packer's boot check. Findings the boot check already
    reported are left out, so what remains is what the production packer missed."""
    seen = {v.property for v in rp.plan.violations}
    document = plan_document(Binding(rp.plan, 1))
    return [v for v in check_plan(document) if v["property"] not in seen]


def summary(rp: RecipePlan, missed: list[dict]) -> dict:
    plan = rp.plan
    return {
        "model": rp.model.name,
        "tp": rp.tp,
        "dtype": rp.dtype,
        "policy": rp.policy,
        "accepted": plan.accepted,
        "parent_bytes": plan.parent_bytes,
        "page_bytes": rp.page_bytes,
        "state_bytes": rp.state_bytes,
        "packing": plan.packing,
        "padding": {g.id: float(g.padding) for g in plan.groups},
        "max_padding": float(plan.max_padding),
        "stride": {g.id: sorted({f.stride for f in plan.fields_of(g.id)}) for g in plan.groups},
        "planes": [{"id": p.id, "bytes": p.bytes, "alignment": p.alignment} for p in plan.planes],
        "max_parents": plan.max_parents,
        "violations": [{"property": v.property, "message": v.message} for v in plan.violations],
        "missed_by_packer": missed,
    }


def render(rp: RecipePlan, missed: list[dict]) -> str:
    plan = rp.plan
    lines = [
        f"{rp.model.name}  tp={rp.tp}  dtype={rp.dtype}  policy={rp.policy}  "
        f"page {rp.page_bytes:,} B  state {rp.state_bytes:,} B",
        "",
        f"{'group':<22}{'packing':>8}{'fields':>8}{'stride B':>22}{'payload/page B':>16}{'padding':>9}",
    ]
    for g in plan.groups:
        fields = plan.fields_of(g.id)
        strides = sorted({f.stride for f in fields})
        stride = f"{strides[0]:,}" if len(strides) == 1 else f"{strides[0]:,}..{strides[-1]:,}"
        flag = "  > bound" if g.padding > plan.max_padding else ""
        lines.append(f"{g.id:<22}{g.packing:>8}{len(fields):>8}{stride:>22}{g.raw_bytes:>16,}{float(g.padding):>9.3f}{flag}")
    sizes = Counter(p.bytes for p in plan.planes)
    lines += [
        "",
        f"planes: {len(plan.planes)} ({plan.planes[0].id}..{plan.planes[-1].id}): "
        + ", ".join(f"{n} x {b:,} B" for b, n in sorted(sizes.items(), reverse=True)),
        f"parent: {plan.parent_bytes:,} B   padding bound {float(plan.max_padding):.3f}   "
        f"max parents {plan.max_parents:,}",
        f"verdict: {'ACCEPTED' if plan.accepted else 'REJECTED'}",
    ]
    by_property = Counter(v.property for v in plan.violations)
    for prop, count in by_property.items():
        first = next(v for v in plan.violations if v.property == prop)
        more = f" (+{count - 1} more)" if count > 1 else ""
        lines.append(f"  {prop}: {first.message}{more}")
    for v in missed:
        lines.append(f"  MISSED BY THE PACKER {v['property']}: {v['message']}")
    return "\n".join(lines)


def emit(rp: RecipePlan, parents: int, path: str) -> None:
    """A rejected plan is emitted too, bound as an engine without the boot check would bind it,
    so that `verify check` can show why it is wrong."""
    if not 1 <= parents <= rp.plan.max_parents:
        raise UsageError(f"--parents must be in 1..{rp.plan.max_parents:,} for this plan")
    try:
        Path(path).write_text(json.dumps(plan_document(Binding(rp.plan, parents)), indent=1))
    except OSError as err:
        raise UsageError(f"cannot write --emit-plan {path}: {err.strerror}") from None


def run(args: argparse.Namespace) -> int:
    model = load_model(args.model, args.config)
    rp = plan_model(model, args.tp, args.dtype, args.policy)
    if args.emit_plan:
        emit(rp, args.parents, args.emit_plan)
    missed = spec_findings(rp)
    print(json.dumps(summary(rp, missed), indent=1) if args.json else render(rp, missed))
    return 0 if rp.plan.accepted and not missed else 1
