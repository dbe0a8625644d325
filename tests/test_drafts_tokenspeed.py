"""The drafts of the released checkpoints: the MTP heads they carry, planned by tokenspeed's mla,
dsa, qwen_gdn, mamba2 and deepseek_v4 recipes (--speculative-algorithm MTP on the target
checkpoint), and the drafts SpecForge trains for mha's (checkpoints of their own: EAGLE3 for both,
DFLASH and DSPARK block drafters for Qwen3-8B)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bites import fails_under

from kvproof.engines import verdict
from kvproof.engines.tokenspeed import engine, loader, ordinary, pipeline, startup
from kvproof.engines.tokenspeed.configs import member_dicts
from kvproof.engines.user_config import UserConfig
from kvproof.impl import faults

# recipe -> (a checkpoint with its own MTP head, its draft layers, a point of it without drafts)
DRAFTED: dict[str, tuple[str, int, dict[str, Any]]] = {
    "mla": ("deepseek-v3", 1, {"tp": 8, "dtype": "fp8"}),
    "dsa": ("deepseek-v3.2", 1, {"tp": 8, "dtype": "bfloat16"}),
    "qwen_gdn": ("qwen3.5-27b", 1, {"tp": 4, "dtype": "fp8", "assume": "TOKENSPEED_MAMBA_SSM_DTYPE=float32"}),
    "mamba2": ("nemotron-3-super-120b-a12b-fp8", 1,
               {"tp": 4, "dtype": "fp8", "assume": "TOKENSPEED_MAMBA_SSM_DTYPE=float32"}),
    "deepseek_v4": ("deepseek-v4-flash", 1, {"tp": 8, "dtype": "fp8", "assume": "dsv4_indexer_cache_format=mxfp4"}),
    # its EAGLE3 draft: one LlamaForCausalLMEagle3 layer
    "mha": ("llama-3.1-8b", 1, {"tp": 8, "dtype": "fp8"}),
}

# the --speculative-algorithm of a recipe whose drafts differ by more than their layer count
ALGORITHM = {"mha": {"algorithm": "EAGLE3"}, "mla": {"algorithm": "MTP"}}

# recipe -> every checkpoint of it that has a draft
WITH_HEAD = {recipe: {model} for recipe, (model, _, _) in DRAFTED.items()} | {
    "deepseek_v4": {"deepseek-v4-flash", "deepseek-v4-pro"}, "mha": {"llama-3.1-8b", "qwen3-8b"}}


@pytest.fixture(scope="module")
def installed() -> loader.Source:
    return loader.installed_source()


def _planned(source: loader.Source, recipe: str, point: dict[str, Any]) -> dict:
    outcome = engine.plan(source, recipe, point)
    assert isinstance(outcome, pipeline.Planned), (recipe, point, outcome)
    return outcome.documents[1]


def test_every_draft_point_plans_and_verifies(installed: loader.Source) -> None:
    run = engine.run(installed, list(DRAFTED), {"drafts": [1]})
    for result in run.recipes:
        assert not result.adapter and not result.not_verified, (result.recipe, result.not_verified)
        assert result.points and {p.point["drafts"] for p in result.points} == {1}
        assert {p.point["model"] for p in result.points} == WITH_HEAD[result.recipe], result.recipe
        # The released recipes plan every draft point; only DSA's fp8 cache on the assumed sm_90
        # is declined, as without a draft (configs/dsa.py asks the GPU).
        for p in result.points:
            declined = result.recipe == "dsa" and p.point.get("assume") == "platform=sm_90"
            assert p.verdict == ("refused" if declined else "ok"), (p.point, p.verdict, p.findings)
            assert " --drafts 1" in p.replay


@pytest.mark.parametrize("recipe", sorted(DRAFTED))
def test_the_draft_is_a_continuation_layer_of_the_target_plan(installed: loader.Source, recipe: str) -> None:
    """The draft adds its layers' fields after the target's, in groups the target already has,
    and keeps every target field as it was."""
    model, layers, point = DRAFTED[recipe]
    target = _planned(installed, recipe, {"model": model, **point, "drafts": 0})
    drafted = _planned(installed, recipe, {"model": model, **point, "drafts": layers, **ALGORITHM.get(recipe, {})})
    first = 1 + max(int(f["id"].split(".")[1]) for f in target["fields"])
    before = {f["id"]: f for f in target["fields"]}
    after = {f["id"]: f for f in drafted["fields"]}
    added = set(after) - set(before)
    assert set(before) <= set(after)
    assert added and {int(i.split(".")[1]) for i in added} == set(range(first, first + layers)), sorted(added)
    assert {after[i]["group"] for i in added} <= {g["id"] for g in target["groups"]}
    assert drafted["parent_bytes"] >= target["parent_bytes"]
    assert all(after[i]["shape"] == before[i]["shape"] and after[i]["dtype"] == before[i]["dtype"] for i in before)


def test_the_mtp_draft_layer_is_the_targets_geometry(installed: loader.Source) -> None:
    """DeepSeek-V3's draft layer is one more 576-wide latent row; Qwen3.5's one more K/V pair of
    the target's full-attention shape."""
    mla = _planned(installed, "mla", {"model": "deepseek-v3", "tp": 8, "dtype": "fp8", "drafts": 1, "algorithm": "MTP"})
    (draft,) = [f for f in mla["fields"] if f["id"].startswith("layer.61.")]
    assert draft["id"] == "layer.61.latent_kv" and draft["shape"] == [64, 1, 576]
    qwen = _planned(installed, "qwen_gdn", {"model": "qwen3.5-27b", **DRAFTED["qwen_gdn"][2], "drafts": 1})
    fields = {f["id"]: f for f in qwen["fields"]}
    assert {i for i in fields if i.startswith("layer.64.")} == {"layer.64.k", "layer.64.v"}
    assert fields["layer.64.k"]["shape"] == fields["layer.63.k"]["shape"]
    assert fields["layer.64.k"]["group"] == fields["layer.63.k"]["group"] == "full_attention"


