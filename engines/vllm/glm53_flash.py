"""GLM-5.3-Flash (Glm5NextForConditionalGeneration) over a stated family, for want of a published config.json.

zai-org/GLM-5.3-Flash publishes no config.json kvproof could read verbatim. tokenspeed's adapter plans the
model over a stated family whose every value is cited (engines/tokenspeed/glm53_flash.py,
docs/engines/tokenspeed-families.md, glm53_flash); this module writes the same cited values as the
config.json vLLM 0.33.0 reads, in the spelling of transformers' Glm5NextConfig (which vLLM builds the
model's config with), and gives an axis to each key vLLM's planning reads that no citation gives.

What vLLM 0.33.0 reads of this class to plan its cache (vllm/models/glm5next/, file:line at the PyPI wheel):

- architectures and model_type: the registry's Glm5NextForConditionalGeneration
  (model_executor/models/registry.py:437-440) and transformers' Glm5NextConfig ("glm5_next"), whose
  text_config is a Glm5NextTextConfig (configuration_glm5_next.py:268-311);
- text_config.layer_types: a layer is KDA when its entry is "linear_attention", else MLA
  (common/model.py:141-147, :381); transformers spells the others "indexed_attention" (:164-172);
- text_config.num_hidden_layers: the decoder layers (common/model.py:744, make_layers) and the MTP
  layer's index after them (:1288);
- text_config.kv_lora_rank and qk_rope_head_dim: the MLA latent, one head of kv_lora_rank +
  qk_rope_head_dim (transformers_utils/model_arch_config_convertor.py:91-98; the class is an MLA
  model by its model_type, :294-327; the layer's head, model_executor/layers/attention/mla_attention.py:480);
- text_config.num_attention_heads: the MLA heads, which tp divides (common/model.py:766; the layer
  asserts it, common/attention.py:417);
- text_config.index_topk: sparse (DSA) MLA when set (common/model.py:712; common/attention.py:507),
  the top-k buffer's width round_up(index_topk + index_kpool - 1, 128) in the MLA spec
  (common/model.py:106-113; mla_attention.py:567-569, :1397), and the sm_100 fp8 default
  (model_executor/models/config.py:119-141);
- text_config.index_head_dim and index_kpool: the indexer's K cache, index_head_dim + index_head_dim
  // 128 x 4 uint8 bytes a state, one state per index_kpool tokens (common/attention.py:260-266,
  :114-119), and the tail ring of raw keys and gate scores, index_kpool x next_power_of_2(ceil((index_kpool +
  speculative tokens) / index_kpool)) tokens of 2 x index_head_dim bf16 values (:156-183);
- text_config.linear_attn_config's num_heads, head_dim and short_conv_kernel_size: the KDA state
  (common/model.py:1101-1117; common/kda.py:189-204, :218-220), read by transformers into
  linear_num_heads, linear_head_dim and linear_conv_kernel_dim (configuration_glm5_next.py:189-193);
- text_config.linear_attn_config.gate_lower_bound: the KDA gate's bound (linear_lower_bound,
  configuration_glm5_next.py:193-197; common/kda.py:338), which picks FlashKDA or Triton for prefill
  (:137-160) and so the state's prefill checkpoints (:168-176);
- text_config.num_nextn_predict_layers: the MTP draft's layers (config/speculative.py:1146-1157);
- text_config.max_position_embeddings: max_model_len, the state's block without prefix caching;
- dtype: the model dtype (transformers_utils/model_arch_config_convertor.py:208-217), the MLA page's
  at --kv-cache-dtype auto and the KDA states' at --mamba-cache-dtype auto
  (MambaStateDtypeCalculator.kda_state_dtype, common/model.py:1090-1099).

Read by the layers' constructors but by no cache page: index_n_heads (the indexer's query projection,
common/attention.py:212; a member key all the same, as vLLM 0.31.0's own config class has no default for it),
q_lora_rank (projections; transformers refuses None,
configuration_glm5_next.py:220-221), mla_use_nope (rotary only, common/model.py:411),
index_kpool_always_select_tail (refused when False at model build, common/model.py:156-164).

How the adapter plans it (catalog.py, the glm53-flash members): the KDA layers as state layers with their own
state (kda_state), and the MLA layers, their indexers' K caches and tail rings built as shells of their own
classes (built): vLLM's own get_kv_cache_spec of each, customized by each one's own backend
(Glm5NextIndexerBackend, KpoolTailBackend: v1/attention/backends/mla/indexer.py:296-319; the MLA layer's the
point's). KpoolTailBackend admits the block-outermost layout BLHNC alone, so the whole cache is laid out
block-outermost (v1/core/kv_cache_planning.py:676-733; planner._block_outermost translates it). The MLA
constructor rewrites the cache dtype for its backend (mla_attention.py:359-376, :523-529) before vLLM picks the
block (the worker loads the model first, v1/executor/uniproc_executor.py:71-75): built does it too. Not
modelled: the indexer's and the tail ring's kernels (none recorded; the MLA pages' is FlashInfer's at one-token
pages, FLASHINFER_MLA_SPARSE_ROWS), and the smaller kernel blocks a backend of a packed block-outermost
group may take (v1/worker/utils.py:292-299, :662-675) through its kernel block table.
"""

