"""Edges mutation runs found untested (docs/testing.md), each pinned with numbers worked by hand.

Error paths must raise one clear error, boundaries must sit on the right side, the dtype tables
must size real fields, and each extreme plan must be blamed on the property that owns it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import z3

from kvproof.cli.main import main
from kvproof.impl.allocator import Allocator, AllocatorError
from kvproof.impl.arena import Arena
from kvproof.impl.capacity import max_tokens, parents_needed, usable_parents
from kvproof.impl.export import plan_document
from kvproof.impl.packer import FieldSpec, GroupSpec, PlanError, derive_packings, pack
from kvproof.impl.recipe import plan_model
from kvproof.spec import properties as P
from kvproof.spec.catalog import ConfigError, load_model, parse_config
from kvproof.spec.check import check_plan
from kvproof.spec.contract import recipe_layout
from kvproof.spec.encoding import in_bounds, page_id_limit
from kvproof.spec.facts import Affine
from kvproof.spec.plan_reader import affine_facts, concrete_facts, padding_bound_of, symbolic_facts
from kvproof.spec.policy import K_MLA, Policy, choose, policy_named
from kvproof.spec.prover import plan_point
from kvproof.spec.schema import validate

TOK = GroupSpec("tok", (FieldSpec("t.k", "p0", (4, 4), "bfloat16", exact_stride=True),))  # 32 B


def _tok_plan() -> dict:
    """TOK packed (granularity 4, alignment 16) and bound to 2 parents: a fresh plan document each call."""
    return plan_document(pack([TOK], granularity=4, alignment=16).bind(2))


def _one_byte_group() -> list[GroupSpec]:
    return [GroupSpec("g", (FieldSpec("g.x", "p", (1,), "uint8"),))]


# ---------------------------------------------------------------- error paths


def test_a_pinned_packing_for_an_unknown_group_is_refused():
    with pytest.raises(PlanError, match="pinned packing for unknown group nope"):
        pack([TOK], granularity=4, packings={"tok": 1, "nope": 3})
    with pytest.raises(PlanError, match="pinned packings must be positive"):
        pack([TOK], granularity=4, packings={"tok": 0})


def test_max_padding_below_zero_is_refused_and_zero_is_a_bound():
    with pytest.raises(PlanError, match="max_padding must be >= 0"):
        pack([TOK], granularity=4, max_padding=Fraction(-1, 10))
    # tok alone: plane 32 B, parent align_up(32, 16) = 32 B = one page, padding 0 <= 0.
    plan = pack([TOK], granularity=4, alignment=16, max_padding=Fraction(0))
    assert plan.accepted and plan.parent_bytes == 32 and plan.max_padding == 0
    with pytest.raises(PlanError, match="alignment and granularity must be positive"):
        pack([TOK], granularity=4, alignment=0)
    with pytest.raises(ConfigError, match=r"must be a finite number >= 0, got -0\.1"):
        padding_bound_of(-0.1)
    assert padding_bound_of(0) == 0 and padding_bound_of(None) is None


def test_a_plan_without_num_parents_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    doc = _tok_plan()
    del doc["num_parents"]
    with pytest.raises(ConfigError, match="plan is missing key 'num_parents'"):
        concrete_facts(doc)
    with pytest.raises(ConfigError, match="plan is missing key 'num_parents'"):
        concrete_facts(doc, validated=True)  # the semantic reader names it too, schema or not
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "num_parents" in err and "Traceback" not in err


def test_a_hybrid_config_with_no_full_attention_layer_is_refused():
    raw = {"num_hidden_layers": 2, "num_attention_heads": 4, "kv_lora_rank": 8, "qk_rope_head_dim": 8,
           "linear_attn_config": {"kda_layers": [1, 2], "full_attn_layers": [], "num_heads": 4, "head_dim": 8,
                                  "short_conv_kernel_size": 4}}
    with pytest.raises(ConfigError, match=r"'linear_attn_config\.full_attn_layers' is empty"):
        parse_config(raw, "no-mla")


def test_a_policy_admitting_no_packing_or_two_is_a_config_error():
    layout = recipe_layout(load_model("kimi-k3"), 8, "fp8")  # state 27,648 + 786,432 B; page 128 x 576 B
    never = Policy("never", lambda k, state, page: k < 0)
    with pytest.raises(ConfigError, match=r"policy never admits no packing \(state 814,080 B, page 73,728 B\)"):
        choose(never, layout, lambda _: True)
    with pytest.raises(ConfigError, match="policy search admits no packing"):
        choose(replace(never, smallest_accepted=True), layout, lambda _: True)
    two = Policy("two", lambda k, state, page: z3.Or(k == 12, k == 13))
    with pytest.raises(ConfigError, match=r"admits both K_mla=1[23] and K_mla=1[23]"):
        choose(two, layout, lambda _: True)
    # The solver is left as it was: the real policy still answers (K_lin = 12 x 73,728 // 814,080 = 1).
    assert choose(policy_named("ceil"), layout, lambda _: True)["full_attention"] == 12


def test_an_unknown_policy_is_named_with_the_three_there_are():
    with pytest.raises(ConfigError, match=r"^unknown policy 'nope'; choose one of search, ceil, pinned12$"):
        policy_named("nope")


def test_capacity_refuses_no_requests_and_negative_counts():
    plan = plan_model(load_model("kimi-k3"), 8, "fp8").plan
    with pytest.raises(ValueError, match=r"^requests must be positive$"):
        max_tokens(plan, 10, 0)
    for tokens, requests in ((-1, 1), (1, -1)):
        with pytest.raises(ValueError, match=r"^tokens and requests must be non-negative$"):
            parents_needed(plan, tokens, requests)
    # One request, 10 parents, three state groups of K = 1: 10 - 3 x 2 = 4 parents x 12 pages x 128.
    assert max_tokens(plan, 10, 1) == 4 * 12 * 128
    assert max_tokens(plan, 5, 1) == -1  # 6 state pages alone need 6 parents


def _small_arena() -> Arena:
    synthetic = parse_config({
        "num_hidden_layers": 2, "num_attention_heads": 2, "kv_lora_rank": 8, "qk_rope_head_dim": 8,
        "linear_attn_config": {"kda_layers": [1], "full_attn_layers": [2], "num_heads": 2, "head_dim": 4,
                               "short_conv_kernel_size": 4},
    }, "tiny")
    return Arena(plan_model(synthetic, 1, "fp8").plan.bind(1))


def test_a_negative_page_is_refused_not_read_from_the_end():
    arena = _small_arena()
    last = arena.binding.page_count("full_attention") - 1
    rows = np.arange(128 * 16, dtype=np.uint8).reshape(128, 16)
    arena.write_latent(2, last, 0, rows)
    for page in (-1, last + 1):
        with pytest.raises(IndexError, match=f"page {page} outside 0..{last}"):
            arena.read_latent(2, page)
        with pytest.raises(IndexError):
            arena.write_latent(2, page, 0, rows)
    assert (arena.read_latent(2, last) == rows).all()


# ---------------------------------------------------------------- boundaries


def _kimi_linear_466():
    """Kimi-Linear with kv_lora_rank 466: fp8 tp 32 has state == page == 67,840 B.

    page  = 128 tokens x (466 + 64) x 1 B = 67,840 B;
    state = conv 3 x 1 head x 128 x 3 x 2 B = 2,304 B, then recurrent 1 x 128 x 128 x 4 B = 65,536 B
            at offset 2,304 (a multiple of 4): 67,840 B.
    """
    return replace(load_model("kimi-linear-48b-a3b"), name="kimi-linear-466", kv_lora_rank=466)


def test_search_takes_k_mla_1_when_state_equals_page_in_spec_and_impl():
    model = _kimi_linear_466()
    layout = recipe_layout(model, 32, "fp8")
    assert layout.state == layout.page == 67_840
    # K_mla = 1 (state <= 1 x page), K_lin = max(1, 67,840 // 67,840) = 1; 7 planes of 67,840 B
    # (a multiple of lcm(256, 16, 4) = 256: 265 x 256), parent 474,880 B; the 6-layer state group
    # pads 474,880 / (6 x 67,840) - 1 = 1/6 <= 1/4, so the plan boots.
    want = {"full_attention": 1, "linear_attention_0": 1, "linear_attention_1": 1, "linear_attention_2": 1}
    for policy in ("search", "ceil"):
        impl = plan_model(model, 32, "fp8", policy).plan
        assert impl.packing == want and impl.parent_bytes == 474_880 and impl.accepted, policy
        assert impl.group("linear_attention_2").padding == Fraction(1, 6)
        spec = plan_point(model, 32, "fp8", policy_named(policy))
        assert {g["id"]: g["packing"] for g in spec.plan["groups"]} == want, policy
        assert spec.plan["parent_bytes"] == 474_880 and spec.accepted


class _LargestWitness(z3.Solver):
    """A solver whose every model has the largest K_mla it admits: z3 may hand any witness."""

    def check(self, *extra):
        if super().check(*extra) != z3.sat:
            return z3.unsat
        while True:
            k = self.model()[K_MLA].as_long()
            if super().check(*extra, k < K_MLA) != z3.sat:
                return super().check(*extra, k == K_MLA)


def test_search_takes_the_least_admitted_k_mla_whatever_witness_z3_gives_first(monkeypatch):
    layout = replace(recipe_layout(_kimi_linear_466(), 32, "fp8"), state=3 * 67_840)
    monkeypatch.setattr("kvproof.spec.policy._SOLVER", _LargestWitness())
    # state = 3 pages: search admits K_mla 3..256. The first witness is 256; bisection over
    # [1, 256] finds 128, 64, 32, 16, 8, 4, then none in [1, 2], so the least is 3 = mid + 1
    # (a step to mid + 2 would answer 4). K_lin = max(1, 3 x 67,840 // 203,520) = 1.
    lin = {"linear_attention_0": 1, "linear_attention_1": 1, "linear_attention_2": 1}
    assert choose(policy_named("search"), layout, lambda packing: True) == {"full_attention": 3, **lin}
    # 3 and 4 refused: the next admitted, 5 (K_lin = 5 x 67,840 // 203,520 = 1).
    tried: list[int] = []

    def boots(packing: dict[str, int]) -> bool:
        tried.append(packing["full_attention"])
        return packing["full_attention"] >= 5

    assert choose(policy_named("search"), layout, boots) == {"full_attention": 5, **lin}
    assert tried == [3, 4, 5]


def test_a_budget_below_two_parents_yields_none_and_a_huge_one_stops_at_max_parents():
    plan = plan_model(load_model("kimi-k3"), 8, "fp8").plan  # K_mla 12: page ids allow 2^31 - 1 // 12
    assert usable_parents(plan, 0) == 0
    assert usable_parents(plan, plan.parent_bytes - 1) == 0
    assert usable_parents(plan, 2 * plan.parent_bytes) == 1
    assert plan.max_parents == 178_956_970
    assert usable_parents(plan, 2**62) == 178_956_970


def test_allocating_zero_pages_of_a_group_takes_no_parent():
    a = Allocator({"a": 2, "b": 3}, 2)
    assert a.parents_needed({"a": 0, "b": 1}) == 1
    assert a.allocate({"a": 0, "b": 1}) == {"a": [], "b": [1]}
    assert a.owned_parents("a") == frozenset() and a.owned_parents("b") == {1}
    assert a.free_parents() == (2,) and a.free_slots("a") == 0 and a.free_slots("b") == 2
    with pytest.raises(AllocatorError, match=">= 0"):
        a.allocate({"a": -1})


def test_a_plan_that_allows_exactly_one_parent_binds_it():
    # K = 2^31 - 1 one-byte pages: plane = parent = 2^31 - 1 B; page ids 1..K fit int32 for N = 1 only.
    k = 2**31 - 1
    plan = pack(_one_byte_group(), granularity=1, packings={"g": k}, alignment=1)
    assert plan.parent_bytes == k and plan.max_parents == 1 and plan.accepted
    binding = plan.bind(1)
    assert binding.page_count("g") == 2**31 and binding.arena_bytes == 2 * k
    with pytest.raises(PlanError, match=r"num_parents=2 outside 1\.\.1"):
        plan.bind(2)
    facts = symbolic_facts(plan_document(binding) | {
        "planes": [{"id": "p", "bytes": k, "offset": 0}], "groups": [{"id": "g", "packing": k}]})
    assert facts.parents == (1, 1) and page_id_limit(facts) == [] and in_bounds(facts) == []
    # One more page per parent and not even N = 1 fits: page_id_limit, not in_bounds, says so.
    over = pack(_one_byte_group(), granularity=1, packings={"g": k + 1}, alignment=1)
    assert over.max_parents == 0
    assert [v.property for v in over.violations] == ["page_id_limit"]


def test_an_arena_of_exactly_2_to_the_62_bytes():
    # One 2^61-byte field: parent 2^61, (2^63 - 1) // 2^61 - 1 = 2 parents; N = 1 is 2^62 bytes.
    half = pack([GroupSpec("h", (FieldSpec("h.x", "p", (2**31, 2**30), "uint8"),))], granularity=1)
    assert half.parent_bytes == 2**61 and half.accepted and half.max_parents == 2
    assert half.bind(1).arena_bytes == 2**62 and half.bind(2).arena_bytes == 3 * 2**61
    # A 2^62-byte parent: two parents are 2^63 > 2^63 - 1. Blame in_bounds alone, though no
    # parent count is left for page ids either ((2^63 - 1) // 2^62 - 1 = 0).
    full = pack([GroupSpec("h", (FieldSpec("h.x", "p", (2**31, 2**31), "uint8"),))], granularity=1)
    assert full.parent_bytes == 2**62 and full.max_parents == 0
    assert [v.property for v in full.violations] == ["in_bounds"]
    assert "leaves no room for two parents" in full.violations[0].message
    # One byte less, 2^62 - 1 = (2^31 - 1)(2^31 + 1): two parents are 2^63 - 2 B and fit; N = 1 only.
    edge = pack([GroupSpec("h", (FieldSpec("h.x", "p", (2**31 - 1, 2**31 + 1), "uint8"),))], granularity=1,
                alignment=1)
    assert edge.parent_bytes == 2**62 - 1 and edge.max_parents == 1 and edge.accepted
    assert edge.bind(1).arena_bytes == 2**63 - 2


# ---------------------------------------------------------------- which property reports what


def _symbolic(parent: int, packing: int, plane: int) -> dict:
    return {"parent_bytes": parent, "alignment": 1, "max_padding": None,
            "planes": [{"id": "p", "bytes": plane, "offset": 0}], "groups": [{"id": "g", "packing": packing}],
            "fields": [{"id": "f", "group": "g", "plane": "p", "shape": [plane // packing], "dtype": "uint8",
                        "offset": 0, "stride": plane // packing, "exact_stride": False}]}


def test_a_parent_too_large_for_two_is_in_bounds_not_page_id_limit():
    facts = symbolic_facts(_symbolic(2**62, 1, 2**62))
    assert facts.parents == (1, 0)
    assert [v.property for v in in_bounds(facts)] == ["in_bounds"] and page_id_limit(facts) == []
    # One byte less per parent: 2 x (2^62 - 1) = 2^63 - 2 fits, and N = 1 is the only count.
    fits = symbolic_facts(_symbolic(2**62 - 1, 1, 2**62 - 1))
    assert fits.parents == (1, 1) and in_bounds(fits) == [] and page_id_limit(fits) == []


def test_a_packing_past_int32_is_page_id_limit_even_with_no_parent_count_to_try():
    # K = 2^31: 2^31 - 1 // 2^31 = 0 parents, so N ranges over nothing; the property must not pass
    # vacuously.
    facts = symbolic_facts(_symbolic(2**31, 2**31, 2**31))
    assert facts.parents == (1, 0)
    (v,) = page_id_limit(facts)
    assert v.message == "packing 2147483648 leaves no parent count N >= 1 whose page ids fit int32"
    assert in_bounds(facts) == []
    # K = 2^31 - 1 allows N = 1, the largest page id is exactly 2^31 - 1.
    assert page_id_limit(symbolic_facts(_symbolic(2**31 - 1, 2**31 - 1, 2**31 - 1))) == []


def test_the_arena_may_reach_but_not_pass_2_to_the_63_minus_1():
    doc = _tok_plan()
    assert check_plan(doc | {"arena_bytes": P.BYTES_MAX}) == []
    (v,) = check_plan(doc | {"arena_bytes": P.BYTES_MAX + 1})
    assert v["property"] == "in_bounds" and "exceeds 2^63 - 1" in v["message"]


# ---------------------------------------------------------------- a branch and the dtype tables


def test_exact_groups_sharing_a_plane_meet_on_a_common_multiple():
    # a 100 B, b 150 B, c 1,000 B: K starts at 1000 // bytes = 10, 6, 1; a and b share a plane, so
    # both fill align_up(max(10 x 100, 6 x 150), lcm(100, 150) = 300) = 1,200 B: K = 12 and 8.
    assert derive_packings({"a": 100, "b": 150, "c": 1000}, [("a", "b")]) == {"a": 12, "b": 8, "c": 1}
    # A chain a-b-c of 2, 3 and 5 B settles only on the third pass (len(k) passes), all at 30 B:
    # pass 1 -> 3, 5, 3 (6 B, 15 B); pass 2 -> 9, 10, 6 (18 B, 30 B); pass 3 -> 15, 10, 6.
    assert derive_packings({"a": 2, "b": 3, "c": 5}, [("a", "b"), ("b", "c")]) == {"a": 15, "b": 10, "c": 6}


def test_fp8_int32_and_int64_fields_are_sized_and_aligned_by_their_element():
    # In id order: a 5 x float8_e4m3fn at 0..5; b 1 x int64 at align_up(5, 8) = 8..16;
    # c 1 x float8_e4m3fn at 16..17; d 2 x int32 at align_up(17, 4) = 20..28.
    # Plane: align_up(28, lcm(8, 1, 8, 4)) = 32 B; payload 5 + 8 + 1 + 8 = 22 B, padding 32 / 22 - 1 = 5/11.
    group = GroupSpec("m", (
        FieldSpec("d", "p", (2,), "int32"), FieldSpec("b", "p", (1,), "int64"),
        FieldSpec("a", "p", (5,), "float8_e4m3fn"), FieldSpec("c", "p", (1,), "float8_e4m3fn"),
    ))
    plan = pack([group], granularity=1, alignment=8, max_padding=Fraction(1, 2))
    assert {f.id: (f.offset_bytes, f.payload_bytes) for f in plan.fields} == {
        "a": (0, 5), "b": (8, 8), "c": (16, 1), "d": (20, 8)}
    assert plan.plane("p").plane_bytes == 32 and plan.group("m").padding == Fraction(5, 11) and plan.accepted
    doc = plan_document(plan.bind(1))
    assert check_plan(doc) == []

    def moved(properties: tuple[str, ...] = tuple(P.PROPERTIES), **offsets: int) -> list[str]:
        fields = [f | {"offset": offsets.get(f["id"], f["offset"])} for f in doc["fields"]]
        return [v["property"] for v in check_plan(doc | {"fields": fields}, properties)]

    assert moved(b=12, c=28) == ["field_alignment"]  # 12..20 is free, but 12 is not a multiple of int64's 8
    assert moved(("no_overlap", "in_bounds"), b=12, c=28) == []  # only the properties asked for are checked
    assert moved(d=18) == ["field_alignment"]  # 18 is not a multiple of int32's 4
    assert moved(a=4) == ["no_overlap"]  # 5 one-byte values from 4 run into b at 8
    # 28 + 8 B runs past the 32-byte page: into the next page, out of the slab (N = 1: the last
    # page, 1, ends at 64 + 4) and out of its parent, and page 0's d out of the null parent.
    assert moved(d=28) == ["no_overlap", "in_bounds", "in_bounds", "null_page"]


# ---------------------------------------------------------------- the schema's messages, whole

_DTYPES = "uint8, int8, float8_e4m3fn, float8_e5m2, float8_e8m0fnu, bfloat16, float16, float32, int32, int64, float64"
_MESSAGES = [  # (id, change to the TOK plan document, the whole message worked out from spec/schema.py)
    ("not_an_object", lambda d: [], "plan must be an object"),
    ("wrong_type", lambda d: d | {"num_parents": "2"},
     "plan key 'num_parents' has the wrong type str; expected integer"),
    ("wrong_type_of_two", lambda d: d | {"max_padding": "x"},
     "plan key 'max_padding' has the wrong type str; expected number or null"),
    ("missing", lambda d: {k: v for k, v in d.items() if k != "alignment"}, "plan is missing key 'alignment'"),
    ("missing_nested", lambda d: d | {"groups": [{"id": "tok", "page_count": 3}]},
     "plan is missing key 'groups[0].packing'"),
    ("unknown_key", lambda d: d | {"colour": 1}, "plan key 'colour' is not part of the plan schema (plan.schema.json)"),
    # A key past 40 characters is cut to its first 37 and '...'.
    ("unknown_key_cut", lambda d: d | {"planes": [d["planes"][0] | {"x" * 50: 1}]},
     f"plan key 'planes[0].{'x' * 37}...' is not part of the plan schema (plan.schema.json)"),
    ("key_of_40", lambda d: d | {"y" * 40: 1},
     f"plan key '{'y' * 40}' is not part of the plan schema (plan.schema.json)"),
    ("key_of_41", lambda d: d | {"z" * 41: 1},
     f"plan key '{'z' * 37}...' is not part of the plan schema (plan.schema.json)"),
    ("not_positive", lambda d: d | {"alignment": 0}, "plan key 'alignment' must be positive, got 0"),
    ("below_zero", lambda d: d | {"max_padding": -1}, "plan key 'max_padding' must be >= 0, got -1"),
    # 2^64 + 1 has 65 bits: past 64 bits a value is told by its size, not its digits.
    ("past_64_bits", lambda d: d | {"num_parents": 2**64 + 1},
     "plan key 'num_parents' must be at most 18,446,744,073,709,551,616, got an integer of 65 bits"),
    ("empty_list", lambda d: d | {"groups": []}, "plan key 'groups' is empty: a plan needs at least one"),
    ("too_many_items", lambda d: d | {"fields": [d["fields"][0] | {"shape": [1] * 9}]},
     "plan key 'fields[0].shape' lists 9 items; a plan allows at most 8"),
    ("empty_id", lambda d: d | {"groups": [{"id": "", "packing": 1, "page_count": 3}]},
     "plan key 'groups[0].id' must be a string of at least 1 characters"),
    ("long_id", lambda d: d | {"groups": [{"id": "g" * 257, "packing": 1, "page_count": 3}]},
     "plan key 'groups[0].id' must be a string of at most 256 characters"),
    ("unknown_dtype", lambda d: d | {"fields": [d["fields"][0] | {"dtype": "float128"}]},
     f"plan key 'fields[0].dtype': unknown value 'float128'; known: {_DTYPES}"),
    # A value whose repr passes 24 characters is cut to its first 20 and '...'.
    ("unknown_dtype_cut", lambda d: d | {"fields": [d["fields"][0] | {"dtype": "f" * 40}]},
     f"plan key 'fields[0].dtype': unknown value '{'f' * 19}...; known: {_DTYPES}"),
    # The cut is at 24: a 24-character repr (two quotes and 22 letters) is shown whole, 25 are cut.
    ("repr_of_24", lambda d: d | {"fields": [d["fields"][0] | {"dtype": "d" * 22}]},
     f"plan key 'fields[0].dtype': unknown value '{'d' * 22}'; known: {_DTYPES}"),
    ("repr_of_25", lambda d: d | {"fields": [d["fields"][0] | {"dtype": "e" * 23}]},
     f"plan key 'fields[0].dtype': unknown value '{'e' * 19}...; known: {_DTYPES}"),
]


# Named ids, not positions: mutmut maps a test id to the functions it calls, and an inserted case
# would hand every later position another case's map.
@pytest.mark.parametrize(("change", "message"), [c[1:] for c in _MESSAGES], ids=[c[0] for c in _MESSAGES])
def test_each_schema_error_reads_exactly_as_written(change, message: str):
    doc = _tok_plan()
    with pytest.raises(ConfigError) as err:
        validate(change(doc))
    assert str(err.value) == message


def test_the_validator_gets_the_schema_with_every_local_ref_written_out():
    # jsonschema resolving a $ref on every visit made one 72-field plan take 0.7 s (spec/schema.py).
    from kvproof.spec import schema as S

    assert "$ref" in json.dumps(S.schema())
    assert "$ref" not in json.dumps(S._validator().schema)
    # A $ref with a sibling constraint the definition also sets is left for jsonschema to resolve.
    defs = {"n": {"type": "integer", "description": "a count"}}
    assert S._inline({"$ref": "#/$defs/n", "description": "parents"}, defs) == {"type": "integer",
                                                                                 "description": "parents"}
    assert S._inline({"$ref": "#/$defs/n", "type": "string"}, defs) == {"$ref": "#/$defs/n", "type": "string"}


def test_each_smt_term_renders_its_smt_lib_text_and_evaluates_on_ints():
    from kvproof.spec.smt import Solver, Term, all_of, any_of, lift, negate

    x, y = Term.var("x"), Term.var("y")
    env = {"x": 7, "y": 2}
    cases = [  # (term, SMT-LIB text, value at x = 7, y = 2), worked by hand
        (x, "x", 7), (x + 3, "(+ x 3)", 10), (3 + x, "(+ 3 x)", 10), (x - y, "(- x y)", 5),
        (10 - x, "(- 10 x)", 3), (x * 4, "(* x 4)", 28), (4 * x, "(* 4 x)", 28), (x / y, "(div x y)", 3),
        (x % y, "(mod x y)", 1), (x < y, "(< x y)", False), (x <= 7, "(<= x 7)", True),
        (x > 7, "(> x 7)", False), (x >= 7, "(>= x 7)", True), (x == 7, "(= x 7)", True),
        (x != 7, "(distinct x 7)", False), (lift(-5) + x, "(+ (- 5) x)", 2), (lift(True), "true", True),
        (lift(False), "false", False), (all_of(x > 1, y > 2), "(and (> x 1) (> y 2))", False),
        (all_of(x > 1, y > 1), "(and (> x 1) (> y 1))", True), (any_of(x < 1, y < 3), "(or (< x 1) (< y 3))", True),
        (any_of(x < 1, y < 2), "(or (< x 1) (< y 2))", False), (negate(x < 1), "(not (< x 1))", True),
    ]
    for term, text, value in cases:
        assert (term.text, term.value(env)) == (text, value), text
    solver = Solver(("x", "y"))
    # x in 3..4, y = x + 2, x odd: only x = 3, y = 5.
    assert solver.witness(x >= 3, x <= 4, y == x + 2, x % 2 == 1) == {"x": 3, "y": 5}
    assert solver.witness(x > 3, x < 4) is None
    assert solver.witness(x == 1, y == 0) == {"x": 1, "y": 0}  # each query pops what it asserted


def test_an_allocator_needs_a_parent_and_positive_packings_each_alone():
    for packing, parents in (({"a": 2}, 0), ({"a": 0}, 2), ({"a": 2, "b": -1}, 1)):
        with pytest.raises(AllocatorError, match=r"^need at least one parent and positive packings$"):
            Allocator(packing, parents)
    with pytest.raises(AllocatorError, match=r"^unknown group b$"):
        Allocator({"a": 2}, 1).allocate({"a": 1, "b": 1})


def test_the_null_page_fault_hands_out_page_0_first():
    from kvproof.impl import faults

    # K = 2: parent 1 holds pages 1, 2; the seeded bug shifts it to 0, 1 (page 0 is the null page).
    with faults.inject("allocator_hands_out_null_page"):
        assert Allocator({"a": 2}, 2).allocate({"a": 3}) == {"a": [0, 1, 2]}
    assert Allocator({"a": 2}, 2).allocate({"a": 3}) == {"a": [1, 2, 3]}


def test_a_field_view_is_built_once_and_a_page_past_the_end_is_named():
    binding = pack([TOK], granularity=4, alignment=16).bind(2)
    arena = Arena(binding)
    assert arena.pages("t.k") is arena.pages("t.k")
    # One group alone: K = 1, so 1 + 2 parents x 1 = 3 pages, 0..2.
    assert binding.page_count("tok") == 3
    with pytest.raises(IndexError, match=r"^page 3 outside 0\.\.2 of tok$"):
        binding.offset_bytes("t.k", 3)


def test_an_unreadable_json_file_is_named_in_the_error(tmp_path):
    from kvproof.spec.catalog import read_json

    bad = tmp_path / "bad.json"
    bad.write_text("{\n")
    with pytest.raises(ConfigError) as err:
        read_json(bad, "config")
    assert str(err.value) == (f"{bad}: not valid JSON (Expecting property name enclosed in double quotes: "
                              "line 2, column 1)")


def test_a_counterexample_reads_out_as_the_json_verify_prove_prints():
    from kvproof.spec.prover import Counterexample

    cex = Counterexample(32, "bf16", "padding_bound", {"full_attention": 2}, 1024, {"p0": 512},
                         ("first violation", "second violation"), "verify plan ...", 3, "fp8")
    assert cex.as_dict() == {
        "tp": 32, "dtype": "bf16", "drafts": 3, "draft_dtype": "fp8", "property": "padding_bound",
        "packing": {"full_attention": 2}, "parent_bytes": 1024, "plane_bytes": {"p0": 512},
        "message": "first violation", "violations": 2, "replay": "verify plan ...",
    }


def _bindings(*ns: int) -> dict[int, dict]:
    plan = pack([TOK], granularity=4, alignment=16)  # one 32 B plane, K = 1; bound 1/4
    return {n: plan_document(plan.bind(n)) for n in ns}


def _parent_of(doc: dict, parent: int) -> dict:
    """The binding with a parent (and its one plane) of `parent` bytes and no arena_bytes."""
    out = {k: v for k, v in doc.items() if k != "arena_bytes"}
    return out | {"parent_bytes": parent, "planes": [doc["planes"][0] | {"bytes": parent}]}


def test_an_engine_plan_at_three_parent_counts_is_one_affine_plan(monkeypatch):
    import kvproof.spec.plan_reader as R

    checked: list[int] = []
    validate_once = R.validate

    def validate_counted(doc: dict) -> None:
        checked.append(doc["num_parents"])
        validate_once(doc)

    monkeypatch.setattr(R, "validate", validate_counted)
    facts = affine_facts(_bindings(3, 1, 2))
    # 32 B parents: arena (N + 1) x 32 B; N from 1 to (2^31 - 1) // 1 page ids; the bound kept.
    assert (facts.parents, facts.arena_bytes, facts.max_padding) == ((1, 2**31 - 1), Affine(32, 32), Fraction(1, 4))
    assert checked == [1]  # the schema on the first binding; the line fit checks the others
    with pytest.raises(ConfigError, match="three or more parent counts"):
        affine_facts(_bindings(1, 2))
    mixed = _bindings(1, 2, 3)
    mixed[3] = {k: v for k, v in mixed[3].items() if k != "arena_bytes"}
    with pytest.raises(ConfigError, match=r"^engine plan: arena_bytes is given at some parent counts and not at"):
        affine_facts(mixed)


def test_bindings_that_differ_beyond_n_are_each_read_whole(monkeypatch) -> None:
    """A binding equal to the first but for N reuses what was read of the first; one that differs in any
    other key (a field's stride, a plane's bytes, a group's packing) is read whole and named."""
    import kvproof.spec.plan_reader as R

    read: list[int] = []
    static_once = R._static

    def static_counted(doc: dict) -> R.StaticKeys:
        read.append(doc["num_parents"])
        return static_once(doc)

    monkeypatch.setattr(R, "_static", static_counted)
    affine_facts(_bindings(1, 2, 3))
    assert read == [1]
    for key, change in (("fields", {"stride": 64}), ("planes", {"bytes": 64}), ("groups", {"packing": 2})):
        read.clear()
        docs = _bindings(1, 2, 3)
        docs[3] = docs[3] | {key: [docs[3][key][0] | change, *docs[3][key][1:]]}
        with pytest.raises(ConfigError, match=r"^engine plan: |^plan key "):
            affine_facts(docs)
        assert read[:2] == [1, 3], (key, read)


def test_an_engine_plan_needs_room_for_two_parents_below_2_63_bytes():
    # 2 x (2^62 - 16) = 2^63 - 32 fits: one parent usable (two would need 3 x parent bytes of arena).
    fits = {n: _parent_of(d, 2**62 - 16) for n, d in _bindings(1, 2, 3).items()}
    assert affine_facts(fits).parents == (1, 1)
    over = {n: _parent_of(d, 2**62) for n, d in _bindings(1, 2, 3).items()}
    with pytest.raises(ConfigError, match=r"^engine plan: parent 4,611,686,018,427,387,904 B leaves no room"):
        affine_facts(over)


def test_a_replay_command_repeats_only_what_differs_from_the_defaults():
    from kvproof.spec.prover import bound_flag, replay_command

    assert (bound_flag(Fraction(1, 4)), bound_flag(Fraction(1, 2)), bound_flag(None)) == (
        "", " --max-padding 0.5", " --max-padding inf")
    k3 = load_model("kimi-k3")
    plain = "verify plan --model kimi-k3 --tp 8 --dtype fp8 --policy search"
    assert replay_command(k3, None, 8, "fp8", "search") == plain
    assert replay_command(k3, "c.json", 32, "bf16", "ceil", 2, "fp8", None) == (
        "verify plan --config c.json --tp 32 --dtype bf16 --policy ceil --drafts 2 --draft-dtype fp8 --max-padding inf")


def test_two_exact_stride_fields_on_one_plane_tie_their_packings():
    from kvproof.spec.synth import encode

    layout = recipe_layout(_kimi_linear_466(), 32, "fp8")
    tied = replace(layout, fields=tuple(replace(f, exact_stride=True) if f.id == "layer.1.recurrent_state" else f
                                        for f in layout.fields))
    # slot.0 then holds two exact strides: K_mla x 67,840 = K_lin x 65,536. 67,840 = 2^8 x 265, so
    # K_mla is a multiple of 2^8 = 256 and K_lin of 265: past the packing limit of 256.
    for plan, sat in ((layout, z3.sat), (tied, z3.unsat)):
        solver = z3.Solver()
        solver.add(*encode(plan, None).constraints)
        assert solver.check() == sat


def test_a_synthesis_with_a_draft_layer_reports_the_draft_dtype_it_used():
    from kvproof.spec.synth import synthesize

    found = synthesize(load_model("kimi-k3"), 8, "fp8", 1, "fp8")
    assert (found.drafts, found.draft_dtype) == (1, "fp8") and found.packing is not None


def test_a_bound_tighter_than_the_engines_keeps_the_packing_the_engine_boots():
    """search takes the first K_mla the engine boots (its own bound, 1/4); a user bound of 1/8 only
    turns the verdict: K3 at bf16 tp 32 still gets K_mla 3, K_lin 2, now with three groups over 1/8."""
    k3, search = load_model("kimi-k3"), policy_named("search")
    default = plan_point(k3, 32, "bf16", search)
    tight = plan_point(k3, 32, "bf16", search, bound=Fraction(1, 8))
    for point in (default, tight):
        assert [g["packing"] for g in point.plan["groups"]] == [3, 2, 2, 2]
    assert default.accepted and not tight.accepted and len(tight.violations["padding_bound"]) == 3


def test_a_recipe_plan_with_a_draft_layer_reports_the_draft_dtype_it_used():
    planned = plan_model(load_model("kimi-k3"), 8, "fp8", "search", 1, "fp8")
    assert (planned.drafts, planned.draft_dtype) == (1, "fp8")


def test_the_draft_dtype_fault_gives_the_draft_layer_the_target_dtype():
    from kvproof.impl import faults
    from kvproof.impl.recipe import recipe_groups

    def last_two(groups) -> list[tuple[str, str]]:
        return [(f.id, f.dtype) for f in groups[0].fields[-2:]]

    # K3 has 93 layers: layer 94 is the draft, bf16 as asked; fp8's latent is stored as uint8.
    k3 = load_model("kimi-k3")
    assert last_two(recipe_groups(k3, 8, "fp8", 1, "bf16")) == [("layer.93.latent_kv", "uint8"),
                                                                 ("layer.94.latent_kv", "bfloat16")]
    with faults.inject("draft_takes_target_dtype"):
        assert last_two(recipe_groups(k3, 8, "fp8", 1, "bf16"))[1] == ("layer.94.latent_kv", "uint8")


def test_a_plane_off_its_alignment_is_a_partition_violation():
    from kvproof.impl.packer import Violation, boot_check

    plan = pack([TOK], granularity=4, alignment=16)  # one plane p0 of 32 B, alignment 16
    off = replace(plan, planes=(replace(plan.planes[0], plane_bytes=40),))
    assert boot_check(plan) == []
    assert boot_check(off) == [Violation("partition", "plane p0 of 40 B is not a multiple of its alignment 16")]


def test_pack_refuses_non_positive_sizes_with_the_message_that_names_them():
    with pytest.raises(PlanError, match=r"^alignment and granularity must be positive$"):
        pack([TOK], granularity=0, alignment=16)
    flat = GroupSpec("g", (FieldSpec("g.x", "p", (4,), "uint8", stride_alignment=0),))
    with pytest.raises(PlanError, match=r"^field g\.x: shape and stride_alignment must be positive$"):
        pack([flat], granularity=4, alignment=16)


def test_a_bad_padding_bound_read_without_the_schema_is_named_as_max_padding():
    # The schema answers a negative bound first in `verify check`; a plan read with validated=True
    # (and a direct call) gets the reader's own message, its default key naming the plan key.
    with pytest.raises(ConfigError) as err:
        padding_bound_of(-0.1)
    assert str(err.value) == "plan key 'max_padding' must be a finite number >= 0, got -0.1"
    doc = _tok_plan() | {"max_padding": -1}
    with pytest.raises(ConfigError) as err:
        concrete_facts(doc, validated=True)
    assert str(err.value) == "plan key 'max_padding' must be a finite number >= 0, got -1"


def test_plan_point_adds_each_propertys_seconds_to_the_callers_tally():
    # verify prove reports each property's solver seconds summed over points: plan_point adds to
    # the dict it is handed (100 s already there stays and grows), one entry per property checked.
    seconds = {"partition": 100.0}
    plan_point(load_model("kimi-k3"), 32, "bf16", policy_named("search"), seconds)
    assert sorted(seconds) == ["consumer_stride", "entry_alignment", "exact_stride", "field_alignment",
                               "fronts_never_cross", "in_bounds", "kernel_page", "no_overlap", "null_page",
                               "padding_bound", "page_id_limit", "partition", "sink_page"]
    assert seconds["partition"] > 100.0 and all(s > 0 for s in seconds.values())


@pytest.mark.parametrize(("kda", "full", "message"), [
    ([1, 2], "x", "config key 'linear_attn_config.full_attn_layers' must be a list of 1-based layer numbers"),
    ([1, True], [3], "config key 'linear_attn_config.kda_layers' must be a list of 1-based layer numbers"),
    ([1, 2, 3, 4], [], "config key 'linear_attn_config.kda_layers' lists 4 layers, more than num_hidden_layers 3"),
    ([2, 1, 2], [3], "config key 'linear_attn_config.kda_layers' lists layer 2 twice"),
    ([1, 2], [3, 4], "config key 'linear_attn_config.full_attn_layers': layer 4 out of range 1..3 (num_hidden_layers)"),
], ids=["not_a_list", "a_bool", "too_many", "twice", "out_of_range"])
def test_each_layer_list_error_names_its_key_whole(kda, full, message: str):
    # 3 layers; every message carries the key with its 'linear_attn_config.' prefix.
    raw = {"num_hidden_layers": 3, "num_attention_heads": 4, "kv_lora_rank": 8, "qk_rope_head_dim": 8,
           "linear_attn_config": {"kda_layers": kda, "full_attn_layers": full, "num_heads": 4, "head_dim": 8,
                                  "short_conv_kernel_size": 4}}
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "three")
    assert str(err.value) == message


