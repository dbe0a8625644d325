"""Kimi-K3's DSpark draft in vLLM: a checkpoint of its own (K3DSparkModel, vllm/models/kimi_k3/nvidia/dspark_mla.py),
whose five MLA layers keep pages in the target's cache under a backend vLLM selects for them apart from the target's.

vLLM 0.33.0 drafts with DSpark in Model Runner V2 only (DSparkSpeculator, v1/worker/gpu/spec_decode/__init__.py:53-58;
V1 refuses the method, config/vllm.py:3110-3113), whose get_kv_cache_spec is V1's but for a draft kept apart under
decode context parallelism, which no point plans (v1/worker/gpu/model_runner.py:611-621, attn_utils.py:138-155).
load_dspark_model builds the draft under a config of its own (v1/worker/gpu/spec_decode/dspark/utils.py:87-115): its
attention asks non-causal attention where the draft's layers are not all causal (dflash_has_any_non_causal) and the
backend _resolve_dspark_attention_backend resolves (the pinned draft backend, else the target's for a DeepSeek-V4
draft only, else none: the platform selects), and its cache the draft's cache dtype where one is given.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kvproof.engines.vllm.parts import draft_cache_config


def draft_layers(first: int) -> Callable[[Any], list[tuple[str, str]]]:
    """The draft's cache layers after a target of `first` hidden layers, one per decoder layer of its config:
    K3DSparkForCausalLM numbers them on from the target's (start_layer_id is the target's
    get_total_num_hidden_layers, dspark_mla.py:465-469), each MultiHeadLatentAttention at `layers.{i}.self_attn`
    under the draft's `model` (:84-86, :469), its own cache layer (kimi_k3/nvidia/mla.py:163, :408)."""
    return lambda draft: [(f"model.layers.{first + i}.self_attn", "draft") for i in range(draft.num_hidden_layers)]


def built(vllm_config: Any, backend: Any, names: list[tuple[str, str]]) -> dict[str, Any]:
    """Each draft layer's MultiHeadLatentAttention as K3DSparkDecoderLayer's constructor leaves what its
    get_kv_cache_spec and get_attn_backend read (shells: the class without its constructor run; kimi_k3/nvidia/
    mla.py:418-437): the cache dtype of the draft's cache config (:317-321), the latent head kv_lora_rank +
    qk_rope_head_dim (:160), non-causal multi-token decode (dspark_mla.py:88) and the backend get_attn_backend
    selects for it (mla.py:324-331) under the draft's own config, with the draft model's dtype (get_model builds it
    at the draft ModelConfig's) and its heads at the draft's tp (mla.py:200-203). `backend` is the target's. The
    draft's cache dtype is the speculative config's kv_cache_dtype where it gives one (utils.py:104-112), else
    the target's."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.models.qwen3_dflash import dflash_has_any_non_causal
    from vllm.models.kimi_k3.nvidia.mla import MultiHeadLatentAttention
    from vllm.v1.attention.selector import get_attn_backend
    from vllm.v1.worker.gpu.spec_decode.dspark.utils import _resolve_dspark_attention_backend

    speculative = vllm_config.speculative_config
    draft, hf = speculative.draft_model_config, speculative.draft_model_config.hf_config
    # the field of load_dspark_model's draft config that the selection reads (utils.py:93-113): a copy of the
    # target's with the draft's attention config, not a new VllmConfig (whose checks the target's ran)
    own = copy.copy(vllm_config)
    own.attention_config = replace(
        vllm_config.attention_config, use_non_causal=dflash_has_any_non_causal(hf),
        backend=_resolve_dspark_attention_backend(draft, speculative.attention_backend,
                                                  vllm_config.attention_config.backend))
    # load_dspark_model swaps the draft config's cache config for one at this dtype (utils.py:104-112); kvproof hands
    # the dtype to the selection itself, which reads no other field of it (get_attn_backend's kv_cache_dtype argument)
    cache_dtype = draft_cache_config(vllm_config).cache_dtype
    head = hf.kv_lora_rank + hf.qk_rope_head_dim
    heads = hf.num_attention_heads // speculative.draft_parallel_config.tensor_parallel_size
    with set_current_vllm_config(own):
        selected = get_attn_backend(head, draft.dtype, cache_dtype, use_mla=True, use_sparse=False, num_heads=heads)
    out: dict[str, Any] = {}
    for name, kind in names:
        if kind != "draft":
            continue
        layer: Any = object.__new__(MultiHeadLatentAttention)
        vars(layer).update(kv_cache_dtype=cache_dtype, head_size=head, non_causal_multi_token_decode=True,
                           attn_backend=selected)
        out[name] = layer
    return out
