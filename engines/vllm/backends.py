"""vLLM's own attention backends a point may assume, the kernels that read their attention pages, and the code that
reads state pages, each choice cited. A backend is an assumption: vLLM picks it on built layers on a GPU
(CudaPlatform.get_attn_backend_cls walks `_get_backend_priorities`, vllm/platforms/cuda.py:84-180), so each point says
which one it assumed and why. A backend whose module binds a GPU package when imported is imported with guarded
stand-ins for it (stand_ins.py); one that cannot be planned honestly on a CPU is listed in the model's limits with the
reason, never silently dropped."""

from __future__ import annotations

from kvproof.engines.vllm.parts import V033, Backend, Kernel, Reader

# vllm/v1/attention/backends/fa_utils.py:99 (0.33.0): FA3 on capability 9.x when built.
FA3 = Kernel("flash_attn_3", 1, None, "vllm-project/flash-attention@617264c hopper/flash_api.cpp:834: page_size is "
             "k.size(1) with no check on it (:473 only picks a faster path when page_size % kBlockN == 0)")
TRITON_UNIFIED = Kernel("triton_unified_attention", 1, None, "vllm-project/vllm@v0.33.0 vllm/v1/attention/ops/"
                        "triton_unified_attention.py:432: a token's page is seq_offset // BLOCK_SIZE, any BLOCK_SIZE; "
                        "the one assertion (:302, BLOCK_SIZE % TILE_SIZE) is met by clamping the tile (:1021)")
FLASHMLA_DECODE = Kernel("flashmla_dense_decode", 64, 64, "deepseek-ai/FlashMLA@9241ae3 csrc/api/dense_decode.h:67: "
                         "TORCH_CHECK(page_block_size == 64)")
# vllm/v1/attention/backends/mla/flashinfer_mla.py:432: trtllm_batch_decode_with_kv_cache_mla, FlashInfer's
# backend="auto" (the wheel vLLM 0.33.0 pins, flashinfer-python==0.7.2.post1). Auto runs trtllm-gen or
# CuTeDSL, whichever accepts the call (and autotunes between them when both do): trtllm-gen takes pages of 32
# or 64 tokens and no 64 < heads < 128 (Kimi-K3 at tp 1), CuTeDSL pages that divide its 128-token tile. The
# limit recorded is the pages both take, 32 or 64: within it the page runs whichever auto picks.
FLASHINFER_MLA_DECODE = Kernel("flashinfer_mla_decode", 32, 64, "flashinfer-ai/flashinfer@v0.7.2.post1 "
                               "flashinfer/mla/_core.py:4409: trtllm-gen requires block_size in (32, 64); "
                               "flashinfer/cute_dsl/attention/mla_config.py:171 (tile 128, wrappers/batch_mla.py:78): "
                               "CuTeDSL requires 128 % page_size == 0 and page_size > 1; auto picks among those that "
                               "accept, mla/_core.py:4730")
# FlashInfer's own kernels behind vLLM's FLASHINFER backend (flashinfer-ai/flashinfer@v0.7.2.post1, the wheel
# vLLM 0.33.0 pins). Native prefill and decode (BatchPrefill/BatchDecodeWithPagedKVCacheWrapper, backend "auto",
# vllm/v1/attention/backends/flashinfer.py:1451, :1487; decode with tensor cores runs the prefill templates) run
# FA3 on sm_90 where determine_attention_backend accepts (flashinfer/utils.py:616), FA2 otherwise and on sm_100.
# With TRTLLM on, vLLM still prefills natively on sm_90 (no TRTLLM prefill there, vllm/utils/flashinfer.py:694)
# and at an fp8 cache on sm_100 (use_trtllm_attention, :793), so the native kernels are recorded at every point.
FI = "flashinfer-ai/flashinfer@v0.7.2.post1 "
FLASHINFER_FA2 = Kernel("flashinfer_fa2_paged", 1, None, FI + "include/flashinfer/page.cuh:39: paged_kv_t keeps "
                        "page_size as a uint_fastdiv and every token's page is a divmod by it (:415, :525); "
                        "csrc/batch_prefill.cu, batch_decode.cu:193 take page_size from the cache's shape, unchecked")
FLASHINFER_FA3 = Kernel("flashinfer_fa3_paged", 1, None, FI + "include/flashinfer/attention/hopper/"
                        "sparse_mainloop.cuh:297: page_size.divmod per token (a fastdiv, :131); csrc/"
                        "batch_prefill_sm90.cu:187-243 takes page_size from the cache's shape, unchecked")
# vLLM's sm_90 decode with TRTLLM on: flashinfer_xqa_batch_decode_with_kv_cache (flashinfer.py:2697), compiled
# per page size: exactly 16, 32, 64 or 128 tokens (power_of_two with at most 128, multiple of 16).
FLASHINFER_XQA = Kernel("flashinfer_xqa_decode", 16, 128, FI + "flashinfer/jit/xqa.py:82: page_size not in "
                        "[16, 32, 64, 128] raises", power_of_two=True)
# sm_100 with TRTLLM on: trtllm_batch_context_with_kv_cache (flashinfer.py:2543) and trtllm_batch_decode_with_kv_cache
# (backend "trtllm-gen", :2764), one fmha runner: pages of a power of two (a static kernel below 128 tokens, the
# dynamic-page kernel from 128, keyed as 128, so the source sets no largest page). Which static page sizes
# exist is in the cubins' metadata, not in the source: not recorded.
TRTLLM_GEN = Kernel("trtllm_gen_fmha", 1, None, FI + "include/flashinfer/trtllm/fmha/kernelParams.h:887: "
                    "NumTokensPerPage must be power of 2; fmhaKernels.cuh:540-560 (dynamic pages from 128, "
                    "keyed as 128)", power_of_two=True)