def test_each_kernel_limit_of_a_plan_is_read_and_checked():
    from kvproof.spec.encoding import kernel_page

    doc = _tok_plan()
    # The field's page holds 48 tokens. a: 48 is a multiple of its block 16 and tiles 48, but is no
    # power of two; b: 16 passes all four limits; c: 32 is a multiple of 16 but does not tile 48;
    # d: 8 tiles 48 but is no multiple of 16; e: 24 tiles 48, a multiple of 8, but past its 16.
    kernels = [{"name": "a", "tokens": 48, "block": 16, "max_tokens": None, "power_of_two": True},
               {"name": "b", "tokens": 16, "block": 16, "max_tokens": 16, "power_of_two": True},
               {"name": "c", "tokens": 32, "block": 16, "max_tokens": None},
               {"name": "d", "tokens": 8, "block": 16, "max_tokens": None},
               {"name": "e", "tokens": 24, "block": 8, "max_tokens": 16}]
    doc["fields"][0] |= {"tokens": 48, "kernels": kernels}
    assert [(v.property, v.message) for v in kernel_page(concrete_facts(doc))] == [
        ("kernel_page", "field t.k: kernel a is handed pages of 48 tokens, not a power of two as its source "
                        "requires"),
        ("kernel_page", "field t.k: kernel c is handed pages of 32 tokens, which do not tile the field's "
                        "48-token page"),
        ("kernel_page", "field t.k: kernel d is handed pages of 8 tokens, not a multiple of its token block 16"),
        ("kernel_page", "field t.k: kernel e is handed pages of 24 tokens, past its limit of 16 tokens per page"),
    ]
    del doc["fields"][0]["tokens"]  # kernels split the field's page: without its tokens there is nothing to split
    with pytest.raises(ConfigError) as err:
        concrete_facts(doc, validated=True)
    assert str(err.value) == ("plan key 'fields[0].kernels' needs 'fields[0].tokens', the tokens per page the "
                              "kernels split")


