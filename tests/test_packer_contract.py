"""Contract items a-g on a small geometry whose every number is worked out by hand below."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kvproof.impl.packer import FieldSpec, GroupSpec, PlanError, pack

# tok: one exact-stride field of 4 x 4 bf16 = 32 B.
# st:  s.a 5 x uint8 at 0, s.b 3 x fp32 at align_up(5, 4) = 8, so st's page is 20 B on p0.
TOK = GroupSpec("tok", (FieldSpec("t.k", "p0", (4, 4), "bfloat16", exact_stride=True),))
ST = GroupSpec("st", (FieldSpec("s.b", "p0", (3,), "float32"), FieldSpec("s.a", "p0", (5,), "uint8")))


def _plan(k_tok=5, k_st=8, bound=Fraction(1, 4)):
    return pack([TOK, ST], granularity=4, packings={"tok": k_tok, "st": k_st}, alignment=16, max_padding=bound)


def test_a_field_offsets_in_id_order_rounded_to_element_size():
    plan = _plan()
    assert plan.field("s.a").offset_bytes == 0 and plan.field("s.b").offset_bytes == 8


def test_b_plane_bytes_and_alignment():
    # need = max(5 x 32, 8 x 20) = 160; alignment = lcm(16, 5 x 2, 5 x 1, 8 x 1, 8 x 4, 8 x 1) = 160.
    plane = _plan().plane("p0")
    assert (plane.plane_bytes, plane.alignment) == (160, 160)


def test_c_stride_is_plane_over_packing_and_exactness_is_enforced():
    plan = _plan()
    assert plan.field("t.k").page_stride_bytes == 32 and plan.field("s.b").page_stride_bytes == 20 and plan.accepted
    bad = _plan(k_tok=4)  # need 160, alignment lcm(16, 8, 4, 8, 32) = 32: stride 40 != 32
    assert not bad.accepted
    (v,) = bad.violations
    assert v.property == "exact_stride"
    assert "t.k" in v.message and "needs stride 32 B" in v.message and "gets 40 B" in v.message


def test_d_parent_bytes_divisible_by_every_packing():
    plan = _plan()  # align_up(160, lcm(16, 5, 8) = 80) = 160
    assert plan.parent_bytes == 160


def test_e_padding_per_group_and_the_bound():
    plan = _plan()
    assert plan.group("tok").padding == 0
    assert plan.group("st").padding == Fraction(160 // 8 - 17, 17)  # 3/17
    tight = _plan(bound=Fraction(1, 10))
    assert [v.property for v in tight.violations] == ["padding_bound"]
    assert "st pads 0.176 > bound 0.100" in tight.violations[0].message


def test_f_bind_offsets_page_counts_and_parents():
    binding = _plan().bind(2)
    assert binding.page_count("tok") == 11 and binding.page_count("st") == 17
    assert binding.arena_bytes == 3 * 160
    assert binding.offset_bytes("t.k", 0) == 160 - 32  # last slot of the null parent
    assert binding.offset_bytes("t.k", 1) == 160 and binding.offset_bytes("t.k", 5) == 288
    assert binding.parent_of("tok", 5) == 1 and binding.parent_of("tok", 6) == 2
    assert binding.offset_bytes("s.b", 0) == 160 - 20 + 8
    assert binding.offset_bytes("s.b", 16) + 12 == 480 and binding.parent_of("st", 16) == 2
    with pytest.raises(IndexError):
        binding.offset_bytes("s.b", 17)


def test_f_bind_limits():
    plan = _plan()
    assert plan.max_parents == (2**31 - 1) // 8
    with pytest.raises(PlanError, match=r"outside 1\.\."):
        plan.bind(plan.max_parents + 1)
    with pytest.raises(PlanError, match="rejected plan"):
        _plan(k_tok=4).bind(1)


def test_g_parent_beyond_int64_is_rejected():
    huge = GroupSpec("h", (FieldSpec("h.x", "p", (2**31, 2**31), "int64"),))
    plan = pack([huge], granularity=1, alignment=256)
    assert not plan.accepted and plan.violations[0].property == "in_bounds"


def test_unpinned_exact_groups_sharing_a_plane_agree_by_byte_ratio():
    a = GroupSpec("a", (FieldSpec("a.x", "q", (50,), "bfloat16", exact_stride=True),))  # 100 B
    b = GroupSpec("b", (FieldSpec("b.x", "q", (75,), "bfloat16", exact_stride=True),))  # 150 B
    plan = pack([a, b], granularity=1, alignment=1)
    assert plan.packing == {"a": 3, "b": 2} and plan.accepted
    assert plan.field("a.x").page_stride_bytes == 100 and plan.field("b.x").page_stride_bytes == 150


@pytest.mark.parametrize(
    ("groups", "needle"),
    [
        ([], "no groups"),
        ([GroupSpec("e", ())], "has no fields"),
        ([GroupSpec("d", (FieldSpec("x", "p", (1,), "float128"),))], "unknown dtype"),
        ([GroupSpec("z", (FieldSpec("x", "p", (0,), "uint8"),))], "must be positive"),
        ([TOK, TOK], "appears twice"),
    ],
)
def test_malformed_input_is_a_plan_error(groups, needle):
    with pytest.raises(PlanError, match=needle):
        pack(groups, granularity=1)