TRITON_MLA_DECODE = Kernel("triton_decode_attention", 1, None, "vllm-project/vllm@v0.33.0 vllm/v1/attention/ops/"
                           "triton_decode_attention.py:132: a token's page is offs_n // PAGE_SIZE, any PAGE_SIZE")


CAUSAL_CONV1D = Reader("causal_conv1d_update", "page", V033 + "vllm/model_executor/layers/mamba/ops/causal_conv1d.py:"
                       "1068: the conv state's per-sequence stride is conv_state.stride(), the view's own")
GATED_DELTA_RULE = Reader("fused_recurrent_gated_delta_rule", "page", V033 + "vllm/third_party/flash_linear_attention/"
                          "ops/fused_recurrent.py:117, :208: state_idx * initial_state.stride(0)")
SELECTIVE_STATE_UPDATE = Reader("selective_state_update", "page", V033 + "vllm/model_executor/layers/mamba/ops/"
                                "mamba_ssm.py:353, :660: state_batch_idx * state.stride(0)")
FUSED_RECURRENT_KDA = Reader("fused_recurrent_kda", "page", V033 + "vllm/models/kimi_k3/nvidia/ops/third_party/kda/"
                             "fused_recurrent.py:210, :416: state_index * initial_state.stride(0)")
# A connector a deployment may attach. From its code: a cache view whose dim 0 (the block) is padded is
# registered as it is and its stride travels with it (contiguity.py), and the transfer steps blocks by
# that stride(0) (resolve_block_stride_and_log_layout, gpu_connector/utils.py @02b35f8). The code that
# turns vLLM's per-layer [conv, ssm] state views into those tensors was not found in the index, so the
# state-page path rests on these generic functions and on LMCache/LMCache#4772's description.
LMCACHE = Reader("lmcache", "page", "LMCache/LMCache@5b58154 lmcache/v1/gpu_connector/kv_format/contiguity.py:36-46: "
                 "a dim-0-padded view keeps its stride and (shape, stride) travel verbatim; block step = "
                 "stride(0); LMCache#4772")


# The CUDA platform's priority lists (vllm 0.33.0, vllm/platforms/cuda.py `_get_backend_priorities`): the
# platform takes the first whose validate_configuration accepts the layer (cuda.py:398-415, :468-472).
# sm_90, MLA: FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA (:150-153); FLASH_ATTN_MLA declares
# auto/float16/bfloat16 KV caches only (flashattn_mla.py:42), so at fp8 FLASHMLA is the first that accepts.
# sm_100, MLA: FLASHINFER_MLA first (:123); it declares auto and fp8 (flashinfer_mla.py:195) and asks
# qk_nope_head_dim in (64, 128, 192) (:245): both MLA models have 128, so TOKENSPEED_MLA (:127) and
# CUTLASS_MLA (:128) behind it are never reached for them.
FLASH_ATTN = Backend("FLASH_ATTN", "vllm.v1.attention.backends.flash_attn:FlashAttentionBackend", "sm_90", (9, 0),
                     "first non-MLA choice below sm_100 (vllm/platforms/cuda.py:176)", (FA3,))
TRITON_ATTN = Backend("TRITON_ATTN", "vllm.v1.attention.backends.triton_attn:TritonAttentionBackend", "sm_90", (9, 0),
                      "third non-MLA choice below sm_100, when FLASH_ATTN and FLASHINFER both decline "
                      "(vllm/platforms/cuda.py:178)", (TRITON_UNIFIED,))
FLASHINFER_PATH = "vllm.v1.attention.backends.flashinfer:FlashInferBackend"
FLASHINFER_SM90 = Backend("FLASHINFER", FLASHINFER_PATH, "sm_90", (9, 0),
                          "second non-MLA choice below sm_100 (vllm/platforms/cuda.py:177): when FLASH_ATTN "
                          "declines, or named by --attention-backend (vllm/engine/arg_utils.py:1114)",
                          (FLASHINFER_FA2, FLASHINFER_FA3), (FLASHINFER_XQA,), all_stages=False)
FLASHINFER_SM100 = Backend("FLASHINFER", FLASHINFER_PATH, "sm_100", (10, 0),
                           "first non-MLA choice on sm_100 for causal attention (vllm/platforms/cuda.py:162)",
                           (FLASHINFER_FA2,), (TRTLLM_GEN,), all_stages=False)
FLASH_ATTN_MLA = Backend("FLASH_ATTN_MLA", "vllm.v1.attention.backends.mla.flashattn_mla:FlashAttnMLABackend", "sm_90",
                         (9, 0), "first MLA choice below sm_100 (vllm/platforms/cuda.py:150), at the KV-cache dtypes "
                         "it declares", (FA3,))
FLASHMLA = Backend("FLASHMLA", "vllm.v1.attention.backends.mla.flashmla:FlashMLABackend", "sm_90", (9, 0),
                   "second MLA choice below sm_100, after FLASH_ATTN_MLA (vllm/platforms/cuda.py:151); the first "
                   "that accepts an fp8 KV cache",
                   (FLASHMLA_DECODE,))
FLASHINFER_MLA = Backend("FLASHINFER_MLA", "vllm.v1.attention.backends.mla.flashinfer_mla:FlashInferMLABackend",
                         "sm_100", (10, 0), "first MLA choice on sm_100 (vllm/platforms/cuda.py:123)",
                         (FLASHINFER_MLA_DECODE,))
TRITON_MLA = Backend("TRITON_MLA", "vllm.v1.attention.backends.mla.triton_mla:TritonMLABackend", "sm_90", (9, 0),
                     "the MLA fallback below sm_100 (vllm/platforms/cuda.py:153)", (TRITON_MLA_DECODE,))