def test_only_checkpoints_with_an_mtp_head_have_draft_points() -> None:
    mamba2 = engine.PROFILES["mamba2"]
    points = mamba2.points(engine._configs(mamba2, None))
    drafted = {p["model"] for p in points if p["drafts"]}
    assert drafted == {"nemotron-3-super-120b-a12b-fp8"}  # Nemotron-H-56B publishes no num_nextn_predict_layers


def test_the_drafts_go_with_a_config_of_the_target_they_read() -> None:
    """mha's drafts are checkpoints of their own, each trained for one target: a config.json with that
    target's architecture, hidden size, layer count and vocabulary (another release of it) is planned with
    its drafts, whatever its name; one of another geometry without."""
    mha = engine.PROFILES["mha"]
    shipped = engine._configs(mha, None)
    assert {(p["model"], p["drafts"], p.get("algorithm")) for p in mha.points(shipped)} == {
        ("llama-3.1-8b", 0, None), ("llama-3.1-8b", 1, "EAGLE3"), ("qwen3-8b", 0, None), ("qwen3-8b", 1, "EAGLE3"),
        ("qwen3-8b", 5, "DFLASH"), ("qwen3-8b", 5, "DSPARK")}
    instruct = UserConfig("mine.json", {**shipped["llama-3.1-8b.json"], "eos_token_id": [128001, 128008, 128009]})
    assert {p["drafts"] for p in mha.points(engine._configs(mha, instruct))} == {0, 1}
    other = UserConfig("qwen3-8b.json", {**shipped["qwen3-8b.json"], "num_hidden_layers": 30})
    assert {p["drafts"] for p in mha.points(engine._configs(mha, other))} == {0}
    assert "drafts other than the ones SpecForge trains" in mha.limits


@pytest.mark.parametrize(("algorithm", "layers", "steps"), [("EAGLE3", 1, 3), ("DFLASH", 5, 15), ("DSPARK", 5, 7)])
def test_a_draft_point_launches_its_algorithm_with_the_drafts_config(installed: loader.Source,
                                                                    monkeypatch: pytest.MonkeyPatch, algorithm: str,
                                                                    layers: int, steps: int) -> None:
    """Each draft with its own --speculative-algorithm; a block drafter's widths are its checkpoint's
    block_size (DFlash's 16 counts the anchor row, DSpark's 7 does not), EAGLE3's the launch defaults."""
    seen: list[tuple[Any, Any]] = []
    monkeypatch.setattr(ordinary, "_recipe", lambda modules, family, sa, mc, draft=None: seen.append((sa, draft)))
    configs = engine._configs(engine.PROFILES["mha"], None)
    modules = loader.load(installed, ordinary.MODULES)
    ordinary.build_mha(modules, configs, {"model": "qwen3-8b", "tp": 8, "dtype": "fp8", "drafts": 0})
    ordinary.build_mha(modules, configs, {"model": "qwen3-8b", "tp": 8, "dtype": "fp8", "drafts": layers,
                                          "algorithm": algorithm})
    (plain, none), (drafted, draft) = seen
    assert plain.speculative_algorithm is None and none is None
    assert drafted.speculative_algorithm == algorithm and draft.num_attention_layers == layers
    assert (drafted.speculative_num_steps, drafted.speculative_num_draft_tokens) == (steps, steps + 1)
    assert draft.hf_config.architectures == [{"EAGLE3": "LlamaForCausalLMEagle3", "DFLASH": "DFlashDraftModel",
                                              "DSPARK": "DSparkDraftModel"}[algorithm]]


