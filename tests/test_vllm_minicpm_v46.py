"""MiniCPM-V 4.6 (MiniCPMV4_6ForConditionalGeneration) planned over its stated family (engines/vllm/minicpm_v46.py):
one member of the copy's cited keys and the hub metadata's dtype, planned at the installed vLLM with Qwen3.5's
layers under the multimodal class, saying it stands for a family; no value transformers fills in for a key the
member lacks moves a plan; the class keeps the SSM state in the model dtype where its config asks float32."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

import config_defaults
import state_faults
from vllm_families import stand_for_their_family

from kvproof.engines.families import Member
from kvproof.engines.vllm import catalog, engine, minicpm_v46, planner

NAME = "minicpm-v-4.6-family-0"
MINICPM = catalog.MODELS[NAME]
MEMBER = minicpm_v46.MEMBERS[0]
AT_TP1: dict[str, Any] = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1],
                          "backend": ["FLASH_ATTN@sm_90"]}
# the copy's text_config values (moderately-ai/lmbrrr@f04df6d .../hf-model/config.json, blob dbe7f74b) the member holds
TEXT = {"model_type": "qwen3_5_text", "num_hidden_layers": 24, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 16, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4, "mamba_ssm_dtype": "float32", "max_position_embeddings": 262144,
        "rope_parameters": {"partial_rotary_factor": 0.25, "rope_theta": 10000000, "rope_type": "default"},
        "mtp_num_hidden_layers": 1}


def point(model: catalog.Model = MINICPM, tp: int = 1, dtype: str = "auto", mamba: str = "auto", prefix: bool = False,
          spec: int = 0, rank: int = 0, pp: int = 1) -> planner.Point:
    return planner.Point(model, tp, dtype, mamba, prefix, model.backends[0], spec, rank=rank, pp=pp)


def test_the_family_is_one_member_of_the_copys_keys_and_the_hubs_dtype() -> None:
    config = json.loads(MINICPM.config_text())
    assert [m.name for m in minicpm_v46.MEMBERS] == [NAME] and minicpm_v46.FAMILY.size() == 1
    assert config == {"architectures": ["MiniCPMV4_6ForConditionalGeneration"], "model_type": "minicpmv4_6",
                      "dtype": "bfloat16", "text_config": {**TEXT, "layer_types": config["text_config"]["layer_types"]}}
    pattern = config["text_config"]["layer_types"]
    assert len(pattern) == 24 and [i for i, t in enumerate(pattern) if t == "full_attention"] == list(range(3, 24, 4))
    assert set(pattern) == {"linear_attention", "full_attention"} and MEMBER.varied() == {}


def test_it_plans_at_the_installed_vllm_and_stands_for_its_family_not_a_checkpoint() -> None:
    _, (out,) = stand_for_their_family([NAME], {**AT_TP1, "spec": [0, 3]}, "openbmb/MiniCPM-V-4.6", 1)
    assert out["family"]["varied"] == {}


def test_the_block_is_worked_by_hand() -> None:
    """At tp 1, bf16: the GDN state is (2 x 16 x 128 + 16 x 128) x 3 conv values and 16 x 128 x 128 temporal
    ones, 36,864 + 524,288 = 561,152 B, against 2 x 2 x 256 x 2 B = 2,048 B a token of attention: the block is
    16 x ceil(561,152 / 32,768) = 288 tokens, a 589,824 B page; four groups of six layers (one attention,
    three GDN) share six slots, so six pages a parent. Two ngram tokens add two conv rows (585,728 B): still
    288; three add three (598,016 B), past the page: 304 tokens. fp8 halves the token and float32 states double
    the state (560 each; 1,104 with both). At tp 8 a rank keeps 2 of the 16 GDN heads and 1 KV head (the 2
    replicated): at 2 ngram tokens 73,216 B of state, 80 tokens."""
    planned = {spec: planner.plan(point(spec=spec)) for spec in (0, 2, 3)}
    assert {spec: (p.block_size, p.mamba_padded) for spec, p in planned.items()} == {
        0: (288, 589_824), 2: (288, 589_824), 3: (304, 622_592)}
    assert planned[0].documents[1]["parent_bytes"] == 6 * 589_824
    shapes = {(tuple(f["shape"]), f["dtype"]) for f in planned[0].documents[1]["fields"]}
    assert shapes == {((288, 1024), "bfloat16"), ((3, 6144), "bfloat16"), ((16, 128, 128), "bfloat16")}
    blocks = {(dtype, mamba): planner.plan(point(dtype=dtype, mamba=mamba)).block_size
              for dtype in ("auto", "fp8") for mamba in ("auto", "float32")}
    assert blocks == {("auto", "auto"): 288, ("fp8", "auto"): 560, ("auto", "float32"): 560, ("fp8", "float32"): 1104}
    wide = planner.plan(point(tp=8, spec=2))
    assert (wide.block_size, wide.mamba_padded) == (80, 81_920)
    assert {tuple(f["shape"]) for f in wide.documents[1]["fields"]} == {(80, 512), (5, 768), (2, 128, 128)}


def test_the_layers_their_names_and_the_domain() -> None:
    """Qwen3.5's layers under `language_model`; pp 2's second stage builds layers 12-23. tp is 1, 2, 4, 8 (the 8
    attention heads; 16 GDN heads; 2 KV heads divide or are replicated), pp 2 at every tp, pp 4 and 8 at tp 1, as
    Qwen3.5's."""
    stage = planner.plan(point(rank=1, pp=2))
    assert stage.layers == (12, 24) and stage.attention and stage.block_size == 288
    assert {(p["tp"], p["pp"]) for p in engine.points(MINICPM)} >= {(1, 1), (2, 1), (4, 1), (8, 1), (1, 8)}
    assert {p["tp"] for p in engine.points(MINICPM)} == {1, 2, 4, 8} and len(engine.points(MINICPM)) == 1168


