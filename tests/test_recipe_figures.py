"""The published Kimi-K3 figures the packer must reproduce number for number.

These numbers come from the engine that motivated kvproof (tokenspeed, 2026), not from our code.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from kvproof.impl.recipe import pack_k, plan_model, recipe_groups, split_sizes
from kvproof.spec.catalog import load_model

K3 = load_model("kimi-k3")
LINEAR = ("linear_attention_0", "linear_attention_1", "linear_attention_2")


def _plan(tp, dtype, policy):
    return plan_model(K3, tp, dtype, policy).plan


def _linear_packing(plan) -> set[int]:
    return {plan.group(g).packing for g in LINEAR}


@pytest.mark.parametrize("policy", ["search", "ceil", "pinned12"])
def test_fp8_tp8_every_policy(policy):
    plan = _plan(8, "fp8", policy)
    assert plan.accepted
    assert plan.group("full_attention").packing == 12 and _linear_packing(plan) == {1}
    assert plan.parent_bytes == 21_233_664
    assert {round(float(plan.group(g).padding), 3) for g in LINEAR} == {0.134}


def test_fp8_tp1_ceil():
    plan = _plan(1, "fp8", "ceil")
    assert plan.group("full_attention").packing == 89 and _linear_packing(plan) == {1}
    assert plan.parent_bytes == 157_483_008


def test_fp8_tp4_pinned12_rejected_for_exact_stride():
    plan = _plan(4, "fp8", "pinned12")
    assert not plan.accepted
    exact = [v for v in plan.violations if v.property == "exact_stride"]
    assert exact and "latent_kv needs stride 73,728 B" in exact[0].message


def test_bf16_tp32_ceil_rejected_for_padding():
    plan = _plan(32, "bf16", "ceil")
    assert plan.group("full_attention").packing == 2 and _linear_packing(plan) == {1}
    assert not plan.accepted
    assert {v.property for v in plan.violations} == {"padding_bound"}
    assert {round(float(plan.group(g).padding), 3) for g in LINEAR} == {0.512}


def test_bf16_tp32_search():
    plan = _plan(32, "bf16", "search")
    assert plan.accepted
    assert plan.group("full_attention").packing == 3 and _linear_packing(plan) == {2}
    assert plan.parent_bytes == 10_616_832
    assert {round(float(plan.group(g).padding), 3) for g in LINEAR} == {0.134}


def test_state_group_split():
    assert split_sizes(69, 24) == [23, 23, 23]
    assert split_sizes(20, 7) == [7, 7, 6]
    plan = _plan(8, "fp8", "search")
    assert [len(plan.fields_of(g)) // 2 for g in LINEAR] == [23, 23, 23]


def test_mla_only_model_has_one_group_with_packing_one():
    plan = plan_model(load_model("deepseek-v3"), 8, "bf16").plan
    assert plan.accepted and plan.packing == {"full_attention": 1}
    assert plan.group("full_attention").padding == Fraction(0)


def test_search_is_smallest_accepted_at_or_above_ceil():
    """Every packing search skipped is rejected, at every point of the domain."""
    for dtype in ("fp8", "bf16"):
        for tp in K3.tp_domain:
            rp = plan_model(K3, tp, dtype, "search")
            ceil_k = -(-rp.state_bytes // rp.page_bytes)
            chosen = rp.plan.group("full_attention").packing
            assert rp.plan.accepted and chosen >= ceil_k
            for k in range(ceil_k, chosen):
                assert not pack_k(recipe_groups(K3, tp, dtype), k, rp.state_bytes, rp.page_bytes).accepted
