"""OLMo Hybrid (OlmoHybridForCausalLM) planned over its stated family (engines/vllm/olmo_hybrid.py): its two
members are the cited keys and the model dtype only, plan at the installed vLLM with each GDN layer's own state
shape, say they stand for a family, and no value transformers fills in for a key a member lacks moves a plan."""

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
from kvproof.engines.vllm import catalog, engine, olmo_hybrid, planner

NAMES = ["olmo-hybrid-7b-family-0", "olmo-hybrid-7b-family-1"]
OLMO = catalog.MODELS[NAMES[0]]
AT_TP1: dict[str, Any] = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1]}
# the copy's values (uw-syfi/vibesys@a22af55 .../reference/config.json, blob aeb36a51), as the members hold them
COPY = {"architectures": ["OlmoHybridForCausalLM"], "model_type": "olmo_hybrid", "num_hidden_layers": 32,
        "hidden_size": 3840, "num_attention_heads": 30, "num_key_value_heads": 30, "linear_num_key_heads": 30,
        "linear_num_value_heads": 30, "linear_key_head_dim": 96, "linear_value_head_dim": 192,
        "linear_conv_kernel_dim": 4, "max_position_embeddings": 65536, "rope_parameters": None}


def point(model: catalog.Model = OLMO, tp: int = 1, dtype: str = "auto", mamba: str = "auto", prefix: bool = False,
          spec: int = 0, rank: int = 0, pp: int = 1) -> planner.Point:
    return planner.Point(model, tp, dtype, mamba, prefix, model.backends[0], spec, rank=rank, pp=pp)


def test_the_family_is_two_members_the_copys_keys_and_the_model_dtype() -> None:
    """Every key vLLM reads is the copy's but the model dtype, which it does not name: one axis of the two
    16-bit dtypes vLLM's `auto` plans, so two members, in product order, each exactly those keys."""
    assert [m.name for m in olmo_hybrid.MEMBERS] == NAMES and olmo_hybrid.FAMILY.size() == 2
    assert [m.recipe for m in catalog.MODELS.values() if m.member and m.member.family is olmo_hybrid.FAMILY] == NAMES
    for member, dtype in zip(olmo_hybrid.MEMBERS, ("bfloat16", "float16"), strict=True):
        config = json.loads(catalog.MODELS[member.name].config_text())
        assert config == {**COPY, "layer_types": config["layer_types"], "dtype": dtype}
        assert member.varied() == {"dtype": dtype}
    pattern = json.loads(OLMO.config_text())["layer_types"]
    assert len(pattern) == 32 and [i for i, t in enumerate(pattern) if t == "full_attention"] == list(range(3, 32, 4))
    assert set(pattern) == {"linear_attention", "full_attention"}


def test_both_plan_at_the_installed_vllm_and_stand_for_their_family_not_a_checkpoint() -> None:
    """At 0.33.0 both boot at 0 and 2 ngram tokens and hold every plan property; each result says family, two
    members, and which checkpoint it is no verdict on."""
    text, outs = stand_for_their_family(NAMES, {**AT_TP1, "spec": [0, 2]}, "allenai/Olmo-Hybrid-7B", 2)
    assert "2 of 2 recipes verified (0 at a checkpoint, 2 over a family, members of 1 family)" in text
    assert all(out["family"]["varied"] == {"dtype": ["bfloat16", "float16"]} for out in outs)


def test_each_gdn_layer_keeps_its_own_state_and_the_block_is_worked_by_hand() -> None:
    """At tp 1, bf16: the GDN state is (2 x 30 x 96 + 30 x 192) x 3 conv values and 30 x 192 x 96 temporal
    ones, 69,120 + 1,105,920 = 1,175,040 B, against 2 x 30 x 128 x 2 B = 15,360 B a token of attention: the
    block is 16 x ceil(1,175,040 / (16 x 15,360)) = 80 tokens, a 1,228,800 B page. Two ngram tokens add two
    conv rows (1,221,120 B): still 80; three add three (1,244,160 B), past the page: 16 x ceil(1,244,160 /
    245,760) = 96 tokens, 1,474,560 B (the class passes the tokens its layers keep, so the block widens and
    the point boots). fp8 halves the token (160), float32 states double the state (160; 320 with fp8). At
    tp 30 every count is a thirtieth and the block the same."""
    planned = {spec: planner.plan(point(spec=spec)) for spec in (0, 2, 3)}
    assert {spec: (p.block_size, p.mamba_padded) for spec, p in planned.items()} == {
        0: (80, 1_228_800), 2: (80, 1_228_800), 3: (96, 1_474_560)}
    shapes = {spec: {(tuple(f["shape"]), f["dtype"]) for f in p.documents[1]["fields"]}
              for spec, p in planned.items()}
    assert shapes[0] == {((80, 7680), "bfloat16"), ((3, 11_520), "bfloat16"), ((30, 192, 96), "bfloat16")}
    assert shapes[2] == {((80, 7680), "bfloat16"), ((5, 11_520), "bfloat16"), ((30, 192, 96), "bfloat16")}
    assert planned[0].documents[1]["parent_bytes"] == 8 * 1_228_800  # 4 groups of 8 layers: 8 pages a parent
    blocks = {(dtype, mamba): planner.plan(point(dtype=dtype, mamba=mamba)).block_size
              for dtype in ("auto", "fp8") for mamba in ("auto", "float32")}
    assert blocks == {("auto", "auto"): 80, ("fp8", "auto"): 160, ("auto", "float32"): 160, ("fp8", "float32"): 320}
    wide = planner.plan(point(tp=30, spec=2))
    assert (wide.block_size, wide.mamba_padded) == (80, 40_960)
    assert {tuple(f["shape"]) for f in wide.documents[1]["fields"]} == {(80, 256), (5, 384), (1, 192, 96)}


