"""EAGLE3 drafts in vLLM: a draft checkpoint of its own (SpeculativeConfig(method="eagle3", model=its folder)),
whose attention layers vLLM numbers on from the target's and plans at the draft's own geometry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvproof.engines.stubs import StubUsed
from kvproof.engines.vllm import backends, catalog, engine, planner, platform

EAGLE3 = ("qwen3-next-80b-a3b-eagle3", "qwen3.5-35b-a3b-eagle3")


@pytest.fixture(scope="module", autouse=True)
def _assumed() -> None:
    platform.cuda_assumed(platform.modules())


def _fields(model: catalog.Model, tp: int = 2) -> dict[str, dict]:
    point = planner.Point(model, tp, "auto", "auto", False, backends.FLASH_ATTN, 1)
    return {f["id"].split(".", 1)[1]: f for f in planner.plan(point).documents[1]["fields"]}


@pytest.mark.parametrize(("recipe", "last"), [(EAGLE3[0], 47), (EAGLE3[1], 39)])
def test_the_draft_layer_follows_the_targets_layers_at_its_geometry(recipe: str, last: int) -> None:
    """Both shipped drafts have their targets' attention geometry (16 heads, 2 KV heads of 256): the draft's
    one layer is planned after the target's last, with the page of the target's last attention layer."""
    fields = _fields(catalog.MODELS[recipe])
    # vLLM's proposer builds the draft as a model of its own: its layers carry no prefix of the target class's
    draft = fields[f"model.layers.{last + 1}.self_attn.attn.kv"]
    (target,) = [f for name, f in fields.items() if name.endswith(f"model.layers.{last}.self_attn.attn.kv")]
    assert draft["shape"] == target["shape"] and draft["group"] == target["group"]
    assert not [name for name in fields if f"layers.{last + 2}." in name]


def test_a_draft_layer_is_planned_at_the_draft_checkpoints_own_geometry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A draft of another geometry (head_dim 64, 4 KV heads: 2 per rank at tp 2) gets pages of its own: K and V
    of 2 x 64 values a token, where the target's layers hold 1 x 256."""
    model = catalog.MODELS[EAGLE3[0]]
    draft = {**json.loads(model.draft_text() or "{}"), "head_dim": 64, "num_key_value_heads": 4}
    monkeypatch.setattr(catalog.Model, "draft_text", lambda self: json.dumps(draft))
    fields = _fields(model)
    assert fields["model.layers.47.self_attn.attn.kv"]["shape"][1] == 2 * 1 * 256
    assert fields["model.layers.48.self_attn.attn.kv"]["shape"][1] == 2 * 2 * 64


@pytest.mark.parametrize(("recipe", "draft"), [(EAGLE3[0], "model.layers.48.self_attn.attn"),
                                               ("qwen3-next-80b-a3b", "mtp.layers.0.self_attn.attn")])
def test_the_drafts_group_is_an_eagle_group(recipe: str, draft: str) -> None:
    """vLLM's runner marks the layers its proposer added as the draft's, so the group holding them (and only
    it) drops its trailing prefix-cache block; MTP drafts alike."""
    point = planner.Point(catalog.MODELS[recipe], 2, "auto", "auto", False, backends.FLASH_ATTN, 1)
    groups = planner.plan(point).configs[1].kv_cache_groups
    assert {g.layer_names[-1]: g.is_eagle_group for g in groups if g.is_eagle_group} == {draft: True}


def test_a_draft_with_sliding_window_layers_is_an_adapter_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    model = catalog.MODELS[EAGLE3[0]]
    draft = {**json.loads(model.draft_text() or "{}"), "layer_types": ["sliding_attention"], "sliding_window": 4096}
    monkeypatch.setattr(catalog.Model, "draft_text", lambda self: json.dumps(draft))
    with pytest.raises(StubUsed, match="sliding-window layers"):
        _fields(model)


def test_the_drafts_heads_bound_tp(monkeypatch: pytest.MonkeyPatch) -> None:
    model = catalog.MODELS[EAGLE3[0]]
    hf = json.loads(model.config_text())
    assert model.tps(hf) == (1, 2, 4, 8, 16)
    draft = {**json.loads(model.draft_text() or "{}"), "num_attention_heads": 4}
    monkeypatch.setattr(catalog.Model, "draft_text", lambda self: json.dumps(draft))
    assert model.tps(hf) == (1, 2, 4)


def test_every_eagle3_point_plans_at_one_to_three_tokens_without_stages() -> None:
    run = engine.run(list(EAGLE3), {"tp": [4]}, workers=1)
    for result in run.recipes:
        assert not result.adapter and not result.not_verified, result.recipe
        assert {p.point["spec"] for p in result.points} == {1, 2, 3}
        assert {p.point["pp"] for p in result.points} == {1} and {p.point["backend"] for p in result.points} == {
            "FLASH_ATTN@sm_90"}
        assert all(p.verdict in ("ok", "counterexample") for p in result.points)


def test_a_users_config_is_not_planned_with_a_draft_trained_for_another(tmp_path: Path) -> None:
    mine = tmp_path / "config.json"
    mine.write_text(catalog.MODELS["qwen3-next-80b-a3b"].config_text())
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "vllm", "--recipe", EAGLE3[0],
                           "--config", str(mine)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "the EAGLE3 draft trained for it" in proc.stderr
