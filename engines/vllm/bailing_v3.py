"""Bailing V3 (BailingMoeV3ForCausalLM: Ling 3.0) over two stated families, for want of a published config.json.

No whole config.json of an inclusionAI Ling 3.0 checkpoint was found. One public test decodes the Ling-3.0-tiny
configuration as a JSON literal (figyaro/mlx-swift-lm@6b437f86c696cc533063d34a7eb415ab363ec9bf
Tests/MLXLMTests/BailingMoeV3Tests.swift, the test "decodes the Ling-3.0-tiny configuration"; its assertions pin the
model type, layer count, hidden size and layer kinds, the rest is in the literal only); it is a test's copy, not the
hub's bytes, and names no dtype and no MTP layer count. A MaxText model config of the same model gives the same
geometry (Garrybest/maxtext@0fb0b0930f7cfac19fa57047fbc836599a106689 src/maxtext/configs/models/ling3-tiny.yml),
SGLang's cookbook for it says the checkpoint declares no MTP layer (sgl-project/sglang pull request 34283), and
vLLM's own serving recipe for it names the official checkpoint's precision, BF16
(vllm-project/recipes@370c74d7fe209b8cdd02b289bf1f3d0120b479ca models/inclusionAI/Ling-3.0-tiny.yaml). What `verify
engine vllm` plans for Ling-3.0-tiny is therefore a family (engines/families.py) of one member: those values, each
cited below, with no MTP layer, as SGLang's cookbook for it quotes the checkpoint. Ling-3.0-flash, the class's
larger model, has a family of its own (FLASH_FAMILY): the defaults of transformers 5.20.2's BailingHybridConfig,
whose docstring names Ling-3.0-Flash, with public pull requests and vLLM's recipe for it behind its layer count,
pattern, KDA gates, MLA widths, MTP block and dtype, the text config of inclusionAI's own test fixture for its VL
model (whose language backbone it is) behind its heads, head_dim, hidden size and latent, and its context, which its
published config has held at two values, an axis: two members.

What vLLM 0.33.0 reads of this class to plan (vllm/model_executor/models/bailing_moe_v3.py):

- architectures and model_type: the registry's BailingMoeV3ForCausalLM (registry.py:82), and "bailing_hybrid",
  which vLLM has no config class of its own for (transformers_utils/config.py:125 registers only the VL
  model's), so it reads the file through transformers' BailingHybridConfig, and plans it as an MLA model
  (transformers_utils/model_arch_config_convertor.py:317);
- num_hidden_layers and layer_group_size: a layer is KDA unless it ends a group or lies past the last whole one
  (_is_kda_layer, :131-137; the decoder layer, :1243-1263), KDA at `model.layers.i.self_attn`, MLA under it at
  `.attn` (the MLA wrapper's prefix, model_executor/layers/mla.py:132);
- kv_lora_rank and qk_rope_head_dim: the MLA latent, one head of kv_lora_rank + qk_rope_head_dim;
- num_attention_heads, head_dim and short_conv_kernel_size: each KDA layer's state (get_state_shape, :651-660,
  of what its constructor keeps, :673-683: kda_state_shape of the tp, heads, head_dim and conv kernel and its
  speculative tokens), in the model dtype (get_state_dtype, :642-649); head_dim as the config class leaves it,
  which is qk_rope_head_dim, whatever the file's head_dim (below);
- no_kda_lora: the KDA layer's constructor refuses any value but true (:686-687);
- num_nextn_predict_layers: the MTP draft's layers (config/speculative.py:946-970 gives the draft model type
  bailing_hybrid_v3_mtp and n_predict; bailing_moe_v3_mtp.py:160-175 builds that many MLA layers after the
  hidden ones);
- max_position_embeddings: max_model_len, the state's block without prefix caching (rope_theta, also cited, feeds
  the rotary embedding only);
- dtype: the MLA page's at --kv-cache-dtype auto and the KDA states' at --mamba-cache-dtype auto.

transformers' BailingHybridConfig sets head_dim to qk_rope_head_dim after reading the file
(configuration_bailing_hybrid.py:159; the file's value kept as linear_head_dim, :139), and the KDA layer takes
its head size from head_dim (:675): vLLM plans each KDA state with 64-wide heads where the fixture's are 128
(docs/findings/vllm-0.33.0.md, Bailing V3 over its family). kvproof plans what vLLM plans at its default launch.
Two launches it does not plan: --trust-remote-code, which vLLM's recipes for Ling 3.0 pass and under which
transformers reads the file with the checkpoint's own configuration class (its auto_map; not found), and
--hf-overrides '{"head_dim": 128}', which vLLM applies after the class has built the config
(transformers_utils/config.py:989-991).

Strictness, as for the other families: a member's config.json is exactly the cited and varied keys, and
tests/test_vllm_bailing_v3.py changes every model key a member lacks at once and shows a drafted,
tensor-parallel, prefix-caching point plans exactly as before.
"""

