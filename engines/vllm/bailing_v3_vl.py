"""Bailing V3 VL (BailingMoeV3VLForConditionalGeneration: Ling-3.0-flash-VL) over a stated family, for want of a
published config.json.

No whole config.json of inclusionAI/Ling-3.0-flash-VL was found. inclusionAI's own fork of vLLM for Ling 3.0 tests the
config class vLLM reads the model through with one as a fixture (inclusionAI/vllm-ling-v3
@4e709a63e4dde7c57e206680c9397297a147cca8 tests/transformers_utils/test_bailing_moe_v3_vl_config.py,
`_bailing_v3_vl_config`): it names no checkpoint, and its assertions pin the layer pattern (35 KDA layers, MLA at 5,
11, ..., 41), kv_lora_rank and no_kda_lora (vLLM's own copy of the test, vllm-project/vllm@688237d3, keeps only the
layer count, group size and rope_theta of it). Its text
values are Ling-3.0-flash's, whose own family (bailing_v3.FLASH_FAMILY) cites them from other sources: 42 layers in
groups of 6, 32 heads and KV heads, head_dim 128, hidden size 2,560, kv_lora_rank 512, full-rank KDA gates; and
SGLang's cookbook for the VL model says "Its language backbone is the Ling-3.0-flash hybrid-attention
Mixture-of-Experts (MoE) model: 42 layers that interleave Kimi Delta Attention (KDA) linear-attention layers with gated
Multi-head Latent Attention (MLA) full-attention layers" and gives it a 128K context. What
`verify engine vllm` plans is therefore a family (engines/families.py) of two members: the fixture's values vLLM's
planning reads, the two it lacks (qk_rope_head_dim, short_conv_kernel_size) from the Ling-3.0-flash family's
citations, which vLLM's class defaults equal, and the MTP layer count an axis (below).

What vLLM 0.33.0 reads of this class to plan (vllm/model_executor/models/bailing_moe_v3_vl.py):

- architectures and model_type: the registry's BailingMoeV3VLForConditionalGeneration (registry.py:361) and
  "bailing_moe_v3_vl", which vLLM reads through its own BailingMoeV3VLConfig (transformers_utils/config.py:125) with
  no remote code, its text_config through BailingMoeV3TextConfig (model_type bailing_hybrid), which keeps the
  file's head_dim (transformers_utils/configs/bailing_moe_v3_vl.py:170) where transformers' BailingHybridConfig, which
  the text-only class is read through, sets it to qk_rope_head_dim;
- the language model is BailingMoeV3ForCausalLM built under the text config (`with_hf_config`, :371-374) at the
  prefix `language_model` (maybe_prefix of the loader's empty prefix: the model runner calls load_model with none,
  v1/worker/gpu_model_runner.py:4996-4999, whose default "" it hands to create_model,
  model_loader/base_loader.py:64, :76-80), so its layers
  are the text class's (bailing_v3.layers) under `language_model.`, and the state shape and dtype the hybrid
  alignment pads by are the text class's of the text config (:321-337);
- text_config.num_hidden_layers, layer_group_size, kv_lora_rank, qk_rope_head_dim, num_attention_heads, head_dim,
  short_conv_kernel_size, no_kda_lora and max_position_embeddings, read as bailing_v3 says for the text class;
- torch_dtype: the MLA page's dtype at --kv-cache-dtype auto and the KDA states' at --mamba-cache-dtype auto.

Speculation: vLLM gives the class the text class's MTP draft, BailingMoeV3MTPModel built from a copy of the text
config (config/speculative.py:938-970), num_nextn_predict_layers MLA layers after the hidden ones (bailing_v3's
draft_layers); the fixture names no count, so it is an axis: 0, the default of vLLM's class the fixture leaves it to,
where the member speculates by ngram, and 1, Ling-3.0-flash's. Up to 3 tokens either way.

Strictness, as for the other families: a member's config.json is exactly the cited and varied keys, and
tests/test_vllm_bailing_v3_vl.py changes every key vLLM's BailingMoeV3VLConfig and its text and vision configs answer
for a member that lacks it at once (those None by default or a list or mapping left as they are) and shows a
tensor-parallel, prefix-caching, speculating point plans exactly as before.
"""

from __future__ import annotations

from typing import Any

from kvproof.engines.families import Axis, Cited, Family, Member
from kvproof.engines.vllm import bailing_v3
from kvproof.engines.vllm.bailing_v3 import FORK_TEST