def test_a_draft_the_target_lacks_is_an_adapter_gap(installed: loader.Source) -> None:
    with pytest.raises(verdict.AdapterGap, match=r"llama-3\.1-8b\.json has no DFLASH draft kvproof plans with it"):
        engine.plan(installed, "mha", {"model": "llama-3.1-8b", "tp": 8, "dtype": "fp8", "drafts": 5,
                                       "algorithm": "DFLASH"})


def test_a_block_drafter_keeps_a_bfloat16_cache_beside_an_fp8_target(installed: loader.Source) -> None:
    """configs/mha.py: a DFLASH or DSPARK draft writes at the target's cache locations (its layers in the
    target's full-attention group, after its 36) in a bfloat16 cache whatever the target's dtype, under
    the default drafter backend; an EAGLE3 draft keeps the target's fp8. At tp 1 a 64-token page of 8 KV
    heads x 128 is 131,072 B of K and V at fp8, twice that at bfloat16."""
    points = {"EAGLE3": 1, "DFLASH": 5, "DSPARK": 5}
    for algorithm, layers in points.items():
        plan = _planned(installed, "mha", {"model": "qwen3-8b", "tp": 1, "dtype": "fp8", "drafts": layers,
                                           "algorithm": algorithm})
        fields = {f["id"]: f for f in plan["fields"]}
        draft = {i: f for i, f in fields.items() if int(i.split(".")[1]) >= 36}
        assert {int(i.split(".")[1]) for i in draft} == set(range(36, 36 + layers))
        assert {f["group"] for f in draft.values()} == {fields["layer.0.k"]["group"]}
        block = algorithm != "EAGLE3"
        assert {f["dtype"] for f in draft.values()} == {"bfloat16" if block else fields["layer.0.k"]["dtype"]}
        assert plan["parent_bytes"] == 36 * 131_072 + layers * (262_144 if block else 131_072), algorithm


def test_launching_a_block_drafter_as_eagle3_is_killed(installed: loader.Source) -> None:
    fails_under("ts_adapter_block_draft_as_eagle3", test_a_block_drafter_keeps_a_bfloat16_cache_beside_an_fp8_target,
                installed)


def test_narrowing_by_algorithm_keeps_that_algorithms_drafted_points_only() -> None:
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "tokenspeed", "--recipe", "mha",
                           "--algorithm", "DSPARK", "--json"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    points = json.loads(proc.stdout)["recipes"][0]["points"]
    assert len(points) == 18 and {(p["model"], p["drafts"], p["algorithm"]) for p in points} == {
        ("qwen3-8b", 5, "DSPARK")}
    assert all(p["replay"].endswith("--drafts 5 --algorithm DSPARK") for p in points)


