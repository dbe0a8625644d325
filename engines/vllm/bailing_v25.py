"""Bailing V2.5 (BailingMoeV2_5ForCausalLM: Ling 2.5 and 2.6) over two stated families, for want of a published
config.json.

No whole config.json of an inclusionAI Ling/Ring 2.5 or 2.6 checkpoint was found. The configuration class a pull
request to transformers proposes for model_type bailing_hybrid ("add bailing v2.6 model", huggingface/transformers
pull request 46713, at huggingface/transformers@51057eee152fffe2475a32c0f51444e83ef0aaa4
src/transformers/models/bailing_hybrid/configuration_bailing_hybrid.py) names inclusionAI/Ring-2.5-1T in its
docstring (`@auto_docstring(checkpoint="inclusionAI/Ring-2.5-1T")`) and defaults to 80 layers in groups of 8, 64
heads, hidden size 8,192, kv_lora_rank 512, qk_rope_head_dim 64, group_norm_size 8 and 131,072 positions; a later
version of the same file (@12218464d34f4ae94c9b96c64b893beae8f2d5ad) names Ling-2.6-flash-base over the same
numbers, so the label alone vouches for nothing. Others do: SGL-JAX's serving notes for Ling 2.5 say Ring-2.5-1T has
Ling-2.5-1T's architecture, the same as Ling-2.6-1T's, with its MLA layers every eighth (7, 15, 23, 31, ...) and its
linear attention's group norm in eight groups (sgl-project/sglang-jax@db865744f458bb948aad743c82a083bc321a6704
docs/cookbook/autoregressive/InclusionAI/Ling-2.5.md); SGL-JAX's run of the whole Ling-2.6-1T counts 80 layers, 10
MLA and 70 linear (sgl-project/sglang-jax pull request 1087); SGLang's cookbook serves Ling-2.5-1T, a BF16
checkpoint, at tp 8 at most (sgl-project/sgl-cookbook@b21a3902bb906bf7639a72adab41103e92f80c7d
docs/autoregressive/InclusionAI/Ling-2.5-1T.md). Nothing found states the 1T checkpoints' MTP layers, and their
contexts differ (Ring-2.5-1T's 128K, Ling-2.5-1T's 256K): what `verify engine vllm` plans for this class is
therefore a family (engines/families.py) of four members, those values with the context and the MTP layer count
axes. Ling-2.6-flash, the class's published flash model, has a family of its own (FLASH_FAMILY): one member, every
key it reads cited from notes that name the checkpoint (a llama.cpp port's, a Swift runtime's), a quantization's README,
vLLM's recipe and SGLang's cookbook (32 layers in groups of 8, 32 heads, hidden size 4,096, 4 norm groups, one MTP
layer, 131,072 positions, BF16).

What vLLM 0.33.0 reads of this class to plan (vllm/model_executor/models/bailing_moe_linear.py):

- architectures and model_type: the registry's BailingMoeV2_5ForCausalLM (registry.py:81), and "bailing_hybrid",
  which vLLM has no config class of its own for (transformers_utils/config.py:125 registers only the V3 VL
  model's), so it reads the file through transformers 5.20.2's BailingHybridConfig, and plans it as an MLA model
  (transformers_utils/model_arch_config_convertor.py:317);
- num_hidden_layers and layer_group_size: a layer is linear attention unless it ends a group (the model's
  is_linear_layer, :68-74, sets each layer's attention_type, :466-470 and :485-488, which the decoder layer reads,
  :362-377), the linear layer at `model.layers.i.self_attn`, MLA under it at `.attn` (the MLA wrapper's prefix,
  model_executor/layers/mla.py:132);
- kv_lora_rank and qk_rope_head_dim: the MLA latent, one head of kv_lora_rank + qk_rope_head_dim;
- num_attention_heads and head_dim: each linear layer's state (LinearAttention.get_state_shape,
  layers/mamba/linear/base.py:63-66: linear_attention_state_shape of the heads, tp and head_dim its constructor
  keeps, :38-47), in the model dtype (get_state_dtype, :55-61); head_dim as the config class leaves it, which is
  qk_rope_head_dim, whatever the file's head_dim (below);
- group_norm_size: the linear layer's constructor refuses a tp that does not divide it, 1 where the file has none
  (layers/mamba/linear/bailing_linear_attn.py:446-453), so tp stops at 8 for the 1T family and at 4 for
  Ling-2.6-flash (norm_groups);
- num_nextn_predict_layers: the MTP draft's layers (config/speculative.py:951-963 gives the draft model type
  bailing_hybrid_mtp and n_predict; bailing_moe_mtp.py:134-150 builds that many MLA layers after the hidden
  ones);
- max_position_embeddings: max_model_len, the state's block without prefix caching;
- dtype: the MLA page's at --kv-cache-dtype auto and the linear states' at --mamba-cache-dtype auto.

transformers 5.20.2's BailingHybridConfig (the Ling 3.0 class that now holds the model type) sets head_dim to
qk_rope_head_dim after reading the file (configuration_bailing_hybrid.py:159), as the proposed one does
(configuration_bailing_hybrid.py@51057eee, __post_init__), and vLLM's linear layer takes its head size from
head_dim (base.py:40-44): vLLM plans each state with 64-wide heads, where the proposed class's own lightning layer
makes them hidden_size / num_kv_heads_for_linear_attn = 128 wide (modular_bailing_hybrid.py@51057eee,
BailingHybridLightningAttention) and inclusionAI's configuration class in its Ring-V2.5 repository keeps the
file's head_dim (inclusionAI/Ring-V2.5@ae5a5d903053e86229c0a04c05c77bacecbd8435
models/configuration_bailing_moe_v2_5.py, default 128): docs/findings/vllm-0.33.0.md, Bailing V2.5 over its
family. kvproof plans what vLLM plans at its default launch. Two launches it does not plan: --trust-remote-code,
which vLLM's recipes for Ling 2.6 pass and under which transformers reads the file with the checkpoint's own
configuration class (its auto_map, not found; kvproof runs no checkpoint code), and --hf-overrides
'{"head_dim": 128}', which vLLM applies after the class has built the config (transformers_utils/config.py:
989-991).

Strictness, as for the other families: a member's config.json is exactly the cited and varied keys, and
tests/test_vllm_bailing_v25.py changes every model key a member lacks at once and shows a drafted,
tensor-parallel, prefix-caching point plans exactly as before. A member holds what planning reads, not a
checkpoint's whole file: the layers' constructors read more (use_bias, bailing_linear_attn.py:421;
moe_shared_expert_intermediate_size, bailing_moe_linear.py:297), which kvproof does not run.
"""

