"""Capacity: the null parent is paid for, and max_tokens is the exact inverse of parents_needed."""

from __future__ import annotations

from functools import cache

import pytest
from bites import fails_under
from hypothesis import given
from hypothesis import strategies as st

from kvproof.impl.capacity import max_tokens, parents_needed, state_slots, token_capacity, usable_parents
from kvproof.impl.recipe import plan_model
from kvproof.spec.catalog import load_model

K3 = load_model("kimi-k3")


@cache
def _plan(tp: int, dtype: str):
    return plan_model(K3, tp, dtype, "search").plan


POINTS = [(tp, dtype) for dtype in ("fp8", "bf16") for tp in K3.tp_domain]


def test_budget_pays_for_the_null_parent():
    plan = _plan(8, "fp8")
    assert usable_parents(plan, plan.parent_bytes) == 0
    assert usable_parents(plan, 11 * plan.parent_bytes - 1) == 9
    assert usable_parents(plan, 11 * plan.parent_bytes) == 10


def test_token_capacity_and_state_slots_at_tp8():
    plan = _plan(8, "fp8")
    assert token_capacity(plan, 10) == 10 * 12 * 128
    assert state_slots(plan, 10) == {"full_attention": 120} | {f"linear_attention_{i}": 10 for i in range(3)}


def test_parents_needed_counts_partial_pages_and_state():
    plan = _plan(8, "fp8")  # K_mla = 12, three state groups with K = 1
    # 3 requests, 300 tokens: ceil(300/128) + 3 - 1 = 5 pages -> 1 parent; state 3 x 2 x 6 pages / 1.
    assert parents_needed(plan, 300, 3) == 1 + 3 * 6
    assert parents_needed(plan, 0, 0) == 0


@pytest.mark.parametrize("point", POINTS, ids=[f"{d}-tp{t}" for t, d in POINTS])
@given(num_parents=st.integers(1, 5000), requests=st.integers(1, 64))
def test_max_tokens_is_the_exact_inverse(point, num_parents, requests):
    plan = _plan(*point)
    tokens = max_tokens(plan, num_parents, requests)
    if tokens < 0:
        assert parents_needed(plan, 0, requests) > num_parents
        return
    assert parents_needed(plan, tokens, requests) <= num_parents, "capacity does not fit"
    assert parents_needed(plan, tokens + 1, requests) > num_parents, "capacity is not the largest"


def test_inverse_bites():
    # bf16 at tp 96: a state group packs 2 pages, the MLA group 1, so the largest packing lies.
    fails_under("capacity_largest_packing", test_max_tokens_is_the_exact_inverse, (96, "bf16"))