from __future__ import annotations

from typing import Any

from kvproof.engines.families import Axis, Cited, Family, Member
from kvproof.engines.stubs import StubUsed
from kvproof.engines.tokenspeed import glm53_flash as cited
from kvproof.engines.vllm.parts import V033, Backend, Kernel, Reader, cache_config_of, model_dtype

LAYERS = cited.LAYERS
# The cited split (DSA at 3, 7, ..., 43; the last layer KDA) in transformers' labels, which vLLM reads: KDA is
# "linear_attention" (common/model.py:141-147), the others "indexed_attention" (configuration_glm5_next.py:164-172)
LAYER_TYPES = ["linear_attention" if label == "linear_attention" else "indexed_attention"
               for label in cited.LAYER_TYPES]
TRANSLATED = ("transformers' Glm5NextTextConfig reads linear_attn_config into linear_num_heads, linear_head_dim and "
              "linear_conv_kernel_dim (configuration_glm5_next.py:189-193), the names vLLM reads")
# Kimi-K3's published config, whose KDA layers GLM-5.3-Flash's reuse (the llama.cpp pull request tokenspeed's
# family cites for its short-conv kernel)
SIBLING = "Kimi-K3's published config (engines/tokenspeed/models/kimi-k3.json)"


_carried = cited.FAMILY.carried  # tokenspeed's citations, under the same keys in the config.json vLLM reads


