"""LFM2-VL (Lfm2VlForConditionalGeneration) over a stated family, for want of a config.json vLLM reads as published.

One whole copy of LiquidAI/LFM2-VL-450M's config.json was found: varun00391/local-finetuned-model
@a913c33978b466ed686191eda666661a918ee9a3 `LiquidAI:LFM2-VL-450M/lfm2-450m/config.json` (2,506 bytes, git blob
7a69045a9328ed267bab2b375bd0f4cdb8ecf474, sha256 f034653a...d154e076), a snapshot of the hub repository beside its
`modeling_lfm2_vl.py` and weights. It is the checkpoint's first, remote-code revision (`auto_map` to
modeling_lfm2_vl, model_type `lfm2-vl`, transformers_version 4.55.0): transformers' own Lfm2VlConfig, which vLLM
0.33.0 reads it through, spells the model type `lfm2_vl`. No later revision was found, and it is not hash-checked
against the hub. So what `verify engine vllm` plans is a family (engines/families.py) of one member: the copy's
values vLLM's planning reads, cited below, with the model type in transformers' spelling. Its text_config names
LiquidAI/LFM2-350M (`_name_or_path`), and every value below equals LFM2-350M's published config.json, which the
catalog plans as `lfm2-350m` (engines/vllm/models/SOURCES.md): a second source for each.

What vLLM reads of this class to plan (vllm/model_executor/models/lfm2_vl.py, 0.33.0): the language model is
Lfm2ForCausalLM built from text_config (`init_vllm_registered_model`, :712-718) under the prefix `language`
(`maybe_prefix` of the loader's empty prefix: the model runner calls load_model with none,
gpu_model_runner.py:4996-4999, whose default "" it hands to create_model, model_loader/base_loader.py:64, :76-80), so
its layers are LFM2's: text_config.layer_types picks each decoder layer's kind (lfm2.py:435), an attention layer's page
from num_attention_heads and num_key_value_heads with the head hidden_size / num_attention_heads, each ShortConv layer's
state from conv_dim and conv_L_cache and its own speculative tokens (short_conv.py:351-357), in the model dtype at
`auto` (torch_dtype). The class's own get_mamba_state_shape_from_config, which the hybrid alignment pads by, passes
conv_L_cache and no num_spec, as Lfm2ForCausalLM's does, and hidden_size (:654-675) where Lfm2ForCausalLM's and the
ShortConv layers pass conv_dim (lfm2.py:575, :356): the two agree here, both 1,024 (the test plans it as LFM2-350M's).
num_hidden_layers splits the pipeline stages; max_position_embeddings is the max_model_len.

Speculation: the class has neither SupportsMTP nor SupportsEagle among its bases (:616-623): ngram only, up to 3
tokens as for LFM2's other classes.

Strictness, as for the other families: a member's config.json is exactly the cited keys, and
tests/test_vllm_lfm2_vl.py changes every key transformers' Lfm2VlConfig and its Lfm2Config answer for a member
that lacks it at once and shows a drafted, tensor-parallel, prefix-caching point plans exactly as before.
"""

from __future__ import annotations

from kvproof.engines.families import Cited, Family, Member

COPY = ("the LFM2-VL-450M config a public snapshot holds (varun00391/local-finetuned-model"
        "@a913c33978b466ed686191eda666661a918ee9a3 LiquidAI:LFM2-VL-450M/lfm2-450m/config.json, git blob "
        "7a69045a9328ed267bab2b375bd0f4cdb8ecf474)")
SIBLING = "as LiquidAI/LFM2-350M's published config.json gives it (engines/vllm/models/lfm2-350m.json)"
T = "text_config."
# Its text_config.layer_types: full_attention at 2, 5, 8, 10, 12, 14 (LFM2-350M's full_attn_idxs), conv elsewhere.
LAYER_TYPES = ["full_attention" if i in (2, 5, 8, 10, 12, 14) else "conv" for i in range(16)]

FAMILY = Family(
    name="lfm2-vl-450m",
    not_a_verdict_on="LiquidAI/LFM2-VL-450M",
    cited=(
        Cited("architectures", ["Lfm2VlForConditionalGeneration"],
              f"vLLM's registry name for the class (vllm/model_executor/models/registry.py:501); {COPY}"),
        Cited("model_type", "lfm2_vl", f"transformers' Lfm2VlConfig.model_type; {COPY} spells it `lfm2-vl`, the "
              "remote-code revision's name for the same config"),
        Cited("torch_dtype", "bfloat16", f"{COPY} (torch_dtype bfloat16)"),
        Cited(T + "architectures", ["Lfm2ForCausalLM"], f"{COPY} (text_config.architectures, which the class builds "
              "its language model from, lfm2_vl.py:717)"),
        Cited(T + "model_type", "lfm2", f"{COPY} (text_config.model_type lfm2)"),
        Cited(T + "num_hidden_layers", 16, f"{COPY} (text_config.num_hidden_layers 16), {SIBLING}"),
        Cited(T + "layer_types", LAYER_TYPES, f"{COPY} (text_config.layer_types, 16 entries, full_attention at 2, 5, "
              f"8, 10, 12, 14), {SIBLING} (full_attn_idxs)"),
        Cited(T + "hidden_size", 1024, f"{COPY} (text_config.hidden_size 1024), {SIBLING}"),
        Cited(T + "num_attention_heads", 16, f"{COPY} (text_config.num_attention_heads 16), {SIBLING}"),
        Cited(T + "num_key_value_heads", 8, f"{COPY} (text_config.num_key_value_heads 8), {SIBLING}"),
        Cited(T + "conv_dim", 1024, f"{COPY} (text_config.conv_dim 1024), {SIBLING}"),
        Cited(T + "conv_L_cache", 3, f"{COPY} (text_config.conv_L_cache 3), {SIBLING}"),
        Cited(T + "max_position_embeddings", 128000, f"{COPY} (text_config.max_position_embeddings 128000), "
              f"{SIBLING}"),
    ),
    axes=(),
    cap=1,
)

MEMBERS: tuple[Member, ...] = tuple(FAMILY.members())