@pytest.mark.parametrize("shape", [[], [4, 0], [4, -4], [4, 2.0], [True, 4]])
def test_a_shape_read_without_the_schema_must_list_positive_integers(shape):
    # symbolic_facts and validated=True read a plan without the schema; the reader refuses the shape itself.
    doc = _tok_plan()
    doc["fields"][0]["shape"] = shape
    with pytest.raises(ConfigError) as err:
        concrete_facts(doc, validated=True)
    assert str(err.value) == "plan key 'fields[0].shape' must be a non-empty list of positive integers"


def test_pages_past_the_groups_count_never_overlap():
    from kvproof.spec.encoding import no_overlap

    # One plane of 32 B, packing 1; t.a (4 B at 0) steps 32 B a page, t.b (4 B at 24) only 8 B.
    # Page bases: a 32p, b 32 - 8 + 8q = 24 + 8q, so a starts at 32p and b at 48 + 8q: both runs
    # are 4 B at multiples of 8, so they share bytes only where the starts are equal: p = 3, q = 6
    # (48 + 8p = 32q has no p < q). At N = 2 the pages are 0..2: no overlap; at N = 7, 0..7: one.
    def at(n: int) -> list[tuple[str, str]]:
        doc = _tok_plan()
        doc |= {"num_parents": n, "arena_bytes": 32 * (n + 1),
                "groups": [doc["groups"][0] | {"page_count": 1 + n}],
                "fields": [{"id": "t.a", "group": "tok", "plane": "p0", "shape": [4], "dtype": "uint8",
                            "offset": 0, "stride": 32, "exact_stride": False},
                           {"id": "t.b", "group": "tok", "plane": "p0", "shape": [4], "dtype": "uint8",
                            "offset": 24, "stride": 8, "exact_stride": False}]}
        return [(v.property, v.message) for v in no_overlap(concrete_facts(doc))]

    assert at(2) == []
    assert at(7) == [("no_overlap", "plane p0: t.a of page 3 and t.b of page 6 of tok share bytes "
                                    "(strides 32/8 B, N=7)")]


