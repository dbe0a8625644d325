"""Bailing V2.5 (Ling 2.5 / 2.6) planned over two stated families (engines/vllm/bailing_v25.py): the 1T family's four
members, the cited keys at either 1T checkpoint's context, with and without an MTP layer, and Ling-2.6-flash's one,
plan at the installed vLLM with each linear layer's own state, say they stand for a family, and no value
transformers fills in for a key a member lacks moves a plan. vLLM reads the file through transformers'
BailingHybridConfig, which makes head_dim the rope width: the linear states are planned with 64-wide heads (the
findings page's replay)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

from vllm_families import bailing_hybrid_moved, stand_for_their_family

from kvproof.engines.families import Member
from kvproof.engines.vllm import bailing_v25, catalog, engine, planner
from kvproof.impl import faults

NAMES = [f"ling-2.5-1t-family-{index}" for index in range(4)]
BARE, DRAFTED = (catalog.MODELS[name] for name in NAMES[:2])
FLASH = catalog.MODELS["ling-2.6-flash-family-0"]
AT_TP1: dict[str, Any] = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1],
                           "draft_dtype": ["target"], "draft_backend": ["target"],
                          "backend": ["FLASHMLA@sm_90"]}
# the defaults of the class a transformers pull request proposes, whose docstring names Ring-2.5-1T, its lightning
# layer's head width, and the dtype SGLang's cookbook gives Ling-2.5-1T
CITED = {"architectures": ["BailingMoeV2_5ForCausalLM"], "model_type": "bailing_hybrid", "num_hidden_layers": 80,
         "layer_group_size": 8, "hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 64,
         "head_dim": 128, "group_norm_size": 8, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
         "qk_rope_head_dim": 64, "v_head_dim": 128, "dtype": "bfloat16"}


def point(model: catalog.Model = DRAFTED, tp: int = 1, mamba: str = "auto", prefix: bool = False, spec: int = 0,
          rank: int = 0, pp: int = 1) -> planner.Point:
    return planner.Point(model, tp, "auto", mamba, prefix, model.backends[1], spec, rank=rank, pp=pp)


def test_the_family_is_the_cited_keys_at_two_contexts_with_and_without_an_mtp_layer() -> None:
    """Every key vLLM reads is cited but the context, which the two 1T checkpoints give apart, and the MTP layer
    count, which nothing found states for them: four members, all in the default run; those without MTP layers
    speculate by ngram."""
    assert [m.name for m in bailing_v25.MEMBERS] == NAMES and bailing_v25.FAMILY.size() == 4
    assert [m.recipe for m in catalog.MODELS.values() if m.member and m.member.family is bailing_v25.FAMILY] == NAMES
    for name, (context, layers) in zip(NAMES, [(c, n) for c in (131072, 262144) for n in (0, 1)], strict=True):
        model = catalog.MODELS[name]
        varied = {"max_position_embeddings": context, "num_nextn_predict_layers": layers}
        assert json.loads(model.config_text()) == {**CITED, **varied}
        assert model.member is not None and model.member.varied() == varied
        assert model.draft == ("mtp" if layers else "ngram")


def test_it_plans_at_the_installed_vllm_and_stands_for_its_family_not_a_checkpoint() -> None:
    """At 0.33.0 every member boots at 0 and 3 speculative tokens and holds every plan property at tp 1; the result
    says family, four members, which checkpoint it is no verdict on, and that the --trust-remote-code launch vLLM's
    recipes give is not planned."""
    text, outs = stand_for_their_family(NAMES, {**AT_TP1, "spec": [0, 3]}, "inclusionAI/Ling-2.5-1T", 4)
    assert "4 of 4 recipes verified (0 at a checkpoint, 4 over a family, members of 1 family)" in text
    assert all("with --trust-remote-code, reads the checkpoint's own config class, not found, and is not planned"
               in out["limits"] for out in outs)


def test_vllm_plans_each_linear_state_with_64_wide_heads_where_the_checkpoint_has_128() -> None:
    """transformers' BailingHybridConfig sets head_dim to qk_rope_head_dim, 64; vLLM's linear layer takes head_dim.
    At tp 1, bf16: each state is 64 x 64 x 64 values, 524,288 B, where vLLM's own shape of 128-wide heads is
    64 x 128 x 128, 2,097,152 B. The MLA token is 576 x 2 = 1,152 B and an MLA model's hybrid block a multiple of
    128 (platforms/interface.py:1083-1088): 128 x ceil(524,288 / 147,456) = 512 tokens, a 589,824 B page. The
    file's head_dim moves no page; qk_rope_head_dim moves both."""
    from transformers import BailingHybridConfig
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

    read = BailingHybridConfig(**bailing_v25.MEMBERS[1].config())
    assert (read.head_dim, read.qk_rope_head_dim) == (64, 64)
    planned = planner.plan(point())
    fields = {(tuple(f["shape"]), f["dtype"]) for f in planned.documents[1]["fields"]}
    assert fields == {((64, 64, 64), "bfloat16"), ((512, 576), "bfloat16")}
    assert (planned.block_size, planned.mamba_padded) == (512, 589_824)
    (wide,) = MambaStateShapeCalculator.linear_attention_state_shape(64, 1, 128)
    assert math.prod(wide) * 2 == 2_097_152
    member = bailing_v25.MEMBERS[1]
    for values, shapes in (({"head_dim": 256}, {(64, 64, 64), (512, 576)}),
                           ({"qk_rope_head_dim": 32}, {(64, 32, 32), (128, 544)})):
        other = replace(DRAFTED, member=Member(bailing_v25.FAMILY, member.index, {**member.values, **values}))
        assert {tuple(f["shape"]) for f in planner.plan(point(other)).documents[1]["fields"]} == shapes


