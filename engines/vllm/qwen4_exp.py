"""Qwen4-Exp (Qwen4ExpForConditionalGeneration, released as Qwen/Qwen3.8-Flash-Next) over a stated family, for
want of a published config.json.

No verbatim config.json of the release has been published. tokenspeed's adapter plans the model over a stated
family whose values come from two cited derivatives (engines/tokenspeed/qwen4_exp.py,
docs/engines/tokenspeed-families.md, qwen4_exp); this module writes the same cited values as the config.json
vLLM 0.33.0 reads, in the spelling of transformers' Qwen4ExpConfig (which vLLM builds the model's config with),
and gives an axis to each key vLLM's planning reads that no citation gives.

What vLLM 0.33.0 reads of this class to plan its cache (vllm/models/qwen4_exp/nvidia/, file:line at the PyPI
wheel; transformers' models/qwen4_exp/configuration_qwen4_exp.py for the config):

- architectures and model_type: the registry's Qwen4ExpForConditionalGeneration, whose language model is
  Qwen4ExpForCausalLM under `language_model` (model.py:1029-1032) and its Qwen4ExpModel under `model`
  (:727-729); transformers' Qwen4ExpConfig ("qwen4_exp");
- text_config.full_attention_interval: transformers labels layer i "indexed_attention" where (i + 1) is a
  multiple of it, else "linear_attention" (configuration_qwen4_exp.py:173-179): a GDN layer's
  QwenGatedDeltaNetAttention at `layers.i.linear_attn` (model.py:227-234), a QSA layer's Qwen4ExpQSAAttention at
  `layers.i.self_attn` (:235-254) with its indexer's two side caches at `.indexer.raw_key_cache` and
  `.indexer.compressed_key_cache` (indexer_qsa.py:165-181), registered as they are built (common/qsa_cache.py:
  788-791), then its pages at `.attn` (qsa.py:461, registered at :537): the order vLLM lists the layers in;
- text_config.num_attention_heads, num_key_value_heads and head_dim: the QSA page, max(1, kv heads // tp)
  heads of head_dim (qsa.py:393-399, :552-560), tp dividing the heads (:385-386);
- text_config.indexer_head_dim, indexer_compress_ratio and rope_parameters: the raw key ring (bf16 keys of
  indexer_head_dim, widened by three int64 M-RoPE positions where the model uses M-RoPE; compress_ratio +
  speculative tokens rounded up to a whole group of rows, common/qsa_cache.py:811-860) and the compressed keys
  (one row per compress_ratio tokens, :863-874); indexer_n_heads turns QSA on (model.py:236), and
  indexer_kv_heads and indexer_budget must be set with it (configuration_qwen4_exp.py:206-223);
- text_config.linear_*: each GDN layer's state (model.py:822-842; the layer's own, catalog._gdn_layer_state),
  its temporal part in text_config.mamba_ssm_dtype at --mamba-ssm-cache-dtype auto (Qwen3.5's config hook,
  model_executor/models/config.py:953-977, which reads it by getattr: the config class has no such key);
- text_config.ple_layer_ids, ple_conv_kernel_size, ngram_size, hidden_size and hc_count: each PLE layer's
  short-conv state at `layers.i.ple` (model.py:212-225), (ple_conv_kernel_size - 1) x ngram_size + the
  speculative tokens rows of hidden_size x hc_count values, replicated across tp (ple_layer.py:98-103,
  :181-203); the class sizes the hybrid block by the larger of that state and the GDN state
  (model.py:789-809, :880-899), with or without PLE layers: a member without them still reads these keys;
- text_config.num_hidden_layers and mtp_num_hidden_layers: the decoder layers and the MTP draft's QSA layers
  after them (mtp.py:189-190, :223-230), under `mtp` (:420-423);
- text_config.max_position_embeddings: max_model_len, the state's block without prefix caching;
- dtype: the model dtype; QSA refuses any but bfloat16 (qsa.py:357-358).

Read by the layers' constructors or by transformers' checks but by no cache page (so a member key only where
transformers refuses its absence): heads_per_ngram and eos_token_id (PLE's, configuration_qwen4_exp.py:232-238,
:255-256),
indexer_budget (the selection buffer's width, indexer_qsa.py:118, qsa.py:522-530).
"""