@pytest.mark.parametrize(("stride", "offsets"), [(12, (0, 4, 8)), (8, (0, 4, 8)), (16, (0, 8, 12)),
                                                 (16, (0, 6, 12)), (32, (0, 4, 24))])
def test_one_query_for_two_pages_footprints_says_what_the_pairs_say(monkeypatch, stride, offsets):
    from kvproof.spec import encoding

    # Three 4 B fields of one stride on a 32 B plane, N = 7: two pages' footprints (the first field's start to
    # the last one's end) meet only where a footprint is wider than the stride (12 B at stride 8); at 12, 16
    # and 32 they are apart. Asking the footprints first must find exactly what the pairs alone find.
    doc = _tok_plan()
    doc |= {"num_parents": 7, "arena_bytes": 32 * 8, "groups": [doc["groups"][0] | {"page_count": 8}],
            "fields": [{"id": f"t.{i}", "group": "tok", "plane": "p0", "shape": [4], "dtype": "uint8",
                        "offset": offset, "stride": stride, "exact_stride": False}
                       for i, offset in enumerate(offsets)]}
    facts = concrete_facts(doc)
    bases: list[object] = []
    page_base = encoding._page_base

    def counted(*args):
        bases.append(args)
        return page_base(*args)

    monkeypatch.setattr(encoding, "_page_base", counted)
    with_hull = encoding.no_overlap(facts)
    hull_bases = len(bases)
    monkeypatch.setattr(encoding, "HULL_FROM", len(offsets))  # the pairs alone
    bases.clear()
    assert encoding.no_overlap(facts) == with_hull
    assert bool(with_hull) == (offsets[-1] + 4 - offsets[0] > stride)
    if not with_hull:  # apart: two page bases, no pair's formula built
        assert hull_bases == 2 < len(bases)


