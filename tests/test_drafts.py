"""Draft layers (docs/contract.md#draft-layers): hand-worked numbers at one point, the tokenspeed facts
(planes, grouping, field names), the padding finding over the bound the user accepts, and the
`verify plan / prove / synth / check` flags that carry them."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from kvproof.cli.main import main
from kvproof.impl.recipe import plan_model
from kvproof.spec.catalog import CACHE_DTYPES, load_model
from kvproof.spec.policy import POLICIES
from kvproof.spec.prover import plan_point, prove
from kvproof.spec.synth import synthesize

K3 = load_model("kimi-k3")
BOUND = Fraction(1, 4)


def test_hand_worked_k3_fp8_tp8_five_bf16_drafts():
    """fp8 tp 8, 5 bf16 DSpark layers. Target page 128 x 576 x 1 = 73,728 B; draft page
    128 x 576 x 2 = 147,456 B; one KDA layer at 96 / 8 = 12 heads: conv 3 x 12 x 128 x 3 x 2 =
    27,648 B + recurrent 12 x 128 x 128 x 4 = 786,432 B = 814,080 B. ceil(814,080 / 73,728) = 12
    boots (no padding check with drafts), K_lin = 12 x 73,728 // 814,080 = 1. Planes slot.0..23:
    12 x 73,728 = 884,736 B; slot.24..28: 12 x 147,456 = 1,769,472 B. Parent 24 x 884,736 +
    5 x 1,769,472 = 30,081,024 B (a multiple of lcm(256, 12) = 768). full_attention's raw page
    24 x 73,728 + 5 x 147,456 = 2,506,752 B = parent / 12: no padding. A state group's raw
    23 x 814,080 = 18,723,840 B pads (30,081,024 - 18,723,840) / 18,723,840 = 0.607 > 0.25."""
    plan = plan_model(K3, 8, "fp8", "search", drafts=5, draft_dtype="bf16").plan
    spec = plan_point(K3, 8, "fp8", POLICIES["search"], drafts=5, draft_dtype="bf16").plan
    state_groups = [f"linear_attention_{i}" for i in range(3)]
    assert plan.packing == {"full_attention": 12} | dict.fromkeys(state_groups, 1)
    assert plan.parent_bytes == spec["parent_bytes"] == 30_081_024
    planes = {p.id: p.plane_bytes for p in plan.planes}
    assert planes == {f"slot.{n}": 884_736 for n in range(24)} | {f"slot.{n}": 1_769_472 for n in range(24, 29)}
    assert {p["id"]: p["bytes"] for p in spec["planes"]} == planes
    for n, layer in enumerate(range(94, 99)):
        f = plan.field(f"layer.{layer}.latent_kv")
        assert (f.plane, f.dtype, f.group, f.page_stride_bytes, f.payload_bytes) == (
            f"slot.{24 + n}", "bfloat16", "full_attention", 147_456, 147_456)
    assert plan.field("layer.4.latent_kv").page_stride_bytes == 73_728
    assert plan.group("full_attention").padding == 0
    for g in state_groups:
        assert plan.group(g).padding == Fraction(30_081_024 - 18_723_840, 18_723_840)
    assert plan.accepted and plan.max_padding is None  # the engine's bound with a draft is inf


@pytest.mark.parametrize("drafts", range(9))
def test_planes_are_target_plus_drafts_and_state_groups_stay_on_target_planes(drafts):
    """tokenspeed's check_layout: one plane per MLA layer plus one per draft layer, no more."""
    for dtype in CACHE_DTYPES:
        for draft_dtype in CACHE_DTYPES:
            plan = plan_model(K3, 8, dtype, "search", drafts, draft_dtype).plan
            assert len(plan.planes) == 24 + drafts
            assert [g.id for g in plan.groups] == ["full_attention", *(f"linear_attention_{i}" for i in range(3))]
            assert len(plan.fields_of("full_attention")) == 24 + drafts
            state_planes = {int(f.plane.split(".")[1]) for f in plan.fields if f.group != "full_attention"}
            assert max(state_planes) < 23


def test_drafts_zero_changes_nothing():
    for tp in (1, 8, 32):
        for dtype in CACHE_DTYPES:
            assert plan_model(K3, tp, dtype, "search", 0, "fp8").plan == plan_model(K3, tp, dtype, "search").plan


def _over_bound_points(drafts: tuple[int, ...]) -> set[tuple]:
    """impl's points where some group pads more than the target bound."""
    return {
        (tp, dtype, n, draft_dtype)
        for n in drafts for draft_dtype in CACHE_DTYPES for dtype in CACHE_DTYPES for tp in K3.tp_domain
        if any(g.padding > BOUND for g in plan_model(K3, tp, dtype, "search", n, draft_dtype).plan.groups)
    }