FAMILY = Family(
    name="glm53-flash",
    not_a_verdict_on="zai-org/GLM-5.3-Flash",
    cited=(
        Cited("architectures", ["Glm5NextForConditionalGeneration"],
              f"vLLM's registry name for the class (vllm/model_executor/models/registry.py:437-440); "
              f"{_carried('architectures').source}"),
        Cited("model_type", "glm5_next", "transformers' Glm5NextConfig.model_type (configuration_glm5_next.py), "
              "which the cited architecture is the model of"),
        _carried("text_config.num_hidden_layers"),
        Cited("text_config.layer_types", LAYER_TYPES,
              f"{_carried('text_config.layer_types').source}; in transformers' labels (linear_attention, "
              "indexed_attention, configuration_glm5_next.py:164-172)"),
        _carried("text_config.num_attention_heads"),
        _carried("text_config.kv_lora_rank"),
        _carried("text_config.qk_rope_head_dim"),
        _carried("text_config.index_topk"),
        # no page reads it, but vLLM 0.31.0 reads the config with a class of its own that leaves it None
        # (transformers_utils/configs/glm5_next.py:67 there) and the indexer's constructor asserts it
        # (common/attention.py:241 there), so a member without it would not build at that release
        _carried("text_config.index_n_heads"),
        _carried("text_config.index_head_dim"),
        _carried("text_config.index_kpool"),
        _carried("text_config.linear_attn_config.num_heads", TRANSLATED),
        _carried("text_config.linear_attn_config.head_dim", TRANSLATED),
        _carried("text_config.linear_attn_config.short_conv_kernel_size", TRANSLATED),
        _carried("text_config.num_nextn_predict_layers"),
    ),
    axes=(
        model_dtype("no source names the model dtype", "the MLA page's", "the KDA states'"),
        Axis("text_config.linear_attn_config.gate_lower_bound", (-5.0,),
             f"no GLM-5.3-Flash source states it; {SIBLING} has gate_lower_bound -5.0. vLLM reads only whether "
             "it is set (FlashKDA needs a bounded gate, common/kda.py:148-155), and transformers sets -5.0 "
             "whenever safe_gate is on, which it is unless the config turns it off "
             "(configuration_glm5_next.py:193-197)"),
        Axis("text_config.max_position_embeddings", (1048576,),
             f"no GLM-5.3-Flash source states it; {SIBLING} has 1,048,576. vLLM makes it max_model_len, the "
             "state's block without prefix caching; no page's bytes depend on it"),
    ),
    cap=2,
    derived={
        # transformers refuses any other (Glm5NextTextConfig.validate_architecture, configuration_glm5_next.py:
        # 206-212), and sets it from the heads when the config has none (:156-157)
        "text_config.num_key_value_heads": lambda values: values["text_config.num_attention_heads"],
    },
)

MEMBERS: tuple[Member, ...] = tuple(FAMILY.members())


def layers(hf: Any) -> list[tuple[str, str]]:
    """The cache layers of Glm5NextForConditionalGeneration's language model (`language_model.model`,
    common/model.py:1226-1229, :1057-1059; its layers, :746): a KDA layer's Glm5NextLinearAttention at
    `layers.i.self_attn` (:385-390, a `state`); an MLA layer's MLAAttention at `layers.i.self_attn.attn`
    (`attention`: the layer's prefix, :409, and the wrapper's, model_executor/layers/mla.py:132), and, with
    index_topk set, its indexer's K cache (`indexer`) and tail ring (`tail`) at
    `layers.i.self_attn.indexer.k_cache` and `.tail_cache` (common/attention.py:527, :263, :274)."""
    out: list[tuple[str, str]] = []
    for i, label in enumerate(hf.layer_types):
        at = f"language_model.model.layers.{i}.self_attn"
        if label == "linear_attention":
            out.append((at, "state"))
            continue
        out.append((f"{at}.attn", "attention"))
        if hf.index_topk is not None:
            out += [(f"{at}.indexer.k_cache", "indexer"), (f"{at}.indexer.tail_cache", "tail")]
    return out


def kda_state(vllm_config: Any) -> dict[str, Any]:
    """What Glm5NextLinearAttention's constructor sets that its get_kv_cache_spec reads (common/kda.py:168-204):
    the tp, heads, head dim and conv width of the text config (:218-220; the tp and speculative tokens,
    GatedDeltaNetAttention's, mamba/gdn/base.py:33, :43-47), the model and cache configs (gdn/base.py:39-40) and
    the KDA prefill backend vLLM's own _resolve_kda_prefill_backend picks (common/kda.py:344-350; "auto" unless
    additional_config names one), which sets the state's prefill checkpoints (:168-176)."""
    from vllm.models.glm5next.common import kda
    from vllm.platforms import current_platform

    # kda.py binds current_platform when first imported; the capability _resolve_kda_prefill_backend asks of it
    # must be the point's
    bound = kda.current_platform
    if not bound.is_cuda() or bound.get_device_capability() != current_platform.get_device_capability():
        raise StubUsed(f"vllm.models.glm5next was first imported under a platform with capability "
                       f"{bound.get_device_capability()}, not the point's; plan one GPU per process")
    hf = vllm_config.model_config.hf_text_config
    extra = vllm_config.additional_config
    choice = extra.get("kda_prefill_backend", "auto") if isinstance(extra, dict) else "auto"
    return {"tp_size": vllm_config.parallel_config.tensor_parallel_size, "num_heads": hf.linear_num_heads,
            "head_dim": hf.linear_head_dim, "conv_size": hf.linear_conv_kernel_dim,
            "num_spec": vllm_config.num_speculative_tokens, "model_config": vllm_config.model_config,
            "cache_config": vllm_config.cache_config,
            "kda_prefill_backend": kda._resolve_kda_prefill_backend(
                choice, hf.linear_head_dim, vllm_config.model_config.dtype, hf.linear_lower_bound)}


