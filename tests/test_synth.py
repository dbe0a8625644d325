"""`search` picks exactly the packing z3 Optimize synthesizes (smallest parent, then smallest
worst padding, K <= 256) at every point of every catalog model."""

from __future__ import annotations

from functools import cache

import pytest
from bites import fails_under

from kvproof.cli.main import main
from kvproof.impl.recipe import plan_model
from kvproof.spec.catalog import BUILTIN_MODELS, CACHE_DTYPES, load_model
from kvproof.spec.synth import Synthesis, synthesize


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
