"""The prover: expected verdicts on the catalog (from the issue), agreement with impl where a
policy fails, a broken policy it was never told about, and each property check shown to bite."""

from __future__ import annotations

import json
import re
import time
from math import floor

import pytest
import z3

from kvproof.cli.main import main
from kvproof.impl.recipe import pack_k, plan_model, recipe_groups
from kvproof.spec import properties as P
from kvproof.spec.catalog import ConfigError, load_model
from kvproof.spec.check import check_plan
from kvproof.spec.contract import bound, plan_for, recipe_layout
from kvproof.spec.encoding import violations
from kvproof.spec.plan_reader import concrete_facts, symbolic_facts
from kvproof.spec.policy import POLICIES, Policy
from kvproof.spec.prover import prove

K3 = load_model("kimi-k3")


def failing(proof) -> set[tuple[int, str, str]]:
    return {(c.tp, c.dtype, c.property) for c in proof.counterexamples}


@pytest.mark.parametrize("name", ["kimi-k3", "kimi-linear-48b-a3b", "deepseek-v3"])
def test_search_proves_every_property_at_every_point(name: str) -> None:
    model = load_model(name)
    proof = prove(model, POLICIES["search"])
    assert proof.proved, proof.counterexamples[:2]
    assert {(p.tp, p.dtype) for p in proof.points} == {(t, d) for t in model.tp_domain for d in ("fp8", "bf16")}
    assert set(proof.properties) == set(P.PROPERTIES)


def test_ceil_fails_exactly_at_bf16_tp32_padding() -> None:
    proof = prove(K3, POLICIES["ceil"])
    assert failing(proof) == {(32, "bf16", "padding_bound")}
    (example,) = proof.counterexamples
    assert example.packing["full_attention"] == 2 and example.packing["linear_attention_0"] == 1
    assert "0.512" in example.messages[0]
    assert example.replay == "verify plan --model kimi-k3 --tp 32 --dtype bf16 --policy ceil"


@pytest.mark.parametrize("name", ["kimi-k3", "kimi-linear-48b-a3b"])
@pytest.mark.parametrize("policy", ["pinned12", "ceil"])
def test_failing_points_are_exactly_impl_rejections(name: str, policy: str) -> None:
    """Every point where impl's boot check rejects the policy's plan, with the same properties."""
    model = load_model(name)
    expected = {
        (tp, dtype, v.property)
        for dtype in ("fp8", "bf16")
        for tp in model.tp_domain
        for v in plan_model(model, tp, dtype, policy).plan.violations
    }
    assert failing(prove(model, POLICIES[policy])) == expected


def test_pinned12_fp8_tp4_is_the_published_exact_stride_failure() -> None:
    proof = prove(K3, POLICIES["pinned12"], ("exact_stride",), tps=[4], dtypes=["fp8"])
    (example,) = proof.counterexamples
    assert "needs stride 73,728 B" in example.messages[0]


def _round_half_up(k, state: int, page: int):
    """K_mla = max(1, round(state / page)): a plausible policy that is wrong. No counterexample
    for it is written down anywhere; the prover has to find them."""
    return z3.And(2 * state < (2 * k + 1) * page, z3.Or(k == 1, (2 * k - 1) * page <= 2 * state))


def test_prover_catches_a_broken_policy_it_was_not_told_about() -> None:
    proof = prove(K3, Policy("round", _round_half_up))
    assert not proof.proved
    for c in proof.counterexamples:
        # confirm each counterexample with impl: the same packing, planned by the production packer
        layout = recipe_layout(K3, c.tp, c.dtype)
        k_mla = c.packing["full_attention"]
        assert k_mla == max(1, floor(layout.state / layout.page + 0.5))
        plan = pack_k(recipe_groups(K3, c.tp, c.dtype), k_mla, layout.state, layout.page)
        assert c.property in {v.property for v in plan.violations}, (c, plan.violations)


def _good_plan():
    layout = recipe_layout(K3, 8, "fp8")
    return plan_for(layout, {g: 12 if g == "full_attention" else 1 for g in layout.groups})


def _field(plan: dict, suffix: str) -> dict:
    return next(f for f in plan["fields"] if f["id"].endswith(suffix))