def built(vllm_config: Any, backend: Any, names: list[tuple[str, str]]) -> dict[str, Any]:
    """Each MLA layer's MLAAttention and its indexer's two caches, as their constructors leave what their
    get_kv_cache_spec reads (shells: the class without its constructor run). The MLA layer (model_executor/
    layers/attention/mla_attention.py:480-569): its head kv_lora_rank + qk_rope_head_dim, no sliding window, its
    indexer (so it leads its index group, :1398), the top-k buffer's width where the release has one
    (common/model.py:106-113, :712-720), and the cache dtype its backend serves, which it writes back to the cache
    config (:523-529) before vLLM picks the block. The indexer's K cache (common/attention.py:260-266) and its tail
    ring (:271-277), each keeping the cache config it was built with, whose block its get_kv_cache_spec reads
    (deepseek_v2.py:646, :660). The MTP layer is built under the draft's config (common/model.py:369): its cache
    config is vLLM's copy at the draft's KV dtype where the speculative config gives one (parts.cache_config_of),
    which the worker's block alignment never reaches."""
    import torch
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention, _canonicalize_sparse_mla_kv_cache_dtype
    from vllm.models.glm5next.common import model as glm_model
    from vllm.models.glm5next.common.attention import Glm5NextIndexerCache, Glm5NextTailCache

    hf = vllm_config.model_config.hf_text_config
    # the top-k buffer's width where the release's model hands the MLA layer one (get_sparse_topk_buffer_width,
    # 0.33.0); 0.32.0's MLA spec has no such field and its layer no such attribute, and a spec that read it on a
    # shell without one would raise StubUsed (planner._check_shell_call)
    width = getattr(glm_model, "get_sparse_topk_buffer_width", None)
    topk = {} if width is None else {"topk_buffer_width": width(hf)}
    cache_of = cache_config_of(vllm_config, draft_layers)
    quant_block = 128  # Indexer.quant_block_size, common/attention.py:253
    out: dict[str, Any] = {}
    for name, kind in names:
        cache = cache_of(name)
        if kind == "attention":
            # the layer's constructor writes the dtype its backend serves back to its cache config
            dtype = cache.cache_dtype = _canonicalize_sparse_mla_kv_cache_dtype(backend, cache.cache_dtype)
            layer: Any = object.__new__(MLAAttention)
            # indexer: any object; the spec asks only that the layer has one (mla_attention.py:1398)
            vars(layer).update(kv_cache_dtype=dtype, head_size=hf.kv_lora_rank + hf.qk_rope_head_dim,
                               sliding_window=None, indexer=f"{name}.indexer", non_causal_multi_token_decode=False,
                               attn_backend=backend, **topk)
        elif kind == "indexer":
            layer = object.__new__(Glm5NextIndexerCache)
            vars(layer).update(head_dim=hf.index_head_dim + hf.index_head_dim // quant_block * 4, dtype=torch.uint8,
                               cache_config=cache, _index_kpool=hf.index_kpool)
        elif kind == "tail":
            layer = object.__new__(Glm5NextTailCache)
            vars(layer).update(head_dim=hf.index_head_dim, dtype=torch.bfloat16, cache_config=cache,
                               _index_kpool=hf.index_kpool)
        else:
            continue
        out[name] = layer
    return out


