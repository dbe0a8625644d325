"""The shared predicates of spec/properties.py against numbers worked out by hand.

The packer's boot check and the prover both call these, so a bug here would pass the
conformance tests; these tests pin each formula to the contract's arithmetic independently.
"""

from __future__ import annotations

from fractions import Fraction

import z3

from kvproof.spec import properties as P


def test_padding_and_its_bound():
    # bf16 tp 32 ceil: parent 7,077,888 B, K 1, 23 layers x 203,520 B of state.
    assert P.padding(7_077_888, 1, 23 * 203_520) == Fraction(7_077_888, 4_680_960) - 1
    assert round(float(P.padding(7_077_888, 1, 23 * 203_520)), 3) == 0.512
    assert not P.padding_within(7_077_888, 1, 4_680_960, Fraction(1, 4))
    # search: parent 10,616,832 B, K 2: 5,308,416 B per page, padding 0.134.
    assert P.padding_within(10_616_832, 2, 4_680_960, Fraction(1, 4))
    # Exactly at the bound is within it: parent = 1.25 x K x raw.
    assert P.padding_within(125, 1, 100, Fraction(1, 4)) and not P.padding_within(126, 1, 100, Fraction(1, 4))


def test_page_offsets_and_parents():
    # Plane at 1000, 160 B, stride 32, field at +8: page 0 is the null parent's last slot.
    assert P.page_offset(1000, 160, 32, 0, 8) == 1000 + 128 + 8
    assert P.page_offset(1000, 160, 32, 1, 8) == 1000 + 160 + 8
    assert [P.parent_of(p, 5) for p in (0, 1, 5, 6, 10, 11)] == [0, 1, 1, 2, 2, 3]
    assert [P.parent_of(p, 1) for p in (0, 1, 2)] == [0, 1, 2]


def test_limits():
    assert P.page_ids_fit(178_956_970, 12) and not P.page_ids_fit(178_956_971, 12)
    assert P.max_parents(21_233_664, [12, 1, 1, 1]) == (2**31 - 1) // 12
    assert P.max_parents(2**62, [1]) == 0  # two parents already pass 2^63 - 1 bytes
    assert P.divides(12, 21_233_664) and not P.divides(7, 21_233_664)
    assert P.exact_stride(73_728, 73_728) and not P.exact_stride(135_680, 73_728)


def test_field_alignment():
    # K3 tp 8: conv_state bf16 at 0 (73,728 B), recurrent_state fp32 at 73,728; a uint8 field of
    # 3 B followed by an fp32 field puts it at 4, not 3.
    assert P.field_aligned(73_728, 4) and P.field_aligned(0, 8) and P.field_aligned(4, 4)
    assert not P.field_aligned(3, 4) and not P.field_aligned(4, 8) and not P.field_aligned(1, 2)
    assert P.field_aligned(7, 1)


def test_the_same_predicates_build_z3_terms():
    page, k = z3.Ints("page k")
    solver = z3.Solver()
    solver.add(k >= 1, k <= 64, page >= 1, page <= 10_000, P.parent_of(page, k) == 0)
    assert solver.check() == z3.unsat  # no page but page 0 lives in the null parent
    solver = z3.Solver()
    solver.add(k == 12, P.padding_within(z3.IntVal(21_233_664), k, z3.IntVal(1_769_472), Fraction(1, 4)))
    assert solver.check() == z3.sat
    solver = z3.Solver()
    solver.add(page >= 1, page <= 3, P.field_aligned(page, 4))
    assert solver.check() == z3.unsat  # no offset in 1..3 is a multiple of 4


def test_kernel_pages():
    # Kimi-Linear at tp 1 on FlashMLA: vLLM's block of 1,920 tokens is split into 64-token kernel
    # pages (FlashMLA takes exactly 64); handing it the whole block breaks the limit (vllm#25811).
    assert P.kernel_block_multiple(64, 64) and P.within_page_limit(64, 64) and P.tiles_page(64, 1920)
    assert not P.within_page_limit(1920, 64) and not P.kernel_block_multiple(544, 64)
    assert not P.tiles_page(64, 544 + 16)  # 560 tokens are 8.75 kernel pages of 64
    assert P.kernel_block_multiple(544, 16) and P.kernel_block_multiple(544, 1)
    tokens = z3.Int("tokens")
    solver = z3.Solver()
    solver.add(tokens >= 1, P.within_page_limit(tokens, 64), P.kernel_block_multiple(tokens, 64),
               tokens != 64)
    assert solver.check() == z3.unsat  # FlashMLA's one page size


def test_power_of_two_kernel_pages():
    # FlashInfer's XQA decode compiles pages of 16, 32, 64 or 128 tokens (jit/xqa.py:82): block 16, at most
    # 128 and a power of two is exactly that set; without the power of two 48, 80, 96 and 112 would pass.
    xqa = [t for t in range(1, 2049) if P.kernel_block_multiple(t, 16) and P.within_page_limit(t, 128)
           and P.power_of_two_page(t)]
    assert xqa == [16, 32, 64, 128]
    assert P.power_of_two_page(1) and not P.power_of_two_page(544) and not P.power_of_two_page(0)
