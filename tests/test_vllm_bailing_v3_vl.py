"""Bailing V3 VL (Ling-3.0-flash-VL) planned over its stated family (engines/vllm/bailing_v3_vl.py): two members, the
cited keys of inclusionAI's vLLM fork's test fixture and Ling-3.0-flash's family with the MTP layer count an axis; each
plans at the installed vLLM with each KDA layer's own state, says it stands for a family, and no value vLLM's config
classes fill in for a key a member lacks moves a plan. vLLM reads the file through its own config class, which keeps
head_dim: the KDA states are planned with 128-wide heads, where the text class plans the same backbone's with 64-wide
ones."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

import config_defaults
import state_faults
from vllm_families import stand_for_their_family

from kvproof.engines.families import Member
from kvproof.engines.vllm import bailing_v3_vl, catalog, engine, planner

NAMES = [f"ling-3.0-flash-vl-family-{index}" for index in range(2)]
NGRAM, MTP = (catalog.MODELS[name] for name in NAMES)
AT_TP1: dict[str, Any] = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1],
                           "draft_dtype": ["target"], "draft_backend": ["target"],
                          "backend": ["FLASHMLA@sm_90"]}
# the values of the fixture a test in inclusionAI's vLLM fork writes (inclusionAI/vllm-ling-v3@4e709a63
# tests/transformers_utils/test_bailing_moe_v3_vl_config.py) the members hold, and the two Ling-3.0-flash's family gives
TEXT = {"num_hidden_layers": 42, "layer_group_size": 6, "hidden_size": 2560, "num_attention_heads": 32,
        "num_key_value_heads": 32, "head_dim": 128, "kv_lora_rank": 512, "no_kda_lora": True,
        "max_position_embeddings": 131072, "qk_rope_head_dim": 64, "short_conv_kernel_size": 4}


def point(model: catalog.Model = NGRAM, tp: int = 1, dtype: str = "auto", mamba: str = "auto", prefix: bool = False,
          spec: int = 0, rank: int = 0, pp: int = 1) -> planner.Point:
    return planner.Point(model, tp, dtype, mamba, prefix, model.backends[1], spec, rank=rank, pp=pp)


def test_the_family_is_two_members_the_cited_keys_and_the_mtp_layer_count() -> None:
    """Every key vLLM reads is cited (the fixture's, and Ling-3.0-flash's family's qk_rope_head_dim and conv kernel,
    which the fixture leaves to the class defaults) but the MTP layer count, which nothing gives for the VL model: 0,
    the class default, speculating by ngram, and 1, Ling-3.0-flash's, by its MTP draft."""
    assert [m.name for m in bailing_v3_vl.MEMBERS] == NAMES and bailing_v3_vl.FAMILY.size() == 2
    for model, layers in ((NGRAM, 0), (MTP, 1)):
        assert json.loads(model.config_text()) == {
            "architectures": ["BailingMoeV3VLForConditionalGeneration"], "model_type": "bailing_moe_v3_vl",
            "torch_dtype": "bfloat16", "text_config": {**TEXT, "num_nextn_predict_layers": layers}}
    assert (NGRAM.draft, MTP.draft) == ("ngram", "mtp")


def test_it_plans_at_the_installed_vllm_and_stands_for_its_family_not_a_checkpoint() -> None:
    """At 0.33.0 both members boot at 0 and 3 speculative tokens and hold every plan property at tp 1; the result says
    family, two members, which checkpoint it is no verdict on, and which launch it is planned at."""
    text, outs = stand_for_their_family(NAMES, {**AT_TP1, "spec": [0, 3]}, "inclusionAI/Ling-3.0-flash-VL", 2)
    assert "2 of 2 recipes verified (0 at a checkpoint, 2 over a family, members of 1 family)" in text
    assert all("read through vLLM's own BailingMoeV3VLConfig, which keeps the file's head_dim" in out["limits"]
               for out in outs)


def test_vllm_plans_each_kda_state_with_128_wide_heads_where_the_text_class_plans_64() -> None:
    """vLLM's own BailingMoeV3TextConfig keeps the file's head_dim 128, and the KDA layer takes head_dim: at tp 1,
    bf16, each state is a (3, 3 x 32 x 128) bf16 conv and 32 x 128 x 128 float32 values, 73,728 + 2,097,152 =
    2,170,880 B, padded to a 1,920-token block (15 x 128 tokens x 1,152 B = 2,211,840 B). The text class reads the
    same values through transformers' BailingHybridConfig, which makes head_dim the rope width, 64: 36,864 + 524,288
    = 561,152 B states in 512-token blocks."""
    from vllm.transformers_utils.configs.bailing_moe_v3_vl import BailingMoeV3VLConfig

    assert BailingMoeV3VLConfig(**bailing_v3_vl.MEMBERS[0].config()).text_config.head_dim == 128
    planned = planner.plan(point())
    fields = {(tuple(f["shape"]), f["dtype"]) for f in planned.documents[1]["fields"]}
    assert fields == {((3, 12288), "bfloat16"), ((32, 128, 128), "float32"), ((1920, 576), "bfloat16")}
    assert (planned.block_size, planned.mamba_padded) == (1920, 2_211_840)
    text = catalog.MODELS["ling-3.0-flash-family-0"]
    assert {key: value for key, value in json.loads(text.config_text()).items() if key in TEXT} == TEXT
    text_planned = planner.plan(point(text))
    assert {tuple(f["shape"]) for f in text_planned.documents[1]["fields"]} == {(3, 6144), (32, 64, 64), (512, 576)}
    assert (text_planned.block_size, text_planned.mamba_padded) == (512, 589_824)