def test_prover_flags_exactly_the_points_impl_pads_over_the_target_bound():
    drafts = (1, 5)
    proof = prove(K3, POLICIES["search"], drafts=drafts, draft_dtypes=CACHE_DTYPES)
    flagged = {(c.tp, c.dtype, c.drafts, c.draft_dtype) for c in proof.counterexamples}
    assert {c.property for c in proof.counterexamples} == {"padding_bound"}
    assert flagged == _over_bound_points(drafts)
    assert len(flagged) > 0 and (32, "bf16", 1, "bf16") in flagged
    assert prove(K3, POLICIES["search"], drafts=drafts, draft_dtypes=CACHE_DTYPES, bound=None).proved


def _run(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_plan_reports_padding_over_the_accepted_bound(capsys):
    code, out = _run(capsys, "plan", "--drafts", "5")
    assert code == 1 and out["accepted"] is True and out["engine_max_padding"] is None
    assert out["drafts"] == 5 and out["draft_dtype"] == "bf16" and out["max_padding"] == 0.25
    assert sorted(v["message"].split()[1] for v in out["over_bound"]) == [f"linear_attention_{i}" for i in range(3)]
    assert "0.607 > bound 0.250" in out["over_bound"][0]["message"] and out["missed_by_packer"] == []
    assert out["within_bound"].startswith("no packing keeps the padding within 0.250 (verify synth")
    code, out = _run(capsys, "plan", "--tp", "32", "--dtype", "bf16", "--drafts", "1")
    assert code == 1 and "K_mla/K_lin 3/2, worst padding 0.181" in out["within_bound"]  # synth's packing
    assert _run(capsys, "plan", "--drafts", "5", "--max-padding", "inf")[0] == 0
    assert _run(capsys, "plan", "--drafts", "5", "--max-padding", "0.61")[0] == 0
    assert _run(capsys, "plan", "--drafts", "1")[0] == 0  # 0.229 at fp8 tp 8
    code, out = _run(capsys, "plan", "--drafts", "0", "--max-padding", "0.1")
    assert code == 1 and out["engine_max_padding"] == 0.25 and len(out["over_bound"]) == 3


def test_the_engine_bound_still_applies_without_drafts(capsys):
    """--max-padding only loosens where the engine checks no padding: ceil's bf16 tp 32 plan
    (0.512) is refused by the engine, so it fails whatever the user accepts."""
    code, out = _run(capsys, "plan", "--tp", "32", "--dtype", "bf16", "--policy", "ceil", "--max-padding", "inf")
    assert code == 1 and out["max_padding"] == 0.25 and not out["accepted"]
    proof = prove(K3, POLICIES["ceil"], bound=None, drafts=(0, 1))
    flagged = {(c.tp, c.dtype, c.drafts) for c in proof.counterexamples}
    assert flagged == {(32, "bf16", 0)}


def test_prove_over_a_draft_range(capsys):
    code, out = _run(capsys, "prove", "--drafts", "0-8", "--all")
    assert code == 1 and out["domain"]["drafts"] == list(range(9)) and out["domain"]["draft_dtype"] == ["bf16"]
    assert {c["property"] for c in out["counterexamples"]} == {"padding_bound"}
    assert all(c["drafts"] >= 1 for c in out["counterexamples"])  # drafts 0 prove as before
    first = out["counterexamples"][0]
    assert first["replay"].endswith(f"--drafts {first['drafts']} --draft-dtype bf16")
    assert main([*first["replay"].split()[1:], "--json"]) == 1  # the replay shows the finding
    capsys.readouterr()
    code, out = _run(capsys, "prove", "--drafts", "4-5", "--draft-dtype", "fp8", "bf16", "--max-padding", "inf")
    assert code == 0 and out["proved"] and out["max_padding"] is None


def test_synth_finds_the_packing_within_the_bound_or_says_none(capsys):
    """bf16 tp 32 with one bf16 draft: the engine keeps ceil's 2 / 1 (no padding check), synth
    finds 3 / 2 within 0.25. fp8 tp 8 with 5 bf16 drafts: nothing within 0.25 (the state groups
    miss the 5 draft planes and the latent group misses none), but 12 / 1 within 0.7."""
    engine = plan_model(K3, 32, "bf16", "search", 1, "bf16").plan
    assert engine.packing["full_attention"] == 2 and max(g.padding for g in engine.groups) > BOUND
    best = synthesize(K3, 32, "bf16", 1, "bf16")
    assert best.packing is not None and best.worst_padding is not None
    assert best.packing["full_attention"] == 3 and best.packing["linear_attention_0"] == 2
    assert best.worst_padding <= BOUND and not best.violations
    assert synthesize(K3, 8, "fp8", 5, "bf16").packing is None
    # 24 + D x r <= 28.75 (docs/commands/synth.md): 5 fp8 drafts on bf16 (r = 1/2) fit, 5 same-dtype ones do not
    assert synthesize(K3, 8, "fp8", 5, "fp8").packing is None
    fp8_drafts = synthesize(K3, 8, "bf16", 5, "fp8")
    assert fp8_drafts.packing is not None and fp8_drafts.worst_padding is not None
    assert fp8_drafts.worst_padding <= BOUND
    assert (fp8_drafts.packing["full_attention"], fp8_drafts.packing["linear_attention_0"]) == (17, 3)
    code, out = _run(capsys, "synth", "--tp", "8", "--dtype", "fp8", "--drafts", "5")
    assert code == 1 and out["points"][0]["packing"] is None
    code, out = _run(capsys, "synth", "--tp", "8", "--dtype", "fp8", "--drafts", "5", "--max-padding", "0.7")
    assert code == 0 and out["points"][0]["packing"]["full_attention"] == 12


def test_emitted_draft_plan_goes_through_verify_check(capsys, tmp_path: Path):
    path = tmp_path / "plan.json"
    assert main(["plan", "--drafts", "5", "--emit-plan", str(path), "--parents", "3"]) == 1
    capsys.readouterr()
    doc = json.loads(path.read_text())
    assert doc["max_padding"] == 0.25 and len(doc["planes"]) == 29
    code = main(["check", str(path), "--json"])
    found = json.loads(capsys.readouterr().out)
    assert code == 1 and {v["property"] for v in found["violations"]} == {"padding_bound"}
    assert main(["plan", "--drafts", "5", "--emit-plan", str(path), "--max-padding", "inf"]) == 0
    assert json.loads(path.read_text())["max_padding"] is None  # no bound: null
    capsys.readouterr()
    assert main(["check", str(path)]) == 0
    assert main(["check", str(path), "--max-padding", "0.25"]) == 1


def test_check_and_engine_take_max_padding_inf(capsys, tmp_path: Path):
    """inf is no bound in every command that takes --max-padding, not only plan/prove/synth/config."""
    path = tmp_path / "plan.json"
    assert main(["plan", "--drafts", "5", "--emit-plan", str(path)]) == 1  # bound 0.25 in the plan
    assert main(["check", str(path), "--max-padding", "inf"]) == 0
    argv = ["engine", "tokenspeed", "--recipe", "kimi_k3", "--tp", "8", "--dtype", "fp8", "--drafts", "5"]
    assert main([*argv, "--max-padding", "inf"]) == 0
    assert main([*argv, "--max-padding", "0.25"]) == 1  # fp8 tp 8 with 5 drafts pads 0.607


@pytest.mark.parametrize("argv", [
    ["plan", "--drafts", "x"], ["plan", "--drafts", "-1"], ["plan", "--drafts", "65"], ["plan", "--drafts", "0-8"],
    ["prove", "--drafts", "3-1"], ["prove", "--drafts", "0-999"], ["plan", "--draft-dtype", "fp16"],
    ["plan", "--max-padding", "-0.1"], ["plan", "--max-padding", "nan"], ["plan", "--max-padding", "1e400"],
    ["synth", "--drafts", "1-"],
])
def test_bad_draft_flags_are_one_line_exit_two(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("verify: error:")


def test_an_mla_only_model_with_a_draft_keeps_a_page_a_plane_and_checks_no_padding():
    """DeepSeek-V3 has no KDA layer, so nothing shares a plane: K_mla 1, each plane one page, its
    61 fp8 pages 128 x 576 x 1 = 73,728 B and one bf16 draft page of 147,456 B. As for K3, the
    engine's bound with a draft is inf (None); without one it is the 1/4 of the recipe."""
    model = load_model("deepseek-v3")
    plan = plan_model(model, 8, "fp8", "search", drafts=1, draft_dtype="bf16").plan
    assert plan.packing == {"full_attention": 1} and plan.accepted and plan.max_padding is None
    assert [p.plane_bytes for p in plan.planes] == [73_728] * 61 + [147_456]
    assert plan_model(model, 8, "fp8", "search").plan.max_padding == BOUND
