"""A bound plan as the engine-neutral plan document that `verify check` reads.

The schema (docs/plan-schema.md) is deliberately flat: any engine can emit it from its own
planner and have kvproof check it against the same named properties.
"""

from __future__ import annotations

from fractions import Fraction

from kvproof.impl.packer import Binding


def plan_document(binding: Binding, bound: Fraction | str | None = "plan") -> dict:
    """`bound`: the padding bound the document states, "plan" for the plan's own, None for none
    (null in the document)."""
    plan = binding.plan
    if isinstance(bound, str):  # "plan"
        bound = plan.max_padding
    return {
        "num_parents": binding.num_parents,
        "parent_bytes": plan.parent_bytes,
        "alignment": plan.alignment,
        "max_padding": None if bound is None else float(bound),
        "arena_bytes": binding.arena_bytes,
        "planes": [
            {"id": p.id, "bytes": p.plane_bytes, "alignment": p.alignment,
             "arena_offset": binding.plane_offset_bytes(p.id)}
            for p in plan.planes
        ],
        "groups": [
            {"id": g.id, "packing": g.packing, "page_count": binding.page_count(g.id)} for g in plan.groups
        ],
        "fields": [
            {
                "id": f.id,
                "group": f.group,
                "plane": f.plane,
                "shape": list(f.shape),
                "dtype": f.dtype,
                "offset": f.offset_bytes,
                "stride": f.page_stride_bytes,
                "exact_stride": f.exact_stride,
            }
            for f in plan.fields
        ],
    }