def test_each_partition_message_of_a_plan_reads_as_worked_out():
    from kvproof.spec.encoding import partition

    # Parent 40 B (not a multiple of 16, nor of packing 3), one plane of 48 B: more than the parent.
    # The plane is a multiple of lcm(16, 3 x 2 B) = 48 and of its own 16, but t.k's stride 32 x 3 is 96.
    doc = _tok_plan()
    doc |= {"parent_bytes": 40, "planes": [doc["planes"][0] | {"bytes": 48}],
            "groups": [doc["groups"][0] | {"packing": 3, "page_count": 7}]}
    assert [(v.property, v.message) for v in partition(concrete_facts(doc))] == [
        ("partition", "parent 40 B is not a multiple of alignment 16"),
        ("partition", "packing 3 of tok does not divide parent 40 B"),
        ("partition", "planes take 48 B, more than the parent's 40 B"),
        ("partition", "field t.k: stride 32 B x packing 3 != plane p0 48 B"),
    ]


def test_a_plane_off_every_packing_and_element_size_is_named_with_its_unit():
    from kvproof.spec.encoding import partition

    # One 40 B plane in a 48 B parent: 40 is not a multiple of lcm(alignment 16, packing 1 x 2 B) = 16,
    # nor of the plane's declared 16, and t.k's stride 32 x packing 1 is not 40.
    doc = _tok_plan()
    doc |= {"parent_bytes": 48, "planes": [doc["planes"][0] | {"bytes": 40}]}
    assert [(v.property, v.message) for v in partition(concrete_facts(doc))] == [
        ("partition", "plane p0 of 40 B is not a multiple of 16 (alignment and every packing x element size on it)"),
        ("partition", "plane p0 of 40 B is not a multiple of its declared alignment 16"),
        ("partition", "field t.k: stride 32 B x packing 1 != plane p0 40 B"),
    ]


