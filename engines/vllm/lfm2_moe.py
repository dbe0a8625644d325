"""LFM2-MoE (Lfm2MoeForCausalLM) over a stated family, for want of a published config.json.

No whole config.json of LiquidAI/LFM2.5-8B-A1B or LiquidAI/LFM2-8B-A1B was found, so what `verify engine
vllm` plans for this model class is a family (engines/families.py) of one member: the values the public
sources state, cited below. The sources:

- rcarmo/go-pherence@d292b80669cbb93974e91338a8c9bf11c0eb9a69 docs/models/lfm2-moe-support.md, its LFM2.5-8B-A1B
  support roadmap (its "Checkpoint summary" and layer pattern), which reviews the hub checkpoint
  LiquidAI/LFM2.5-8B-A1B at revision 5dd22602c2e9f6a097b1de4c4efe0658b605015c, config.json sha256
  9c0255c2d5c744c99b760a12edca2572935348dae340e79e2e6625af975d2d68 (an earlier version of the note,
  @d3adbd4 docs/lfm2-moe-support.md, gives the same values from the hub file read 2026-05-28, no revision named);
- tuly1/sn56-forge@b4abad14e0f77cb43df8d986569a2c84cb217ade ops/2026-pool-route-matrix.json, which records
  the same sha256 for the same revision (model_type lfm2_moe, Lfm2MoeForCausalLM; no other value): the
  roadmap's values are of that one file;
- the config.json onnx-community/LFM2-8B-A1B-ONNX publishes for LFM2-8B-A1B, as its hub page shows it up to
  num_key_value_heads (the rest cut off): the same value for every key both give, the layer pattern
  included.

The two checkpoints differ where the planning does not read: LFM2.5's roadmap gives vocab_size 128,000,
LFM2-8B-A1B's model card a vocabulary of 65,536 (the ONNX page's config is cut off before vocab_size). So
the one member's pages stand for both geometries, and its points are a verdict on neither checkpoint.

What vLLM reads of this class to plan (vllm/model_executor/models/lfm2_moe.py, 0.33.0), through
transformers' Lfm2MoeConfig (imported at :8; transformers/models/lfm2_moe/configuration_lfm2_moe.py:24, whose
layer_types defaults to None, :83, and must have num_hidden_layers entries, configuration_utils.py:694-706):
layer_types picks each decoder layer's kind (:433); an attention layer's page from num_attention_heads and
num_key_value_heads (:287-288) with the head hidden_size / num_attention_heads (:205, as
ModelConfig.get_head_size derives it for a config without head_dim,
vllm/transformers_utils/model_arch_config_convertor.py:106-118); each ShortConv layer's state from the width
its decoder layer hands it, hidden_size (:345, short_conv.py:53), conv_L_cache (short_conv.py:54) and its
own speculative tokens (get_state_shape, short_conv.py:351-357), in the model dtype (short_conv_state_dtype,
:536-543). The class-level shape the hybrid alignment pads by (get_mamba_state_shape_from_config, :545-567)
passes no num_spec, as LFM2-350M's does (lfm2.py:556-578). num_hidden_layers splits the pipeline stages
(make_layers, :449-451), the dtype is the model dtype at `auto`, and max_position_embeddings is the
max_model_len vLLM derives (a request of it fits the memory kvproof plans with, so it moves no page).

Strictness, as for Falcon-H1 (falcon_h1.py): a member's config.json is exactly the cited keys, and
tests/test_vllm_lfm2_moe_family.py changes every key transformers' Lfm2MoeConfig answers for a member that
lacks it at once and shows a drafted, tensor-parallel, prefix-caching point plans exactly as before.
"""

from __future__ import annotations

from typing import Any

from kvproof.engines.families import Cited, Family, Member

ROADMAP = ("rcarmo/go-pherence@d292b80 docs/models/lfm2-moe-support.md, its checkpoint summary of "
           "LiquidAI/LFM2.5-8B-A1B@5dd22602c2e9f6a097b1de4c4efe0658b605015c (config.json sha256 9c0255c2d5c744c9..., "
           "the hash tuly1/sn56-forge@b4abad1 ops/2026-pool-route-matrix.json records for that revision)")
ONNX = ("onnx-community/LFM2-8B-A1B-ONNX's config.json for LFM2-8B-A1B (its hub page at main, "
        "huggingface.co/onnx-community/LFM2-8B-A1B-ONNX/blob/main/config.json, shown up to num_key_value_heads)")
BOTH = f"{ROADMAP}; {ONNX}"

# conv, conv, A, (conv, conv, conv, A) x 4, conv, conv, A, conv, conv: attention at 2, 6, 10, 14, 18, 21
LAYER_TYPES = ["conv", "conv", "full_attention",
               *(["conv", "conv", "conv", "full_attention"] * 4),
               "conv", "conv", "full_attention", "conv", "conv"]

FAMILY = Family(
    name="lfm2.5-8b-a1b",
    not_a_verdict_on="LiquidAI/LFM2.5-8B-A1B or LiquidAI/LFM2-8B-A1B",
    cited=(
        Cited("architectures", ["Lfm2MoeForCausalLM"],
              f"vLLM's registry name for the class (vllm/model_executor/models/registry.py:153); {BOTH}"),
        Cited("model_type", "lfm2_moe", f"transformers' Lfm2MoeConfig.model_type; {BOTH}"),
        Cited("num_hidden_layers", len(LAYER_TYPES), BOTH),
        Cited("hidden_size", 2048, BOTH),
        Cited("num_attention_heads", 32, BOTH),
        Cited("num_key_value_heads", 8, BOTH),
        Cited("layer_types", LAYER_TYPES, f"{BOTH} (attention at layers 2, 6, 10, 14, 18, 21)"),
        Cited("conv_L_cache", 3, BOTH),
        Cited("max_position_embeddings", 128000, BOTH),
        Cited("dtype", "bfloat16", BOTH),
    ),
    axes=(),
    cap=1,
)

MEMBERS: tuple[Member, ...] = tuple(FAMILY.members())


def layers(hf: Any) -> list[tuple[str, str]]:
    """Lfm2MoeModel builds each decoder layer by layer_types (lfm2_moe.py:431-451, under `model`, :579): an
    attention layer's Attention at `model.layers.i.self_attn.attn` (:292, :240), a conv layer's ShortConv at
    `model.layers.i.short_conv` (:350)."""
    return [(f"model.layers.{i}.self_attn.attn", "attention") if t == "full_attention"
            else (f"model.layers.{i}.short_conv", "state") for i, t in enumerate(hf.layer_types)]


def conv_width(hf: Any) -> int:
    """The width Lfm2MoeShortConvDecoderLayer hands its ShortConv (dim, lfm2_moe.py:345): hidden_size, where
    the dense class hands conv_dim (lfm2.py:356)."""
    return int(hf.hidden_size)
