"""The spec (spec/contract.py, derived from the contract text) and impl (the production packer)
agree number for number at every catalog point under every policy, and on random small hybrid
models; impl's own plans pass `verify check`'s property checks."""

from __future__ import annotations

from fractions import Fraction

import pytest
from bites import fails_under
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from kvproof.impl.export import plan_document
from kvproof.impl.packer import Binding, PlanError
from kvproof.impl.recipe import plan_model
from kvproof.spec.catalog import BUILTIN_MODELS, CACHE_DTYPES, ConfigError, ModelGeometry, load_model, parse_config
from kvproof.spec.check import check_plan
from kvproof.spec.contract import padding
from kvproof.spec.policy import POLICIES
from kvproof.spec.prover import plan_point


def spec_numbers(model: ModelGeometry, tp: int, dtype: str, policy: str, drafts: int = 0,
                 draft_dtype: str = "bf16") -> dict:
    # impl's verdict is the engine's: no padding bound once a draft layer is in (docs/contract.md#draft-layers).
    bound = None if drafts else Fraction(1, 4)
    point = plan_point(model, tp, dtype, POLICIES[policy], drafts=drafts, draft_dtype=draft_dtype, bound=bound)
    plan = point.plan
    return {
        "packing": {g["id"]: g["packing"] for g in plan["groups"]},
        "planes": {p["id"]: p["bytes"] for p in plan["planes"]},
        "parent": plan["parent_bytes"],
        "stride": {f["id"]: f["stride"] for f in plan["fields"]},
        "offset": {f["id"]: f["offset"] for f in plan["fields"]},
        "padding": padding(plan, point.layout),
        "accepted": point.accepted,
        "violated": sorted({prop for prop, found in point.violations.items() if found}),
    }


def impl_numbers(model: ModelGeometry, tp: int, dtype: str, policy: str, drafts: int = 0,
                 draft_dtype: str = "bf16") -> dict:
    plan = plan_model(model, tp, dtype, policy, drafts, draft_dtype).plan
    return {
        "packing": plan.packing,
        "planes": {p.id: p.plane_bytes for p in plan.planes},
        "parent": plan.parent_bytes,
        "stride": {f.id: f.page_stride_bytes for f in plan.fields},
        "offset": {f.id: f.offset_bytes for f in plan.fields},
        "padding": {g.id: Fraction(g.padding) for g in plan.groups},
        "accepted": plan.accepted,
        "violated": sorted({v.property for v in plan.violations}),
    }


def assert_conforms(model: ModelGeometry, tp: int, dtype: str, policy: str, drafts: int = 0,
                    draft_dtype: str = "bf16") -> None:
    try:
        spec = spec_numbers(model, tp, dtype, policy, drafts, draft_dtype)
    except ConfigError as err:
        # A point outside what the policy covers is refused by both, never planned by one.
        with pytest.raises(PlanError):
            impl_numbers(model, tp, dtype, policy, drafts, draft_dtype)
        print(f"both refuse {model.name} tp={tp} {dtype} {policy}: {err}")
        return
    impl = impl_numbers(model, tp, dtype, policy, drafts, draft_dtype)
    differ = [key for key in spec if spec[key] != impl[key]]
    assert not differ, (
        f"{model.name} tp={tp} {dtype} {policy} drafts={drafts} {draft_dtype}: spec and impl disagree on {differ}\n"
        + "\n".join(f"  {key}: spec {spec[key]!r}\n  {' ' * len(key)}  impl {impl[key]!r}" for key in differ)
    )


def check_model(name: str, policy: str, drafts: int = 0) -> None:
    model = load_model(name)
    for draft_dtype in CACHE_DTYPES if drafts else ("bf16",):
        for dtype in CACHE_DTYPES:
            for tp in model.tp_domain:
                assert_conforms(model, tp, dtype, policy, drafts, draft_dtype)


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("name", BUILTIN_MODELS)
def test_spec_equals_impl_at_every_catalog_point(name: str, policy: str) -> None:
    check_model(name, policy)