def test_page_0_out_of_the_null_parent_is_named_by_its_bytes():
    from kvproof.spec.encoding import null_page

    # t.k's 32 B fill its 32 B plane: page 0 is bytes 0..32, all of parent 0. Moved to offset 8,
    # page 0 spans bytes 8..40 of the slab, past parent 0's 32.
    doc = _tok_plan()
    assert null_page(concrete_facts(doc)) == []
    doc["fields"][0]["offset"] = 8
    assert [(v.property, v.message) for v in null_page(concrete_facts(doc))] == [
        ("null_page", "page 0 of tok on plane p0 (bytes 8..40 of the slab) is not inside null parent 0 (bytes 0..32)")]


def test_a_reader_walking_by_payload_is_named_only_where_the_stride_is_not_the_payload():
    from kvproof.spec.encoding import consumer_stride

    # t.k holds 32 B: on a 32 B plane its stride is its payload and a payload walker reads right;
    # on a 48 B plane (parent 48 B) page p sits at 48p, where the walker reads 32p.
    doc = _tok_plan()
    doc["fields"][0]["readers"] = [{"name": "lmcache", "walks": "payload"}]
    assert consumer_stride(concrete_facts(doc)) == []
    doc |= {"parent_bytes": 48, "planes": [doc["planes"][0] | {"bytes": 48}]}
    doc["fields"][0] |= {"stride": 48, "exact_stride": False}
    assert [(v.property, v.message) for v in consumer_stride(concrete_facts(doc))] == [
        ("consumer_stride", "lmcache walks the pages of tok on plane p0 by their payload 32 B, but the plan's "
                            "stride is 48 B: page p is read at the wrong bytes for every p >= 1")]


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d | {"max_padding": "x"}, "plan key 'max_padding' has the wrong type str"),
    (lambda d: d | {"planes": [d["planes"][0] | {"alignment": 0}]}, "plan key 'planes[0].alignment' must be "
                                                                     "positive, got 0"),
    (lambda d: d | {"fields": [d["fields"][0] | {"dtype": "float7"}]},
     "plan key 'fields[0].dtype': unknown dtype 'float7'; known: uint8, float8_e4m3fn, bfloat16, float16, "
     "float32, int32, int64, int8, float8_e5m2, float8_e8m0fnu, float64"),
], ids=["max_padding", "plane_alignment", "dtype"])
def test_each_key_the_reader_refuses_without_the_schema_is_named_whole(change, message: str):
    # concrete_facts(validated=True) and symbolic_facts read a plan the schema did not see first.
    doc = _tok_plan()
    with pytest.raises(ConfigError) as err:
        concrete_facts(change(doc), validated=True)
    assert str(err.value) == message


