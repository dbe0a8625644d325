"""Bailing V3 (Ling 3.0) planned over its two stated families (engines/vllm/bailing_v3.py), Ling-3.0-tiny's one
member and Ling-3.0-flash's two (its context an axis): each is the cited keys, plans at the installed vLLM with each
KDA layer's own state, says it stands for a family, and no value transformers fills in for a key a member lacks
moves a plan. vLLM reads the file through transformers' BailingHybridConfig, which makes head_dim the rope width:
the KDA states are planned with 64-wide heads (the findings page's replay)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

import state_faults
from vllm_families import bailing_hybrid_moved, stand_for_their_family

from kvproof.engines.families import Member
from kvproof.engines.user_config import UserConfig
from kvproof.engines.vllm import bailing_v3, catalog, engine, planner

NAME = "ling-3.0-tiny-family-0"
LING = catalog.MODELS[NAME]
FLASH = [f"ling-3.0-flash-family-{index}" for index in range(2)]
AT_TP1: dict[str, Any] = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1],
                           "draft_dtype": ["target"], "draft_backend": ["target"],
                          "backend": ["FLASHMLA@sm_90"]}
# the fixture's values (figyaro/mlx-swift-lm@6b437f86 Tests/MLXLMTests/BailingMoeV3Tests.swift) the members hold
FIXTURE = {"architectures": ["BailingMoeV3ForCausalLM"], "model_type": "bailing_hybrid", "num_hidden_layers": 24,
           "layer_group_size": 4, "hidden_size": 1536, "num_attention_heads": 16, "num_key_value_heads": 16,
           "head_dim": 128, "short_conv_kernel_size": 4, "no_kda_lora": True, "kv_lora_rank": 512, "q_lora_rank": 256,
           "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 131072,
           "rope_theta": 6000000, "num_nextn_predict_layers": 0, "dtype": "bfloat16"}


def point(model: catalog.Model = LING, tp: int = 1, dtype: str = "auto", mamba: str = "auto", prefix: bool = False,
          spec: int = 0, rank: int = 0, pp: int = 1) -> planner.Point:
    return planner.Point(model, tp, dtype, mamba, prefix, model.backends[1], spec, rank=rank, pp=pp)


def test_the_family_is_one_member_the_cited_keys() -> None:
    """Every key vLLM reads is cited (the fixture's, the MTP layer count SGLang's cookbook quotes, none, the
    dtype vLLM's own recipe serves): one member, exactly those keys, nothing varied."""
    assert [m.name for m in bailing_v3.MEMBERS] == [NAME] and bailing_v3.FAMILY.size() == 1
    assert [m.recipe for m in catalog.MODELS.values() if m.member and m.member.family is bailing_v3.FAMILY] == [NAME]
    assert json.loads(LING.config_text()) == FIXTURE and bailing_v3.MEMBERS[0].varied() == {}


def test_it_plans_at_the_installed_vllm_and_stands_for_its_family_not_a_checkpoint() -> None:
    """At 0.33.0 it boots at 0 and 3 ngram tokens and holds every plan property; the result says family, one
    member, which checkpoint it is no verdict on, and that vLLM's recipes' --trust-remote-code launch is not
    planned."""
    text, (out,) = stand_for_their_family([NAME], {**AT_TP1, "spec": [0, 3]}, "inclusionAI/Ling-3.0-tiny", 1)
    assert "1 of 1 recipes verified (0 at a checkpoint, 1 over a family)" in text
    assert "with --trust-remote-code, reads the checkpoint's own config class, not found, and is not planned" in (
        out["limits"])


def test_vllm_plans_each_kda_state_with_64_wide_heads_where_the_config_has_128() -> None:
    """transformers' BailingHybridConfig keeps the file's head_dim 128 as linear_head_dim and sets head_dim to
    qk_rope_head_dim, 64; the KDA layer takes head_dim. At tp 1, bf16: each state is a (3, 3 x 16 x 64) bf16 conv
    and 16 x 64 x 64 float32 values, 18,432 + 262,144 = 280,576 B, where vLLM's own shape of 128-wide heads is
    36,864 + 1,048,576 = 1,085,440 B. The file's head_dim moves no page; qk_rope_head_dim moves both. The MLA
    token is 576 x 2 = 1,152 B and an MLA model's hybrid block a multiple of 128
    (platforms/interface.py:1083-1088): 128 x ceil(280,576 / 147,456) = 256 tokens, a 294,912 B page."""
    from transformers import BailingHybridConfig

    read = BailingHybridConfig(**bailing_v3.MEMBERS[0].config())
    assert (read.head_dim, read.linear_head_dim, read.qk_rope_head_dim) == (64, 128, 64)
    planned = planner.plan(point())
    fields = {(tuple(f["shape"]), f["dtype"]) for f in planned.documents[1]["fields"]}
    assert fields == {((3, 3072), "bfloat16"), ((16, 64, 64), "float32"), ((256, 576), "bfloat16")}
    assert (planned.block_size, planned.mamba_padded) == (256, 294_912)
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

    conv, recurrent = MambaStateShapeCalculator.kda_state_shape(1, 16, 128, conv_kernel_size=4)
    assert math.prod(conv) * 2 + math.prod(recurrent) * 4 == 1_085_440
    member = bailing_v3.MEMBERS[0]
    for values, shapes in (({"head_dim": 256}, {(3, 3072), (16, 64, 64), (256, 576)}),
                           ({"qk_rope_head_dim": 32}, {(3, 1536), (16, 32, 32), (128, 544)})):
        other = replace(LING, member=Member(bailing_v3.FAMILY, member.index, {**member.values, **values}))
        assert {tuple(f["shape"]) for f in planner.plan(point(other)).documents[1]["fields"]} == shapes


def test_each_kda_layer_keeps_its_own_state_and_three_tokens_widen_the_block() -> None:
    """Each speculative token (ngram: the checkpoint has no MTP layer, so no draft layer keeps a page) adds a conv row
    (6,144 B at bf16): at 2 the 292,864 B state still fits the 256-token page; at 3 its 299,008 B do not, and the
    block widens to 384 tokens (442,368 B). float32 states double the conv rows; at tp 16 each state is a sixteenth
    (17,536 B) and the block falls to the 128-token floor."""
    planned = {spec: planner.plan(point(spec=spec)) for spec in (2, 3)}
    assert {spec: (p.block_size, p.mamba_padded) for spec, p in planned.items()} == {2: (256, 294_912),
                                                                                    3: (384, 442_368)}
    assert {tuple(f["shape"]) for f in planned[3].documents[1]["fields"]} == {(6, 3072), (16, 64, 64), (384, 576)}
    assert LING.draft == "ngram" and not [f for f in planned[3].documents[1]["fields"] if "layers.24." in f["id"]]
    assert planner.plan(point(mamba="float32")).block_size == 384  # 36,864 + 262,144 = 299,008 B
    wide = planner.plan(point(tp=16))
    assert (wide.block_size, {tuple(f["shape"]) for f in wide.documents[1]["fields"]}) == (
        128, {(3, 192), (1, 64, 64), (128, 576)})


def test_the_layers_their_names_and_the_domain() -> None:
    """18 KDA layers at model.layers.i.self_attn, 6 MLA at model.layers.i.self_attn.attn (every fourth, vLLM's
    _is_kda_layer), the MTP layer after them; pp 2's second stage builds layers 12-23. tp is every divisor of the
    16 heads, at pp 1, and pp 2 at tp 1; FLASH_ATTN_MLA declines an fp8 cache."""
    hf = SimpleNamespace(num_hidden_layers=24, layer_group_size=4)
    names = bailing_v3.layers(hf)
    assert [n for n, kind in names if kind == "attention"] == [f"model.layers.{i}.self_attn.attn"
                                                               for i in range(3, 24, 4)]
    assert names[0] == ("model.layers.0.self_attn", "state") and len(names) == 24
    assert bailing_v3.draft_layers(SimpleNamespace(num_hidden_layers=24, num_nextn_predict_layers=1)) == [
        ("model.layers.24.self_attn.attn", "attention")]
    # a tail past the last whole group is MLA throughout (26 layers in groups of 4: 24 and 25)
    tail = bailing_v3.layers(SimpleNamespace(num_hidden_layers=26, layer_group_size=4))
    assert [i for i, (_, kind) in enumerate(tail) if kind == "attention"] == [3, 7, 11, 15, 19, 23, 24, 25]
    stage = planner.plan(point(rank=1, pp=2))
    assert stage.layers == (12, 24) and stage.attention and stage.block_size == 256
    points = engine.points(LING)
    assert {(p["tp"], p["pp"]) for p in points} == {(tp, 1) for tp in (1, 2, 4, 8, 16)} | {(1, 2)}
    assert {p["dtype"] for p in points if p["backend"] == "FLASH_ATTN_MLA@sm_90"} == {"auto"}
    # FLASHMLA 2 kv dtypes, FLASH_ATTN_MLA 1, x 2 state dtypes x prefix off / on: 12 a tp and token count
    assert len(points) == 12 * (5 * 4 + 1) == 252


@pytest.mark.parametrize("name", [NAME, FLASH[0]])
def test_no_default_of_transformers_config_class_moves_a_plan(name: str) -> None:
    """vLLM reads config.json through BailingHybridConfig, which answers every key a member lacks with a class
    default, so no read can raise: instead every such key is set to another value at once (those None by default
    or a structure left as they are), and a drafted, tensor-parallel, prefix-caching point plans exactly as
    before. The keys the class derives from the member's own in __post_init__ (linear_*, qk_head_dim, the layer
    lists) it derives again, so changing them tests nothing; layer_types, which vLLM reads too (is_hybrid), is
    left as the class derives it from layer_group_size."""
    model = catalog.MODELS[name]
    moved, other = bailing_hybrid_moved(model)
    assert {"vocab_size", "num_experts", "first_k_dense_replace", "kda_lower_bound", "linear_head_dim"} <= moved
    base = planner.plan(point(model, tp=2, spec=3, prefix=True))
    again = planner.plan(point(other, tp=2, spec=3, prefix=True))
    assert (again.block_size, again.documents) == (base.block_size, base.documents)


def test_a_config_vllms_kda_layer_refuses_is_not_verified() -> None:
    """The KDA layer's constructor refuses a config without no_kda_lora true (bailing_moe_v3.py:686-687), which
    kvproof does not run: the state's reading raises that refusal, and a user's config.json without the key is NOT
    VERIFIED (adapter), never verified."""
    mine = {key: value for key, value in bailing_v3.MEMBERS[0].config().items() if key != "no_kda_lora"}
    run = engine.run([LING.recipe], {**AT_TP1, "spec": [0]}, workers=1, user_config=UserConfig("mine.json", mine))
    result = run.recipes[0]
    assert result.adapter and not result.points
    assert "expects no_kda_lora=True" in (result.not_verified or "")


def test_its_seeded_bug_is_killed_at_3_tokens_and_hides_in_the_slack_at_2() -> None:
    """The class sizing the state without the speculative conv rows its layers keep (vllm#57721's kind): at 2
    tokens the layers' 292,864 B still fit the 256-token page of 294,912 B; at 3 their 299,008 B do not, and
    vLLM's own assertion stops the boot."""
    state_faults.killed_past_the_slack("vllm_bailing_v3_state_unwidened", NAME, AT_TP1, 2, 3)


def test_the_flash_family_is_its_cited_keys_at_two_contexts() -> None:
    """Ling-3.0-flash's family: every key vLLM reads cited (transformers' class, whose docstring names Ling-3.0-Flash,
    with a pull request's 42 blocks, 5:1 pattern, full-rank KDA gates and one MTP block, SGLang's word on the published
    config's rope, and vLLM's recipe's BF16) but the context, which the published config has held at 131,072 and at
    262,144: two members, each with its MTP draft."""
    assert [m.name for m in bailing_v3.FLASH_MEMBERS] == FLASH and bailing_v3.FLASH_FAMILY.size() == 2
    assert {catalog.MODELS[name].draft for name in FLASH} == {"mtp"}
    cited = {"architectures": ["BailingMoeV3ForCausalLM"], "model_type": "bailing_hybrid", "num_hidden_layers": 42,
             "layer_group_size": 6, "hidden_size": 2560, "num_attention_heads": 32, "num_key_value_heads": 32,
             "head_dim": 128, "short_conv_kernel_size": 4, "no_kda_lora": True, "kv_lora_rank": 512,
             "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "rope_theta": 6000000,
             "rope_scaling": None, "dtype": "bfloat16", "num_nextn_predict_layers": 1}
    for name, context in zip(FLASH, (131072, 262144), strict=True):
        assert json.loads(catalog.MODELS[name].config_text()) == {**cited, "max_position_embeddings": context}


def test_flash_plans_its_35_kda_and_7_mla_layers_with_64_wide_heads() -> None:
    """At tp 1, bf16, each KDA state is a (3, 3 x 32 x 64) bf16 conv and 32 x 64 x 64 float32 values, 36,864 +
    524,288 = 561,152 B (128-wide heads would keep 73,728 + 2,097,152 B): 128 x ceil(561,152 / 147,456) = 512 tokens,
    a 589,824 B page; five KDA groups and one MLA group of 7 layers, 4,128,768 B a parent. tp is every divisor of the
    32 heads; at tp 32 each state is 17,536 B and the block falls to the 128-token floor, as tiny's does at tp 16.
    No context moves the documents, so the two members plan alike."""
    flash, wide = (catalog.MODELS[name] for name in FLASH)
    planned = planner.plan(point(flash))
    fields = {(tuple(f["shape"]), f["dtype"]) for f in planned.documents[1]["fields"]}
    assert fields == {((3, 6144), "bfloat16"), ((32, 64, 64), "float32"), ((512, 576), "bfloat16")}
    assert (planned.block_size, planned.mamba_padded) == (512, 589_824)
    assert planned.documents[1]["parent_bytes"] == 4_128_768 and len(planned.documents[1]["groups"]) == 6
    assert sum(f["id"].endswith(".kv") for f in planned.documents[1]["fields"]) == 7
    assert {tuple(f["shape"]) for f in planner.plan(point(flash, tp=32)).documents[1]["fields"]} == {
        (3, 192), (1, 64, 64), (128, 576)}
    # the MTP draft's 3 token counts again at FLASHMLA with the draft at the other kv dtype (FLASH_ATTN_MLA has no fp8),
    # and with the draft at the other backend (draft_backend=) where it declares the draft's dtype
    assert {p["tp"] for p in engine.points(flash)} == {1, 2, 4, 8, 16, 32}
    assert len(engine.points(flash)) == 300 + (8 + 16) * 6 * 3
    assert planner.plan(point(wide)).documents == planned.documents


def test_the_seeded_bug_is_killed_at_flash_past_its_slack_too() -> None:
    """Flash's 512-token page holds its state with 28,672 B to spare and a drafted conv row is 12,288 B at bf16: the
    class sizing the state without them is hidden at 2 tokens and stops the boot at 3, as at tiny."""
    state_faults.killed_past_the_slack("vllm_bailing_v3_state_unwidened", FLASH[0], AT_TP1, 2, 3)
