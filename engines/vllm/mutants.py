"""Historical vLLM layout bugs, reintroduced by replacing one vLLM function for the planning call.

vLLM's files are never edited: while a fault declared here is switched on (kvproof.impl.faults),
the planner runs with one function of the installed vLLM swapped for a broken variant of it (the
kind of change a pull request makes), so `verify mutants` shows that `verify engine vllm` flags a
broken vLLM, not only a broken kvproof. A replacement whose target no longer exists raises: a
mutant that silently stopped applying proves nothing.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kvproof.engines.interface import Mutant
from kvproof.engines.replaced import replaced
from kvproof.engines.vllm.planner import layer_spec
from kvproof.engines.vllm.platform import Vllm, cuda_assumed, modules
from kvproof.impl import faults

faults.declare({
    # vllm_*: the replacements of PATCHES; lmcache_*: catalog.Model.state_readers' hook; adapter_*: planner._specs'.
    "vllm_hybrid_block_floor": "vLLM's _align_hybrid_block_size rounds the block down: the attention page ends up "
    "smaller than the state page it must hold",
    "vllm_state_slab_by_payload": "vLLM lays each padded state layer's slab out by its payload, not its padded page "
    "(the walk-by-payload bug of LMCache#5166, in the planner)",
    "vllm_kernel_gets_raised_block": "vLLM hands the attention kernel the whole raised hybrid block instead of a "
    "kernel block it supports (vllm#25811: past FlashInfer's tokens-per-page limit on GB200)",
    "vllm_flashinfer_mla_gets_raised_block": "vLLM hands FlashInfer's MLA decode on sm_100 the whole raised hybrid "
    "block (vllm#25811's bug at the backend it hit: past FlashInfer's 64-token pages)",
    "vllm_flashinfer_gets_raised_block": "vLLM hands FlashInfer's trtllm-gen kernels on sm_100 the whole raised "
    "hybrid block (vllm#25811 as reported: Qwen3-Next on GB200; not a power-of-two page)",
    "vllm_spec_padding_unwidened": "vLLM pads the state page to the attention page as if no token were speculated, "
    "while the layers' state keeps the speculative conv rows (vllm#57721)",
    "vllm_split_page_padded": "vLLM reserves two pages' bytes per layer-outer block, so a block split into kernel "
    "pages (FlashMLA's 64 tokens) is no longer one dense page",
    "vllm_mamba1_dtype_unaligned": "vLLM's hybrid alignment sizes a Mamba-1 state page by the model dtype, dropping "
    "--mamba-cache-dtype, while the layers keep their states at it (Jamba's model class and its MambaMixer disagree)",
    "vllm_falcon_h1_state_unwidened": "FalconH1's model class sizes the Mamba2 state the alignment pads by without "
    "the speculative conv rows its MambaMixer2 layers keep (vllm#57721 as 0.30.0 and 0.31.0 shipped it)",
    "vllm_zamba2_head_dim_unexpanded": "Zamba2's model class sizes the Mamba2 state by a head of hidden_size / "
    "n_mamba_heads, while its MambaMixer2 layers keep heads of the expanded intermediate size / n_mamba_heads",
    "vllm_olmo_hybrid_state_unwidened": "OlmoHybrid's model class sizes the GDN state the alignment pads by without "
    "the speculative conv rows its layers keep (vllm#57721's kind, at another class)",
    "vllm_qwen3_5_state_unwidened": "Qwen3.5's model class sizes the GDN state the alignment pads by without the "
    "speculative conv rows its layers keep (vllm#57721's kind, at the Qwen3.5 / 3.6 classes)",
    "vllm_minicpm_v46_state_unwidened": "MiniCPM-V 4.6's model class sizes the GDN state the alignment pads by "
    "without the speculative conv rows its Qwen3.5 layers keep (vllm#57721's kind, at a multimodal wrapper)",
    "vllm_qwen4_exp_state_unwidened": "Qwen4-Exp's model class sizes the GDN state the alignment pads by without "
    "the speculative conv rows its layers keep (vllm#57721's kind, at the class that sizes two states)",
    "vllm_kimi_linear_state_unwidened": "Kimi-Linear's model class sizes the KDA state the alignment pads by without "
    "the speculative conv rows its layers keep (vllm#57721's kind, at the class Kimi-K3's delegates to)",
    "vllm_bailing_v3_state_unwidened": "Bailing V3's model class sizes the KDA state the alignment pads by without "
    "the speculative conv rows its layers keep (vllm#57721's kind, at the Ling 3.0 class)",
    "vllm_short_conv_dtype_unaligned": "vLLM's hybrid alignment sizes a ShortConv state page by the model dtype, "
    "dropping --mamba-cache-dtype, while the layers keep their states at it (the Mamba-1 bug at LFM2's classes)",
    "vllm_linear_attention_dtype_unaligned": "vLLM's hybrid alignment sizes a linear-attention state page by the "
    "model dtype, dropping --mamba-cache-dtype, while the layers keep their states at it (the Mamba-1 bug at Bailing "
    "V2.5's class)",
    "vllm_block_outermost_by_largest_page": "vLLM sizes a block-outermost block by the largest layer page of a "
    "group, not the group's layers together: the layers after the first run into the next block",
    "vllm_draft_kernel_gets_raised_block": "vLLM hands the cache group of a DSpark draft's non-causal MLA layers "
    "the whole raised hybrid block (vllm#25811's bug where only the draft's attention group meets it)",
    "vllm_draft_page_padded_not_raised": "vLLM pads a smaller non-MLA attention page (the target's under a draft of a "
    "wider KV dtype) to the largest page, as it pads a page that does not divide it, where it raises the layer's "
    "block to fill it (hypothetical: 0.29.0 to 0.33.0 raise the block)",
    "vllm_draft_takes_target_kernel_block": "vLLM picks every attention group's kernel block for the first backend it "
    "finds on the built layers (the target's), so an MTP draft's layers at a backend of their own get the target's "
    "pick (hypothetical: 0.30.0 on pick each cache group's over its own attention groups' backends, "
    "prepare_kernel_block_sizes, and 0.32.0 on again per attention group, v1/worker/utils.py:291-299)",
    "adapter_draft_at_target_geometry": "kvproof's vLLM planner gives a draft checkpoint's attention layers the "
    "target's page geometry, not the draft checkpoint's own",
    "lmcache_walks_by_payload": "the catalog records LMCache as walking state pages by their payload, not the padded "
    "page (LMCache#5166): one flipped reader entry",
})


def _floor_cdiv(a: int, b: int) -> int:
    return max(1, a // b)


def _payload_layer_stride(original: Callable[..., Any]) -> Callable[..., Any]:
    """compute_layout_strides with the state page's payload in place of its padded page: the
    layer-outer slab of a padded state layer is sized by payload, as a consumer that walks state
    pages by payload size does (LMCache#5166)."""
    def broken(spec: Any, num_blocks: int, num_layers: int, layout: Any, fixed_strides: Any = None) -> Any:
        strides = original(spec, num_blocks, num_layers, layout, fixed_strides=fixed_strides)
        if hasattr(spec, "shapes") and spec.page_size_padded:
            return (spec.real_page_size_bytes * num_blocks, *strides[1:])
        return strides
    return broken


def _manager_block_to_kernel(_original: Callable[..., Any]) -> Callable[..., Any]:
    """select_common_block_size that hands every kernel the manager's block: the raised hybrid
    block reaches a kernel past its tokens-per-page limit, as FlashInfer's TRTLLM kernels got
    Qwen3-Next's block on GB200 while its backend declared any block size (vllm#25811)."""
    def broken(kv_manager_block_size: int, backends: Any, kv_cache_specs: Any = None) -> int:
        return kv_manager_block_size
    return broken


def _draft_group_gets_manager_block(original: Callable[..., Any]) -> Callable[..., Any]:
    """select_common_block_size that hands the manager's block to a cache group holding a layer of non-causal
    multi-token decode (a DSpark draft's, the one spec that sets it), and picks every other group's as vLLM does."""
    def broken(kv_manager_block_size: int, backends: Any, kv_cache_specs: Any = None) -> int:
        if any(getattr(spec, "non_causal_multi_token_decode", False) for spec in kv_cache_specs or ()):
            return kv_manager_block_size
        return int(original(kv_manager_block_size, backends, kv_cache_specs))
    return broken


def _draft_takes_target_kernel_block(original: Callable[..., Any]) -> Callable[..., Any]:
    """select_common_block_size that answers for the target's backend (the first vLLM finds on the built layers)
    whatever backends it is asked about (a merged group's spec keeps no is_draft to tell a draft's group by)."""
    def broken(kv_manager_block_size: int, backends: Any, kv_cache_specs: Any = None) -> int:
        target = cuda_assumed(modules())._answers().backends[0]
        return int(original(kv_manager_block_size, [target for _ in backends], kv_cache_specs))
    return broken


def _padding_unwidened(original: Any) -> Any:
    """Platform._align_hybrid_block_size planned as if no token were speculated: the state page it
    pads to leaves out the conv state's speculative rows that the layers' own state shape adds (a
    model class whose get_mamba_state_shape_from_config drops num_spec, vllm#57721)."""
    def broken(cls: Any, vllm_config: Any, backend_cls: Any) -> Any:
        speculative = vllm_config.speculative_config
        object.__setattr__(vllm_config, "speculative_config", None)
        try:
            return original.__func__(cls, vllm_config, backend_cls)
        finally:
            object.__setattr__(vllm_config, "speculative_config", speculative)
    return classmethod(broken)


def _state_dtype_dropped(calculation: str) -> Callable[[Any], Any]:
    """Platform._align_hybrid_block_size with one MambaStateDtypeCalculator method's state dtypes taken as
    the model's: the page it pads to is what the model class's get_mamba_state_dtype_from_config would
    size were it to drop --mamba-cache-dtype, while the layers' own get_state_dtype keeps honouring it (the
    model class and its layer computing one fact twice, as in vllm#57721). Only a model whose class asks
    `calculation` is changed: Mamba-1's mamba1_state_dtype (Jamba), ShortConv's short_conv_state_dtype (LFM2),
    linear attention's linear_attention_state_dtype (Bailing V2.5)."""
    def factory(original: Any) -> Any:
        def broken(cls: Any, vllm_config: Any, backend_cls: Any) -> Any:
            from vllm.model_executor.layers.mamba import mamba_utils

            calculator: Any = mamba_utils.MambaStateDtypeCalculator
            kept = vars(calculator)[calculation]

            def dropped(c: Any, model_dtype: Any, *cache_dtypes: Any) -> Any:
                return kept.__func__(c, model_dtype, *("auto" for _ in cache_dtypes))
            setattr(calculator, calculation, classmethod(dropped))
            try:
                return original.__func__(cls, vllm_config, backend_cls)
            finally:
                setattr(calculator, calculation, kept)
        return classmethod(broken)
    return factory


def _num_spec_dropped(original: Any) -> Any:
    """A model class's get_mamba_state_shape_from_config as if no token were speculated: the shape
    0.30.0 and 0.31.0 computed for FalconH1 (falcon_h1.py:542 / :540 there pass no num_spec), while
    its MambaMixer2 layers keep 3 + num_spec conv rows (mamba_mixer2.py:555)."""
    def broken(cls: Any, vllm_config: Any) -> Any:
        speculative = vllm_config.speculative_config
        object.__setattr__(vllm_config, "speculative_config", None)
        try:
            return original.__func__(cls, vllm_config)
        finally:
            object.__setattr__(vllm_config, "speculative_config", speculative)
    return classmethod(broken)


def _head_dim_unexpanded(original: Any) -> Any:
    """Zamba2ForCausalLM.get_mamba_state_shape_from_config with the temporal state's head taken as
    hidden_size / n_mamba_heads: the class and its layers computing the head twice, the layer from the
    intermediate size (zamba2.py:545), the class here from the unexpanded width."""
    def broken(cls: Any, vllm_config: Any) -> Any:
        conv, (heads, _head, state) = original.__func__(cls, vllm_config)
        hf = vllm_config.model_config.hf_config
        return conv, (heads, hf.hidden_size // hf.n_mamba_heads, state)
    return classmethod(broken)


def _page_doubled(original: Callable[..., Any]) -> Callable[..., Any]:
    """_get_layer_block_stride reserving two aligned pages per block (a double-buffered page): every
    layer-outer page gains a tail as long as itself. A kernel that steps by the tensor's stride
    still reads each page right; where vLLM splits the block into kernel pages, kernel page j of
    block b no longer lands in block b (vLLM's own create_kv_cache_views refuses that on the GPU)."""
    def broken(spec: Any) -> int:
        return 2 * original(spec)
    return broken


def _smaller_page_padded(original: Callable[..., Any]) -> Callable[..., Any]:
    """unify_kv_cache_spec_page_size that takes its padding branch first: a non-MLA attention page smaller than the
    largest is padded to it (as vLLM pads one that does not divide the largest, v1/core/kv_cache_planning.py:
    396-399) where vLLM raises the layer's block by the pages' ratio (:392-395), so the layer keeps its block of
    tokens in a page as large as the others'. MLA pages, which vLLM never pads (:400-405), and state pages are left
    to vLLM. Pages of different sizes meet it: a target's and its draft's at another KV dtype or geometry."""
    def broken(kv_cache_spec: Any) -> Any:
        from dataclasses import replace as replaced_spec

        from vllm.v1.kv_cache_interface import AttentionSpec, MLAAttentionSpec

        largest = max((spec.page_size_bytes for spec in kv_cache_spec.values()), default=0)
        padded = {name: replaced_spec(spec, page_size_padded=largest)
                  if spec.page_size_bytes < largest and isinstance(spec, AttentionSpec)
                  and not isinstance(spec, MLAAttentionSpec) else spec
                  for name, spec in kv_cache_spec.items()}
        return original(padded)
    return broken


def _block_by_largest_page(original: Callable[..., Any]) -> Callable[..., Any]:
    """_get_kv_cache_bytes_per_block that sizes a block-outermost block by the largest layer page of any group,
    as if each group held one layer: still rounded up to the layers' alignment, but a group's second layer and
    those after it now start where the next block's first layer does (get_kv_cache_config_from_groups steps
    each layer's offset by its page within the block, v1/core/kv_cache_planning.py:730-732). The alignment to a
    HiSparse hot group's page (:595-599) is left out with the rest: no model kvproof plans has such a group. A
    layer-outer layout is sized as before."""
    def broken(kv_cache_groups: Any, layout: Any) -> int:
        if not layout.is_block_outermost:
            return int(original(kv_cache_groups, layout))
        specs = [layer_spec(group, name) for group in kv_cache_groups for name in group.layer_names]
        alignment = math.lcm(*(spec.get_block_stride_alignment() for spec in specs))
        return -(-max(spec.page_size_bytes for spec in specs) // alignment) * alignment
    return broken


# The module that holds vLLM's planning helpers at this release: the one EngineCore._initialize_kv_caches
# imports get_kv_cache_configs from (vllm.v1.core.kv_cache_planning in 0.33.0, vllm.v1.core.kv_cache_utils
# before; platform.engine_core), so a seeded bug there patches whichever module plans.
PLANNING = "<planning>"

# fault name -> (dotted module path or PLANNING, attribute or Class.attribute, replacement factory)
PATCHES: dict[str, tuple[str, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = {
    # _align_hybrid_block_size rounds B = q * ceil(M / (q * A1)) down: the attention page ends up
    # smaller than the state page it must hold (the bug the alignment exists for).
    "vllm_hybrid_block_floor": ("vllm.utils.math_utils", "cdiv", lambda _original: _floor_cdiv),
    "vllm_state_slab_by_payload": (PLANNING, "compute_layout_strides", _payload_layer_stride),
    "vllm_kernel_gets_raised_block": ("vllm.v1.worker.utils", "select_common_block_size", _manager_block_to_kernel),
    # the same replacement, killed only at FLASHINFER_MLA@sm_100 (ci/mutants.py): FlashInfer's own page limit
    "vllm_flashinfer_mla_gets_raised_block": ("vllm.v1.worker.utils", "select_common_block_size",
                                              _manager_block_to_kernel),
    # and at FLASHINFER@sm_100 with TRTLLM on: trtllm-gen's power-of-two pages
    "vllm_flashinfer_gets_raised_block": ("vllm.v1.worker.utils", "select_common_block_size",
                                          _manager_block_to_kernel),
    "vllm_draft_kernel_gets_raised_block": ("vllm.v1.worker.utils", "select_common_block_size",
                                            _draft_group_gets_manager_block),
    "vllm_spec_padding_unwidened": ("vllm.platforms.interface", "Platform._align_hybrid_block_size",
                                    _padding_unwidened),
    "vllm_split_page_padded": (PLANNING, "_get_layer_block_stride", _page_doubled),
    "vllm_mamba1_dtype_unaligned": ("vllm.platforms.interface", "Platform._align_hybrid_block_size",
                                    _state_dtype_dropped("mamba1_state_dtype")),
    "vllm_short_conv_dtype_unaligned": ("vllm.platforms.interface", "Platform._align_hybrid_block_size",
                                        _state_dtype_dropped("short_conv_state_dtype")),
    "vllm_linear_attention_dtype_unaligned": ("vllm.platforms.interface", "Platform._align_hybrid_block_size",
                                              _state_dtype_dropped("linear_attention_state_dtype")),
    "vllm_falcon_h1_state_unwidened": ("vllm.model_executor.models.falcon_h1",
                                       "FalconH1ForCausalLM.get_mamba_state_shape_from_config", _num_spec_dropped),
    "vllm_zamba2_head_dim_unexpanded": ("vllm.model_executor.models.zamba2",
                                        "Zamba2ForCausalLM.get_mamba_state_shape_from_config", _head_dim_unexpanded),
    "vllm_olmo_hybrid_state_unwidened": ("vllm.model_executor.models.olmo_hybrid",
                                         "OlmoHybridForCausalLM.get_mamba_state_shape_from_config", _num_spec_dropped),
    "vllm_qwen3_5_state_unwidened": ("vllm.model_executor.models.qwen3_5",
                                     "Qwen3_5ForConditionalGeneration.get_mamba_state_shape_from_config",
                                     _num_spec_dropped),
    "vllm_minicpm_v46_state_unwidened": ("vllm.model_executor.models.minicpmv4_6",
                                         "MiniCPMV4_6ForConditionalGeneration.get_mamba_state_shape_from_config",
                                         _num_spec_dropped),
    "vllm_qwen4_exp_state_unwidened": ("vllm.models.qwen4_exp.nvidia.model",
                                       "Qwen4ExpForCausalLM.get_gdn_mamba_state_shape_from_config", _num_spec_dropped),
    "vllm_kimi_linear_state_unwidened": ("vllm.models.kimi_k3.nvidia.model",
                                         "KimiLinearForCausalLM.get_mamba_state_shape_from_config", _num_spec_dropped),
    "vllm_bailing_v3_state_unwidened": ("vllm.model_executor.models.bailing_moe_v3",
                                        "BailingMoeV3ForCausalLM.get_mamba_state_shape_from_config", _num_spec_dropped),
    "vllm_block_outermost_by_largest_page": (PLANNING, "_get_kv_cache_bytes_per_block", _block_by_largest_page),
    "vllm_draft_page_padded_not_raised": (PLANNING, "unify_kv_cache_spec_page_size", _smaller_page_padded),
    "vllm_draft_takes_target_kernel_block": ("vllm.v1.worker.utils", "select_common_block_size",
                                             _draft_takes_target_kernel_block),
}


def active() -> list[str]:
    return [name for name in PATCHES if faults.active(name)]


@contextmanager
def applied(v: Vllm) -> Iterator[None]:
    """Every active vLLM fault's replacement in place for the block, the originals restored after
    (planner.Patches: a replacement names its module, or PLANNING: `v.planning`)."""
    with replaced((name, v.planning if PATCHES[name][0] == PLANNING else importlib.import_module(PATCHES[name][0]),
                   PATCHES[name][1], PATCHES[name][2]) for name in active()):
        yield


# One tp, no pipeline stages, against the baseline: clean at 0.33.0 (its tp_block_size findings span tp,
# pp_block_size pp 8; Zamba2-7B's family pads past the bound at tp 1, baselined).
TP1 = "verify engine vllm --tp 1 --baseline engines/vllm/baseline.json --assume pp=1"  # more assumptions go last

MUTANTS: tuple[Mutant, ...] = (
    Mutant("vllm_hybrid_block_floor", (TP1,), expect="boots"),
    # at a layer-outer layout, where the overlap shows: GLM-5.3-Flash's block-outermost one would put its layers at
    # offsets that move with N, which the plan reader refuses (NOT VERIFIED (adapter); docs/engines/vllm.md)
    Mutant("vllm_state_slab_by_payload", ("verify engine vllm --recipe qwen3-next-80b-a3b --tp 1 --baseline "
                                          "engines/vllm/baseline.json --assume pp=1",), expect="no_overlap"),
    Mutant("vllm_kernel_gets_raised_block", (TP1,), expect="kernel_page"),
    Mutant("vllm_flashinfer_mla_gets_raised_block", (TP1 + " backend=FLASHINFER_MLA",), expect="kernel_page"),
    Mutant("vllm_flashinfer_gets_raised_block", (TP1 + " backend=FLASHINFER@sm_100 trtllm=on",),
           expect="kernel_page"),
    # only a DSpark draft's group: at FLASHINFER_MLA@sm_100 the draft's layers join the target's MLA group, whose
    # FlashInfer MLA decode takes pages of 32 or 64 tokens
    Mutant("vllm_draft_kernel_gets_raised_block",
           ("verify engine vllm --recipe kimi-k3-dspark --tp 1 --baseline engines/vllm/baseline.json --assume spec=1 "
            "backend=FLASHINFER_MLA",), expect="kernel_page"),
    Mutant("vllm_spec_padding_unwidened", (TP1,), expect="boots"),
    Mutant("vllm_split_page_padded", (TP1,), expect="exact_stride"),
    # only Jamba (the one Mamba-1 model) asks mamba1_state_dtype: its float32 states, unaligned
    Mutant("vllm_mamba1_dtype_unaligned", ("verify engine vllm --recipe jamba-v0.1 --tp 1 --assume pp=1 "
                                           "mamba_dtype=float32 backend=FLASH_ATTN",), expect="boots"),
    # each family's own: FalconH1's two-token points (one token stays within the padding), Zamba2's drafted ones
    # (no bound: its undrafted tp-1 points pad past 0.25, baselined)
    Mutant("vllm_falcon_h1_state_unwidened", ("verify engine vllm --recipe falcon-h1-0.5b-family-0 --tp 1 "
                                              "--assume pp=1 spec=2",), expect="boots"),
    Mutant("vllm_zamba2_head_dim_unexpanded", ("verify engine vllm --recipe zamba2-7b-family-0 --tp 1 "
                                               "--assume pp=1 spec=1 spec=2",), expect="boots"),
    # OLMo Hybrid's at 3 tokens: at 1 and 2 the page's 53,760 B of slack holds the conv rows the class leaves out
    Mutant("vllm_olmo_hybrid_state_unwidened", ("verify engine vllm --recipe olmo-hybrid-7b-family-0 --tp 1 "
                                                "--assume pp=1 spec=3",), expect="boots"),
    # Qwen3.5's at Qwen3.5-27B's one MTP token: its 784-token page holds the state with 4,096 B to spare, one conv
    # row 20,480 B (the MoE class inherits the method: every Qwen3.5 / 3.6 checkpoint plans with it)
    Mutant("vllm_qwen3_5_state_unwidened", ("verify engine vllm --recipe qwen3.5-27b --tp 1 --assume pp=1 spec=1 "
                                            "backend=FLASH_ATTN",), expect="boots"),
    # Kimi-Linear's at 2 ngram tokens: its 1,920-token page holds the state with 40,960 B to spare, one conv row
    # 24,576 B (Kimi-K3's class delegates to it)
    Mutant("vllm_kimi_linear_state_unwidened", ("verify engine vllm --recipe kimi-linear-48b-a3b --tp 1 --dtype auto "
                                                "--assume pp=1 spec=2 backend=FLASHMLA mamba_dtype=auto prefix=off",),
           expect="boots"),
    # Bailing V3's at 3 (ngram) tokens: at 1 and 2 the 256-token page's 14,336 B of slack holds the rows the class
    # leaves out (6,144 B each at bf16)
    Mutant("vllm_bailing_v3_state_unwidened", ("verify engine vllm --recipe ling-3.0-tiny-family-0 --tp 1 --dtype "
                                               "auto --assume pp=1 spec=3 backend=FLASHMLA@sm_90 mamba_dtype=auto "
                                               "prefix=off",), expect="boots"),
    # MiniCPM-V 4.6's at 3 tokens: at 1 and 2 the 288-token page's 28,672 B of slack holds the rows the class leaves out
    Mutant("vllm_minicpm_v46_state_unwidened", ("verify engine vllm --recipe minicpm-v-4.6-family-0 --tp 1 "
                                                "--assume pp=1 spec=3",), expect="boots"),
    # Qwen4-Exp's at one MTP token: its 1,568-token page holds the state with 4,096 B to spare, one conv row 20,480 B
    # (the multimodal class's get_mamba_specs_from_config asks the language model class's)
    Mutant("vllm_qwen4_exp_state_unwidened", ("verify engine vllm --recipe qwen3.8-flash-next-family-0 --tp 1 "
                                              "--assume pp=1 spec=1 backend=QWEN4_EXP_QSA_TRITON@sm_90",),
           expect="boots"),
    # LFM2's at LFM2.5-1.2B, fp8 and float32 states, where the class page is the attention page (LFM2-350M's is a
    # quarter of it: the slack hides the bug)
    Mutant("vllm_short_conv_dtype_unaligned", ("verify engine vllm --recipe lfm2.5-1.2b-base --tp 1 --dtype fp8 "
                                               "--baseline engines/vllm/baseline.json --assume pp=1 "
                                               "mamba_dtype=float32 backend=FLASH_ATTN",), expect="boots"),
    # Bailing V2.5's at float32 states: the alignment sizes the page by a bf16 state, 524,288 B (a 512-token block),
    # where each layer keeps 1,048,576 B
    Mutant("vllm_linear_attention_dtype_unaligned", ("verify engine vllm --recipe ling-2.5-1t-family-0 --tp 1 "
                                                     "--dtype auto --assume pp=1 spec=0 backend=FLASHMLA@sm_90 "
                                                     "mamba_dtype=float32 prefix=off",), expect="boots"),
    # only GLM-5.3-Flash's cache is laid out block-outermost (its tail ring's backend admits no other layout)
    Mutant("vllm_block_outermost_by_largest_page", ("verify engine vllm --recipe glm53-flash-family-0 --tp 1 "
                                                    "--baseline engines/vllm/baseline.json --assume pp=1",),
           expect="no_overlap"),
    # a bf16 draft over an fp8 cache leaves the target's attention pages the smaller; FlashInfer's kernels take their
    # blocks split into kernel pages, which tile only a dense page (at FLASH_ATTN and TRITON_ATTN a kernel takes the
    # whole block and reads a padded page through its stride: planner._split)
    Mutant("vllm_draft_page_padded_not_raised", ("verify engine vllm --recipe qwen3.5-35b-a3b --tp 1 --dtype fp8 "
                                                 "--baseline engines/vllm/baseline.json --assume pp=1 spec=1 "
                                                 "backend=FLASHINFER@sm_90 draft_dtype=auto",), expect="exact_stride"),
    # an MTP draft at FLASHMLA under a FLASH_ATTN_MLA target (vLLM's own choice for a bf16 target and an fp8 draft on
    # sm_90, unpinned): FlashMLA's decode takes 64-token pages, FLASH_ATTN_MLA's pick the whole 256-token block
    Mutant("vllm_draft_takes_target_kernel_block", ("verify engine vllm --recipe ling-2.6-flash-family-0 --tp 1 "
                                                    "--baseline engines/vllm/baseline.json --assume pp=1 spec=1 "
                                                    "draft_backend=FLASHMLA",), expect="kernel_page"),
    # not a replaced vLLM function: the catalog's LMCache reader entry flipped (catalog.Model.state_readers)
    Mutant("lmcache_walks_by_payload", (TP1,), expect="consumer_stride"),
    # kvproof's own planner: the shipped EAGLE3 drafts have their targets' geometry, Qwen3.5-35B-A3B's DFLASH draft
    # another one, whose layers vLLM then groups apart
    Mutant("adapter_draft_at_target_geometry",
           ("tests/test_vllm_eagle3.py::test_a_draft_layer_is_planned_at_the_draft_checkpoints_own_geometry",
            "tests/test_vllm_dflash.py::test_the_drafts_eight_layers_follow_the_targets_forty_at_their_own_geometry")),
)