from __future__ import annotations

from typing import Any

from kvproof.engines.families import Axis, Cited, Family, Member
from kvproof.engines.vllm.parts import V033, Reader

FIXTURE = ("the Ling-3.0-tiny configuration a public test decodes (figyaro/mlx-swift-lm"
           "@6b437f86c696cc533063d34a7eb415ab363ec9bf Tests/MLXLMTests/BailingMoeV3Tests.swift, \"decodes the "
           "Ling-3.0-tiny configuration\")")
BAILING_HYBRID_CONFIG = ("transformers 5.20.2's BailingHybridConfig, whose defaults, its docstring says, \"yield a "
                         "similar configuration to that of the\" inclusionAI/Ling-3.0-Flash (src/transformers/models/"
                         "bailing_hybrid/configuration_bailing_hybrid.py:29, `@auto_docstring(checkpoint=\""
                         "inclusionAI/Ling-3.0-Flash\")`; a class's defaults, not the hub's bytes)")
ATOMIC_PR63 = ("the pull request adding Ling-3.0-flash to a llama.cpp fork (AtomicBot-ai/atomic-llama-cpp-turboquant "
               "pull request 63)")
FLASH_RECIPE = ("vLLM's serving recipe for Ling-3.0-flash (vllm-project/recipes"
                "@15ab283abc4b92435d493066e2fdaab0e32d01fd models/inclusionAI/Ling-3.0-flash.yaml)")
# The VL model's language backbone is Ling-3.0-flash (engines/vllm/bailing_v3_vl.py cites SGLang's cookbook for it), so
# the text config inclusionAI's own vLLM fork tests its VL config class with gives Ling-3.0-flash's widths too
FORK_TEST = ("the Bailing V3 VL config a test in inclusionAI's vLLM fork for Ling 3.0 writes (inclusionAI/vllm-ling-v3"
             "@4e709a63e4dde7c57e206680c9397297a147cca8 tests/transformers_utils/test_bailing_moe_v3_vl_config.py, "
             "`_bailing_v3_vl_config`; a fixture, not the hub's bytes, naming no checkpoint)")
FORK_TEXT = f"the text_config of {FORK_TEST}, whose language backbone is Ling-3.0-flash"
SGLANG_FLASH_CONTEXT = ("SGLang's pull request dropping its YaRN override for Ling-3.0-flash (sgl-project/sglang pull "
                        "request 33882: \"The published `inclusionAI/Ling-3.0-flash` config was bumped to a native "
                        "256K window (`max_position_embeddings: 262144`) with `rope_scaling: null`\", the override "
                        "it drops having \"original_max_position_embeddings\":131072)")

FAMILY = Family(
    name="ling-3.0-tiny",
    not_a_verdict_on="inclusionAI/Ling-3.0-tiny",
    cited=(
        Cited("architectures", ["BailingMoeV3ForCausalLM"],
              f"vLLM's registry name for the class (vllm/model_executor/models/registry.py:82); {FIXTURE}"),
        Cited("model_type", "bailing_hybrid", FIXTURE),
        Cited("num_hidden_layers", 24, FIXTURE),
        Cited("layer_group_size", 4, f"{FIXTURE}; its assertions: KDA at layer 0, MLA at 3 and 23"),
        Cited("hidden_size", 1536, FIXTURE),
        Cited("num_attention_heads", 16, FIXTURE),
        Cited("num_key_value_heads", 16, FIXTURE),
        Cited("head_dim", 128, FIXTURE),
        Cited("short_conv_kernel_size", 4, FIXTURE),
        Cited("no_kda_lora", True, f"{FIXTURE}; vLLM's KDA layer refuses any other (bailing_moe_v3.py:686-687)"),
        Cited("kv_lora_rank", 512, FIXTURE),
        Cited("q_lora_rank", 256, FIXTURE),
        Cited("qk_nope_head_dim", 128, FIXTURE),
        Cited("qk_rope_head_dim", 64, FIXTURE),
        Cited("v_head_dim", 128, FIXTURE),
        Cited("max_position_embeddings", 131072, FIXTURE),
        Cited("rope_theta", 6000000, FIXTURE),
        Cited("dtype", "bfloat16",
              "vLLM's serving recipe for Ling 3.0 tiny (vllm-project/recipes@370c74d7fe209b8cdd02b289bf1f3d0120b479ca "
              "models/inclusionAI/Ling-3.0-tiny.yaml): \"Official BF16 checkpoint\", served with --dtype bfloat16; "
              "the model dtype is the MLA page's at --kv-cache-dtype auto and the KDA states' at --mamba-cache-dtype "
              "auto"),
        Cited("num_nextn_predict_layers", 0,
              "SGLang's cookbook for the model (sgl-project/sglang pull request 34283, adding it: \"No NEXTN "
              "speculative decoding — `num_nextn_predict_layers: 0`\"); vLLM's recipe for it offers no MTP option "
              "(vllm-project/recipes@370c74d models/inclusionAI/Ling-3.0-tiny.yaml). A MaxText training config of the "
              "model trains one MTP layer (Garrybest/maxtext@0fb0b0930f7cfac19fa57047fbc836599a106689 "
              "src/maxtext/configs/models/ling3-tiny.yml, mtp_num_layers 1), which the published checkpoint does "
              "not declare"),
    ),
    axes=(),
    cap=1,
)

