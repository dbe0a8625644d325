"""Plan one (model, tp, dtype, policy) point with the production packer and show its verdict.

With draft layers (--drafts) the engine checks no padding; the padding is still checked here
against the bound the user accepts (--max-padding, the target bound 0.25 by default).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from fractions import Fraction
from pathlib import Path

from kvproof.cli.args import UsageError, add_draft_arguments, add_model_arguments, bound_text
from kvproof.impl import faults
from kvproof.impl.export import plan_document
from kvproof.impl.packer import Binding
from kvproof.impl.recipe import POLICIES, RecipePlan, draft_layers, plan_model
from kvproof.spec.catalog import CACHE_DTYPES, load_model
from kvproof.spec.check import check_plan
from kvproof.spec.contract import checked_bound
from kvproof.spec.synth import synthesize

faults.declare({
    "plan_draft_bound_dropped": "verify plan checks a draft plan against the engine's bound (none) instead of the one "
    "the user accepts: the draft padding finding never shows",
})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--tp", type=int, default=8, help="attention tensor-parallel size")
    parser.add_argument("--dtype", choices=CACHE_DTYPES, default="fp8", help="MLA cache dtype")
    parser.add_argument("--policy", choices=POLICIES, default="search", help="K_mla policy")
    add_draft_arguments(parser, domain=False)
    parser.add_argument("--emit-plan", metavar="FILE", help="write the bound plan as plan JSON (verify check's schema)")
    parser.add_argument("--parents", type=int, default=1, help="usable parents to bind for --emit-plan (default 1)")


def spec_findings(rp: RecipePlan, bound: Fraction | None) -> tuple[list[dict], list[dict]]:
    """The spec's own check of the plan bound to one parent: every named property, judged by the
    prover's encoding rather than by the packer's boot check, padding against `bound`. Findings
    the boot check already reported are left out. Returns (what the packer missed, the groups
    over `bound` where the engine checks another bound: none at all with draft layers)."""
    seen = {v.property for v in rp.plan.violations}
    document = plan_document(Binding(rp.plan, 1), bound)
    found = [v for v in check_plan(document) if v["property"] not in seen]
    if bound == rp.plan.max_padding:
        return found, []
    over = [v for v in found if v["property"] == "padding_bound"]
    return [v for v in found if v not in over], over


def summary(rp: RecipePlan, bound: Fraction | None, missed: list[dict], over: list[dict]) -> dict:
    plan = rp.plan
    return {
        "model": rp.model.name,
        "tp": rp.tp,
        "dtype": rp.dtype,
        "policy": rp.policy,
        "drafts": rp.drafts,
        "draft_dtype": rp.draft_dtype,
        "accepted": plan.accepted,
        "parent_bytes": plan.parent_bytes,
        "page_bytes": rp.page_bytes,
        "state_bytes": rp.state_bytes,
        "packing": plan.packing,
        "padding": {g.id: float(g.padding) for g in plan.groups},
        "max_padding": None if bound is None else float(bound),
        "engine_max_padding": None if plan.max_padding is None else float(plan.max_padding),
        "stride": {g.id: sorted({f.page_stride_bytes for f in plan.fields_of(g.id)}) for g in plan.groups},
        "planes": [{"id": p.id, "bytes": p.plane_bytes, "alignment": p.alignment} for p in plan.planes],
        "max_parents": plan.max_parents,
        "violations": [{"property": v.property, "message": v.message} for v in plan.violations],
        "missed_by_packer": missed,
        "over_bound": over,
    }


def _span(first: int, last: int) -> str:
    return f"{first}..{last}" if first != last else f"{first}"


def render(rp: RecipePlan, bound: Fraction | None, missed: list[dict], over: list[dict]) -> str:
    plan = rp.plan
    lines = [
        f"{rp.model.name}  tp={rp.tp}  dtype={rp.dtype}  policy={rp.policy}  "
        f"page {rp.page_bytes:,} B  state {rp.state_bytes:,} B",
        "",
        f"{'group':<22}{'packing':>8}{'fields':>8}{'stride B':>22}{'payload/page B':>16}{'padding':>9}",
    ]
    for g in plan.groups:
        fields = plan.fields_of(g.id)
        strides = sorted({f.page_stride_bytes for f in fields})
        stride = f"{strides[0]:,}" if len(strides) == 1 else f"{strides[0]:,}..{strides[-1]:,}"
        flag = "  > bound" if bound is not None and g.padding > bound else ""
        lines.append(f"{g.id:<22}{g.packing:>8}{len(fields):>8}{stride:>22}{g.raw_bytes:>16,}{float(g.padding):>9.3f}{flag}")
    sizes = Counter(p.plane_bytes for p in plan.planes)
    if rp.drafts:
        layers = draft_layers(rp.model, rp.drafts)
        lines += ["", f"drafts: {rp.drafts} x {rp.draft_dtype} (layer.{_span(layers[0], layers[-1])} in "
                  f"{plan.groups[0].id}, plane slot.{_span(len(rp.model.mla_layers), len(plan.planes) - 1)}); "
                  "the engine checks no padding"]
    lines += [
        "",
        f"planes: {len(plan.planes)} ({plan.planes[0].id}..{plan.planes[-1].id}): "
        + ", ".join(f"{n} x {b:,} B" for b, n in sorted(sizes.items(), reverse=True)),
        f"parent: {plan.parent_bytes:,} B   padding bound {bound_text(bound)} "
        f"(engine's {bound_text(plan.max_padding)})   max parents {plan.max_parents:,}",
        f"verdict: {'ACCEPTED' if plan.accepted else 'REJECTED'}"
        + (f"; FINDING: {len(over)} group(s) over the padding bound you accept" if over else ""),
    ]
    by_property = Counter(v.property for v in plan.violations)
    for prop, count in by_property.items():
        first = next(v for v in plan.violations if v.property == prop)
        more = f" (+{count - 1} more)" if count > 1 else ""
        lines.append(f"  {prop}: {first.message}{more}")
    for v in missed:
        lines.append(f"  MISSED BY THE PACKER {v['property']}: {v['message']}")
    for v in over:
        lines.append(f"  OVER THE BOUND YOU ACCEPT ({bound_text(bound)}; --max-padding): {v['message']}")
    return "\n".join(lines)


def within_bound(rp: RecipePlan, bound: Fraction | None) -> str:
    """Where a draft plan pads over the bound you accept: the packing `verify synth` finds within
    it, or that there is none, so the finding says what would fix it."""
    syn = synthesize(rp.model, rp.tp, rp.dtype, rp.drafts, rp.draft_dtype, bound)
    where = f"verify synth --tp {rp.tp} --dtype {rp.dtype} --drafts {rp.drafts} --draft-dtype {rp.draft_dtype}"
    if syn.packing is None or syn.worst_padding is None:
        return f"no packing keeps the padding within {bound_text(bound)} ({where})"
    packing = "/".join(str(syn.packing[g]) for g in ("full_attention", "linear_attention_0") if g in syn.packing)
    return (f"within {bound_text(bound)}: K_mla/K_lin {packing}, worst padding {float(syn.worst_padding):.3f}, "
            f"parent {syn.parent_bytes:,} B ({where})")


def emit(rp: RecipePlan, parents: int, path: str, bound: Fraction | None) -> None:
    """A rejected plan is emitted too, bound as an engine without the boot check would bind it,
    so that `verify check` can show why it is wrong."""
    if not 1 <= parents <= rp.plan.max_parents:
        raise UsageError(f"--parents must be in 1..{rp.plan.max_parents:,} for this plan")
    try:
        Path(path).write_text(json.dumps(plan_document(Binding(rp.plan, parents), bound), indent=1))
    except OSError as err:
        raise UsageError(f"cannot write --emit-plan {path}: {err.strerror}") from None


def run(args: argparse.Namespace) -> int:
    model = load_model(args.model, args.config)
    rp = plan_model(model, args.tp, args.dtype, args.policy, args.drafts, args.draft_dtype)
    bound = checked_bound(rp.plan.max_padding, args.max_padding)
    if faults.active("plan_draft_bound_dropped"):
        bound = rp.plan.max_padding
    if args.emit_plan:
        emit(rp, args.parents, args.emit_plan, bound)
    missed, over = spec_findings(rp, bound)
    within = within_bound(rp, bound) if over else None
    text = render(rp, bound, missed, over) + (f"\n  {within}" if within else "")
    print(json.dumps(summary(rp, bound, missed, over) | {"within_bound": within}, indent=1) if args.json else text)
    return 0 if rp.plan.accepted and not missed and not over else 1