def test_the_state_keeps_no_draft_rows_and_float32_doubles_the_block() -> None:
    """A linear state has no conv rows: 3 MTP tokens leave the 512-token block as it is, and the draft's one MLA
    layer joins the MLA group. float32 states double the state and the block; at tp 8 each state is an eighth
    (65,536 B) and the block falls to the 128-token floor."""
    drafted = planner.plan(point(spec=3))
    assert (drafted.block_size, drafted.mamba_padded) == (512, 589_824)
    assert [f["id"] for f in drafted.documents[1]["fields"] if "layers.80." in f["id"]] == [
        "g7.model.layers.80.self_attn.attn.kv"]
    assert planner.plan(point(mamba="float32")).block_size == 1024
    wide = planner.plan(point(tp=8))
    assert (wide.block_size, {tuple(f["shape"]) for f in wide.documents[1]["fields"]}) == (
        128, {(8, 64, 64), (128, 576)})


def test_the_layers_their_names_and_the_domain() -> None:
    """70 linear layers at model.layers.i.self_attn, 10 MLA at model.layers.i.self_attn.attn (every eighth, vLLM's
    is_linear_layer), the MTP layer after them; pp 2's second stage builds layers 40-79. tp divides the 8 groups the
    linear layer norms in (its constructor refuses any other), at pp 1, and pp 2 at tp 1: 4 groups stop tp at 4, and
    a file without the key at 1, the constructor's own default, though the 64 heads divide by 64."""
    names = bailing_v25.layers(SimpleNamespace(num_hidden_layers=80, layer_group_size=8))
    assert [n for n, kind in names if kind == "attention"] == [f"model.layers.{i}.self_attn.attn"
                                                               for i in range(7, 80, 8)]
    assert names[0] == ("model.layers.0.self_attn", "state") and len(names) == 80
    assert bailing_v25.draft_layers(SimpleNamespace(num_hidden_layers=80, num_nextn_predict_layers=1)) == [
        ("model.layers.80.self_attn.attn", "attention")]
    stage = planner.plan(point(rank=1, pp=2))
    assert stage.layers == (40, 80) and stage.attention and stage.block_size == 512
    for model in (BARE, DRAFTED):
        points = engine.points(model)
        assert {(p["tp"], p["pp"]) for p in points} == {(tp, 1) for tp in (1, 2, 4, 8)} | {(1, 2)}
        # FLASHMLA 2 kv dtypes, FLASH_ATTN_MLA 1, x 2 state dtypes x prefix off / on: 12 a tp and token count; the
        # MTP draft's 3 token counts again at FLASHMLA with the draft at the other kv dtype (FLASH_ATTN_MLA has no fp8),
        # and with the draft at the other backend: 4 of the 6 backend and kv dtype pairs that one declares, x 4
        assert len(points) == 12 * (4 * 4 + 1) + ((8 + 16) * 4 * 3 if model is DRAFTED else 0)
    config = bailing_v25.MEMBERS[1].config()
    assert DRAFTED.tps(config) == (1, 2, 4, 8)
    assert DRAFTED.tps({**config, "group_norm_size": 4}) == (1, 2, 4)
    assert DRAFTED.tps({k: v for k, v in config.items() if k != "group_norm_size"}) == (1,)


# the keys of Ling-2.6-flash's config.json its ports' notes, a quantization's README and SGLang's cookbook give
FLASH_CITED = {"architectures": ["BailingMoeV2_5ForCausalLM"], "model_type": "bailing_hybrid", "num_hidden_layers": 32,
               "layer_group_size": 8, "hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128,
               "group_norm_size": 4, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 131072, "rope_scaling": None,
               "dtype": "bfloat16", "num_nextn_predict_layers": 1}


