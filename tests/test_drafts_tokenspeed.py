"""The drafts of the released checkpoints: the MTP heads they carry, planned by tokenspeed's mla,
dsa, qwen_gdn, mamba2 and deepseek_v4 recipes (--speculative-algorithm MTP on the target
checkpoint), and the EAGLE3 drafts SpecForge trains for mha's (--speculative-algorithm EAGLE3, a
checkpoint of their own)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvproof.engines.tokenspeed import engine, loader, ordinary, pipeline
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
    drafted = _planned(installed, recipe, {"model": model, **point, "drafts": layers})
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
    mla = _planned(installed, "mla", {"model": "deepseek-v3", "tp": 8, "dtype": "fp8", "drafts": 1})
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


def test_an_eagle3_draft_goes_with_a_config_of_the_target_it_reads() -> None:
    """mha's drafts are checkpoints of their own, each trained for one target: a config.json with that
    target's architecture, hidden size, layer count and vocabulary (another release of it) is planned with
    the draft, whatever its name; one of another geometry without."""
    mha = engine.PROFILES["mha"]
    shipped = engine._configs(mha, None)
    assert {(p["model"], p["drafts"]) for p in mha.points(shipped)} == {
        (model, drafts) for model in ("llama-3.1-8b", "qwen3-8b") for drafts in (0, 1)}
    instruct = UserConfig("mine.json", {**shipped["llama-3.1-8b.json"], "eos_token_id": [128001, 128008, 128009]})
    assert {p["drafts"] for p in mha.points(engine._configs(mha, instruct))} == {0, 1}
    other = UserConfig("qwen3-8b.json", {**shipped["qwen3-8b.json"], "num_hidden_layers": 30})
    assert {p["drafts"] for p in mha.points(engine._configs(mha, other))} == {0}
    assert "EAGLE3" in mha.limits


def test_a_draft_point_launches_eagle3_with_the_drafts_config(installed: loader.Source,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[Any, Any]] = []
    monkeypatch.setattr(ordinary, "_recipe", lambda modules, family, sa, mc, draft=None: seen.append((sa, draft)))
    configs = engine._configs(engine.PROFILES["mha"], None)
    modules = loader.load(installed, ordinary.MODULES)
    for drafts in (0, 1):
        ordinary.build_mha(modules, configs, {"model": "qwen3-8b", "tp": 8, "dtype": "fp8", "drafts": drafts})
    (plain, none), (drafted, draft) = seen
    assert plain.speculative_algorithm is None and none is None
    assert drafted.speculative_algorithm == "EAGLE3" and draft.num_attention_layers == 1
    assert draft.hf_config.architectures == ["LlamaForCausalLMEagle3"]


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
    verdicts: dict[int, set[tuple[str, tuple[str, ...]]]] = {}
    for p in result.points:
        verdicts.setdefault(p.point["drafts"], set()).add((p.verdict, tuple(f.property for f in p.findings)))
    assert verdicts == {0: {("ok", ())}, 1: {("counterexample", ("boots",))}}, verdicts