from __future__ import annotations

import inspect
from typing import Any

from kvproof.engines.families import Axis, Cited, Family, Member
from kvproof.engines.stubs import StubUsed
from kvproof.engines.tokenspeed import qwen4_exp as cited
from kvproof.engines.vllm.parts import V033, Backend, Kernel, cache_config_of

LAYERS = cited.LAYERS
INTERVAL = cited.QWEN4.carried("text_config.full_attention_interval").value
# transformers' labels of the cited interval (configuration_qwen4_exp.py:173-179): PLE may sit on these alone
# (:247-254)
LINEAR_IDS = tuple(i + 1 for i in range(LAYERS) if (i + 1) % INTERVAL)
QWEN35 = "Qwen3.5-27B's published config (engines/tokenspeed/models/qwen3.5-27b.json)"
QWEN35_ROPE = {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "rope_type": "default",
               "rope_theta": 10000000, "partial_rotary_factor": 0.25}  # its text_config.rope_parameters


_carried = cited.QWEN4.carried  # tokenspeed's citations, under the same keys in the config.json vLLM reads


def _axis(key: str, read: str) -> Axis:
    """tokenspeed's family's axis: its values, and the reason they stop there (tokenspeed's), with where vLLM
    reads the key."""
    found = next(a for a in cited.AXES if a.key == key)
    return Axis(key, found.values, f"tokenspeed's family's values: {found.why}; vLLM reads it as {read}")