@pytest.mark.parametrize("drafts", [1, 5])
@pytest.mark.parametrize("name", BUILTIN_MODELS)
def test_spec_equals_impl_with_drafts(name: str, drafts: int) -> None:
    """Drafts 0 are the test above; 1 and 5 draft layers in both draft dtypes, every policy."""
    for policy in POLICIES:
        check_model(name, policy, drafts)


@pytest.mark.parametrize("fault", ["draft_shares_target_plane", "draft_own_group"])
def test_draft_conformance_bites(fault: str) -> None:
    fails_under(fault, check_model, "kimi-k3", "search", 1)


@st.composite
def hybrid_configs(draw: st.DrawFn) -> dict:
    """Small hybrid models that obey the catalog's rules: every layer is MLA or KDA, both kinds
    present, head counts that shard over a few tp values."""
    layers = draw(st.integers(2, 14))
    mla = draw(st.sets(st.integers(1, layers), min_size=1, max_size=layers - 1))
    heads = draw(st.sampled_from([4, 6, 8, 12, 16, 32]))
    return {
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "kv_lora_rank": draw(st.sampled_from([64, 128, 256, 512])),
        "qk_rope_head_dim": draw(st.sampled_from([16, 32, 64])),
        "linear_attn_config": {
            "kda_layers": sorted(set(range(1, layers + 1)) - mla),
            "full_attn_layers": sorted(mla),
            "num_heads": heads * draw(st.sampled_from([1, 2])),
            "head_dim": draw(st.sampled_from([32, 64, 128])),
            "short_conv_kernel_size": draw(st.integers(2, 4)),
        },
    }


Point = tuple[ModelGeometry, int, str, str, int, str]


@st.composite
def random_points(draw: st.DrawFn) -> Point:
    """A random hybrid point, with 0 to 3 draft layers in either draft dtype."""
    model = parse_config(draw(hybrid_configs()), "random-hybrid")
    return (model, draw(st.sampled_from(model.tp_domain)), draw(st.sampled_from(CACHE_DTYPES)),
            draw(st.sampled_from(list(POLICIES))), draw(st.integers(0, 3)), draw(st.sampled_from(CACHE_DTYPES)))


@given(random_points())
def test_spec_equals_impl_on_random_hybrids(point: Point) -> None:
    assert_conforms(*point)


def check_impl_plans(name: str) -> None:
    """impl's accepted plans satisfy every property of `verify check`, bound to 1 parent and to
    the most parents the plan allows."""
    model = load_model(name)
    for dtype in CACHE_DTYPES:
        for tp in model.tp_domain:
            plan = plan_model(model, tp, dtype, "search").plan
            for parents in (1, plan.max_parents):
                found = check_plan(plan_document(Binding(plan, parents)))
                assert not found, f"{name} tp={tp} {dtype} N={parents}: {found[:3]}"


@pytest.mark.parametrize("name", BUILTIN_MODELS)
def test_impl_plans_pass_verify_check(name: str) -> None:
    check_impl_plans(name)


@pytest.mark.parametrize("fault", ["stride_in_elements", "search_skips_first", "field_end_in_elements"])
def test_conformance_bites(fault: str) -> None:
    fails_under(fault, check_model, "kimi-k3", "search")


@settings(phases=[Phase.generate], database=None)  # a fault needs no shrinking to be seen
@given(random_points())
def _conforms_unshrunk(point: Point) -> None:
    assert_conforms(*point)


def test_conformance_on_random_hybrids_bites() -> None:
    fails_under("stride_in_elements", _conforms_unshrunk)


@pytest.mark.parametrize("fault", ["stride_in_elements", "field_end_in_elements"])
def test_verify_check_of_impl_plans_bites(fault: str) -> None:
    fails_under(fault, check_impl_plans, "kimi-k3")