def _mutants():
    """One broken variant of a good bound plan per property: each must be reported under its name."""
    def exact_stride(p):
        _field(p, "latent_kv")["stride"] -= 256

    def padding_bound(p):
        p["max_padding"] = 0.01

    def partition(p):
        p["parent_bytes"] += 1

    def no_overlap(p):
        _field(p, "recurrent_state")["offset"] = 0

    def field_alignment(p):
        _field(p, "recurrent_state")["offset"] += 2  # fp32 at an offset of 2 mod 4

    def in_bounds(p):
        p["planes"][-1]["arena_offset"] += 256  # its slab now ends past the arena

    def page_id_limit(p):
        p["num_parents"] = 2**31 // 12 + 1
        for g in p["groups"]:
            g["page_count"] = 1 + p["num_parents"] * g["packing"]

    def null_page(p):
        _field(p, "latent_kv")["offset"] = 128

    def kernel_page(p):
        # the whole 128-token page handed to FlashMLA, which takes 64 (deepseek-ai/FlashMLA csrc/api/dense_decode.h:67)
        latent = _field(p, "latent_kv")
        latent["tokens"] = latent["shape"][0]
        latent["kernels"] = [{"name": "flashmla", "tokens": latent["shape"][0], "block": 64, "max_tokens": 64}]

    def consumer_stride(p):
        # a connector that steps through padded state pages by their payload (LMCache#5166)
        _field(p, "recurrent_state")["readers"] = [{"name": "lmcache", "walks": "payload"}]

    def entry_alignment(p):
        # a layout stating entries of twice the field's stride: its stride is no whole entry
        latent = _field(p, "latent_kv")
        latent["aligned"] = {"entry": 2 * latent["stride"], "row": 1}

    def fronts_never_cross(p):
        # an end of 3 B pages growing down against one of 2 B pages: with the other end at watermark 2 (its front
        # at byte 4), this end's allocations reach watermark 0, its front at byte 3
        p["groups"][0]["end"] = {"grows": "down", "page_bytes": 3, "min_page": 1, "pages": 10, "sink_bytes": 3,
                                 "peer": {"page_bytes": 2, "min_page": 2, "pages": 15},
                                 "reach": [{"peer_from": 2, "peer_to": 2, "own": 0}]}

    def sink_page(p):
        # an end whose allocator hands out page 0, the sink's
        p["groups"][0]["end"] = {"grows": "up", "page_bytes": 2, "min_page": 0, "pages": 15, "sink_bytes": 2,
                                 "peer": {"page_bytes": 3, "min_page": 1, "pages": 10},
                                 "reach": [{"peer_from": 9, "peer_to": 9, "own": 15}]}

    return [exact_stride, padding_bound, partition, no_overlap, field_alignment, in_bounds, page_id_limit, null_page,
            kernel_page, consumer_stride, entry_alignment, fronts_never_cross, sink_page]


def test_every_property_has_a_mutant() -> None:
    assert {m.__name__ for m in _mutants()} == set(P.PROPERTIES)


def test_good_plan_passes_every_check() -> None:
    assert check_plan(bound(_good_plan(), 5)) == []


@pytest.mark.parametrize("mutant", _mutants(), ids=lambda m: m.__name__)
def test_each_property_check_bites(mutant) -> None:
    plan = json.loads(json.dumps(bound(_good_plan(), 5)))
    mutant(plan)
    assert mutant.__name__ in {v["property"] for v in check_plan(plan)}