def test_two_planes_on_the_same_slab_bytes_are_one_slab_check_named_by_the_first():
    # p0 and p1 both 32 B per parent at arena offset 0 (the overlap is no_overlap's to report):
    # at N = 1 each slab is 2 x 32 = 64 B, past an arena of 48 B. The same bytes are checked once.
    doc = _tok_plan()
    doc |= {"num_parents": 1, "arena_bytes": 48, "parent_bytes": 64, "groups": [doc["groups"][0] | {"page_count": 2}],
            "planes": [doc["planes"][0], doc["planes"][0] | {"id": "p1"}]}
    assert [(v.property, v.message) for v in in_bounds(concrete_facts(doc))] == [
        ("in_bounds", "plane p0's slab (arena bytes 0..64) leaves the arena of 48 B at N=1")]


def test_a_group_keeps_at_most_64_fields_on_one_plane():
    # Every pair of a stack is checked, so the reader caps a group's fields on one plane at 64:
    # 64 copies of t.k on p0 are read; a 65th (fields[64]) is refused before any pair is built.
    doc = _tok_plan()
    doc["fields"] = [doc["fields"][0] | {"id": f"t.k{i}"} for i in range(64)]
    assert len(concrete_facts(doc, validated=True).fields) == 64
    doc["fields"].append(doc["fields"][0] | {"id": "t.k64"})
    with pytest.raises(ConfigError) as err:
        concrete_facts(doc, validated=True)
    assert str(err.value) == ("plan key 'fields[64].plane': group 'tok' keeps more than 64 fields on plane 'p0' "
                              "(every pair is checked; at most 64 per group and plane)")