def test_the_class_keeps_the_ssm_state_in_the_model_dtype_where_its_config_asks_float32() -> None:
    """The member's text_config asks mamba_ssm_dtype float32. Qwen3.5's classes read it (their config hook,
    model_executor/models/config.py:953-977): the same text config under Qwen3_5ForConditionalGeneration keeps the
    temporal state in float32 (a 544-token block). MiniCPM-V 4.6's class has no entry in MODELS_CONFIG_MAP, so at
    --mamba-ssm-cache-dtype auto it keeps the state in bfloat16 (288 tokens). Not a contract property: a finding
    about the numbers the state holds, pinned here so that a vLLM that adds the hook shows."""
    qwen = {**MEMBER.values, "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5"}
    as_qwen = replace(MINICPM, member=Member(minicpm_v46.FAMILY, MEMBER.index, qwen))
    temporal = {name: next(f["dtype"] for f in planner.plan(point(model)).documents[1]["fields"]
                           if tuple(f["shape"]) == (16, 128, 128))
                for name, model in (("minicpm", MINICPM), ("qwen", as_qwen))}
    assert temporal == {"minicpm": "bfloat16", "qwen": "float32"}
    assert planner.plan(point(as_qwen)).block_size == 544


def test_vllm_refuses_an_mtp_draft_for_the_class() -> None:
    """The class drops the MTP weights (minicpmv4_6.py:1178) and SpeculativeConfig knows no MTP draft for
    minicpmv4_6: why the domain speculates by ngram only."""
    with pytest.raises(NotImplementedError, match="Unsupported speculative method: 'mtp'"):
        planner.plan(point(replace(MINICPM, draft="mtp"), spec=1))


BOOKKEEPING = config_defaults.BOOKKEEPING | {"dtype"}
STRINGS = {"hidden_act": "relu", "downsample_mode": "4x"}


@pytest.mark.parametrize("where", ["top", "text_config"])
def test_no_default_of_transformers_config_classes_moves_a_plan(where: str) -> None:
    """vLLM reads config.json through MiniCPMV4_6Config and its Qwen3_5TextConfig, which answer every key a member
    lacks with a class default: every such key is set to another value at once (those None or structured left as
    they are), and a drafted, tensor-parallel, prefix-caching point plans exactly as before."""
    from transformers import MiniCPMV4_6Config

    moved = config_defaults.moved(MiniCPMV4_6Config().to_dict(), MEMBER.config(), where, BOOKKEEPING, STRINGS)
    # the copy's hidden_size among them (no planning code reads it; its full_attention_interval, None here, neither)
    assert ({"text_config.vocab_size", "text_config.hidden_size"} <= set(moved) if where == "text_config"
            else "insert_layer_id" in moved)
    other = replace(MINICPM, member=Member(minicpm_v46.FAMILY, MEMBER.index, {**MEMBER.values, **moved}))
    base = planner.plan(point(tp=2, spec=2, prefix=True))
    again = planner.plan(point(other, tp=2, spec=2, prefix=True))
    assert (again.block_size, again.documents) == (base.block_size, base.documents)


def test_its_seeded_bug_is_killed_at_3_tokens_and_hides_in_the_slack_at_2() -> None:
    """The class sizing the state without the speculative conv rows its layers keep (vllm#57721's kind): at 2
    tokens the layers' 585,728 B still fit the 288-token page of 589,824 B; at 3 their 598,016 B do not, and
    vLLM's own assertion stops the boot."""
    state_faults.killed_past_the_slack("vllm_minicpm_v46_state_unwidened", NAME, AT_TP1, 2, 3)
