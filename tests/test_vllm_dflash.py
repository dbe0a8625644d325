"""DFLASH drafts in vLLM: a block drafter of its own checkpoint (SpeculativeConfig(method="dflash", model=its
folder)), whose attention layers vLLM numbers on from the target's (DFlashQwen3ForCausalLM) and plans at the
draft's own geometry, each layer's sliding window as vLLM's own qwen3_dflash.py resolves it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvproof.engines.stubs import StubUsed
from kvproof.engines.vllm import backends, catalog, engine, planner, platform

DFLASH = "qwen3.5-35b-a3b-dflash"


@pytest.fixture(scope="module", autouse=True)
def _assumed() -> None:
    platform.cuda_assumed(platform.modules())


def _fields(model: catalog.Model, tp: int = 2, dtype: str = "auto") -> dict[str, dict]:
    point = planner.Point(model, tp, dtype, "auto", False, backends.FLASH_ATTN, 1)
    return {f["id"].split(".", 1)[1]: f for f in planner.plan(point).documents[1]["fields"]}


def test_the_drafts_eight_layers_follow_the_targets_forty_at_their_own_geometry() -> None:
    """Qwen3.5-35B-A3B's DFLASH draft has 4 KV heads of 128 where the target has 2 of 256: another spec, so vLLM
    groups the draft's 8 layers apart: 7 groups of up to 8 layers, where the draft planned at the target's
    geometry joins the target's attention layers in 3 groups of up to 18. At tp 4 each keeps one KV head a rank,
    so a draft layer holds half the target's bytes a token: its block twice the target's, the page the same."""
    point = planner.Point(catalog.MODELS[DFLASH], 2, "auto", "auto", False, backends.FLASH_ATTN, 1)
    groups = planner.plan(point).configs[1].kv_cache_groups
    heads = {(g.kv_cache_spec.num_kv_heads, g.kv_cache_spec.head_size): g.layer_names for g in groups
             if hasattr(g.kv_cache_spec, "head_size")}
    assert heads.get((2, 128)) == [f"model.layers.{i}.self_attn.attn" for i in range(40, 48)]
    assert set(heads) == {(1, 256), (2, 128)} and len(groups) == 7
    fields = _fields(catalog.MODELS[DFLASH], tp=4)
    assert fields["model.layers.40.self_attn.attn.kv"]["shape"] == [1056, 2 * 1 * 128]
    assert fields["language_model.model.layers.39.self_attn.attn.kv"]["shape"] == [528, 2 * 1 * 256]


def test_the_drafts_cache_keeps_the_targets_kv_dtype() -> None:
    """vLLM builds the draft under the target's cache config (llm_base_proposer.py:1265-1301): at fp8 its layers
    keep fp8 pages, though the draft's config.json says bfloat16."""
    fields = _fields(catalog.MODELS[DFLASH], dtype="fp8")
    assert fields["model.layers.40.self_attn.attn.kv"]["dtype"] == fields[
        "language_model.model.layers.39.self_attn.attn.kv"]["dtype"] != "bfloat16"


def test_a_draft_layers_window_is_the_one_vllms_dflash_class_resolves(monkeypatch: pytest.MonkeyPatch) -> None:
    """dflash_config's use_swa makes every layer of a draft without layer_types a sliding-window layer of its
    swa_window_size (qwen3_dflash.py _resolve_layer_attention): kvproof asks that function, so the draft is an
    adapter gap, where its layer_types alone would have said full attention."""
    model = catalog.MODELS[DFLASH]
    own = json.loads(model.draft_text() or "{}")
    draft = {**{k: v for k, v in own.items() if k != "layer_types"},
             "dflash_config": {**own["dflash_config"], "use_swa": True, "swa_window_size": 2048}}
    monkeypatch.setattr(catalog.Model, "draft_text", lambda self: json.dumps(draft))
    with pytest.raises(StubUsed, match="sliding-window layers"):
        _fields(model)


def test_every_dflash_point_plans_at_one_to_fifteen_tokens_without_stages() -> None:
    """The draft is trained at block_size 16, its anchor and 15 drafted tokens (v1/spec_decode/dflash.py: a
    request's query is 1 + K tokens)."""
    run = engine.run([DFLASH], {"tp": [2]}, workers=1)
    (result,) = run.recipes
    assert not result.adapter and not result.not_verified
    assert {p.point["spec"] for p in result.points} == set(range(1, 16))
    assert {p.point["pp"] for p in result.points} == {1} and {p.point["backend"] for p in result.points} == {
        "FLASH_ATTN@sm_90"}
    assert {p.verdict for p in result.points} == {"ok"}


def test_a_users_config_is_not_planned_with_the_dflash_draft(tmp_path: Path) -> None:
    mine = tmp_path / "config.json"
    mine.write_text(catalog.MODELS["qwen3.5-35b-a3b"].config_text())
    proc = subprocess.run([sys.executable, "-m", "kvproof.cli.main", "engine", "vllm", "--recipe", DFLASH,
                           "--config", str(mine)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "the DFLASH draft trained for it" in proc.stderr