from __future__ import annotations

from typing import Any

from kvproof.engines.families import Axis, Cited, Family, Member
from kvproof.engines.vllm.bailing_v3 import draft_layers as draft_layers
from kvproof.engines.vllm.parts import V033, Reader

PROPOSED = ("the configuration class transformers pull request 46713 proposes for model_type bailing_hybrid, whose "
            "docstring names inclusionAI/Ring-2.5-1T (huggingface/transformers"
            "@51057eee152fffe2475a32c0f51444e83ef0aaa4 src/transformers/models/bailing_hybrid/"
            "configuration_bailing_hybrid.py; its defaults, not the hub's bytes)")
SGL_JAX = ("SGL-JAX's notes for Ling 2.5 (sgl-project/sglang-jax@db865744f458bb948aad743c82a083bc321a6704 "
           "docs/cookbook/autoregressive/InclusionAI/Ling-2.5.md)")
COOKBOOK = ("SGLang's cookbook for Ling-2.5-1T (sgl-project/sgl-cookbook@b21a3902bb906bf7639a72adab41103e92f80c7d "
            "docs/autoregressive/InclusionAI/Ling-2.5-1T.md)")
RUN_1T = ("SGL-JAX's run of the whole Ling-2.6-1T, the same architecture (sgl-project/sglang-jax pull request 1087: "
          "80 layers, \"10 个 MLA full-attn + 70 个 GLA layer\")")

