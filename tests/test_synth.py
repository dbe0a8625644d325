"""`search` picks exactly the packing z3 Optimize synthesizes (smallest parent, then smallest
worst padding, K <= 256) at every point of every catalog model."""

from __future__ import annotations

from functools import cache

import pytest
import z3
from bites import fails_under

from kvproof.cli.main import main
from kvproof.impl.recipe import plan_model
from kvproof.spec.catalog import BUILTIN_MODELS, CACHE_DTYPES, load_model
from kvproof.spec.contract import ALIGNMENT, recipe_layout
from kvproof.spec.synth import Synthesis, encode, synthesize


@cache
def synthesized(name: str, tp: int, dtype: str) -> Synthesis:
    return synthesize(load_model(name), tp, dtype)


def check_search_is_optimal(name: str, tps: tuple[int, ...] | None = None) -> None:
    model = load_model(name)
    for dtype in CACHE_DTYPES:
        for tp in tps or model.tp_domain:
            best = synthesized(name, tp, dtype)
            plan = plan_model(model, tp, dtype, "search").plan
            assert best.packing is not None and not best.violations, (name, tp, dtype, best)
            assert best.worst_padding is not None  # a packing has a padding per group
            assert plan.packing == best.packing and plan.parent_bytes == best.parent_bytes, (
                f"{name} tp={tp} {dtype}: search {plan.packing} parent {plan.parent_bytes:,} B, "
                f"synthesized {best.packing} parent {best.parent_bytes:,} B "
                f"worst padding {float(best.worst_padding):.3f}"
            )


@pytest.mark.parametrize("name", BUILTIN_MODELS)
def test_search_picks_the_synthesized_packing(name: str) -> None:
    check_search_is_optimal(name)


def test_search_optimality_bites() -> None:
    fails_under("search_skips_first", check_search_is_optimal, "kimi-k3", (8, 32))


def test_published_bf16_tp32_packing_is_the_optimum() -> None:
    best = synthesized("kimi-k3", 32, "bf16")
    assert best.packing is not None and best.worst_padding is not None
    assert list(best.packing.values())[:2] == [3, 2] and best.parent_bytes == 10_616_832
    assert round(float(best.worst_padding), 3) == 0.134


def test_cli_synth_json(capsys) -> None:
    assert main(["synth", "--model", "kimi-k3", "--tp", "8", "--dtype", "fp8", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"parent_bytes": 21233664' in out


def test_the_encoding_takes_any_parent_every_packing_divides() -> None:
    """docs/contract.md, item d: the parent is a multiple of the alignment and of every K_g, and
    nothing more is asked of it. At K3 tp 96 bf16 a state packing of 256 divides every multiple of
    256 B, the odd multiples too, so the encoding must admit such a parent (no padding bound here)."""
    problem = encode(recipe_layout(load_model("kimi-k3"), 96, "bf16"), None)
    solver, odd = z3.Solver(), z3.Int("odd")
    solver.add(*problem.constraints, problem.packing["linear_attention_0"] == 256,
               problem.parent_bytes == ALIGNMENT * (2 * odd + 1))
    assert solver.check() == z3.sat
