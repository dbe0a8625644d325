"""Falcon-H1 (FalconH1ForCausalLM) and Zamba2 (Zamba2ForCausalLM) planned over their stated families
(engines/vllm/falcon_h1.py, engines/vllm/zamba2.py): each member is made of cited and derived keys only,
plans at the installed vLLM with its layers' own state shapes, says it stands for a family, and no value
transformers fills in for a key a member lacks moves a plan."""

from __future__ import annotations

import json
from dataclasses import replace
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

import config_defaults

from kvproof.cli.cmd_engine import render
from kvproof.engines import baseline
from kvproof.engines.families import Member
from kvproof.engines.vllm import catalog, engine, falcon_h1, planner, zamba2
from kvproof.impl import faults

FALCON = catalog.MODELS["falcon-h1-0.5b-family-0"]
ZAMBA = catalog.MODELS["zamba2-7b-family-0"]
FAMILIES = [(falcon_h1, FALCON), (zamba2, ZAMBA)]
AT_TP1: dict[str, Any] = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1]}


def point(model: catalog.Model, tp: int = 1, spec: int = 0, prefix: bool = False, rank: int = 0,
          pp: int = 1) -> planner.Point:
    return planner.Point(model, tp, "auto", "auto", prefix, model.backends[0], spec, rank=rank, pp=pp)


@pytest.mark.parametrize(("module", "model"), FAMILIES, ids=["falcon_h1", "zamba2"])
def test_each_family_is_one_member_of_cited_and_derived_keys_only(module: ModuleType, model: catalog.Model) -> None:
    """Every key vLLM reads is cited, or derived from cited values by transformers' own rule: no axis is
    left, so each family is one member, and its config.json is exactly those keys."""
    assert [m.name for m in module.MEMBERS] == [model.recipe] and module.FAMILY.size() == 1
    config = json.loads(model.config_text())
    assert set(config) == {c.key for c in module.FAMILY.cited} | set(module.FAMILY.derived)
    assert all(config[c.key] == c.value for c in module.FAMILY.cited)


def test_the_derived_keys_are_the_ones_transformers_accepts() -> None:
    """FalconH1Config refuses any mamba_d_ssm but d_head x heads (24 x 64). Zamba2's layers take the head as
    the intermediate size over the heads, so 112 keeps the copy's 64 (7,168 / 112); its attention heads are
    the width 2 x 3,584 over 32 heads, 224, the one head Zamba2Attention accepts."""
    from huggingface_hub.errors import StrictDataclassClassValidationError
    from transformers import FalconH1Config, Zamba2Config

    falcon = json.loads(FALCON.config_text())
    assert falcon["mamba_d_ssm"] == 1536
    for wrong, why in ((2048, "mamba_n_heads must divide"), (1560, "do not match the model intermediate_size")):
        with pytest.raises(StrictDataclassClassValidationError, match=why):
            FalconH1Config(**{**falcon, "mamba_d_ssm": wrong})
    zamba = json.loads(ZAMBA.config_text())
    assert (zamba["n_mamba_heads"], zamba["attention_hidden_size"], zamba["attention_head_dim"]) == (112, 7168, 224)
    derived = Zamba2Config(**{k: v for k, v in zamba.items() if k not in (*zamba2.FAMILY.derived, "mamba_headdim")
                             or k == "n_mamba_heads"})
    assert (derived.mamba_headdim, derived.attention_head_dim, derived.hybrid_layer_ids) == (
        64, 224, zamba["hybrid_layer_ids"])
    assert (len(zamba["layers_block_type"]), zamba["layers_block_type"].count("hybrid")) == (81, 13)


def test_both_plan_at_the_installed_vllm_and_stand_for_their_family_not_a_checkpoint() -> None:
    """At 0.33.0 both boot at 0 and 2 ngram tokens (both classes pass num_spec there); each result says
    family, one member, and which checkpoint it is no verdict on."""
    run = engine.run([FALCON.recipe, ZAMBA.recipe], {**AT_TP1, "spec": [0, 2]})
    text = render(run, baseline.compare([], set(), "vllm", run.version, set()), False, set())
    # the way to a checkpoint verdict the text names is one verify engine vllm has (test_engine_vllm_config.py)
    assert text.count("not a verdict on Zyphra/Zamba2-7B; --config FILE gives one") == 1
    for r, checkpoint in zip(run.recipes, ("tiiuae/Falcon-H1-0.5B-Instruct", "Zyphra/Zamba2-7B"), strict=True):
        assert r.not_verified is None and [p.point["spec"] for p in r.points] == [0, 2]
        assert all(f.property == "padding_bound" for p in r.points for f in p.findings)
        out = r.as_dict()
        assert (out["coverage"], out["members"], out["enumerated"]) == ("family", 1, 1)
        assert out["family"]["not_a_verdict_on"] == checkpoint