def test_a_negative_page_count_is_refused_by_its_own_message_and_takes_nothing() -> None:
    a = Allocator({"g": 2}, 1)
    with pytest.raises(AllocatorError, match=r"^page counts must be >= 0$"):
        a.allocate({"g": -1})
    assert a.free_parents() == (1,)  # refused before any state changed


def test_a_binding_off_the_line_of_the_first_two_is_named_with_the_three_numbers() -> None:
    # TOK's arena is (N + 1) x 32 B: 64 B at N=1 and 96 B at N=2 fix the line, which puts N=3 at
    # 128 B; a binding stating 160 B there is not affine in N.
    docs = _bindings(1, 2, 3)
    docs[3]["arena_bytes"] = 160
    with pytest.raises(ConfigError) as err:
        affine_facts(docs)
    assert str(err.value) == "engine plan: arena_bytes is 160 at N=3, not affine in N (64 at N=1, 96 at N=2)"


def test_a_concrete_binding_reads_as_numbers_that_do_not_grow_with_n() -> None:
    # TOK bound to 2 parents: 1 + 2 x 1 = 3 pages and an arena of (2 + 1) x 32 = 96 B. N is fixed
    # at 2, so each is an affine term of slope 0 (an int, as the properties add and compare them).
    facts = concrete_facts(_tok_plan())
    assert facts.parents == (2, 2)
    assert facts.groups[0].page_count == Affine(0, 3) and facts.arena_bytes == Affine(0, 96)


def test_a_page_freed_twice_in_one_call_is_named_and_nothing_is_freed() -> None:
    a = Allocator({"g": 2}, 1)
    a.allocate({"g": 2})  # pages 1 and 2, parent 1
    with pytest.raises(AllocatorError, match=r"^a page of g is freed twice in one call$"):
        a.free({"g": [1, 1]})
    assert a.live_pages("g") == {1, 2} and a.free_parents() == ()


def test_a_plan_or_an_entry_that_is_not_an_object_is_named_without_the_schema() -> None:
    # concrete_facts(validated=True) reads a plan the schema did not see: a list, or a list entry
    # that is a number, is named by where it sits.
    with pytest.raises(ConfigError) as err:
        concrete_facts([], validated=True)  # type: ignore[arg-type]
    assert str(err.value) == "plan must be an object"
    doc = _tok_plan()
    doc["planes"][0] = 5
    with pytest.raises(ConfigError) as err:
        concrete_facts(doc, validated=True)
    assert str(err.value) == "plan key 'planes[0]' must be an object"


def test_a_field_without_a_shape_or_with_a_dtype_not_a_string_is_named_without_the_schema() -> None:
    doc = _tok_plan()
    del doc["fields"][0]["shape"]
    with pytest.raises(ConfigError) as err:
        concrete_facts(doc, validated=True)
    assert str(err.value) == "plan is missing key 'fields[0].shape'"
    doc = _tok_plan()
    doc["fields"][0]["dtype"] = 2
    with pytest.raises(ConfigError) as err:
        concrete_facts(doc, validated=True)
    assert str(err.value) == "plan key 'fields[0].dtype' has the wrong type int"


class _FarthestWitness(z3.Solver):
    """A solver whose every model has the K_mla farthest from the model before: the least or the
    largest it admits (z3 may hand any witness)."""

    def __init__(self) -> None:
        super().__init__()
        self.last = 0

    def _walk(self, extra: tuple[Any, ...], further: Callable[[int], Any]) -> int:
        k: int = self.model()[K_MLA].as_long()
        while super().check(*extra, further(k)) == z3.sat:
            k = self.model()[K_MLA].as_long()
        return k

    def check(self, *extra: Any) -> Any:
        if super().check(*extra) != z3.sat:
            return z3.unsat
        largest = self._walk(extra, lambda k: k < K_MLA)
        least = self._walk(extra, lambda k: k > K_MLA)
        self.last = largest if largest - self.last >= self.last - least else least
        return super().check(*extra, self.last == K_MLA)


def test_search_bisects_above_the_candidates_it_refused_whatever_witness_z3_gives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    layout = replace(recipe_layout(_kimi_linear_466(), 32, "fp8"), state=3 * 67_840)
    monkeypatch.setattr("kvproof.spec.policy._SOLVER", _FarthestWitness())
    # state = 3 pages: search admits K_mla 3..256. After 3 is refused the next is asked for above
    # 3: the witness 256, then below 130 the one farthest from 256, which must be 4, not the
    # refused 3 again; after 4, 5 (K_lin = 5 x 67,840 // 203,520 = 1).
    tried = []

    def boots(packing: dict[str, int]) -> bool:
        tried.append(packing["full_attention"])
        assert len(tried) <= 3, tried
        return packing["full_attention"] >= 5

    lin = {"linear_attention_0": 1, "linear_attention_1": 1, "linear_attention_2": 1}
    assert choose(policy_named("search"), layout, boots) == {"full_attention": 5, **lin}
    assert tried == [3, 4, 5]