def test_the_mtp_member_plans_its_draft_layer_and_three_tokens_widen_the_block() -> None:
    """The MTP member's draft is the text class's BailingMoeV3MTPModel of the text config: one MLA layer after the 42,
    `model.layers.42.self_attn.attn` (the draft model's own names), in the MLA layers' group; the ngram member plans
    none. Each token adds a 24,576 B conv row: at 1 the 2,195,456 B state still fits the 1,920-token page; at 2 its
    2,220,032 B do not and the block widens to 2,048 tokens (2,359,296 B)."""
    def mla(model: catalog.Model) -> set[str]:
        return {f["id"] for f in planner.plan(point(model, spec=3)).documents[1]["fields"] if f["id"].endswith(".kv")}

    assert mla(MTP) - mla(NGRAM) == {"g5.model.layers.42.self_attn.attn.kv"}
    assert "g5.language_model.model.layers.41.self_attn.attn.kv" in mla(NGRAM)
    blocks = {spec: planner.plan(point(spec=spec)).block_size for spec in (1, 2, 3)}
    assert blocks == {1: 1920, 2: 2048, 3: 2048}


def test_the_layers_their_names_and_the_domain() -> None:
    """35 KDA layers at language_model.model.layers.i.self_attn, 7 MLA at ...self_attn.attn (every sixth); pp 2's
    second stage builds layers 21-41. tp is every divisor of the 32 heads, at pp 1, and pp 2 at tp 1."""
    names = bailing_v3_vl.layers(SimpleNamespace(num_hidden_layers=42, layer_group_size=6))
    assert [n for n, kind in names if kind == "attention"] == [f"language_model.model.layers.{i}.self_attn.attn"
                                                               for i in range(5, 42, 6)]
    assert names[0] == ("language_model.model.layers.0.self_attn", "state") and len(names) == 42
    stage = planner.plan(point(rank=1, pp=2))
    assert stage.layers == (21, 42) and stage.attention
    for model in (NGRAM, MTP):
        points = engine.points(model)
        assert {(p["tp"], p["pp"]) for p in points} == {(tp, 1) for tp in (1, 2, 4, 8, 16, 32)} | {(1, 2)}
        # FLASHMLA 2 kv dtypes, FLASH_ATTN_MLA 1, x 2 state dtypes x prefix off / on: 12 a tp and token count; the
        # MTP draft's 3 token counts again at FLASHMLA with the draft at the other kv dtype (FLASH_ATTN_MLA has no fp8),
        # and with the draft at the other backend (draft_backend=) where it declares the draft's dtype
        assert len(points) == 12 * (6 * 4 + 1) + ((8 + 16) * 6 * 3 if model is MTP else 0)


BOOKKEEPING = config_defaults.BOOKKEEPING | {"dtype", "torch_dtype"}
# another value for each string key: the text config's MoE router and the vision tower's activation, neither of which
# planning reads
STRINGS = {"hidden_act": "relu", "router_dtype": "bf16", "score_function": "softmax", "scoring_func": "softmax",
           "topk_method": "greedy"}


@pytest.mark.parametrize("where", ["top", "text_config", "vision_config"])
def test_no_default_of_vllms_config_classes_moves_a_plan(where: str) -> None:
    """vLLM reads config.json through its BailingMoeV3VLConfig, whose text and vision configs answer every key a member
    lacks with a class default: every such key is set to another value at once (those None by default or a structure
    left as they are), and a drafted, tensor-parallel, prefix-caching point plans exactly as before."""
    from vllm.transformers_utils.configs.bailing_moe_v3_vl import BailingMoeV3VLConfig

    member = bailing_v3_vl.MEMBERS[1]
    moved = config_defaults.moved(BailingMoeV3VLConfig().to_dict(), {"vision_config": {}, **member.config()}, where,
                                  BOOKKEEPING, STRINGS)
    assert {"top": "image_token_id", "text_config": "text_config.num_experts",
            "vision_config": "vision_config.depth"}[where] in moved
    if where == "text_config":
        assert {f"text_config.{key}" for key in STRINGS if key != "hidden_act"} <= set(moved)
    other = replace(MTP, member=Member(bailing_v3_vl.FAMILY, member.index, {**member.values, **moved}))
    base = planner.plan(point(MTP, tp=2, spec=3, prefix=True))
    again = planner.plan(point(other, tp=2, spec=3, prefix=True))
    assert (again.block_size, again.documents) == (base.block_size, base.documents)


def test_the_text_class_seeded_bug_is_killed_here_at_2_tokens_and_hides_in_the_slack_at_1() -> None:
    """The class delegates its state shape to the text class's (bailing_moe_v3_vl.py:321-329), so the text class
    sizing the state without the speculative conv rows its layers keep reaches it: at 1 token the layers' 2,195,456 B
    fit the 2,211,840 B page; at 2 their 2,220,032 B do not, and vLLM's own assertion stops the boot."""
    state_faults.killed_past_the_slack("vllm_bailing_v3_state_unwidened", NAMES[0], AT_TP1, 1, 2)
