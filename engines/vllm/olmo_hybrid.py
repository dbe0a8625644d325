"""OLMo Hybrid (OlmoHybridForCausalLM) over a stated family, for want of a published config.json.

No copy of allenai/Olmo-Hybrid-7B's config.json tied to a hub revision was found. One whole config
of the model is held by a public repository's example (uw-syfi/vibesys
@a22af55ec47837fb379e450c86d6ffb750767820, examples/model-serving/olmo-hybrid-prefix-caching/
reference/config.json, git blob aeb36a51638312196bfb066b94da7ef70d6c8f77, 1,575 bytes, sha256
28e5d43e...727b0; its README calls it the allenai/Olmo-Hybrid-7B config). Its key order is OLMo-core's
converter's and its transformers_version, 4.52.0, predates transformers' OlmoHybridConfig, so it is
likely a converter's output, not the hub's bytes; it names no dtype. What `verify engine vllm` plans
for this model class is therefore a family (engines/families.py): that copy's values, cited below,
and an axis for the one key vLLM's planning reads that it does not give, the model dtype.

What vLLM reads of this class to plan (vllm/model_executor/models/olmo_hybrid.py, 0.33.0): the layer
kinds from layer_types (:232: "linear_attention" an OlmoHybridGatedDeltaNetAttention at
`model.layers.i.linear_attn`, :235-240, any other full attention, :249-253), the attention page from
num_attention_heads, num_key_value_heads and hidden_size (head_dim = hidden_size // heads, :103;
ModelConfig.get_head_size, which reads no head_dim this config lacks), the state from
get_mamba_state_shape_from_config (:452-472: linear_num_key_heads, linear_num_value_heads,
linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim and the speculative tokens) and
get_mamba_state_dtype_from_config (the model dtype, :441-450); the GDN layer keeps the same shape of
the same keys (olmo_gdn_linear_attn.py:59-70, :83-87, its num_spec gdn/base.py:43-47) and plans with
MambaBase's get_kv_cache_spec (it exports no prefill checkpoints, abstract.py:65-70).
max_position_embeddings (and rope_parameters, whose scaling factor would scale it) set max_model_len,
the state's block without prefix caching (model_executor/models/config.py:787).

Strictness, as for the Mamba2 families (falcon_h1.py): a member's config.json is exactly the cited
and varied keys, and tests/test_vllm_olmo_hybrid.py changes every model key a member lacks at once and
shows a drafted, tensor-parallel, prefix-caching point plans exactly as before.
"""

from __future__ import annotations

from typing import Any

from kvproof.engines.families import Cited, Family, Member
from kvproof.engines.vllm.parts import model_dtype

COPY = ("the Olmo-Hybrid-7B config a public example holds (uw-syfi/vibesys@a22af55ec47837fb379e450c86d6ffb750767820 "
        "examples/model-serving/olmo-hybrid-prefix-caching/reference/config.json, git blob "
        "aeb36a51638312196bfb066b94da7ef70d6c8f77)")
LAYERS = 32
# Its layer_types: three linear_attention layers, then one full_attention, eight times (full at 3, 7, ..., 31).
PATTERN = (["linear_attention"] * 3 + ["full_attention"]) * (LAYERS // 4)

FAMILY = Family(
    name="olmo-hybrid-7b",
    not_a_verdict_on="allenai/Olmo-Hybrid-7B",
    cited=(
        Cited("architectures", ["OlmoHybridForCausalLM"],
              f"vLLM's registry name for the class (vllm/model_executor/models/registry.py:189); {COPY}"),
        Cited("model_type", "olmo_hybrid", f"transformers' OlmoHybridConfig.model_type; {COPY}"),
        Cited("num_hidden_layers", LAYERS, f"{COPY} (num_hidden_layers 32)"),
        Cited("layer_types", PATTERN, f"{COPY} (layer_types, 32 entries, full_attention at 3, 7, ..., 31)"),
        Cited("hidden_size", 3840, f"{COPY} (hidden_size 3840)"),
        Cited("num_attention_heads", 30, f"{COPY} (num_attention_heads 30)"),
        Cited("num_key_value_heads", 30, f"{COPY} (num_key_value_heads 30)"),
        Cited("linear_num_key_heads", 30, f"{COPY} (linear_num_key_heads 30)"),
        Cited("linear_num_value_heads", 30, f"{COPY} (linear_num_value_heads 30)"),
        Cited("linear_key_head_dim", 96, f"{COPY} (linear_key_head_dim 96)"),
        Cited("linear_value_head_dim", 192, f"{COPY} (linear_value_head_dim 192)"),
        Cited("linear_conv_kernel_dim", 4, f"{COPY} (linear_conv_kernel_dim 4)"),
        Cited("max_position_embeddings", 65536, f"{COPY} (max_position_embeddings 65536)"),
        Cited("rope_parameters", None, f"{COPY} (rope_parameters null: no scaling factor on max_model_len)"),
    ),
    axes=(
        model_dtype("the copy names no dtype", "the attention page's", "the states'"),
    ),
    cap=2,
)

MEMBERS: tuple[Member, ...] = tuple(FAMILY.members())


def layers(hf: Any) -> list[tuple[str, str]]:
    """OlmoHybridModel builds a decoder layer per layer_types entry (olmo_hybrid.py:232): a linear layer's
    OlmoHybridGatedDeltaNetAttention at `model.layers.i.linear_attn` (:236-240), an attention layer's
    Attention at `model.layers.i.self_attn.attn` (:250-253, :138)."""
    return [(f"model.layers.{i}.linear_attn", "state") if t == "linear_attention"
            else (f"model.layers.{i}.self_attn.attn", "attention") for i, t in enumerate(hf.layer_types)]

