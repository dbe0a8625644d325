"""LFM2-MoE (Lfm2MoeForCausalLM) planned over its stated family (engines/vllm/lfm2_moe.py): one member made of
cited keys only, planned at LFM2-350M's domain with each ShortConv layer's own state shape; it says it stands
for a family, and no value transformers' Lfm2MoeConfig fills in for a key the member lacks moves a plan."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

import config_defaults

from kvproof.cli.cmd_engine import render
from kvproof.engines import baseline
from kvproof.engines.families import Member
from kvproof.engines.vllm import catalog, engine, lfm2_moe, planner

MOE = catalog.MODELS["lfm2.5-8b-a1b-family-0"]
AT_TP1: dict[str, Sequence[Any] | None] = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"],
                                           "pp": [1], "backend": ["FLASH_ATTN@sm_90"]}


def point(model: catalog.Model, tp: int = 1, dtype: str = "auto", mamba: str = "auto", spec: int = 0,
          prefix: bool = False) -> planner.Point:
    return planner.Point(model, tp, dtype, mamba, prefix, model.backends[0], spec)


def test_the_family_is_one_member_of_cited_keys_only() -> None:
    """Every key vLLM reads is cited, so the family is one member and its config.json is exactly those keys:
    24 layers, attention at 2, 6, 10, 14, 18 and 21 (18 conv + 6 attention, as both sources' patterns)."""
    assert [m.name for m in lfm2_moe.MEMBERS] == [MOE.recipe] and lfm2_moe.FAMILY.size() == 1
    config = json.loads(MOE.config_text())
    assert set(config) == {c.key for c in lfm2_moe.FAMILY.cited} and not lfm2_moe.FAMILY.derived
    assert all(config[c.key] == c.value for c in lfm2_moe.FAMILY.cited)
    types = config["layer_types"]
    assert len(types) == config["num_hidden_layers"] == 24
    assert [i for i, t in enumerate(types) if t == "full_attention"] == [2, 6, 10, 14, 18, 21]
    names = lfm2_moe.layers(SimpleNamespace(**config))
    assert names[:3] == [("model.layers.0.short_conv", "state"), ("model.layers.1.short_conv", "state"),
                         ("model.layers.2.self_attn.attn", "attention")]


def test_it_plans_at_the_installed_vllm_and_stands_for_its_family_not_a_checkpoint() -> None:
    """The result says family, one member, and which checkpoints it is no verdict on; the domain is LFM2-350M's:
    every GQA backend, tp every divisor of the 32 heads (8 KV heads replicated at 16 and 32), pipeline stages
    (the class is SupportsPP), ngram speculation up to 3 tokens."""
    run = engine.run([MOE.recipe], {**AT_TP1, "spec": [0, 2]}, workers=1)
    text = render(run, baseline.compare([], set(), "vllm", run.version, set()), False, set())
    assert text.count("not a verdict on LiquidAI/LFM2.5-8B-A1B or LiquidAI/LFM2-8B-A1B; --config FILE gives one") == 1
    (result,) = run.recipes
    out = result.as_dict()
    assert (out["coverage"], out["members"], out["enumerated"]) == ("family", 1, 1)
    assert MOE.tps(json.loads(MOE.config_text())) == (1, 2, 4, 8, 16, 32)
    points = engine.points(MOE)
    assert len(points) == 1312 and {p["spec"] for p in points} == {0, 1, 2, 3}
    assert {p["pp"] for p in points} == {1, 2, 4, 8} and {p["backend"] for p in points} == {
        b.label for b in catalog.GQA_BACKENDS}


def test_its_pages_worked_by_hand_from_its_config() -> None:
    """At tp 1, FLASH_ATTN, bf16: each ShortConv layer keeps (conv_L_cache 3 - 1 = 2, hidden_size 2,048) bf16 =
    8,192 B, each attention layer 16 tokens x 2 x 8 KV heads x 64 (2,048 / 32 heads) x 2 B = 32,768 B a block;
    the 18 conv layers make three groups of 6 beside the 6 attention layers, one 32,768 B page a layer, so a
    parent is 6 x 32,768 = 196,608 B and a conv group pads (196,608 - 6 x 8,192) / 49,152 = 3."""
    (result,) = engine.run([MOE.recipe], {**AT_TP1, "spec": [0]}, workers=1).recipes
    (found,) = result.points
    assert found.parent_bytes == 196_608 and found.packing == {"g0": 1, "g1": 1, "g2": 1, "g3": 1}
    assert [f.message for f in found.findings] == [
        f"group {g} pads 3.000 > bound 0.250 (parent 196,608 B / packing 1 per page for 49,152 B of payload)"
        for g in ("g0", "g1", "g2")]
    conv = {tuple(f["shape"]) for f in planner.plan(point(MOE, spec=2)).documents[1]["fields"]
            if not f["id"].endswith(".kv")}
    assert conv == {(4, 2048)}  # the layer's own state: 2 + 2 tokens


def test_three_ngram_tokens_do_not_boot_where_the_class_page_is_padded_short_of_the_layers() -> None:
    """Lfm2MoeForCausalLM's class-level state shape passes no num_spec (lfm2_moe.py:545-567), each ShortConv
    layer keeps its 3 tokens (short_conv.py:351-357): (5, 2,048). With the float32 state at a bf16 cache the
    page padded for the class's 16,384 B is one 32,768 B attention page, short of the layer's 40,960 B; with the
    bf16 state at fp8, 16,384 B short of 20,480 B: vLLM's own page_size_padded >= page_size assertion stops the
    boot. At fp8 with float32 the class's 16,384 B equals the fp8 page, so nothing is padded (the alignment
    returns, vllm/platforms/interface.py:1121-1122) and the engine core pads the attention pages to the layers'
    40,960 B instead: it boots, 6 x 40,960 = 245,760 B a parent."""
    only = {**AT_TP1, "dtype": ["auto", "fp8"], "mamba_dtype": ["auto", "float32"], "spec": [3]}
    (result,) = engine.run([MOE.recipe], only, workers=1).recipes
    by = {(p.point["dtype"], p.point["mamba_dtype"]): p for p in result.points}
    for fails in (("auto", "float32"), ("fp8", "auto")):
        assert [(f.property, f.message) for f in by[fails].findings] == [
            ("boots", "AssertionError: assertion failed at vllm/v1/kv_cache_interface.py:1127")]
    assert (by["auto", "auto"].verdict, by["auto", "auto"].parent_bytes) == ("ok", 196_608)
    assert (by["fp8", "float32"].verdict, by["fp8", "float32"].parent_bytes) == ("ok", 245_760)


# transformers names the member's dtype torch_dtype as well: bookkeeping.
BOOKKEEPING = config_defaults.BOOKKEEPING | {"torch_dtype"}


def test_no_default_of_transformers_config_class_moves_a_plan() -> None:
    """vLLM reads config.json through transformers' Lfm2MoeConfig, which answers every key a member lacks with a
    class default, so no read can raise: instead every such key (vocab_size, the experts, the MLP sizes, ...) is
    set to another value at once, and drafted, tensor-parallel, prefix-caching points plan exactly as before.
    rope_parameters is structured (kept as it is). A key whose default did move a page would be a number nobody
    published."""
    import transformers

    member = lfm2_moe.MEMBERS[0]
    defaults = transformers.Lfm2MoeConfig().to_dict()
    lacking, changed = config_defaults.changed(defaults, member.config(), BOOKKEEPING, {})
    kept = sorted(key for key in lacking if changed[key] == defaults[key])
    assert kept == ["rope_parameters"] and "vocab_size" in lacking and "num_experts" in lacking
    values = {**member.values, **{k: v for k, v in changed.items() if k not in kept}}
    other = replace(MOE, member=Member(lfm2_moe.FAMILY, member.index, values))
    assert set(json.loads(other.config_text())) == set(member.config()) | set(lacking) - set(kept)
    for tp, dtype, mamba, spec, prefix in ((2, "auto", "auto", 2, True), (16, "fp8", "float32", 1, True)):
        base = planner.plan(point(MOE, tp, dtype, mamba, spec, prefix))
        again = planner.plan(point(other, tp, dtype, mamba, spec, prefix))
        assert (again.block_size, again.documents) == (base.block_size, base.documents)
