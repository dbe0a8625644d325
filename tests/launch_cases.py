"""Launches that break exactly one launch rule each (verify config), shared by its tests."""

from __future__ import annotations

ADDR = ("--dist-init-addr", "10.0.0.1:4000")
PREFILL = ("--disaggregation-mode", "prefill")
TILED = ("--assume", "merge_state_head_tiled=yes")
# rule -> (verify config options, a launch that breaks that rule and no other)
BREAKS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "world_product": (TILED, ("--world-size", "8", "--tp", "2", "--data-parallel-size", "2", *ADDR)),
    "tp_divides_heads": (TILED, ("--tp", "5")),
    "dense_tp_is_attention_tp": (TILED, ("--tp", "2", "--data-parallel-size", "4", "--dense-tp-size", "8", *ADDR)),
    "dense_tp_tiles_stage": (TILED, ("--tp", "8", "--dense-tp-size", "3")),
    "merge_state_heads": (("--assume", "merge_state_head_tiled=no"), ("--tp", "1", "--data-parallel-size", "8", *ADDR)),
    "dist_init_addr": (TILED, ("--tp", "2", "--data-parallel-size", "4")),
    "moe_tiles_stage": (TILED, ("--tp", "8", "--moe-tp-size", "3")),
    "moe_tp_or_ep": (TILED, ("--tp", "8", "--ep-size", "4", "--moe-tp-size", "2")),
    "dcp_divides_tp": (TILED, ("--tp", "8", "--decode-context-parallel-size", "3")),
    "nodes_tile_world": (TILED, ("--tp", "8", "--nnodes", "3", *ADDR)),
    "pp_without_attention_dp": (TILED, ("--pipeline-parallel-size", "2", "--tp", "4", "--data-parallel-size", "2",
                                        *ADDR, *PREFILL)),
    "pp_needs_prefill_role": (TILED, ("--pipeline-parallel-size", "2", "--tp", "4")),
    "pp_within_layers": (TILED, ("--pipeline-parallel-size", "96", "--tp", "1", *PREFILL)),
    "kv_cache_dtype": (TILED, ("--tp", "8", "--kv-cache-dtype", "mxfp8")),
    "cache_contract": ((*TILED, "--policy", "pinned12"), ("--tp", "4", "--kv-cache-dtype", "fp8")),
}