def test_the_layers_their_names_and_the_domain() -> None:
    """24 GDN layers at model.layers.i.linear_attn, 8 attention layers at model.layers.i.self_attn.attn; pp 2's
    second stage builds layers 16-31, four of them attention. tp is every divisor of 30 (attention, KV and GDN
    heads), at pp 1, and pp 2 at tp 1; vLLM's own config check refuses tp 4."""
    names = olmo_hybrid.layers(SimpleNamespace(layer_types=json.loads(OLMO.config_text())["layer_types"]))
    assert [n for n, kind in names if kind == "attention"] == [f"model.layers.{i}.self_attn.attn" for i in
                                                               range(3, 32, 4)]
    assert names[0] == ("model.layers.0.linear_attn", "state") and len(names) == 32
    stage = planner.plan(point(rank=1, pp=2))
    assert stage.layers == (16, 32) and stage.attention and stage.block_size == 80
    tps = (1, 2, 3, 5, 6, 10, 15, 30)
    assert {(p["tp"], p["pp"]) for p in engine.points(OLMO)} == {(tp, 1) for tp in tps} | {(1, 2)}
    # 8 tps x 4 tokens, and pp 2 undrafted; x 2 kv dtypes x 2 state dtypes x prefix off / on
    assert len(engine.points(OLMO)) == (8 * 4 + 1) * 2 * 2 * 2 == 264
    with pytest.raises(ValueError, match=r"attention heads \(30\) must be divisible by tensor parallel size \(4\)"):
        planner.plan(point(tp=4))


def test_the_rope_fields_public_notes_disagree_on_move_no_page() -> None:
    """The copy's rope_parameters is null; another rope (a linear factor, which scales max_model_len) or another
    max_position_embeddings changes only max_model_len, the state's block without prefix caching
    (model_executor/models/config.py:787), and no page of the plan."""
    member = olmo_hybrid.MEMBERS[0]
    base = planner.plan(point(tp=2, spec=2))
    for values in ({"rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 500_000.0}},
                   {"max_position_embeddings": 4096}):
        other = replace(OLMO, member=Member(olmo_hybrid.FAMILY, member.index, {**member.values, **values}))
        again = planner.plan(point(other, tp=2, spec=2))
        assert (again.block_size, again.documents) == (base.block_size, base.documents)


# transformers names the members' dtype its own: bookkeeping too.
BOOKKEEPING = config_defaults.BOOKKEEPING | {"dtype"}
STRINGS = {"hidden_act": "relu"}  # another value for each string key


def test_no_default_of_transformers_config_class_moves_a_plan() -> None:
    """vLLM reads config.json through OlmoHybridConfig, which answers every key a member lacks with a class
    default, so no read can raise: instead every such key is set to another value at once (those None by
    default left as they are), and a drafted, tensor-parallel, prefix-caching point plans exactly as before."""
    from transformers import OlmoHybridConfig

    member = olmo_hybrid.MEMBERS[0]
    defaults = OlmoHybridConfig().to_dict()
    lacking, changed = config_defaults.changed(defaults, member.config(), BOOKKEEPING, STRINGS)
    kept = sorted(key for key in lacking if changed[key] == defaults[key])
    assert kept == ["bos_token_id"]  # None by default: as it is
    assert {"vocab_size", "intermediate_size", "rms_norm_eps", "tie_word_embeddings", "linear_allow_neg_eigval",
            "linear_a_log_min", "linear_dt_max"} <= set(lacking) - set(kept)
    values = {**member.values, **{k: v for k, v in changed.items() if k not in kept}}
    other = replace(OLMO, member=Member(olmo_hybrid.FAMILY, member.index, values))
    assert set(json.loads(other.config_text())) == set(member.config()) | set(lacking) - set(kept)
    base = planner.plan(point(tp=2, spec=2, prefix=True))
    again = planner.plan(point(other, tp=2, spec=2, prefix=True))
    assert (again.block_size, again.documents) == (base.block_size, base.documents)


def test_its_seeded_bug_is_killed_at_3_tokens_and_hides_in_the_slack_at_2() -> None:
    """The class sizing the state without the speculative conv rows its layers keep (vllm#57721's kind): at
    2 tokens the layers' 1,221,120 B still fit the 80-token page of 1,228,800 B, so every point boots and
    holds; at 3 their 1,244,160 B do not, and vLLM's own assertion stops the boot."""
    state_faults.killed_past_the_slack("vllm_olmo_hybrid_state_unwidened", NAMES[0], AT_TP1, 2, 3)