def test_the_flash_family_is_one_member_the_cited_keys_and_stands_for_its_family() -> None:
    """Ling-2.6-flash's family: every key vLLM reads cited, one member with its MTP draft; it boots at 0 and 3 tokens
    and holds every plan property at tp 1, and says which checkpoint it is no verdict on."""
    assert [m.name for m in bailing_v25.FLASH_MEMBERS] == [FLASH.recipe] and bailing_v25.FLASH_FAMILY.size() == 1
    assert json.loads(FLASH.config_text()) == FLASH_CITED and FLASH.draft == "mtp"
    stand_for_their_family([FLASH.recipe], {**AT_TP1, "spec": [0, 3]}, "inclusionAI/Ling-2.6-flash", 1)


def test_ling_26_flash_plans_32_heads_64_wide_where_its_checkpoint_has_128_and_tp_stops_at_4() -> None:
    """At tp 1, bf16, each state is 32 x 64 x 64 values, 262,144 B (the checkpoint's 128-wide heads: 32 x 128 x 128,
    1,048,576 B): 128 x ceil(262,144 / 147,456) = 256 tokens, a 294,912 B page; four slots a parent (four MLA layers,
    seven linear groups of four), 1,179,648 B. The MTP draft's MLA layer makes the MLA group five (g6), and vLLM deals
    the 28 linear layers into six groups of up to five: five slots. Its 4 norm groups stop tp at 4, where each state
    is a quarter (65,536 B) in the 128-token floor's page."""
    planned = planner.plan(point(FLASH))
    assert {(tuple(f["shape"]), f["dtype"]) for f in planned.documents[1]["fields"]} == {
        ((32, 64, 64), "bfloat16"), ((256, 576), "bfloat16")}
    assert (planned.block_size, planned.mamba_padded, planned.documents[1]["parent_bytes"]) == (256, 294_912,
                                                                                               1_179_648)
    drafted = planner.plan(point(FLASH, spec=3))
    assert drafted.documents[1]["parent_bytes"] == 5 * 294_912
    assert [f["id"] for f in drafted.documents[1]["fields"] if "layers.32." in f["id"]] == [
        "g6.model.layers.32.self_attn.attn.kv"]
    config = bailing_v25.FLASH_MEMBERS[0].config()
    assert FLASH.tps(config) == (1, 2, 4) and FLASH.tps({**config, "group_norm_size": 8}) == (1, 2, 4, 8)
    assert {(p["tp"], p["pp"]) for p in engine.points(FLASH)} == {(1, 1), (2, 1), (4, 1), (1, 2)}
    assert len(engine.points(FLASH)) == 12 * (3 * 4 + 1) + (8 + 16) * 3 * 3 == 372
    quarter = planner.plan(point(FLASH, tp=4))
    assert (quarter.block_size, {tuple(f["shape"]) for f in quarter.documents[1]["fields"]}) == (
        128, {(8, 64, 64), (128, 576)})


@pytest.mark.parametrize("name", [NAMES[1], FLASH.recipe])
def test_no_default_of_transformers_config_class_moves_a_plan(name: str) -> None:
    """vLLM reads config.json through BailingHybridConfig (the Ling 3.0 class in transformers 5.20.2), which answers
    every key a member lacks with a class default, so no read can raise: instead every such key is set to another
    value at once (those None by default or a structure left as they are), and a drafted, tensor-parallel,
    prefix-caching point plans exactly as before. The keys the class derives from the member's own in
    __post_init__ it derives again; layer_types, which vLLM reads too (is_hybrid), is left as the class derives it
    from layer_group_size. A key the class does not answer, which vLLM reads with a default of its own
    (group_norm_size), is outside this test: the domain test shows what that default does."""
    model = catalog.MODELS[name]
    moved, other = bailing_hybrid_moved(model)
    assert {"vocab_size", "num_experts", "first_k_dense_replace", "short_conv_kernel_size"} <= moved
    if model is FLASH:  # cited in the 1T family, no key of this member's: the test shows planning reads it nowhere
        assert "num_key_value_heads" in moved
    base = planner.plan(point(model, tp=2, spec=3, prefix=True))
    again = planner.plan(point(other, tp=2, spec=3, prefix=True))
    assert (again.block_size, again.documents) == (base.block_size, base.documents)


def test_its_seeded_bug_is_killed_at_float32_states_only() -> None:
    """The alignment sizing the state page by the model dtype while the layers keep --mamba-cache-dtype float32 (the
    Mamba-1 bug of Jamba's class, at this class): a 524,288 B bf16 state sets a 512-token, 589,824 B page, and each
    layer's 1,048,576 B float32 state does not fit it, so vLLM's own assertion stops the boot. At the model dtype the
    two agree and the point holds."""
    with faults.inject("vllm_linear_attention_dtype_unaligned"):
        run = engine.run([NAMES[0]], {**AT_TP1, "mamba_dtype": ["auto", "float32"], "spec": [0]})
    fits, fails = run.recipes[0].points
    assert fits.verdict == "ok" and not fits.findings
    assert [f.property for f in fails.findings] == ["boots"]
    assert "vllm/v1/kv_cache_interface.py:" in fails.findings[0].message