T = "text_config."
FAMILY = Family(
    name="qwen3.8-flash-next",
    not_a_verdict_on="Qwen/Qwen3.8-Flash-Next",
    cited=(
        _carried("architectures", "vLLM's registry name for the class (vllm/model_executor/models/registry.py)"),
        Cited("model_type", "qwen4_exp", "transformers' Qwen4ExpConfig.model_type (configuration_qwen4_exp.py), "
              "which the cited architecture is the model of"),
        *(_carried(T + key) for key in (
            "hidden_size", "head_dim", "hc_count", "heads_per_ngram", "full_attention_interval", "indexer_n_heads",
            "indexer_head_dim", "indexer_compress_ratio", "num_attention_heads", "num_key_value_heads",
            "num_hidden_layers", "mtp_num_hidden_layers", "linear_conv_kernel_dim", "linear_num_key_heads")),
    ),
    axes=(
        Axis("dtype", ("bfloat16",),
             "no source names the model dtype; QSA refuses any other (Qwen4ExpQSAAttention, qsa.py:357-358; "
             "QSAIndexer, indexer_qsa.py:111-112)"),
        _axis(T + "linear_num_value_heads", "the GDN state's value heads (model.py:822-842)"),
        _axis(T + "linear_key_head_dim", "the GDN state's key width (model.py:822-842)"),
        Axis(T + "ple_layer_ids", ((), LINEAR_IDS),
             "no source names the PLE layers (1-based, model.py:212); transformers refuses PLE on a layer that is "
             "not linear attention (configuration_qwen4_exp.py:247-254): none, and every linear-attention layer "
             "of the cited interval, the most PLE states the hybrid block can hold"),
        Axis(T + "ngram_size", (2, 3),
             "no source gives it; with PLE, transformers refuses an order whose (n - 1) x heads_per_ngram does "
             "not divide ple_embed_dim, the cited hidden size 2560 where none is given (configuration_qwen4_exp.py:"
             "167, :232-238): 1 (no heads) and 4 (24 heads) are refused, 2 and 3 build. Without PLE nothing "
             "refuses an order, and vLLM still sizes the block by a PLE state of it (model.py:789-809, :880-899): "
             "the same two, 3 being transformers' default (:151), what a config without the key gets"),
        _axis(T + "ple_conv_kernel_size", "the PLE state's rows (ple_layer.py:98-103)"),
        Axis(T + "indexer_kv_heads", (1,),
             "no source gives it; transformers refuses any other (configuration_qwen4_exp.py:220-221)"),
        Axis(T + "indexer_budget", (2048,),
             "no source gives it; no cache page of 0.33.0 reads it (the selection buffer's width, indexer_qsa.py:118, "
             "qsa.py:522-530), and transformers refuses a QSA config without it or not a multiple of the cited "
             "compress ratio 4 (configuration_qwen4_exp.py:214-223); vLLM 0.30.0 and 0.31.0 read the config with "
             "their own class, which requires budget / compress ratio to be 512 or 2048 (vllm/models/qwen4_exp/"
             "config.py:163-168 at 0.31.0): 512 x 4, the least every release takes"),
        Axis(T + "rope_parameters", (QWEN35_ROPE,),
             f"no source gives it; {QWEN35}'s, the sibling whose vision tower the class reuses (Qwen3-VL's, "
             "model.py:927-935). Its M-RoPE widens the raw key ring by three int64 positions "
             "(common/qsa_cache.py:815-827), which the multimodal class keeps (model_executor/models/config.py:"
             "1048-1049 strips it only for --language-model-only, not planned); its rotary width 64 fits the "
             "cited 128-wide index head, as transformers requires (configuration_qwen4_exp.py:224-230)"),
        Axis(T + "max_position_embeddings", (262144,),
             f"no source gives it; {QWEN35}'s. vLLM makes it max_model_len, the state's block without prefix "
             "caching; no page's bytes depend on it"),
        Axis(T + "mamba_ssm_dtype", ("float32",),
             f"no source gives it; {QWEN35}'s. The class's config hook (Qwen3.5's, "
             "model_executor/models/config.py:953-977, by getattr: no config class key) keeps the GDN temporal "
             "state in it at --mamba-ssm-cache-dtype auto; the model dtype a config without it keeps is not "
             "planned (each value more adds every member again)"),
        Axis(T + "eos_token_id", (248044,),
             f"no source gives it; {QWEN35}'s. No page reads it; transformers refuses PLE without one "
             "(configuration_qwen4_exp.py:255-256)"),
    ),
    cap=4,
    derived={T + "linear_value_head_dim": lambda v: cited.INNER // v[T + "linear_num_value_heads"]},
)
MEMBERS: tuple[Member, ...] = tuple(FAMILY.members())


def has_ple(config: dict[str, Any]) -> bool:
    """Whether a config.json's language model has PLE layers (vLLM then refuses pipeline stages)."""
    return bool(config.get("text_config", config).get("ple_layer_ids"))


def _qsa(at: str) -> list[tuple[str, str]]:
    """A QSA layer's caches in the order its constructor registers them: the indexer's two side caches as the
    indexer is built (qsa.py:488-495; common/qsa_cache.py:788-791), then the layer itself (qsa.py:534-537)."""
    return [(f"{at}.indexer.raw_key_cache", "raw_keys"), (f"{at}.indexer.compressed_key_cache", "compressed_keys"),
            (f"{at}.attn", "attention")]


def layers(hf: Any) -> list[tuple[str, str]]:
    """The cache layers of the language model (`language_model.model.layers.i`) in the order the decoder layers
    build them (model.py:212-254): at a PLE layer its short-conv state (`ple`) first, then a linear layer's GDN
    state (`state`) or a QSA layer's caches."""
    out: list[tuple[str, str]] = []
    ple = set(hf.ple_layer_ids)
    for i, label in enumerate(hf.layer_types):
        at = f"language_model.model.layers.{i}"
        if i + 1 in ple:
            out.append((f"{at}.ple", "ple"))
        out += [(f"{at}.linear_attn", "state")] if label == "linear_attention" else _qsa(f"{at}.self_attn")
    return out


def draft_layers(draft: Any) -> list[tuple[str, str]]:
    """Qwen4ExpMTP's layers (mtp.py:223-230): mtp_num_hidden_layers QSA decoder layers after the hidden layers,
    `mtp.layers.{num_hidden_layers + i}` (:189-190, :420-423); none is a PLE layer (its id is past the last)."""
    text = draft.get_text_config()
    start = text.num_hidden_layers
    return [pair for i in range(start, start + text.mtp_num_hidden_layers)
            for pair in _qsa(f"mtp.layers.{i}.self_attn")]


def built(vllm_config: Any, backend: Any, names: list[tuple[str, str]]) -> dict[str, Any]:
    """Each QSA layer, its indexer's two side caches and each PLE layer, as their constructors leave what
    their get_kv_cache_spec reads (shells: the class without its constructor run). The QSA layer
    (qsa.py:393-399, :461-475): its KV heads at the point's tp, head_dim and cache dtype, and its own backend.
    The raw key ring (QSAKeyStateCache, common/qsa_cache.py:815-827, :775-785, built by indexer_qsa.py:165-173):
    bf16 keys of indexer_head_dim, with three int64 positions after them where the model uses M-RoPE. The
    compressed keys (QSACompressedKeyCache, :863-874; indexer_qsa.py:174-181) in the indexer's KV dtype, the
    attention config's resolve_indexer_kv_dtype of bf16 (:151-163). The PLE layer (ple_layer.py:98-107,
    :181-203): its conv rows and width, the speculative tokens, and the model and cache configs. The side caches
    keep the cache config they were built with, whose block their get_kv_cache_spec reads (qsa_cache.py:783, :850,
    :869); the MTP layer's are built under the draft's config, whose cache config is vLLM's copy at the draft's KV
    dtype where the speculative config gives one (parts.cache_config_of), which the worker's block alignment
    never reaches."""
    import torch
    from vllm.models.qwen4_exp.common.qsa_cache import QSACompressedKeyCache, QSAKeyStateCache
    from vllm.models.qwen4_exp.nvidia import qsa
    from vllm.models.qwen4_exp.nvidia.ple_layer import Qwen4ExpPLELayer
    from vllm.utils.math_utils import round_up
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype

    hf, model = vllm_config.model_config.hf_text_config, vllm_config.model_config
    cache_of = cache_config_of(vllm_config, draft_layers)
    tp = vllm_config.parallel_config.tensor_parallel_size
    indexer = vllm_config.attention_config.resolve_indexer_kv_dtype("bf16")
    indexer_dtype = {"fp8": torch.float8_e4m3fn, "bf16": torch.bfloat16}[indexer]
    ratio = hf.indexer_compress_ratio
    kv_dtype = _qsa_kv_dtype(qsa)
    out: dict[str, Any] = {}
    for name, kind in names:
        layer: Any
        cache = cache_of(name)
        if kind == "attention":
            layer = object.__new__(qsa.Qwen4ExpQSAAttention)
            dtype = kv_dtype(cache, name)
            vars(layer).update(num_kv_heads=max(1, hf.num_key_value_heads // tp), head_dim=hf.head_dim,
                               kv_cache_dtype=dtype, kv_cache_torch_dtype=kv_cache_dtype_str_to_dtype(dtype, model),
                               attn_backend=backend)
        elif kind == "raw_keys":
            layer = object.__new__(QSAKeyStateCache)
            rope = model.uses_mrope
            storage = (round_up(hf.indexer_head_dim, layer._BF16_PER_INT64)
                       + layer._NUM_ROPE_AXES * layer._BF16_PER_INT64) if rope else hf.indexer_head_dim
            vars(layer).update(key_head_size=hf.indexer_head_dim, cache_rope_positions=rope, head_size=storage,
                               dtype=torch.bfloat16, cache_config=cache, compress_ratio=ratio, prefix=name)
        elif kind == "compressed_keys":
            layer = object.__new__(QSACompressedKeyCache)
            vars(layer).update(head_size=hf.indexer_head_dim, dtype=indexer_dtype, cache_config=cache,
                               compress_ratio=ratio, prefix=name)
        elif kind == "ple":
            layer = object.__new__(Qwen4ExpPLELayer)
            vars(layer).update(model_config=model, cache_config=cache, hc_hidden_size=hf.hidden_size * hf.hc_count,
                               conv_state_len=(hf.ple_conv_kernel_size - 1) * hf.ngram_size,
                               num_spec_tokens=vllm_config.num_speculative_tokens, prefix=name)
        else:
            continue
        out[name] = layer
    return out


def _qsa_kv_dtype(qsa: Any) -> Any:
    """How the release's QSA layer constructor reads its KV cache dtype, from its own source: qsa_kv_cache_dtype of
    its cache config and prefix (0.32.0 on, qsa.py:133-137, :463 in 0.33.0, honouring --kv-cache-dtype-skip-layers),
    or the cache config's cache_dtype (qsa.py:284 in 0.30.0, :377 in 0.31.0); any other reading raises StubUsed."""
    source = inspect.getsource(qsa.Qwen4ExpQSAAttention.__init__)
    if "qsa_kv_cache_dtype(" in source:
        return qsa.qsa_kv_cache_dtype
    if "self.kv_cache_dtype = cache_config.cache_dtype" in source:
        return lambda cache, _name: cache.cache_dtype
    raise StubUsed("Qwen4ExpQSAAttention's constructor reads its KV cache dtype neither by qsa_kv_cache_dtype nor as "
                   "its cache config's cache_dtype; kvproof follows those two")


# The QSA layer's own backend (qsa.py:475), whatever the platform would select: its pages are read by the QSA
# Triton kernel, which takes the page size from the cache's shape and steps pages by the cache's own stride.
QSA_SPARSE_PAGED = Kernel("qsa_sparse_paged_gqa", 1, None, V033 + "vllm/models/qwen4_exp/nvidia/ops/qsa.py:158-179, "
                          ":776: PAGE_SIZE = k_cache.shape[1], unchecked; a token's page is token // PAGE_SIZE, "
                          "addressed by k_cache.stride(0)")
QSA_PATH = "vllm.models.qwen4_exp.nvidia.qsa:Qwen4ExpQSAFlashAttentionBackend"
QSA_WHY = ("the QSA layer's own backend (Qwen4ExpQSAAttention.attn_backend, vllm/models/qwen4_exp/nvidia/qsa.py:475): "
           "the layer names it, the platform selects none")
# qsa.py imports the model module back (:63), so it is imported as vLLM imports it, through the model module
QSA_VIA = "vllm.models.qwen4_exp.nvidia.model"
QSA_SM90 = Backend("QWEN4_EXP_QSA_TRITON", QSA_PATH, "sm_90", (9, 0), QSA_WHY, (QSA_SPARSE_PAGED,), via=QSA_VIA)
QSA_SM100 = Backend("QWEN4_EXP_QSA_TRITON", QSA_PATH, "sm_100", (10, 0), QSA_WHY, (QSA_SPARSE_PAGED,), via=QSA_VIA)
ASSUMED = ("its GDN value heads and key width, PLE layers, n-gram order, PLE kernel, rope parameters, SSM dtype and "
           "max_position_embeddings assumed (tokenspeed's family's values and Qwen3.5-27B's: no source gives them)")
LIMITS = ("at the QSA layers' own backend "
          "on sm_90 and sm_100; no pipeline stages with PLE (vLLM refuses them); its MTP draft up to 3 speculative "
          "tokens; --language-model-only (which strips M-RoPE and so narrows the raw key ring) and an fp8 indexer "
          "(--attention-config) not planned; the side caches' kernels not recorded; its vision tower keeps no page")