def draft_layers(draft: Any) -> list[tuple[str, str]]:
    """Glm5NextMTP's layers (common/mtp.py:206-212): num_nextn_predict_layers decoder layers after the hidden
    layers, `model.layers.{num_hidden_layers + i}` (:108-120), each an MLA (DSA) layer (is_mtp_layer, :70-77;
    common/model.py:380) with its indexer caches, named as the target's are."""
    text = draft.get_text_config()
    out: list[tuple[str, str]] = []
    for i in range(text.num_hidden_layers, text.num_hidden_layers + text.num_nextn_predict_layers):
        at = f"model.layers.{i}.self_attn"
        out += [(f"{at}.attn", "attention"), (f"{at}.indexer.k_cache", "indexer"),
                (f"{at}.indexer.tail_cache", "tail")]
    return out


# The sparse (DSA) MLA backends' priorities on sm_90 (vllm/platforms/cuda.py:140-154): after the dense MLA
# backends, which decline a sparse layer (validate_configuration, v1/attention/backend.py:321-323), at a 512-wide
# head FLASHINFER_MLA_SPARSE_SM90 first, then FLASH_ATTN_MLA_SPARSE and FLASHMLA_SPARSE.
# FLASHINFER_MLA_SPARSE_SM90 hands FlashInfer's MLA kernel pages of one token: each top-k slot is a row of a flat
# view of the cache, so the kernel's page is a token at any block size, and the rows are addressed by the block
# stride itself (whole rows asserted), never by an implicit dense page.
FLASHINFER_MLA_SPARSE_ROWS = Kernel("flashinfer_mla_paged_page1", 1, None, V033 + "vllm/v1/attention/backends/mla/"
                                    "flashinfer_mla_sparse_sm90.py:363-371: BatchMLAPagedAttentionWrapper planned "
                                    "at page_size 1; :612-624 and sparse_utils.py:50-69: a token's row is block x "
                                    "block_stride_rows + offset, block_stride_rows = stride(0) // row, asserted whole")
GLM_FUSED_RECURRENT_KDA = Reader("fused_recurrent_kda", "page", V033 + "vllm/models/glm5next/nvidia/ops/third_party/"
                                 "kda/fused_recurrent.py:148, :253: state_idx * initial_state.stride(0)")
FLASHINFER_MLA_SPARSE_SM90 = Backend(
    "FLASHINFER_MLA_SPARSE_SM90", "vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm90:"
    "FlashInferMLASparseSM90Backend", "sm_90", (9, 0),
    "first sparse MLA choice below sm_100 at a 512-wide head (vllm/platforms/cuda.py:144-146), where FlashInfer "
    "has its SM90 MLA (has_flashinfer_sm90_nope_mla, flashinfer_mla_sparse_sm90.py:205-210: FlashInfer >= 0.6.18; "
    "vLLM 0.33.0 pins 0.7.2.post1)", (FLASHINFER_MLA_SPARSE_ROWS,), all_stages=False)
ASSUMED = ("the KDA gate bound and max_position_embeddings assumed (Kimi-K3's published values: no GLM source "
           "gives them)")
GLM_LIMITS = ("at FLASHINFER_MLA_SPARSE_SM90 on sm_90 only (FLASH_ATTN_MLA_SPARSE and FLASHMLA_SPARSE, reached where "
              "FlashInfer lacks its SM90 MLA, and sm_100's sparse backends are not planned), pipeline stages at "
              "tp 1, pp 2 only (each member's points multiply as a family's do), its MTP draft up to 2 speculative "
              "tokens; the MLA pages' kernel is recorded as FlashInfer's at one-token pages (the "
              "wrapper's own page size, its kernel's source not read); the indexer's kernel (DeepGEMM's paged MQA "
              "logits, which vLLM hands 4 x 32 or 4 x 64-token kernel blocks through a kernel block table) and the "
              "tail ring's are not recorded; the backend is "
              "an assumption (its supports_combination asks for FlashInfer's SM90 MLA, which this CPU lacks; "
              "planning asks nothing of FlashInfer); its vision tower keeps no page")
