"""MiniCPM-V 4.6 (MiniCPMV4_6ForConditionalGeneration) over a stated family, for want of a config.json vLLM can
plan as published.

One whole copy of openbmb/MiniCPM-V-4.6's config.json was found: moderately-ai/lmbrrr
@f04df6ddd900d4fcc80539e5c7a23169f3c0b85b docs/research/models/minicpm-v-4.6/hf-model/config.json (2,378 bytes,
git blob dbe7f74b10746936eb2637ba14f5bf5515b5721c, sha256 72d83ac9...97991c), a snapshot of the hub checkpoint
whose api-model.json beside it names the revision 8169864629825dc1d755a5aa1cd8b5935dcbc83f. It is not
hash-checked against the hub, and it names no dtype: vLLM would read the weights' dtype from the safetensors
then (transformers_utils/model_arch_config_convertor.py:210-237), which a folder holding config.json alone
lacks. The same snapshot's api-model.json gives that dtype: `safetensors.parameters` {"BF16": 1300428016},
every parameter bfloat16. So what `verify engine vllm` plans is a family (engines/families.py) of one member:
the copy's values that vLLM's planning reads, cited below, and the dtype the hub's metadata gives.

What vLLM reads of this class to plan (vllm/model_executor/models/minicpmv4_6.py, 0.33.0): the language model
is Qwen3_5ForCausalLM built from text_config (:1246-1258, under `language_model`), so the layers are Qwen3.5's
(catalog._qwen3_5_layers): text_config.layer_types picks each decoder layer's kind (qwen3_5.py:259), a GDN
layer's QwenGatedDeltaNetAttention at `language_model.model.layers.i.linear_attn`, an attention layer's at
`language_model.model.layers.i.self_attn.attn`; the attention page from num_attention_heads,
num_key_value_heads and head_dim; each GDN layer's state from the linear_* keys, the tp and its own speculative
tokens (catalog._gdn_layer_state), and the state the hybrid alignment pads by from the class's own
get_mamba_state_shape_from_config (:1530-1547, the same keys), both in gated_delta_net_state_dtype of the model
dtype and the two --mamba-*-cache-dtype flags (:1522-1527; gdn/base.py:53-58); num_hidden_layers splits the
pipeline stages (qwen3_5.py:264); max_position_embeddings and rope_parameters set max_model_len.

The class has no entry in MODELS_CONFIG_MAP (model_executor/models/config.py:1211-1269, whose Qwen3.5 entries,
:1259-1262, apply text_config.mamba_ssm_dtype, :953-977); the generic hybrid hook that runs for it
(HybridAttentionMambaModelConfig, :585-599) sets no SSM dtype. So text_config.mamba_ssm_dtype (float32) is read
by no planning code: at --mamba-ssm-cache-dtype auto the temporal state is kept in the model dtype, where
Qwen3.5's classes keep it in float32. It is cited all the same, as is mtp_num_hidden_layers, which no planning
code of this class reads either.

Speculation: the class drops the checkpoint's MTP weights (`"mtp.": None`, :1178), and SpeculativeConfig
rewrites only Qwen3.5's own model types to its MTP draft (config/speculative.py:987-1005), so method `mtp`
raises NotImplementedError at minicpmv4_6 (:1498-1501). EAGLE3 (SupportsEagle3, :1157) drafts with a separate
checkpoint, not modelled; ngram keeps no page (catalog.FAMILY_LIMITS), planned up to 3 tokens.

Strictness, as for the other families: a member's config.json is exactly the cited keys, and
tests/test_vllm_minicpm_v46.py changes every key transformers' MiniCPMV4_6Config and its Qwen3_5TextConfig
answer for a member that lacks it at once and shows a drafted, tensor-parallel, prefix-caching point plans
exactly as before.
"""

from __future__ import annotations

from kvproof.engines.families import Cited, Family, Member

COPY = ("the MiniCPM-V-4.6 config a public snapshot holds "
        "(moderately-ai/lmbrrr@f04df6ddd900d4fcc80539e5c7a23169f3c0b85b "
        "docs/research/models/minicpm-v-4.6/hf-model/config.json, git blob dbe7f74b10746936eb2637ba14f5bf5515b5721c)")
METADATA = ("the same snapshot's api-model.json (the hub's model metadata of openbmb/MiniCPM-V-4.6 at revision "
            "8169864629825dc1d755a5aa1cd8b5935dcbc83f): safetensors parameters {\"BF16\": 1300428016}, every one "
            "bfloat16, the dtype vLLM's `auto` reads from the weights of a config that names none")
LAYERS = 24
# Its text_config.layer_types: three linear_attention layers, then one full_attention, six times (full at 3, ..., 23).
PATTERN = (["linear_attention"] * 3 + ["full_attention"]) * (LAYERS // 4)
T = "text_config."

FAMILY = Family(
    name="minicpm-v-4.6",
    not_a_verdict_on="openbmb/MiniCPM-V-4.6",
    cited=(
        Cited("architectures", ["MiniCPMV4_6ForConditionalGeneration"],
              f"vLLM's registry name for the class (vllm/model_executor/models/registry.py:533-536); {COPY}"),
        Cited("model_type", "minicpmv4_6", f"transformers' MiniCPMV4_6Config.model_type; {COPY}"),
        Cited("dtype", "bfloat16", METADATA),
        Cited(T + "model_type", "qwen3_5_text", f"{COPY} (text_config.model_type qwen3_5_text)"),
        Cited(T + "num_hidden_layers", LAYERS, f"{COPY} (text_config.num_hidden_layers 24)"),
        Cited(T + "layer_types", PATTERN, f"{COPY} (text_config.layer_types, 24 entries, full_attention at 3, 7, ..., "
              "23)"),
        Cited(T + "num_attention_heads", 8, f"{COPY} (text_config.num_attention_heads 8)"),
        Cited(T + "num_key_value_heads", 2, f"{COPY} (text_config.num_key_value_heads 2)"),
        Cited(T + "head_dim", 256, f"{COPY} (text_config.head_dim 256)"),
        Cited(T + "linear_num_key_heads", 16, f"{COPY} (text_config.linear_num_key_heads 16)"),
        Cited(T + "linear_num_value_heads", 16, f"{COPY} (text_config.linear_num_value_heads 16)"),
        Cited(T + "linear_key_head_dim", 128, f"{COPY} (text_config.linear_key_head_dim 128)"),
        Cited(T + "linear_value_head_dim", 128, f"{COPY} (text_config.linear_value_head_dim 128)"),
        Cited(T + "linear_conv_kernel_dim", 4, f"{COPY} (text_config.linear_conv_kernel_dim 4)"),
        Cited(T + "mamba_ssm_dtype", "float32", f"{COPY} (text_config.mamba_ssm_dtype float32; no planning code of "
              "this class reads it)"),
        Cited(T + "max_position_embeddings", 262144, f"{COPY} (text_config.max_position_embeddings 262144)"),
        Cited(T + "rope_parameters", {"partial_rotary_factor": 0.25, "rope_theta": 10000000, "rope_type": "default"},
              f"{COPY} (text_config.rope_parameters: the default rope, no scaling factor on max_model_len)"),
        Cited(T + "mtp_num_hidden_layers", 1, f"{COPY} (text_config.mtp_num_hidden_layers 1; no planning code of "
              "this class reads it: the class drops the MTP weights, minicpmv4_6.py:1178)"),
    ),
    axes=(),
    cap=1,
)

MEMBERS: tuple[Member, ...] = tuple(FAMILY.members())