FAMILY = Family(
    name="ling-2.5-1t",
    not_a_verdict_on="inclusionAI/Ling-2.5-1T",
    cited=(
        Cited("architectures", ["BailingMoeV2_5ForCausalLM"],
              f"vLLM's registry name for the class (vllm/model_executor/models/registry.py:81); {SGL_JAX}: "
              "\"`architectures`: must include `BailingMoeV2_5ForCausalLM`\""),
        Cited("model_type", "bailing_hybrid", f"{PROPOSED}; {SGL_JAX}: \"`model_type`: usually `bailing_hybrid`\""),
        Cited("num_hidden_layers", 80, f"{PROPOSED}; {RUN_1T}"),
        Cited("layer_group_size", 8,
              f"{PROPOSED}; {SGL_JAX}: the loader misses the MLA layers' weights at layers 7, 15, 23, 31, ..., "
              "\"every 8th layer = the MLA layers in the 1:7 MLA + Linear Attention hybrid\"; " + RUN_1T),
        Cited("hidden_size", 8192, PROPOSED),
        Cited("num_attention_heads", 64, PROPOSED),
        Cited("num_key_value_heads", 64, PROPOSED),
        Cited("head_dim", 128,
              "the proposed class's own lightning layer makes its heads hidden_size / num_kv_heads_for_linear_attn = "
              "8,192 / 64 = 128 wide (modular_bailing_hybrid.py@51057eee, BailingHybridLightningAttention); "
              "inclusionAI's configuration class in its Ring-V2.5 repository defaults head_dim to 128, else "
              "hidden_size / num_attention_heads (inclusionAI/Ring-V2.5@ae5a5d903053e86229c0a04c05c77bacecbd8435 "
              "models/configuration_bailing_moe_v2_5.py)"),
        Cited("group_norm_size", 8,
              f"{PROPOSED}; {SGL_JAX}: the linear attention's GroupRMSNorm \"uses `num_groups=8`\"; {COOKBOOK}: "
              "\"`--tp-size` can be set to a maximum of 8 for this model\""),
        Cited("kv_lora_rank", 512, PROPOSED),
        Cited("q_lora_rank", 1536, PROPOSED),
        Cited("qk_nope_head_dim", 128, PROPOSED),
        Cited("qk_rope_head_dim", 64, PROPOSED),
        Cited("v_head_dim", 128, PROPOSED),
        Cited("dtype", "bfloat16",
              f"{COOKBOOK}: \"BF16: inclusionAI/Ling-2.5-1T\"; the model dtype is the MLA page's at --kv-cache-dtype "
              "auto and the linear states' at --mamba-cache-dtype auto"),
    ),
    axes=(
        Axis("max_position_embeddings", (131072, 262144),
             f"the two 1T checkpoints' contexts: {SGL_JAX} give Ring-2.5-1T 128K (131,072, the proposed class's "
             "default) and Ling-2.5-1T 256K, which SGL-JAX's notes for Ling 2.6 spell \"native 256K (`262144`)\" for "
             "Ling-2.6-1T (sgl-project/sglang-jax@047fbd76c88148b12c0e815e47171920a1e1f6d9 "
             "docs/cookbook/autoregressive/InclusionAI/Ling-2.6.md)"),
        Axis("num_nextn_predict_layers", (0, 1),
             "nothing found states the 1T checkpoints' MTP layers. 0: inclusionAI's configuration class in its "
             "Ring-V2.5 repository defaults the count to 0 (inclusionAI/Ring-V2.5"
             "@ae5a5d903053e86229c0a04c05c77bacecbd8435 models/configuration_bailing_moe_v2_5.py); 1: Ling-2.6-flash, "
             "of the same class, ships one MTP layer (ml-explore/mlx-lm pull request 1227, adding it: \"sanitize() "
             "drops the trailing MTP layer\"), which vLLM drafts with as BailingMoeV25MTPModel "
             "(config/speculative.py:951-963); no source names more than one"),
    ),
    cap=4,
)

MEMBERS: tuple[Member, ...] = tuple(FAMILY.members())

# Ling-2.6-flash, the class's published flash model: no config.json of it found either. Its keys are in a llama.cpp
# port's notes and a Swift runtime's, a quantization's README, each naming the checkpoint, and vLLM's and SGLang's
# serving notes for it.
JANGTQ = ("the README of a quantization of it (https://hugingapi.com/OsaurusAI/Ling-2.6-flash-JANGTQ/raw/main/"
          "README.md, a mirror of the hub's OsaurusAI/Ling-2.6-flash-JANGTQ, whose base_model is "
          "inclusionAI/Ling-2.6-flash)")
VALIDATOR = ("a llama.cpp port's check of its converted Ling-2.6-flash (ssweens/llama.cpp-ling-2.6"
             "@0764ef299db59ba3d49ef196a7fba7dce40635fc tasks/validate_ling26_gguf.py)")
PORT_PLAN = ("the same port's plan, whose reference is inclusionAI/Ling-2.6-flash's config.json (ssweens/"
             "llama.cpp-ling-2.6@2ba022aafc25bd5a0ae8dabf918ef766a2f18412 tasks/todo.md)")