MEMBERS: tuple[Member, ...] = tuple(FAMILY.members())

# Ling-3.0-flash, the class's larger model: no config.json of it found either. Its layer count, pattern, KDA gates,
# MLA widths, MTP block and context are in public pull requests and vLLM's recipe; its heads, head_dim, hidden size
# and latent in inclusionAI's test fixture for its VL model too.
FLASH_FAMILY = Family(
    name="ling-3.0-flash",
    not_a_verdict_on="inclusionAI/Ling-3.0-flash",
    cited=(
        Cited("architectures", ["BailingMoeV3ForCausalLM"],
              f"vLLM's registry name for the class (vllm/model_executor/models/registry.py:82); {FLASH_RECIPE}: "
              "\"uses the `BailingMoeV3ForCausalLM` architecture\""),
        Cited("model_type", "bailing_hybrid",
              f"{BAILING_HYBRID_CONFIG}; {ATOMIC_PR63}: \"`model_type: bailing_hybrid`\""),
        Cited("num_hidden_layers", 42,
              f"{BAILING_HYBRID_CONFIG}; {ATOMIC_PR63}: \"42 decoder blocks\"; {FLASH_RECIPE}: \"The 42-layer base "
              "model\" (across a line break)"),
        Cited("layer_group_size", 6,
              f"{BAILING_HYBRID_CONFIG}; {ATOMIC_PR63}: \"35 KDA (linear attention) layers, 7 gated MLA layers, "
              "interleaved 5:1 (`layer_group_size = 6`)\""),
        Cited("hidden_size", 2560, f"{BAILING_HYBRID_CONFIG}; {FORK_TEXT}"),
        Cited("num_attention_heads", 32, f"{BAILING_HYBRID_CONFIG}; {FORK_TEXT}"),
        Cited("num_key_value_heads", 32, f"{BAILING_HYBRID_CONFIG}; {FORK_TEXT}"),
        Cited("head_dim", 128, f"{BAILING_HYBRID_CONFIG}; {FORK_TEXT}"),
        Cited("short_conv_kernel_size", 4, BAILING_HYBRID_CONFIG),
        Cited("no_kda_lora", True,
              f"{ATOMIC_PR63}: Ling 3.0's KDA gates are \"full-rank `f_proj`/`g_proj` (`no_kda_lora`)\"; vLLM's KDA "
              "layer refuses any other value (bailing_moe_v3.py:686-687)"),
        Cited("kv_lora_rank", 512, f"{BAILING_HYBRID_CONFIG}; {FORK_TEXT} (asserted there)"),
        Cited("qk_nope_head_dim", 128, f"{BAILING_HYBRID_CONFIG}; {ATOMIC_PR63}: \"partial RoPE, 64 of 192 dims\""),
        Cited("qk_rope_head_dim", 64, f"{BAILING_HYBRID_CONFIG}; {ATOMIC_PR63}: \"partial RoPE, 64 of 192 dims\""),
        Cited("v_head_dim", 128, BAILING_HYBRID_CONFIG),
        Cited("rope_theta", 6000000, f"{BAILING_HYBRID_CONFIG}; {ATOMIC_PR63}: \"`rope_theta = 6e6`\""),
        Cited("rope_scaling", None, SGLANG_FLASH_CONTEXT),
        Cited("dtype", "bfloat16",
              f"{FLASH_RECIPE}: `precision: bf16` (\"Provisional BF16 checkpoint\"), served with --dtype bfloat16; "
              "the model dtype is the MLA page's at --kv-cache-dtype auto and the KDA states' at --mamba-cache-dtype "
              "auto"),
        Cited("num_nextn_predict_layers", 1,
              f"{BAILING_HYBRID_CONFIG} (num_mtp_layers, its name for the key, :124); {ATOMIC_PR63}: \"one MTP "
              f"block\"; {FLASH_RECIPE}: \"a 3.1B MTP layer\", served at 3 speculative tokens"),
    ),
    axes=(
        Axis("max_position_embeddings", (131072, 262144),
             f"262,144, the published config's now ({SGLANG_FLASH_CONTEXT}); 131,072, the context the dropped "
             f"override started from, which {FLASH_RECIPE} still serves (`context_length: 131072`). rope_scaling "
             "null is attested for the 262,144 config only, and assumed at 131,072"),
    ),
    cap=2,
)