SGLANG_VL = ("SGLang's cookbook for the model (https://docs.sglang.io/cookbook/autoregressive/InclusionAI/"
             "Ling-3.0-flash-VL: \"Its language backbone is the Ling-3.0-flash hybrid-attention Mixture-of-Experts "
             "(MoE) model: 42 layers that interleave Kimi Delta Attention (KDA) linear-attention layers with gated "
             "Multi-head Latent Attention (MLA) full-attention layers\")")
MTP_LAYERS = "text_config.num_nextn_predict_layers"
FLASH = (f"as the Ling-3.0-flash family cites it (engines/vllm/bailing_v3.py, FLASH_FAMILY), Ling-3.0-flash being the "
         f"model's language backbone by {SGLANG_VL}")
T = "text_config."


FAMILY = Family(
    name="ling-3.0-flash-vl",
    not_a_verdict_on="inclusionAI/Ling-3.0-flash-VL",
    cited=(
        Cited("architectures", ["BailingMoeV3VLForConditionalGeneration"],
              f"vLLM's registry name for the class (vllm/model_executor/models/registry.py:361); {FORK_TEST}"),
        Cited("model_type", "bailing_moe_v3_vl", f"{FORK_TEST}; the model type vLLM registers its own config class "
              "for (vllm/transformers_utils/config.py:125)"),
        Cited("torch_dtype", "bfloat16", FORK_TEST),
        Cited(T + "num_hidden_layers", 42, f"{FORK_TEST}, {FLASH}"),
        Cited(T + "layer_group_size", 6, f"{FORK_TEST} (its assertions: MLA at layers 5, 11, 17, 23, 29, 35, 41, 35 "
              f"KDA layers), {FLASH}"),
        Cited(T + "hidden_size", 2560, f"{FORK_TEST}, {FLASH}"),
        Cited(T + "num_attention_heads", 32, f"{FORK_TEST}, {FLASH}"),
        Cited(T + "num_key_value_heads", 32, f"{FORK_TEST}, {FLASH}"),
        Cited(T + "head_dim", 128, f"{FORK_TEST}, {FLASH}"),
        Cited(T + "kv_lora_rank", 512, f"{FORK_TEST} (asserted), {FLASH}"),
        Cited(T + "no_kda_lora", True, f"{FORK_TEST} (asserted); vLLM's KDA layer refuses any other value "
              "(bailing_moe_v3.py:686-687)"),
        Cited(T + "max_position_embeddings", 131072, f"{FORK_TEST}; SGLang's cookbook for the model gives it \"128K "
              "context\" (https://docs.sglang.io/cookbook/autoregressive/InclusionAI/Ling-3.0-flash-VL.md)"),
        Cited(T + "qk_rope_head_dim", 64,
              f"{FLASH}: {bailing_v3.FLASH_FAMILY.carried('qk_rope_head_dim').source}; the default of vLLM's "
              "BailingMoeV3TextConfig (transformers_utils/configs/bailing_moe_v3_vl.py:107), which the fixture "
              "leaves it to"),
        Cited(T + "short_conv_kernel_size", 4,
              f"{FLASH}: {bailing_v3.FLASH_FAMILY.carried('short_conv_kernel_size').source}; the default of vLLM's "
              "BailingMoeV3TextConfig (transformers_utils/configs/bailing_moe_v3_vl.py:120), which the fixture "
              "leaves it to"),
    ),
    axes=(
        Axis(MTP_LAYERS, (0, 1),
             f"0, the default of vLLM's BailingMoeV3TextConfig (transformers_utils/configs/bailing_moe_v3_vl.py:98), "
             f"which {FORK_TEST} leaves it to; 1, {FLASH}: "
             f"{bailing_v3.FLASH_FAMILY.carried('num_nextn_predict_layers').source}"),
    ),
    cap=2,
)

MEMBERS: tuple[Member, ...] = tuple(FAMILY.members())


def layers(hf: Any) -> list[tuple[str, str]]:
    """The text class's layers (bailing_v3.layers) under the language model's prefix `language_model`
    (bailing_moe_v3_vl.py:371-374)."""
    return [(f"language_model.{name}", kind) for name, kind in bailing_v3.layers(hf)]


draft_layers = bailing_v3.draft_layers  # the MTP draft's, of the text config the speculative config copies


def kda_state(vllm_config: Any) -> dict[str, Any]:
    """What each KDA layer's constructor keeps, as bailing_v3.kda_state reads it: the class builds its language model
    under `vllm_config.with_hf_config(text_config)` (bailing_moe_v3_vl.py:371-374), whose config the layers read."""
    return bailing_v3.kda_state(vllm_config.with_hf_config(vllm_config.model_config.hf_config.text_config))
