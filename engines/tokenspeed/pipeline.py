"""Run one tokenspeed recipe at one point, the way its own `CacheRecipe.setup()` does.

setup() runs groups -> packing -> pack -> check_layout -> bind (recipes/base.py); we run the
same stages in the same order with the recipe's own seams, and stop before the parts that size
the arena from a memory budget (capacity is the scheduler's business, not the layout's). setup()
itself needs the budget and the scheduler, so its own code is read instead (`stages`): a
revision whose setup() runs other stages, or in another order, or passes pack() other keywords,
is an AdapterGap (`check_stages`). The layout is then bound at three parent counts so the caller
can show the bound plan is affine in N and check it for every N at once.

What the recipe raises is judged by whose code raised it (verdict.blame): the engine's code
refusing the point -> a verdict (`Refused`); kvproof's adapter code (a build step, a stage call
whose shape changed, a stand-in used), or the engine's code raising what is no refusal -> an
AdapterGap, raised for the caller to report the recipe under.
"""

from __future__ import annotations

import ast
import functools
import inspect
import math
import textwrap
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvproof.engines import verdict
from kvproof.engines.stubs import StubUsed
from kvproof.engines.tokenspeed.loader import ASSUMED
from kvproof.engines.verdict import AdapterGap
from kvproof.impl import faults
from kvproof.spec import properties as P

# A bound plan's numbers are affine in the parent count N: two bindings fix the line, and the
# others, up to the largest N the plan allows, confirm it (a cap or threshold in bind shows).
BIND_AT = (1, 2, 3)
SEAMS = "kv_cache/recipes/base.py"  # where a seam a recipe forgot to fill raises NotImplementedError
STAGES = ("groups", "packing", "pack", "check_layout", "bind")  # setup()'s layout stages, by call name
HERE = Path(__file__).resolve().parent
# kvproof's files that stand in for what the engine lacks: an exception raised in one is the
# adapter's even when the engine's code called it (verdict.blame).
STAND_INS = (verdict.STUBS, HERE / "configs.py", HERE / "loader.py", HERE / "partial.py")


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


def run(make: Callable[[], Any], plan_module: types.ModuleType, engine: Path) -> Planned | Refused:
    """Plan with the engine's own recipe, built by `make` (the attention configs and the recipe's
    constructor validate the point too, so their refusals are verdicts like pack's). `engine` is
    the engine's package folder, which tells its frames from kvproof's.

    An exception the engine's code raised is a verdict: NotImplementedError is the recipe declaring
    the point unsupported (unless it is a default seam of CacheRecipe: a broken recipe, boots); a
    ValueError raised after the point's assumed GPU was asked about is the engine declining that
    GPU ("use --kv-cache-dtype auto on this platform"), unsupported there; any other ValueError or
    AssertionError is the engine refusing a point it claims to support (boots). Any other exception
    of the engine's (a TypeError: no refusal kvproof can judge), an exception of kvproof's adapter
    code, and any StubUsed, are raised as an AdapterGap."""
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
        exact = {field.field_id: field.exact_page_stride for _, fields in groups for field in fields}
        bound_padding = recipe.max_padding_fraction
        documents = {n: document(plan, recipe.alignment, bound_padding, exact.__getitem__)
                     for n, plan in bound.items()}
    except Exception as err:
        return _judged(err, engine, packing)
    return Planned(documents)


def _judged(err: Exception, engine: Path, packing: Any) -> Refused:
    blamed = verdict.blame(err, (engine,), stand_ins=STAND_INS)
    if faults.active("ts_adapter_gap_as_boots") and not isinstance(err, StubUsed | AdapterGap):
        blamed = verdict.Blame(True, blamed.frame, blamed.root)  # judged by the exception's type alone
    if not blamed.engine:
        raise verdict.gap(err, blamed) from err
    if not isinstance(err, NotImplementedError | ValueError | AssertionError):
        raise verdict.undeclared(err, blamed) from err
    if isinstance(err, NotImplementedError):
        # A default seam of CacheRecipe raising means the recipe is broken, not that it declines.
        seam = traceback.extract_tb(err.__traceback__)[-1].filename.endswith(SEAMS)
        return Refused(_one_line(err), not seam, _known(packing))
    message = _one_line(err) if isinstance(err, ValueError) else f"{type(err).__name__}: {_one_line(err)}"
    if isinstance(err, ValueError) and _raised_where_asked(err, "platform"):
        return Refused(f"on {ASSUMED.values['platform']}: {message}", True, _known(packing))
    return Refused(message, False, _known(packing))


def _raised_where_asked(err: Exception, name: str) -> bool:
    """Whether the engine raised `err` in the very function that asked assumption `name`: the
    assumed GPU declining (configs/dsa.py refuses an fp8 DSA cache off Blackwell right where it
    asks). A refusal elsewhere, after a function that only chose a layout by the GPU, is the
    engine's own verdict on the point, not the GPU's."""
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and (frames[-1].filename, frames[-1].name) in ASSUMED.asked_in.get(name, set())


def stages(function: Callable[..., Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The layout stages a function calls, in the order they run (a call's arguments before the
    call), and the keywords its pack() call passes: read from its source, not run."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    calls: list[str] = []
    keywords: tuple[str, ...] = ()

    def visit(node: ast.AST) -> None:
        nonlocal keywords
        for child in ast.iter_child_nodes(node):
            visit(child)
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in STAGES:
                calls.append(name)
            if name == "pack":
                keywords = tuple(k.arg or "**" for k in node.keywords)

    body = tree.body[0]
    for stmt in body.body if isinstance(body, ast.FunctionDef) else tree.body:
        visit(stmt)
    return tuple(calls), keywords


@functools.cache
def _ours() -> tuple[tuple[str, ...], tuple[str, ...]]:
    return stages(run)


def check_stages(cache_recipe: type) -> None:
    """The revision's CacheRecipe.setup() must run the stages kvproof runs, in its order, with
    pack() given the same keywords; else kvproof's pipeline is not the engine's (an AdapterGap)."""
    setup = getattr(cache_recipe, "setup", None)
    if setup is None:
        raise AdapterGap("CacheRecipe.setup", "this revision has no setup(), whose stages kvproof runs")
    theirs = stages(setup)
    if theirs != _ours():
        raise AdapterGap("CacheRecipe.setup", f"it runs {' -> '.join(theirs[0])} with pack({', '.join(theirs[1])}); "
                         f"kvproof's pipeline runs {' -> '.join(_ours()[0])} with pack({', '.join(_ours()[1])})")


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
