"""Run one tokenspeed recipe at one point, the way its own `CacheRecipe.setup()` does.

setup() runs groups -> packing -> pack -> check_layout -> bind (recipes/base.py); we run the
same stages in the same order with the recipe's own seams, and stop before the parts that size
the arena from a memory budget (capacity is the scheduler's business, not the layout's). The
layout is then bound at three parent counts so the caller can show the bound plan is affine in
N and check it for every N at once.
"""

from __future__ import annotations

import math
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvproof.engines.tokenspeed.loader import ASSUMED
from kvproof.spec import properties as P

# A bound plan's numbers are affine in the parent count N: two bindings fix the line, and the
# others, up to the largest N the plan allows, confirm it (a cap or threshold in bind shows).
BIND_AT = (1, 2, 3)
SEAMS = "kv_cache/recipes/base.py"  # where a seam a recipe forgot to fill raises NotImplementedError


@dataclass(frozen=True)
class Planned:
    """The recipe planned: a plan document per parent count in BIND_AT."""

    documents: dict[int, dict]


@dataclass(frozen=True)
class Refused:
    """The recipe raised while planning. `unsupported` is an explicit NotImplementedError (the
    recipe declares the point unsupported); otherwise a ValueError (the engine refuses a point
    it claims to support)."""

    message: str
    unsupported: bool
    packing: dict[str, int] | None = None  # the recipe's packing, when it got that far


def run(make: Callable[[], Any], plan_module: types.ModuleType) -> Planned | Refused:
    """Plan with the engine's own recipe, built by `make` (the attention configs and the recipe's
    constructor validate the point too, so their refusals are verdicts like pack's). StubUsed and
    any other exception propagate.

    A ValueError raised after the point's assumed GPU was asked about is the engine declining that
    GPU ("use --kv-cache-dtype auto on this platform"), reported as unsupported there, not as a
    refusal of a point the engine claims to support."""
    packing = None
    try:
        recipe = make()
        groups = recipe.groups()
        packing = recipe.packing(groups)
        layout = plan_module.pack(
            groups,
            prefix_granularity=recipe.prefix_granularity,
            cache_blocks_per_lcm_block=packing,
            alignment=recipe.alignment,
            max_padding_fraction=recipe.max_padding_fraction,
        )
        recipe.check_layout(layout)
        bound = {n: layout.bind(n) for n in bind_at(layout)}
    except NotImplementedError as err:
        # A default seam of CacheRecipe raising means the recipe is broken, not that it declines.
        seam = traceback.extract_tb(err.__traceback__)[-1].filename.endswith(SEAMS)
        return Refused(_one_line(err), not seam, _known(packing))
    except ValueError as err:
        if "platform" in ASSUMED.consulted:
            return Refused(f"on {ASSUMED.values['platform']}: {_one_line(err)}", True, _known(packing))
        return Refused(_one_line(err), False, _known(packing))
    exact = {field.field_id: field.exact_page_stride for _, fields in groups for field in fields}
    bound_padding = recipe.max_padding_fraction
    return Planned({n: document(plan, recipe.alignment, bound_padding, exact.__getitem__)
                    for n, plan in bound.items()})


def bind_at(layout: Any) -> tuple[int, ...]:
    """1, 2, 3, and N spread up to the largest parent count the plan allows (page ids int32,
    arena int64: spec.properties.max_parents)."""
    counts = [count for _, count in layout.group_packing]
    parent = layout.lcm_block_bytes
    top = P.max_parents(parent, counts) if 2 * parent <= P.BYTES_MAX else 0
    return tuple(sorted({n for n in (*BIND_AT, top // 2, top - 1, top) if 1 <= n <= max(top, BIND_AT[-1])}))


def _known(packing: Any) -> dict[str, int] | None:
    """A recipe may leave packing to pack() (None); only a recipe's own choice is reported."""
    return dict(packing) if packing is not None else None


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def document(plan: Any, alignment: int, max_padding: float, exact_stride: Callable[[str], bool]) -> dict:
    """A tokenspeed CacheMemoryPlan as kvproof's plan document (docs/plan-schema.md).

    tokenspeed's plan keeps which fields walk pages by payload size only in the declared field
    specs, so `exact_stride` looks it up by field id. An infinite padding bound (the engine
    checks none) is `max_padding: null`.
    """
    return {
        "num_parents": plan.num_lcm_blocks,
        "parent_bytes": plan.lcm_block_bytes,
        "alignment": alignment,
        "max_padding": None if math.isinf(max_padding) else max_padding,
        "arena_bytes": plan.arena_bytes,
        "planes": [{"id": p.plane_id, "bytes": p.bytes_per_lcm_block, "arena_offset": p.arena_offset_bytes}
                   for p in plan.planes],
        "groups": [{"id": g.group_id, "packing": g.cache_blocks_per_lcm_block, "page_count": g.page_count}
                   for g in plan.groups],
        "fields": [
            {"id": f.field_id, "group": f.group_id, "plane": f.plane_id, "shape": list(f.shape),
             "dtype": f.dtype, "offset": f.field_offset_bytes, "stride": f.page_stride_bytes,
             "exact_stride": exact_stride(f.field_id)}
            for f in plan.fields
        ],
    }
