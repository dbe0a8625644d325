"""Nemotron-3-Nano-Omni (NemotronH_Nano_Omni_Reasoning_V3) planned over its stated family
(engines/vllm/nemotron_omni.py): one member, transformers' Omni model type over the published text config of the
NemotronH MoE model of its name and size; it plans at the installed vLLM, says it stands for a family, and no value
transformers' config class fills in for a key the member lacks moves a plan. No config hook is registered for the
Omni architectures, so vLLM keeps their Mamba2 SSM state in the model dtype where it keeps the same text config's in
float32 under NemotronHForCausalLM (the findings page's replay)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vllm is not installed: `make .venv/.vllm` installs it (make test does)")

import config_defaults
from vllm_families import stand_for_their_family

from kvproof.engines.families import Member
from kvproof.engines.vllm import catalog, engine, nemotron_omni, planner

NAME = "nemotron-3-nano-omni-family-0"
OMNI = catalog.MODELS[NAME]
NANO = catalog.MODELS["nemotron-3-nano-30b-a3b-bf16"]
MEMBER = nemotron_omni.MEMBERS[0]
AT_TP1: dict[str, Any] = {"tp": [1], "dtype": ["auto"], "mamba_dtype": ["auto"], "prefix": ["off"], "pp": [1],
                          "backend": ["FLASH_ATTN@sm_90"]}


def point(model: catalog.Model = OMNI, tp: int = 1, mamba: str = "auto", prefix: bool = False,
          spec: int = 0) -> planner.Point:
    backend = next(b for b in model.backends if b.name == "FLASH_ATTN")
    return planner.Point(model, tp, "auto", mamba, prefix, backend, spec)


def test_the_family_is_one_member_the_omni_type_over_the_siblings_text_config() -> None:
    """The architecture and transformers' model type, and as text_config the held published config.json of
    Nemotron-3-Nano-30B-A3B-BF16 key for key but its auto_map and transformers_version; ngram speculation."""
    assert [m.name for m in nemotron_omni.MEMBERS] == [NAME] and nemotron_omni.FAMILY.size() == 1
    sibling = json.loads(NANO.config_text())
    assert json.loads(OMNI.config_text()) == {
        "architectures": ["NemotronH_Nano_Omni_Reasoning_V3"], "model_type": "nemotron_h_omni",
        "text_config": {k: v for k, v in sibling.items() if k not in ("auto_map", "transformers_version")}}
    assert OMNI.draft == "ngram" and MEMBER.varied() == {}


def test_it_plans_at_the_installed_vllm_and_stands_for_its_family_not_a_checkpoint() -> None:
    """At 0.33.0 it plans at 0 and 3 ngram tokens and holds every plan property at tp 1; the result says family, one
    member, and which checkpoint it is no verdict on."""
    stand_for_their_family([NAME], {**AT_TP1, "spec": [0, 3]}, "nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16", 1)


def test_vllm_keeps_the_omni_ssm_state_in_the_model_dtype_where_nemotron_h_keeps_float32() -> None:
    """At tp 1 and --mamba-ssm-cache-dtype auto, NemotronHForCausalLM's config hook sets the SSM cache dtype to the
    text config's float32 (model_executor/models/config.py:812-832): each Mamba2 state is a (3, 6,144) bf16 conv and
    64 x 64 x 128 float32 values, 36,864 + 2,097,152 = 2,134,016 B, in a 2,096-token block. The Omni architecture has
    no hook, so the same text config keeps bf16 values: 36,864 + 1,048,576 = 1,085,440 B in a 1,072-token block. With
    --mamba-cache-dtype float32 both keep float32 states and plan alike."""
    omni, nano = planner.plan(point()), planner.plan(point(NANO))
    assert {(tuple(f["shape"]), f["dtype"]) for f in omni.documents[1]["fields"]} == {
        ((3, 6144), "bfloat16"), ((64, 64, 128), "bfloat16"), ((1072, 512), "bfloat16")}
    assert {(tuple(f["shape"]), f["dtype"]) for f in nano.documents[1]["fields"]} == {
        ((3, 6144), "bfloat16"), ((64, 64, 128), "float32"), ((2096, 512), "bfloat16")}
    assert (omni.block_size, omni.mamba_padded, nano.block_size, nano.mamba_padded) == (1072, 1_097_728, 2096,
                                                                                      2_146_304)
    wide = planner.plan(point(mamba="float32")), planner.plan(point(NANO, mamba="float32"))
    assert wide[0].block_size == wide[1].block_size == 2128


def test_the_layers_their_names_and_the_domain() -> None:
    """Nemotron-H's Mamba2 mixers and attention layers (each an attention mixer's Attention) under `language_model.`;
    tp every divisor of the 2 KV heads' replicas up to the 8 Mamba2 groups, no pipeline stages (the class is not
    SupportsPP): 4 tp x 2 kv dtypes x 2 state dtypes x prefix off / on x 4 token counts."""
    names = catalog._nemotron_omni_layers(SimpleNamespace(hybrid_override_pattern="M-M*E"))
    assert names == [("language_model.backbone.layers.0.mixer", "state"),
                     ("language_model.backbone.layers.2.mixer", "state"),
                     ("language_model.backbone.layers.3.mixer.attn", "attention")]
    points = engine.points(OMNI)
    assert {(p["tp"], p["pp"]) for p in points} == {(tp, 1) for tp in (1, 2, 4, 8)}
    assert len(points) == 4 * 2 * 2 * 2 * 4 == 128


BOOKKEEPING = config_defaults.BOOKKEEPING | {"dtype", "torch_dtype"}
STRINGS = {"mamba_hidden_act": "relu", "mlp_hidden_act": "silu"}  # another value for each string key
# a key the class requires equal to its vision config's, which the class's own validator refuses otherwise
COUPLED = frozenset({"video_temporal_patch_size"})


@pytest.mark.parametrize("where", ["top", "text_config"])
def test_no_default_of_transformers_config_class_moves_a_plan(where: str) -> None:
    """vLLM reads the file through transformers' NemotronH_Omni_Reasoning_V3_Config and its NemotronHConfig, which
    answer every key the member lacks with a class default: every such key is set to another value at once (those None
    by default or a list or mapping left as they are), and a tensor-parallel, prefix-caching, speculating point plans
    exactly as before."""
    from transformers import NemotronH_Omni_Reasoning_V3_Config

    moved = config_defaults.moved(NemotronH_Omni_Reasoning_V3_Config().to_dict(), MEMBER.config(), where,
                                  BOOKKEEPING | COUPLED, STRINGS)
    assert {"top": "projector_hidden_size", "text_config": "text_config.num_nextn_predict_layers"}[where] in moved
    other = replace(OMNI, member=Member(nemotron_omni.FAMILY, MEMBER.index, {**MEMBER.values, **moved}))
    base = planner.plan(point(tp=2, spec=3, prefix=True))
    again = planner.plan(point(other, tp=2, spec=3, prefix=True))
    assert (again.block_size, again.documents) == (base.block_size, base.documents)


@pytest.mark.parametrize(("fault", "killed_by"), [("lmcache_walks_by_payload", "consumer_stride"),
                                                  ("vllm_state_slab_by_payload", "no_overlap"),
                                                  ("vllm_spec_padding_unwidened", "boots")])
def test_the_members_checks_kill_the_seeded_bugs_that_reach_its_padded_state_pages(fault: str, killed_by: str) -> None:
    """Its state pages are padded (0.21 at tp 1), so a consumer walking them by payload, a slab sized by payload and
    a class leaving the speculative rows out of the padding each fail a check here: the member is no vacuous pass."""
    from kvproof.impl import faults

    with faults.inject(fault):
        (result,) = engine.run([NAME], {**AT_TP1, "spec": [0, 3]}, workers=1).recipes
    assert killed_by in {f.property for p in result.points for f in p.findings}
