"""Unit tests of the production allocator and the NumPy arena, with hand-derived expectations.

The stateful differential test (test_cache_stateful.py) covers long random sequences; these pin
the contract's small cases: page ids per parent, page 0, capacity errors, parent return, and
that the arena's views sit exactly where the plan's offsets say (and where the torch views do).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from bites import fails_under

from kvproof.impl.allocator import Allocator, AllocatorError
from kvproof.impl.arena import Arena, ArenaError
from kvproof.impl.packer import Plan
from kvproof.impl.recipe import plan_model
from kvproof.kernels.views import field_pages
from kvproof.spec.catalog import load_model, parse_config


def _state(a: Allocator) -> tuple:
    groups = sorted(a.packing)
    return (
        {g: a.live_pages(g) for g in groups},
        a.free_parents(),
        {p: a.owner(p) for p in range(a.num_parents + 1)},
        {g: a.free_slots(g) for g in groups},
    )


def test_a_parent_holds_pages_k_minus_one_after_its_predecessor():
    a = Allocator({"full": 3, "lin": 1}, 3)
    got = a.allocate({"full": 4, "lin": 1})
    # Parent 1 holds full pages 1..3, parent 2 page 4 (and 5, 6 still free); lin takes parent 3.
    assert got == {"full": [1, 2, 3, 4], "lin": [3]}
    assert [a.owner(p) for p in range(4)] == [None, "full", "full", "lin"]
    assert a.free_slots("full") == 2 and a.free_parents() == ()


@pytest.mark.parametrize("k", [1, 2, 5])
def test_page_zero_is_never_handed_out(k):
    a = Allocator({"g": k}, 3)
    assert sorted(a.allocate({"g": 3 * k})["g"]) == list(range(1, 3 * k + 1))


def test_out_of_capacity_is_one_line_and_changes_nothing():
    a = Allocator({"full": 2, "lin": 1}, 3)
    a.allocate({"full": 3})  # parents 1 and 2, one full slot left
    before = _state(a)
    with pytest.raises(AllocatorError) as err:
        a.allocate({"full": 1, "lin": 2})  # the full page fits, two lin parents do not
    assert "out of capacity" in str(err.value) and "\n" not in str(err.value)
    assert _state(a) == before
    assert a.allocate({"full": 1, "lin": 1}) == {"full": [4], "lin": [3]}


def test_a_parent_returns_when_its_last_page_is_freed_and_serves_another_group():
    a = Allocator({"full": 2, "lin": 1}, 1)
    pages = a.allocate({"full": 2})["full"]
    a.free({"full": pages[:1]})
    assert a.owner(1) == "full" and a.free_parents() == ()
    a.free({"full": pages[1:]})
    assert a.owner(1) is None and a.free_parents() == (1,)
    assert a.allocate({"lin": 1}) == {"lin": [1]} and a.owner(1) == "lin"


def test_freeing_a_whole_parent_at_once_returns_it_once():
    a = Allocator({"full": 3}, 2)
    a.free({"full": a.allocate({"full": 3})["full"]})
    assert sorted(a.free_parents()) == [1, 2]


def test_groups_never_own_the_same_parent():
    a = Allocator({"full": 2, "lin": 1}, 4)
    a.allocate({"full": 1, "lin": 1})
    a.allocate({"lin": 1, "full": 1})
    assert a.owned_parents("full") == {1} and a.owned_parents("lin") == {2, 3}


def test_a_page_is_not_handed_out_twice():
    a = Allocator({"g": 4}, 1)
    first, second = a.allocate({"g": 1})["g"], a.allocate({"g": 1})["g"]
    assert set(first).isdisjoint(second)


def test_freeing_a_page_that_is_not_live_changes_nothing():
    a = Allocator({"g": 2}, 2)
    a.allocate({"g": 1})
    before = _state(a)
    for bad in ({"g": [2]}, {"g": [1, 1]}, {"h": [1]}):
        with pytest.raises(AllocatorError):
            a.free(bad)
        assert _state(a) == before


@pytest.mark.parametrize(
    ("test", "fault"),
    [
        (test_page_zero_is_never_handed_out, "allocator_hands_out_null_page"),
        (test_groups_never_own_the_same_parent, "allocator_shares_parent"),
        (test_freeing_a_whole_parent_at_once_returns_it_once, "allocator_double_free_parent"),
        (test_a_page_is_not_handed_out_twice, "allocator_reuses_live_page"),
    ],
)
def test_allocator_tests_bite(test, fault):
    args = (2,) if test is test_page_zero_is_never_handed_out else ()
    fails_under(fault, test, *args)


# The arena.


def _plans() -> list[Plan]:
    synthetic = parse_config({
        "num_hidden_layers": 4, "num_attention_heads": 2, "kv_lora_rank": 24, "qk_rope_head_dim": 8,
        "linear_attn_config": {"kda_layers": [1, 2, 4], "full_attn_layers": [3], "num_heads": 2,
                               "head_dim": 16, "short_conv_kernel_size": 4},
    }, "synthetic")
    return [
        plan_model(load_model("kimi-k3"), 32, "bf16", "search").plan,  # packing 3 / 2
        plan_model(synthetic, 1, "fp8", "search").plan,
    ]


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_views_sit_at_the_plans_offsets():
    for plan in _plans():
        binding = plan.bind(2)
        arena = Arena(binding)
        for f in plan.fields:
            view, last = arena.pages(f.id), binding.page_count(f.group) - 1
            for page in {0, 1, last}:
                assert _address(view[page]) - _address(arena.buffer) == binding.offset_bytes(f.id, page), f.id
            assert view[last].nbytes == f.payload_bytes


def test_views_mirror_the_torch_kernel_views():
    for plan in _plans():
        binding = plan.bind(2)
        arena = Arena(binding)
        arena.buffer[:] = np.random.default_rng(0).integers(0, 256, arena.buffer.size, dtype=np.uint8)
        tensor = torch.from_numpy(arena.buffer)
        for f in plan.fields:
            ours = np.ascontiguousarray(arena.pages(f.id)).view(np.uint8)
            theirs = field_pages(tensor, binding, f.id).contiguous().view(torch.uint8).numpy()
            assert np.array_equal(ours, theirs), f.id


def test_a_fresh_arena_reads_nan_state_and_fill_rows():
    binding = _plans()[0].bind(1)
    arena = Arena(binding)
    assert np.isnan(arena.read_recurrent(1, 1)).all()
    assert (arena.read_conv(1, 1) == 0xFFFF).all() and (arena.read_latent(4, 1) == 0xFFFF).all()


def test_writers_and_readers_round_trip_without_touching_other_pages():
    binding = _plans()[0].bind(2)
    arena = Arena(binding)
    rng = np.random.default_rng(1)
    rows = rng.integers(0, 2**16, (5, 576), dtype=np.uint16)
    arena.write_latent(4, 2, 120, rows[:5])
    assert (arena.read_latent(4, 2)[120:125] == rows).all()
    assert (arena.read_latent(4, 2)[:120] == 0xFFFF).all() and (arena.read_latent(4, 3) == 0xFFFF).all()
    conv = rng.integers(0, 2**16, arena.pages("layer.1.conv_state").shape[1:], dtype=np.uint16)
    rec = rng.standard_normal(arena.pages("layer.1.recurrent_state").shape[1:], dtype=np.float32)
    arena.write_conv(1, 2, conv)
    arena.write_recurrent(1, 2, rec)
    assert (arena.read_conv(1, 2) == conv).all() and (arena.read_recurrent(1, 2) == rec).all()
    assert np.isnan(arena.read_recurrent(1, 1)).all() and np.isnan(arena.read_recurrent(1, 3)).all()
    written = 5 * 576 * 2 + conv.nbytes + rec.nbytes
    assert int((arena.buffer != 0xFF).sum()) <= written


def test_a_page_outside_the_binding_raises():
    arena = Arena(_plans()[1].bind(1))
    with pytest.raises(IndexError):
        arena.read_latent(3, arena.binding.page_count("full_attention"))


def test_a_view_past_the_arena_raises_instead_of_reading_foreign_memory():
    plan = _plans()[1]
    f = plan.fields[-1]
    broken = replace(plan, fields=(*plan.fields[:-1], replace(f, page_stride_bytes=f.page_stride_bytes * 4)))
    with pytest.raises(ArenaError, match=f.id):
        Arena(broken.bind(1)).pages(f.id)


def test_arena_tests_bite():
    fails_under("arena_dense_page_stride", test_views_sit_at_the_plans_offsets)
