"""Granite-4.0-H (GraniteMoeHybridForCausalLM) over a stated family, for want of a published config.json.

No copy of ibm-granite/granite-4.0-h-tiny's config.json was found whole, so what `verify engine
vllm` plans for this model class is a family (engines/families.py): the values the Ollama
library's GGUF of the checkpoint states, cited below, and an axis for every other key vLLM's planning
reads of this class. The values are the GGUF's metadata, llama.cpp's names for config.json's keys:
block_count (num_hidden_layers), embedding_length (hidden_size), attention.head_count,
ssm.conv_kernel (mamba_d_conv), ssm.group_count (mamba_n_groups), ssm.state_size (mamba_d_state),
ssm.time_step_rank (the Mamba-2 heads, mamba_n_heads) and ssm.inner_size (mamba_expand x
hidden_size); two public code copies of the config's Mamba fields agree.

What vLLM reads of this class to plan (vllm/model_executor/models/granitemoehybrid.py, 0.33.0):
the layer kinds from layer_types (:350, "full_attention" / "linear_attention" once transformers'
GraniteMoeHybridConfig has mapped a checkpoint's "attention" / "mamba"), the attention page from
num_attention_heads, num_key_value_heads and hidden_size (head_dim = hidden_size // heads, :240;
ModelConfig.get_head_size), the state from get_mamba_state_shape_from_config (:617-645: mamba_expand,
hidden_size, mamba_n_groups, mamba_n_heads, mamba_d_head, mamba_d_state, mamba_d_conv, and from
0.32.0 the speculative tokens) and get_mamba_state_dtype_from_config (the model dtype, :606).

Strictness. vLLM reads config.json through transformers' config class, which answers every key
a file lacks with its class default, and vLLM reads the whole config object (it copies and hashes
it), so a read of another key cannot be made to raise as the tokenspeed adapter's configs do. What
kvproof holds instead: a member's config.json is exactly the cited and varied keys below, and
tests/test_engine_vllm_granite.py changes every model key a member lacks at once (all but
pad_token_id, rope_parameters and time_step_limit, None or structured) and shows a drafted,
tensor-parallel, prefix-caching point plans exactly as before: no class default moves a page.
"""

from __future__ import annotations

from typing import Any

from kvproof.engines.families import Axis, Cited, Family, Member

GGUF = ("the Ollama library's GGUF of Granite-4.0-H-Tiny, its metadata: "
        "https://ollama.com/library/granite4:tiny-h/blobs/9811e90b0eec")
AGREES = ("agree: two public code copies of the checkpoint's Mamba fields (a model-size estimator's test quoting "
          "granite-4.0-h-tiny's real field values, a Mamba analysis script's 'Configuration from our config.json')")
LAYERS = 40
HEADS = 12

# The layer kinds as a checkpoint writes them (transformers' GraniteMoeHybridConfig maps "mamba" to
# "linear_attention" and "attention" to "full_attention", the names vLLM reads).
def _pattern(period: int) -> list[str]:
    return ["attention" if i % period == period - 1 else "mamba" for i in range(LAYERS)]


FAMILY = Family(
    name="granite-4.0-h-tiny",
    not_a_verdict_on="ibm-granite/granite-4.0-h-tiny",
    cited=(
        Cited("architectures", ["GraniteMoeHybridForCausalLM"],
              "vLLM's registry name for the class (vllm/model_executor/models/registry.py:133); "
              f"{GGUF} (general.architecture granitehybrid)"),
        Cited("model_type", "granitemoehybrid", "transformers' GraniteMoeHybridConfig.model_type"),
        Cited("num_hidden_layers", LAYERS, f"{GGUF} (block_count 40)"),
        Cited("hidden_size", 1536, f"{GGUF} (embedding_length 1536); {AGREES}"),
        Cited("num_attention_heads", HEADS, f"{GGUF} (attention.head_count 12; rope.dimension_count 128 = "
              "1536 / 12)"),
        Cited("mamba_d_conv", 4, f"{GGUF} (ssm.conv_kernel 4); {AGREES}"),
        Cited("mamba_n_groups", 1, f"{GGUF} (ssm.group_count 1); {AGREES}"),
        Cited("mamba_d_state", 128, f"{GGUF} (ssm.state_size 128); {AGREES}"),
        Cited("mamba_n_heads", 48, f"{GGUF} (ssm.time_step_rank 48); {AGREES}"),
        Cited("mamba_expand", 2, f"{GGUF} (ssm.inner_size 3072 = 2 x embedding_length 1536); {AGREES}"),
        Cited("mamba_d_head", 64, f"{GGUF} (ssm.inner_size 3072 / 48 heads); {AGREES}"),
    ),
    axes=(
        Axis("num_key_value_heads", (1, 2, 3, 4, 6, 12),
             "every KV head count vLLM's attention takes with 12 query heads: each group of query heads "
             "shares one (assert num_heads % num_kv_heads == 0, vllm/model_executor/layers/attention/"
             "attention.py:329), so the divisors of 12; 12 is plain multi-head attention"),
        Axis("layer_types", (_pattern(10), _pattern(40)),
             "where the attention layers sit is published nowhere found: one attention layer in every 10 (a stage "
             "of an 8-deep pipeline, 5 layers, may hold none) and a single one, the least vLLM plans as a hybrid "
             "(a plan with no attention layer has no block to align); only which pipeline stage holds one changes "
             "with the pattern, not a page"),
        Axis("dtype", ("bfloat16", "float16"),
             "the model dtype (the attention page at --kv-cache-dtype auto, the Mamba states at "
             "--mamba-cache-dtype auto): vLLM's `auto` keeps a 16-bit checkpoint dtype and downcasts a "
             "float32 one to a 16-bit dtype (vllm/config/model.py:2440-2441), so these two are all it plans"),
    ),
    cap=8,
)

MEMBERS: tuple[Member, ...] = tuple(FAMILY.members())

def layers(hf: Any) -> list[tuple[str, str]]:
    """GraniteMoeHybridModel builds a decoder layer per layer_types entry (granitemoehybrid.py:350): an
    attention layer's Attention at `model.layers.i.self_attn.attn` (:163, :293), a Mamba layer's
    MambaMixer2 at `model.layers.i.mixer` (:87)."""
    return [(f"model.layers.{i}.self_attn.attn", "attention") if t == "full_attention"
            else (f"model.layers.{i}.mixer", "state") for i, t in enumerate(hf.layer_types)]