PORT_PLAN_LATER = ("a later revision of that plan (ssweens/llama.cpp-ling-2.6 tasks/todo.md after 2ba022aa, "
                   "sections 2.2 and 8.1; its commit is not known here)")
VMLX = ("a Swift runtime's validation notes, listing Ling-2.6-flash's architecture for a port not yet written "
        "(osaurus-ai/vmlx-swift-lm@fe47ca86c2158a7f90d21f6a0229d4f6c9d24e5c docs/PRODUCTION-VALIDATION-2026-05-04.md)")
RECIPE_26 = ("vLLM's serving recipe for Ling-2.6-flash (vllm-project/recipes@04be05628a982b8a90628d1b955c2b6e99e5bbca "
             "models/inclusionAI/Ling-2.6-flash.yaml)")
COOKBOOK_26 = ("SGLang's cookbook for Ling 2.6 (sgl-project/sglang@0de13af0ffac8498d5a07bc289655e7c53ae3f10 "
               "docs_new/cookbook/autoregressive/InclusionAI/Ling-2.6.mdx)")

FLASH_FAMILY = Family(
    name="ling-2.6-flash",
    not_a_verdict_on="inclusionAI/Ling-2.6-flash",
    cited=(
        Cited("architectures", ["BailingMoeV2_5ForCausalLM"],
              f"vLLM's registry name for the class (vllm/model_executor/models/registry.py:81); {COOKBOOK_26}: "
              "\"custom `BailingMoeV2_5ForCausalLM` modeling code\""),
        Cited("model_type", "bailing_hybrid", f"{PORT_PLAN}: \"HF `model_type = \\\"bailing_hybrid\\\"`\""),
        Cited("num_hidden_layers", 32, f"{JANGTQ}: \"32 layers MLA + Lightning-Linear-Attention\"; {VALIDATOR}: "
              "\"expected 33 layers (32 main + 1 MTP)\""),
        Cited("layer_group_size", 8, f"{JANGTQ}: \"every 8th layer is full softmax MLA\" (layers 7, 15, 23, 31); "
              f"{VALIDATOR}: the MLA layers are [7, 15, 23, 31]"),
        Cited("hidden_size", 4096, f"{PORT_PLAN}: the MTP layer concatenates the embedding and the last hidden state, "
              "\"last dim = 8192\", and eh_proj maps them back \"-> 4096\""),
        Cited("num_attention_heads", 32, f"{VALIDATOR}: each MLA layer's k_b weight is [128, 512, 32] (32 heads); "
              f"{PORT_PLAN}: the linear attention's q, k and v are \"[D=128, H=32, T, B]\"; {VMLX}: "
              "\"num_kv_heads_for_linear_attn=32\""),
        Cited("head_dim", 128, f"{PORT_PLAN}: \"[D=128, H=32, T, B]\" and the state \"[D_k=128, D_v=128, H=32, "
              "n_seqs]\""),
        Cited("group_norm_size", 4, f"{PORT_PLAN}: \"`group_norm_size` (uint32) — for GroupRMSNorm group factor "
              f"(=4)\"; {VALIDATOR}: \"expected group_norm_groups=4\", which {PORT_PLAN_LATER} writes from "
              "`hparams[\"group_norm_size\"]`, the \"number of groups (=4), not channels-per-group\" (the pinned plan "
              "still divided the width by it); vLLM's linear layer refuses a tp above it (bailing_linear_attn.py:"
              "446-453), and SGLang's cookbook's reference layout is --tp-size 4"),
        Cited("kv_lora_rank", 512, f"{VMLX}: \"MLA (`kv_lora_rank=512`, `q_lora_rank=1536`, `qk_head_dim=192`)\"; "
              f"{VALIDATOR}: k_b [128, 512, 32]"),
        Cited("q_lora_rank", 1536, f"{VMLX}; {JANGTQ}: \"`q_lora_rank=1536`\""),
        Cited("qk_nope_head_dim", 128, f"{VALIDATOR}: k_b [128, 512, 32]; {VMLX}: qk_head_dim 192, less the 64 rope "
              "dims"),
        Cited("qk_rope_head_dim", 64, f"{PORT_PLAN}: the MLA layer's compressed KV is \"split into `kv_cmpr [512]` and "
              f"`k_pe [64]`\"; {VMLX}: qk_head_dim 192, of 128 + 64"),
        Cited("v_head_dim", 128, f"{VALIDATOR}: v_b [512, 128, 32]"),
        Cited("max_position_embeddings", 131072, f"{PORT_PLAN_LATER}: \"HF config has `rope_scaling: null` and "
              f"`max_position_embeddings: 131072` (the trained context)\"; {RECIPE_26}: `context_length: 131072`; "
              f"{JANGTQ}: \"131K context\"; {COOKBOOK_26}: \"Native context is 128K\" (256K by a YaRN override at "
              "launch, whose 262,144 an AReaL design note gives as its context)"),
        Cited("rope_scaling", None, f"{PORT_PLAN_LATER}, as above; {COOKBOOK_26} extends the context to 256K by a YaRN "
              "override at launch, which kvproof does not plan"),
        Cited("dtype", "bfloat16", f"{COOKBOOK_26}: \"BF16: inclusionAI/Ling-2.6-flash\"; {RECIPE_26}: `precision: "
              "bf16`; the model dtype is the MLA page's at --kv-cache-dtype auto and the linear states' at "
              "--mamba-cache-dtype auto"),
        Cited("num_nextn_predict_layers", 1, f"{VMLX}: \"MTP head (`num_nextn_predict_layers=1`)\"; {VALIDATOR}: "
              f"\"expected nextn_predict_layers=1\"; {COOKBOOK_26}: \"MTP (multi-token prediction) is supported\""),
    ),
    axes=(),
    cap=1,
)