@pytest.mark.parametrize(("argv", "says"), [
    (["tokenspeed", "--recipe", "mha", "--model", "llama-3.1-8b", "--algorithm", "DFLASH"],
     "no point of mha matches the narrowing"),
    (["tokenspeed", "--recipe", "mha", "--algorithm", "MTP"], "--algorithm MTP: no point of the chosen recipes has it"),
    (["tokenspeed", "--recipe", "dsa", "--algorithm", "MTP"], "points have no algorithm axis"),
    (["tokenspeed", "--recipe", "mla", "--algorithm", "DFLASH"], "algorithm takes EAGLE3, MTP"),
    (["vllm", "--algorithm", "DFLASH"], "--algorithm does not apply to vllm"),
    (["sglang", "--algorithm", "DFLASH"], "--algorithm, --model and --config do not apply to sglang"),
])
def test_an_algorithm_no_point_has_is_one_line_and_exit_2(argv: list[str], says: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", *argv], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr


def test_an_mla_targets_eagle3_draft_is_an_mha_layer_after_its_61(installed: loader.Source) -> None:
    """DeepSeek-V3's EAGLE3 draft (SpecForge's training config: one LlamaForCausalLMEagle3 layer, 56 heads, 8 KV
    heads of 128) binds as a heterogeneous MHA view of the MLA target's one plan: its K and V after the 61 latent
    layers, in their group, at the target's fp8 (not a block drafter). At tp 8 one KV head a rank: 64 tokens x 128
    bytes each of K and V beside 61 latent pages of 64 x 576."""
    plan = _planned(installed, "mla", {"model": "deepseek-v3", "tp": 8, "dtype": "fp8", "drafts": 1,
                                       "algorithm": "EAGLE3"})
    fields = {f["id"]: f for f in plan["fields"]}
    draft = {i: f for i, f in fields.items() if i.startswith("layer.61.")}
    assert set(draft) == {"layer.61.k", "layer.61.v"}
    assert {tuple(f["shape"]) for f in draft.values()} == {(64, 1, 128)}
    assert {f["group"] for f in draft.values()} == {fields["layer.0.latent_kv"]["group"]}
    assert {f["dtype"] for f in draft.values()} == {fields["layer.0.latent_kv"]["dtype"]}
    assert plan["parent_bytes"] == 61 * 64 * 576 + 2 * 64 * 128


def test_at_mxfp8_the_mla_targets_eagle3_draft_keeps_scale_planes_at_block_128(installed: loader.Source) -> None:
    """mxfp8 is the MLA target's fp8 cache, but the MHA draft's K and V keep their mxfp8 scale planes, at the
    128-token block the recipe asserts for them: 61 latent pages of 128 x 576 B, 2 x 128 x 128 B of K and V, and
    one UE8M0 scale byte per 32 of them."""
    plan = _planned(installed, "mla", {"model": "deepseek-v3", "tp": 8, "dtype": "mxfp8", "drafts": 1,
                                       "algorithm": "EAGLE3"})
    assert {f["id"] for f in plan["fields"] if f["id"].startswith("layer.61.")} == {
        "layer.61.k", "layer.61.v", "layer.61.k_scale", "layer.61.v_scale"}
    assert plan["parent_bytes"] == 61 * 128 * 576 + 2 * 128 * 128 + 2 * 128 * 128 // 32


def test_a_family_member_is_planned_with_no_checkpoints_draft() -> None:
    """A stated family states its own drafts: a member of the checkpoint's geometry is not paired with a draft
    trained for the checkpoint."""
    shipped = engine._configs(engine.PROFILES["mla"], None)
    member = {"member.json": member_dicts(shipped["deepseek-v3.json"]), "deepseek-v3-eagle3.json":
              shipped["deepseek-v3-eagle3.json"]}
    assert {p.get("algorithm") for p in ordinary.mla_points(member)} == {None, "MTP"}
    assert {p.get("algorithm") for p in ordinary.mla_points(shipped)} == {None, "MTP", "EAGLE3"}


def test_only_an_mha_view_of_an_ordinary_target_is_planned_as_the_targets_plan(
        installed: loader.Source, monkeypatch: pytest.MonkeyPatch) -> None:
    """A draft the revision binds as any other heterogeneous view is an adapter gap naming it."""
    modules = loader.load(installed, ordinary.MODULES)
    monkeypatch.setattr(modules[startup.REGISTRY], "_resolve_heterogeneous_draft_family",
                        lambda *args, **kwargs: "msa")
    configs = engine._configs(engine.PROFILES["mla"], None)
    with pytest.raises(verdict.AdapterGap, match="binds as a heterogeneous 'msa' view"):
        ordinary.build_mla(modules, configs, {"model": "deepseek-v3", "tp": 8, "dtype": "fp8", "drafts": 1,
                                              "algorithm": "EAGLE3"})


def test_a_config_named_as_a_draft_file_is_refused(tmp_path: Path) -> None:
    mine = tmp_path / "llama-3.1-8b-eagle3.json"
    mine.write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "tokenspeed", "--recipe", "mha",
                           "--config", str(mine)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "is the name of the draft config kvproof plans beside it; rename the file" in proc.stderr


@pytest.mark.parametrize(("fault", "recipe", "tp"), [("ts_qwen_draft_v_on_k", "qwen_gdn", 4),
                                                     ("ts_draft_units_from_zero", "mha", 8)])
def test_a_draft_layer_on_a_target_segment_is_caught_at_draft_points_only(installed: loader.Source, fault: str,
                                                                           recipe: str, tp: int) -> None:
    with faults.inject(fault):
        run = engine.run(installed, [recipe], {"tp": [tp], "dtype": ["fp8"]})
    (result,) = run.recipes
    verdicts: dict[tuple[int, str | None], set[tuple[str, tuple[str, ...]]]] = {}
    for p in result.points:
        verdicts.setdefault((p.point["drafts"], p.point.get("algorithm")), set()).add(
            (p.verdict, tuple(f.property for f in p.findings)))
    drafted = {(1, None)} if recipe == "qwen_gdn" else {(1, "EAGLE3"), (5, "DFLASH"), (5, "DSPARK")}
    assert verdicts == {(0, None): {("ok", ())}} | {key: {("counterexample", ("boots",))} for key in drafted}, verdicts