@pytest.mark.parametrize(("reach", "says"), [
    # a gap between the runs: the other end's watermarks 4..5 would go unchecked
    ([{"peer_from": 2, "peer_to": 3, "own": 9}, {"peer_from": 6, "peer_to": 15, "own": 9}],
     "'groups[0].end.reach[1].peer_from' is 6; expected 4"),
    # runs that stop short of the other end's empty watermark, 2 (its min_page: it grows up)
    ([{"peer_from": 3, "peer_to": 15, "own": 9}], "do not reach the other end's empty watermark 2"),
    ([{"peer_from": 2, "peer_to": 16, "own": 9}], "not an ascending run within its index space 2..15"),
    ([{"peer_from": 2, "peer_to": 15, "own": 10}], "'groups[0].end.reach[0].own' is 10, outside the end's index "
     "space 0..9"),
])
def test_an_ends_runs_must_cover_every_watermark_the_other_end_reaches(reach: list[dict[str, int]],
                                                                       says: str) -> None:
    """fronts_never_cross quantifies over the runs: a plan whose runs miss some of the other end's watermarks is
    refused, not held vacuously there."""
    plan = json.loads(json.dumps(bound(_good_plan(), 5)))
    plan["groups"][0]["end"] = {"grows": "down", "page_bytes": 3, "min_page": 1, "pages": 10, "sink_bytes": 3,
                                "peer": {"page_bytes": 2, "min_page": 2, "pages": 15}, "reach": reach}
    with pytest.raises(ConfigError, match=re.escape(says)):
        concrete_facts(plan)


def test_a_reader_walking_by_its_item_length_holds_at_the_stride_only() -> None:
    """A transfer told a page's item length steps by it: at the stride it finds every page, one
    element short it does not, and an item reader must state its length (and only it may)."""
    plan = bound(_good_plan(), 5)
    state = _field(plan, "recurrent_state")
    state["readers"] = [{"name": "transfer", "walks": "item", "item_bytes": state["stride"]}]
    assert check_plan(plan) == []
    state["readers"][0]["item_bytes"] -= 4
    assert {v["property"] for v in check_plan(plan)} == {"consumer_stride"}
    for reader in ({"name": "transfer", "walks": "item"}, {"name": "transfer", "walks": "page", "item_bytes": 4}):
        state["readers"] = [reader]
        with pytest.raises(ConfigError, match="item_bytes"):
            concrete_facts(plan)


def test_symbolic_parent_count_finds_what_one_parent_hides() -> None:
    """A plane one stride too large: pages of parent 1 still fit, pages of parent 2 do not.
    Bound to N = 1 the plan looks fine; for symbolic N the prover finds the page."""
    plan = _good_plan()
    for p in plan["planes"]:
        p["bytes"] += 12 * 256
    assert "in_bounds" not in {v["property"] for v in check_plan(bound(plan, 1))}
    found = violations(symbolic_facts(plan), ["in_bounds"])
    assert found and "not inside parent" in found[0].message


def test_cli_prove_exit_codes_and_json(capsys) -> None:
    assert main(["prove", "--model", "kimi-k3", "--policy", "ceil", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["proved"] is False and out["policy"] == "ceil" and out["model"] == "kimi-k3"
    (example,) = out["counterexamples"]
    assert (example["tp"], example["dtype"], example["property"]) == (32, "bf16", "padding_bound")
    assert main(["prove", "--model", "deepseek-v3"]) == 0
    assert main(["prove", "--model", "kimi-k3", "--tp", "5"]) == 2
    assert "tp=5" in capsys.readouterr().err


def test_properties_over_undeclared_readers_are_vacuous_not_proved(capsys):
    """Our contract's plans name no kernels or readers: the prover says so for kernel_page and
    consumer_stride, nor the alignments and buffer ends entry_alignment, fronts_never_cross and sink_page read:
    the prover says so instead of claiming them proved; the other eight are proved."""
    assert main(["prove", "--model", "kimi-k3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["vacuous"] == ["kernel_page", "consumer_stride", "entry_alignment",
                                                              "fronts_never_cross", "sink_page"]
    assert main(["prove", "--model", "kimi-k3"]) == 0
    text = capsys.readouterr().out
    assert "kernel_page        vacuous: no plan declares kernels" in text
    assert "sink_page          vacuous: no plan declares end" in text
    assert "exact_stride       proved" in text


def test_a_proof_reports_the_wall_seconds_it_took() -> None:
    """verify prove prints how long the proof took: a share of the time around the call, and no
    less than the solver seconds spent inside it."""
    start = time.perf_counter()
    proof = prove(K3, POLICIES["ceil"], tps=(8,), dtypes=("fp8",))
    assert 0 < sum(proof.solver_seconds.values()) <= proof.seconds <= time.perf_counter() - start
