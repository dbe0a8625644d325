"""Seeded faults: named, deliberately broken variants of impl and kernels.

A verification suite must show that it bites. Each fault here is a small, realistic planner or
kernel bug that a code path switches on by name; `verify mutants` turns each one on (through
the KVPROOF_FAULTS environment variable, so pytest-xdist workers see it too) and runs the checks
that must catch it. With no fault active every hook is a no-op.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

ENV = "KVPROOF_FAULTS"

# name -> what the broken variant does. The checks that must kill each live in kvproof.ci.mutants.
FAULTS: dict[str, str] = {
    "offset_skips_null_slot": "page offsets forget that page 0 is the null parent's last slot",
    "field_end_in_elements": "a page's next field starts after the previous one's elements, not bytes",
    "field_offset_unrounded": "a page's fields are laid end to end: offsets not rounded up to the element size",
    "stride_in_elements": "a field's page stride is computed in elements, not bytes",
    "split_count_floor_plus_one": "the state-group count is n_kda // n_mla + 1, not ceil(n_kda / n_mla): "
    "right for K3 (69/24) and Kimi-Linear (20/7), one group too many whenever n_mla divides n_kda",
    "search_skips_first": "the search policy starts one past ceil(state / page), skipping the first candidate",
    "draft_own_group": "draft layers get a group and packing of their own instead of joining full_attention",
    "draft_shares_target_plane": "draft layer j lands on target plane slot.j: draft planes left out of the count",
    "store_latent_no_sanitize": "store_latent writes NaN and +-inf latents unsanitized",
    "mla_decode_lse_log2": "mla_decode returns its LSE in base 2 instead of the natural log",
    "mla_page_stride_int32": "the latent kernels compute page x stride in int32 (wraps past 2^31)",
    "merge_state_single_block": "merge_state puts every head of a token in one block (fails at 96 heads)",
    "merge_state_empty_nan": "merge_state has no guard for two empty partitions (0/0 = NaN)",
    "kda_conv_shift_wrong_way": "kda_decode shifts the conv state the wrong way: the new input lands oldest",
    "kda_gate_sign": "kda_decode uses g = +5·σ(...) instead of −5·σ(...), so the state grows",
    "kda_beta_no_sigmoid": "kda_decode uses the β logit as β, without the sigmoid",
    "kda_dense_state_stride": "kda_decode walks state pages by the payload size, not the plan's stride",
    "kda_no_page_guard": "kda_decode dereferences page ids outside 1..pages−1 when unvalidated",
    "allocator_hands_out_null_page": "parent P's pages are numbered from (P-1)K, one too low: page 0 is handed out",
    "allocator_shares_parent": "the allocator takes a parent but leaves it on the free list: two groups own it",
    "allocator_double_free_parent": "freeing several pages of a parent returns it to the free list once per page",
    "allocator_reuses_live_page": "the allocator leaves a handed-out page on its free list: it is handed out again",
    "arena_dense_page_stride": "the arena's field views walk pages by payload bytes instead of the plan's stride",
    "capacity_largest_packing": "token capacity uses the largest packing of any group, state groups included",
    # Faults of an engine's own code: the adapter loads a temporary copy of the engine with the
    # edit of kvproof.engines.tokenspeed.mutants applied (the installed engine is never touched).
    "ts_k3_packing_floor": "tokenspeed's K3 recipe rounds K_mla = state / page down instead of up",
    "ts_k3_group_size_literal": "tokenspeed's K3 recipe puts 23 KDA layers in each state group (K3's 69 / 3) "
                                "instead of a third of the model's KDA layers",
    "ts_mamba2_kv_same_segment": "tokenspeed's mamba2 recipe puts an attention layer's K and V in the same segment",
    "ts_v4_state_own_plane": "tokenspeed's deepseek_v4 recipe moves the compressor state off the shared layer planes",
    "ts_plan_widened_stride": "tokenspeed's pack() gives every field a page stride 256 B wider than plane / K",
    "ts_bind_forgets_null_parent": "tokenspeed's bind() sizes each plane slab for N parents, not N + 1",
    "vllm_hybrid_block_floor": "vLLM's _align_hybrid_block_size rounds the block down: the attention page "
    "ends up smaller than the state page it must hold",
    "vllm_state_slab_by_payload": "vLLM lays each padded state layer's slab out by its payload, not its padded "
    "page (the walk-by-payload bug of LMCache#5166, in the planner)",
    "vllm_kernel_gets_raised_block": "vLLM hands the attention kernel the whole raised hybrid block instead of a "
    "kernel block it supports (vllm#25811: past FlashInfer's tokens-per-page limit on GB200)",
    "vllm_flashinfer_mla_gets_raised_block": "vLLM hands FlashInfer's MLA decode on sm_100 the whole raised hybrid "
    "block (vllm#25811's bug at the backend it hit: past FlashInfer's 64-token pages)",
    "vllm_flashinfer_gets_raised_block": "vLLM hands FlashInfer's trtllm-gen kernels on sm_100 the whole raised "
    "hybrid block (vllm#25811 as reported: Qwen3-Next on GB200; not a power-of-two page)",
    "vllm_spec_padding_unwidened": "vLLM pads the state page to the attention page as if no token were "
    "speculated, while the layers' state keeps the speculative conv rows (vllm#57721)",
    "vllm_split_page_padded": "vLLM reserves two pages' bytes per layer-outer block, so a block split into "
    "kernel pages (FlashMLA's 64 tokens) is no longer one dense page",
    "lmcache_walks_by_payload": "the catalog records LMCache as walking state pages by their payload, not the "
    "padded page (LMCache#5166): one flipped reader entry",
    "launch_dense_tp_unchecked": "verify config drops the rule dense tp == attention tp under attention DP",
    # One per other launch rule (spec/launch_fix.py UNCHECKED): the rule's row dropped from the table.
    "launch_world_product_unchecked": "verify config drops the rule world = pp x attention tp x dp",
    "launch_tp_divides_heads_unchecked": "verify config drops the rule attention tp divides the head counts",
    "launch_dense_tp_tiles_stage_unchecked": "verify config drops the rule dense tp divides the stage",
    "launch_merge_state_heads_unchecked": "verify config drops the rule untiled merge_state holds <= 64 heads",
    "launch_dist_init_addr_unchecked": "verify config drops the rule dp or nnodes > 1 needs --dist-init-addr",
    "launch_moe_tiles_stage_unchecked": "verify config drops the rule MoE tp x EP divides the stage",
    "launch_moe_tp_or_ep_unchecked": "verify config drops the rule MoE tp and EP are not both above 1",
    "launch_dcp_divides_tp_unchecked": "verify config drops the rule DCP divides attention tp",
    "launch_nodes_tile_world_unchecked": "verify config drops the rule nnodes divides the world",
    "launch_pp_without_attention_dp_unchecked": "verify config drops the rule dp > 1 needs pp 1",
    "launch_pp_needs_prefill_role_unchecked": "verify config drops the rule pp > 1 needs --disaggregation-mode "
    "prefill",
    "launch_pp_within_layers_unchecked": "verify config drops the rule pp <= the model's layers",
    "launch_kv_cache_dtype_unchecked": "verify config drops the rule --kv-cache-dtype is in the contract",
    "launch_cache_contract_unchecked": "verify config skips the cache contract at the launch's point",
    "launch_fix_ignores_flag_count": "verify config's fix search drops its first objective, the flags changed",
    "launch_engine_moe_check_dropped": "verify config --engine forgets resolve_parallelism's MoE tp / EP check "
    "after the Mapping, so tokenspeed seems to accept MoE tp and EP both above 1",
    "plan_draft_bound_dropped": "verify plan checks a draft plan against the engine's bound (none) instead of the "
    "one the user accepts: the draft padding finding never shows",
    "draft_takes_target_dtype": "draft layers silently take the target's cache dtype instead of the draft's",
}

_active: set[str] = {name for name in os.environ.get(ENV, "").split(",") if name}


def active(name: str) -> bool:
    return name in _active


@contextmanager
def inject(name: str) -> Iterator[None]:
    """Turn one fault on for the duration of a block (tests that show a check bites)."""
    if name not in FAULTS:
        raise KeyError(f"unknown fault {name!r}")
    _active.add(name)
    try:
        yield
    finally:
        _active.discard(name)