FLASH_MEMBERS: tuple[Member, ...] = tuple(FLASH_FAMILY.members())

# The KDA layer's recurrent kernel (bailing_moe_v3.py:1125): fla's fused_recurrent_kda, which walks the state by the
# cache view's own stride
FUSED_RECURRENT_KDA = Reader("fused_recurrent_kda", "page", V033 + "vllm/third_party/flash_linear_attention/ops/"
                             "kda.py:61, :72-94: fused_recurrent_kda_fwd hands initial_state.stride(0) to "
                             "fused_recurrent_gated_delta_rule_fwd_kernel (ops/fused_recurrent.py:117: state_idx "
                             "* stride_init_state_token)")


def layers(hf: Any) -> list[tuple[str, str]]:
    """BailingMoeV3DecoderLayer (bailing_moe_v3.py:1243-1263) asks vLLM's _is_kda_layer (:131-137: the last layer of
    each whole group and every layer past the last whole group are MLA): a KDA layer's BailingMoeV3KimiDeltaAttention
    at `model.layers.i.self_attn`, an MLA layer's MLAAttention at `model.layers.i.self_attn.attn`."""
    from vllm.model_executor.models.bailing_moe_v3 import _is_kda_layer

    return [(f"model.layers.{i}.self_attn", "state") if _is_kda_layer(i, hf.layer_group_size, hf.num_hidden_layers)
            else (f"model.layers.{i}.self_attn.attn", "attention") for i in range(hf.num_hidden_layers)]


def draft_layers(draft: Any) -> list[tuple[str, str]]:
    """BailingMoeV3MTPModel's layers, and Bailing V2.5's BailingMoeV25MTPModel's: num_nextn_predict_layers MLA
    decoder layers after the hidden ones, `model.layers.{num_hidden_layers + i}.self_attn` (bailing_moe_v3_mtp.py:
    101-106, :160-175; bailing_moe_mtp.py:134-150, :82-88), the MLA layer under it at `.attn`."""
    first = draft.num_hidden_layers
    return [(f"model.layers.{i}.self_attn.attn", "attention")
            for i in range(first, first + draft.num_nextn_predict_layers)]


def kda_state(vllm_config: Any) -> dict[str, Any]:
    """What BailingMoeV3KimiDeltaAttention's constructor keeps that its get_state_shape and get_state_dtype read
    (bailing_moe_v3.py:673-683: the tp, the config's head_dim as vLLM's config class leaves it, heads and conv
    kernel, the speculative tokens and the model and cache configs), and the state those methods of the layer
    itself then give (:642-660), not the model class's, which the hybrid alignment pads by (the two disagree where
    a class drops what its layers keep, vllm#57721). Its get_kv_cache_spec is MambaBase's
    (model_executor/layers/mamba/abstract.py:72; it exports no prefill checkpoints, :65-70)."""
    from vllm.model_executor.models.bailing_moe_v3 import BailingMoeV3KimiDeltaAttention

    hf = vllm_config.model_config.hf_config
    if not getattr(hf, "no_kda_lora", False):
        # the constructor's own refusal (bailing_moe_v3.py:686-687), which kvproof cannot reach without building the
        # layer: raised here, it leaves the point NOT VERIFIED (adapter), never verified
        raise ValueError("BailingMoeV3KimiDeltaAttention refuses a config without no_kda_lora true (bailing_moe_v3.py:"
                         "686-687: \"BailingMoeV3 KDA currently expects no_kda_lora=True\")")
    kept = {"tp_size": vllm_config.parallel_config.tensor_parallel_size, "head_dim": hf.head_dim,
            "num_heads": hf.num_attention_heads, "conv_size": hf.short_conv_kernel_size,
            "num_speculative_tokens": vllm_config.num_speculative_tokens,
            "model_config": vllm_config.model_config, "cache_config": vllm_config.cache_config}
    layer: Any = object.__new__(BailingMoeV3KimiDeltaAttention)
    vars(layer).update(kept)
    shape, dtypes = layer.get_state_shape(), layer.get_state_dtype()
    return {**kept, "get_state_shape": lambda: shape, "get_state_dtype": lambda: dtypes}