def test_falcon_h1_layers_keep_their_own_state_and_pair_up_per_decoder_layer() -> None:
    """Each of the 36 parallel layers has an attention layer and a MambaMixer2 (named model.{36 + i}.mixer):
    the state is (1,536 + 2 x 128) x (3 + tokens) conv values plus 24 x 64 x 128 bf16, 403,968 B at 0 tokens,
    against 512 B a token of 2 KV heads of 64: 800 tokens; 411,136 B at 2 tokens: 816."""
    planned = {spec: planner.plan(point(FALCON, spec=spec)) for spec in (0, 2)}
    assert (planned[0].block_size, planned[2].block_size) == (800, 816)
    conv = {spec: {tuple(f["shape"]) for f in p.documents[1]["fields"] if f["id"].endswith("state0")}
            for spec, p in planned.items()}
    assert conv == {0: {(3, 1792)}, 2: {(5, 1792)}}
    hf = SimpleNamespace(num_hidden_layers=36)
    names = falcon_h1.layers(hf)
    assert len(names) == 72 and names[:2] == [("model.layers.0.attn", "attention"), ("model.36.mixer", "state")]
    assert [falcon_h1.hidden_layer(n, hf) for n, _ in names[:4]] == [0, 0, 1, 1]
    stage = planner.plan(point(FALCON, rank=1, pp=2))  # layers 18-35: 18 attention layers, 18 mixers
    assert stage.layers == (18, 36) and stage.attention


def test_zamba2_names_its_shared_attentions_by_block_and_plans_no_pipeline_stage() -> None:
    """Block 0 owns the even hybrid layers (model.attn.0-6), block 1 the odd ones (model.attn.7-12); the 81
    mixers are 13.mixer to 93.mixer. The class is not SupportsPP: every point is pp 1."""
    hf = SimpleNamespace(layers_block_type=zamba2.PATTERN, num_mem_blocks=2, num_hidden_layers=81)
    names = zamba2.layers(hf)
    hybrids = [i for i, t in enumerate(zamba2.PATTERN) if t == "hybrid"]
    assert [n for n, kind in names if kind == "attention"] == [f"model.attn.{j}" for j in range(13)]
    assert [zamba2.hidden_layer(f"model.attn.{j}", hf) for j in (0, 1, 7)] == [hybrids[0], hybrids[2], hybrids[1]]
    assert (names[13], names[-1], zamba2.hidden_layer("93.mixer", hf)) == (("13.mixer", "state"),
                                                                         ("93.mixer", "state"), 80)
    assert {p["pp"] for p in engine.points(ZAMBA)} == {1}
    assert {(p["tp"], p["pp"]) for p in engine.points(FALCON)} == {(1, 1), (2, 1), (4, 1), (8, 1), (1, 2)}


@pytest.mark.parametrize(("fault", "model", "spec"), [("vllm_falcon_h1_state_unwidened", FALCON, 2),
                                                      ("vllm_zamba2_head_dim_unexpanded", ZAMBA, 1)],
                         ids=["falcon_h1", "zamba2"])
def test_each_familys_seeded_bug_is_killed(fault: str, model: catalog.Model, spec: int) -> None:
    """FalconH1's class without num_spec (vllm#57721 as 0.31.0 shipped it): at 2 tokens the padded page,
    409,600 B, is short of the layers' 411,136 B. Zamba2's class with an unexpanded head: the page is padded
    for 112 heads of 32 x 64 values while the layers keep heads of 64 x 64. vLLM's own assertion fails."""
    with faults.inject(fault):
        (found,) = engine.run([model.recipe], {**AT_TP1, "spec": [spec]}).recipes[0].points
    assert [f.property for f in found.findings] == ["boots"]
    assert "vllm/v1/kv_cache_interface.py:" in found.findings[0].message


# transformers names the members' torch_dtype dtype: bookkeeping too.
BOOKKEEPING = config_defaults.BOOKKEEPING | {"dtype"}
STRINGS = {"hidden_act": "relu"}  # another value for each string key


@pytest.mark.parametrize(("module", "model", "config_class", "kept"), [
    (falcon_h1, FALCON, "FalconH1Config", ["mlp_multipliers", "rope_parameters", "ssm_multipliers", "time_step_limit"]),
    (zamba2, ZAMBA, "Zamba2Config", ["rope_parameters"]),
], ids=["falcon_h1", "zamba2"])
def test_no_default_of_transformers_config_class_moves_a_plan(module: ModuleType, model: catalog.Model,
                                                              config_class: str, kept: list[str]) -> None:
    """vLLM reads config.json through transformers' class, which answers every key a member lacks with a class
    default (or derives it), so no read can raise: instead every such key is set to another value at once, and
    a drafted, tensor-parallel, prefix-caching point plans exactly as before. A key whose default did move a
    page would be a number nobody published."""
    import transformers

    member = module.MEMBERS[0]
    defaults = getattr(transformers, config_class)().to_dict()
    lacking, changed = config_defaults.changed(defaults, member.config(), BOOKKEEPING, STRINGS)
    assert sorted(key for key in lacking if changed[key] == defaults[key]) == kept  # structured: as they are
    values = {**member.values, **{k: v for k, v in changed.items() if k not in kept}}
    other = replace(model, member=Member(module.FAMILY, member.index, values))
    assert set(json.loads(other.config_text())) == set(member.config()) | set(lacking) - set(kept)
    base = planner.plan(point(model, tp=2, spec=2, prefix=True))
    again = planner.plan(point(other, tp=2, spec=2, prefix=True))
    assert (again.block_size, again.documents) == (base.block_size, base.documents)