FLASH_MEMBERS: tuple[Member, ...] = tuple(FLASH_FAMILY.members())
# The linear layer's decode kernels: MiniMax's lightning decode, and the class's own speculative decode step, each
# stepping from state to state by the cache view's own stride
LIGHTNING_DECODE = Reader("linear_decode_forward_triton", "page", V033 + "vllm/model_executor/layers/lightning_attn.py:"
                          "676-716: cache_b_stride = kv_caches.stride(0)")
BAILING_DECODE_SPEC = Reader("bailing_linear_attention_decode_spec", "page", V033 + "vllm/model_executor/layers/mamba/"
                             "linear/bailing_linear_attn.py:269-329: kv_cache.stride(0) as cache_b_stride")


def layers(hf: Any) -> list[tuple[str, str]]:
    """Each decoder layer's attention as vLLM's is_linear_layer has BailingMoeV25Model set it (bailing_moe_linear.py:
    68-74, :466-470, :485-488: every layer but the last of each group of layer_group_size is linear; the decoder
    layer reads it, :362-377): a linear layer's BailingMoELinearAttention at `model.layers.i.self_attn`, an MLA
    layer's MLAAttention at `model.layers.i.self_attn.attn`."""
    from vllm.model_executor.models.bailing_moe_linear import is_linear_layer

    return [(f"model.layers.{i}.self_attn", "state") if is_linear_layer(i, hf.layer_group_size)
            else (f"model.layers.{i}.self_attn.attn", "attention") for i in range(hf.num_hidden_layers)]


def linear_state(vllm_config: Any) -> dict[str, Any]:
    """What BailingMoELinearAttention's constructor keeps that its get_state_shape and get_state_dtype read
    (LinearAttention.__init__, layers/mamba/linear/base.py:32-48: the model and cache configs, the heads, the
    config's head_dim as transformers' BailingHybridConfig leaves it, which always sets one, and the tp), and the
    state those methods of the layer itself then give (:55-66). Its get_kv_cache_spec is MambaBase's
    (layers/mamba/abstract.py:72; it exports no prefill checkpoints, :65-70)."""
    from vllm.model_executor.layers.mamba.linear.bailing_linear_attn import BailingMoELinearAttention

    hf = vllm_config.model_config.hf_config
    kept = {"model_config": vllm_config.model_config, "cache_config": vllm_config.cache_config,
            "num_heads": hf.num_attention_heads, "head_dim": hf.head_dim,
            "tp_size": vllm_config.parallel_config.tensor_parallel_size}
    layer: Any = object.__new__(BailingMoELinearAttention)
    vars(layer).update(kept)
    shape, dtypes = layer.get_state_shape(), layer.get_state_dtype()
    return {**kept, "get_state_shape": lambda: shape, "get_state_dtype": lambda: dtypes}


def norm_groups(hf: dict[str, Any]) -> int:
    """The groups BailingMoELinearAttention norms its output in, which each rank must hold whole: its constructor
    asserts tp <= group_norm_size and group_norm_size % tp == 0, reading 1 where the config has none
    (bailing_linear_attn.py:446-453)."""
    return int(hf.get("group_norm_size", 1))
