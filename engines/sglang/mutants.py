"""Seeded bugs in SGLang's pools, reintroduced by replacing one SGLang function for the planning call.

SGLang's files are never edited: while a fault declared here is switched on (kvproof.impl.faults),
the planner builds the pools with one method of the imported SGLang swapped for a broken variant
(planner.Patches), so `verify mutants` shows that `verify engine sglang` flags a broken SGLang. A
replacement whose target no longer exists raises: a mutant that silently stopped applying proves
nothing.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kvproof.engines.interface import Mutant
from kvproof.engines.replaced import replaced
from kvproof.engines.sglang import unified_mutants
from kvproof.impl import faults

faults.declare({
    "sglang_mamba_no_dummy_slot": "SGLang's MambaPool allocates its conv states for `size` slots, not size + 1, "
    "forgetting slot 0, the dummy its allocator never hands out (allocator/mamba.py), while the allocator still "
    "hands out slots 1..size",
    "sglang_conv_item_merged_segments": "SGLang's MambaPool tells the disaggregation transfer a conv state entry's "
    "item length for the whole conv row of every attention-tp rank (the full q, k, v sub-block dims of "
    "get_state_conv_shard_groups) instead of its own rank's segments, as when the conv state's TP segments are merged",
    "sglang_pd_kv_heads_no_floor": "SGLang's heterogeneous-tp KV transfer counts the KV heads per rank it sends as "
    "the model's KV heads // tp, without the floor of one (compute_head_slice_params), so a side with more ranks "
    "than KV heads sends none",
    "sglang_pd_state_writer_unwrapped": "SGLang's Mamba state transfer from more prefill ranks to fewer decode ranks "
    "places a prefill rank's slice by its rank in the whole group, not by its index among the ranks writing one "
    "decode rank (compute_mamba_state_slice_blocks), so the later writers write past the decode slot",
    "sglang_mxfp8_scales_no_padding_page": "SGLang's MHATokenToKVPoolMXFP8 allocates its UE8M0 scale buffers for "
    "the pool's size tokens, not size + page_size as its K and V data (memory_pool.py), so the last page the "
    "allocator hands out has no scales",
    "sglang_spec_state_decode_prealloc": "SGLang's HybridReqToTokenPool sizes the Mamba pool's speculative "
    "intermediate states for its requests plus the decode side's pre-allocated ones (2 x size, the disaggregation "
    "decode default for up to 32 requests), which never speculate, beyond what the sizing priced, as sglang#23643 did",
    "sglang_spec_state_priced_prealloc": "SGLang's _handle_max_mamba_cache prices the speculative intermediate states "
    "of the decode side's pre-allocated slots too (3 x its requests), which the pool does not allocate (as after "
    "sglang#23643's fix), so the sizing takes gigabytes the pool never uses",
})


def _no_dummy_slot(original: Callable[..., None]) -> Callable[..., None]:
    """MambaPool.__init__ whose conv tensors lack the dummy slot: one slot fewer on their first
    axis (memory_pool.py's MambaPool allocates `size + 1`)."""
    def broken(self: Any, *args: Any, **kwargs: Any) -> None:
        import torch

        original(self, *args, **kwargs)
        conv = [torch.zeros((c.shape[0], c.shape[1] - 1, *c.shape[2:]), dtype=c.dtype, device=c.device)
                for c in self.mamba_cache.conv]
        self.mamba_cache = dataclasses.replace(self.mamba_cache, conv=conv)
    return broken


def _merged_conv_items(original: Callable[..., tuple[list[int], list[int], list[int]]]
                       ) -> Callable[..., tuple[list[int], list[int], list[int]]]:
    """MambaPool.get_contiguous_buf_infos whose conv entries' item lengths scale this rank's
    sliceable dim up to the sum of the full sub-block dims (memory_pool.py's returns
    `state_tensor[0].nbytes`)."""
    def broken(self: Any) -> tuple[list[int], list[int], list[int]]:
        ptrs, lens, items = original(self)
        dims, groups = self.get_state_dim_per_tensor(), self.get_state_conv_shard_groups()
        merged = [item if not subdims else item // dim * sum(subdims)
                  for item, dim, subdims in zip(items, dims, groups, strict=True)]
        return ptrs, lens, merged
    return broken


Heads = tuple[int, int, int, int]  # compute_head_slice_params: src start, heads sent, dst start, heads sent


def _heads_without_floor(original: Callable[..., Heads]) -> Callable[..., Heads]:
    """compute_head_slice_params whose heads sent are at most total // tp of the side that sets them
    (the decode side when it has at least as many ranks, else the prefill side): the per-rank count
    without staging_buffer.py's max(1, ·)."""
    def broken(src_tp: int, dst_tp: int, src_rank: int, dst_rank: int, total: int) -> Heads:
        src_start, count, dst_start, _ = original(src_tp, dst_tp, src_rank, dst_rank, total)
        count = min(count, total // (src_tp if src_tp > dst_tp else dst_tp))
        return src_start, count, dst_start, count
    return broken


def _writer_unwrapped(original: Callable[..., list[tuple[int, int, int]]]) -> Callable[..., list[tuple[int, int, int]]]:
    """compute_mamba_state_slice_blocks whose aggregation blocks sit at the writer's rank in the group,
    not at that rank modulo the writers per decode rank (utils.py: `local_writer_idx`)."""
    def broken(src_dim: int, dst_dim: int, src_attn_tp_size: int, dst_attn_tp_size: int, dst_tp_rank_in_group: int,
               local_tp_rank_in_group: int, conv_shard_groups: list[int] | None = None) -> list[tuple[int, int, int]]:
        blocks = original(src_dim, dst_dim, src_attn_tp_size, dst_attn_tp_size, dst_tp_rank_in_group,
                          local_tp_rank_in_group, conv_shard_groups)
        if src_attn_tp_size <= dst_attn_tp_size:
            return blocks
        shift = local_tp_rank_in_group - local_tp_rank_in_group % (src_attn_tp_size // dst_attn_tp_size)
        return [(src, dst + shift * size, size) for src, dst, size in blocks]
    return broken


def _decode_prealloc(original: Callable[..., None]) -> Callable[..., None]:
    """HybridReqToTokenPool.__init__ whose speculative states are sized for size + pre_alloc_size slots, the
    pre-allocated decode slots being 2 x size (memory_pool.py's HybridReqToTokenPool takes mamba_spec_state_size)."""
    def broken(self: Any, *args: Any, mamba_spec_state_size: int, size: int, **kwargs: Any) -> None:
        original(self, *args, size=size, mamba_spec_state_size=mamba_spec_state_size + 2 * size, **kwargs)
    return broken


def _priced_with_prealloc(original: Callable[..., float]) -> Callable[..., float]:
    """_handle_max_mamba_cache that prices the intermediate states of the decode side's pre-allocated slots
    too: 2 x (capped_reqs + 1) x per_req x D more than its own price (kv_cache_configurator.py:3372-3377)."""
    def broken(self: Any, total_rest_memory: float) -> float:
        import sys

        rest = original(self, total_rest_memory)
        runtime = sys.modules["sglang.srt.runtime_context"]
        schedule, drafts = runtime.get_schedule(), runtime.get_spec().speculative_num_draft_tokens
        if self.spec_algorithm.is_none() or not drafts:
            return rest
        capped = min(max(1, schedule.max_running_requests // self.attn_dp_size),
                     schedule.max_mamba_cache_size // self._calculate_mamba_ratio())
        per_req = self.mambaish_config.mamba2_cache_params.mamba_cache_per_req
        return rest - 2 * (capped + 1) * per_req * drafts / (1 << 30)
    return broken


def _scales_without_padding_page(original: Callable[..., None]) -> Callable[..., None]:
    """MHATokenToKVPoolMXFP8._create_buffers whose scale buffers lack one page of rows: a page fewer on their
    first axis (memory_pool.py's allocates m = size + page_size rows, as for the data)."""
    def broken(self: Any) -> None:
        import torch

        original(self)
        drop = 1 if self.mxfp8_sf_interleaved else self.page_size  # the first axis counts pages or rows
        for name in ("k_scale_buffer", "v_scale_buffer"):
            setattr(self, name, [torch.zeros((b.shape[0] - drop, *b.shape[1:]), dtype=b.dtype, device=b.device)
                                 for b in getattr(self, name)])
    return broken


# fault name -> (module, Class.attribute, replacement factory)
PATCHES: dict[str, tuple[str, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = {
    "sglang_mamba_no_dummy_slot": ("sglang.srt.mem_cache.memory_pool", "MambaPool.__init__", _no_dummy_slot),
    "sglang_conv_item_merged_segments": ("sglang.srt.mem_cache.memory_pool", "MambaPool.get_contiguous_buf_infos",
                                         _merged_conv_items),
    "sglang_pd_kv_heads_no_floor": ("sglang.srt.disaggregation.common.staging_buffer", "compute_head_slice_params",
                                    _heads_without_floor),
    "sglang_pd_state_writer_unwrapped": ("sglang.srt.disaggregation.utils", "compute_mamba_state_slice_blocks",
                                         _writer_unwrapped),
    "sglang_mxfp8_scales_no_padding_page": ("sglang.srt.mem_cache.memory_pool",
                                            "MHATokenToKVPoolMXFP8._create_buffers", _scales_without_padding_page),
    "sglang_spec_state_decode_prealloc": ("sglang.srt.mem_cache.memory_pool", "HybridReqToTokenPool.__init__",
                                          _decode_prealloc),
    "sglang_spec_state_priced_prealloc": ("sglang.srt.mem_cache.kv_cache_configurator",
                                          "KVCacheConfigurator._handle_max_mamba_cache", _priced_with_prealloc),
    **unified_mutants.PATCHES,  # the unified memory pool's (unified_mutants.py)
}


def active() -> list[str]:
    return [name for name in PATCHES if faults.active(name)]


@contextmanager
def applied(mods: dict[str, types.ModuleType], names: list[str] | None = None) -> Iterator[None]:
    """The replacements of the active faults (or of `names`) in place for the block, the originals
    restored after (a planner.Patches)."""
    with replaced((name, mods[PATCHES[name][0]], PATCHES[name][1], PATCHES[name][2])
                  for name in (active() if names is None else names)):
        yield


MUTANTS: tuple[Mutant, ...] = (
    # the dummy slot is the conv tensor's: every slot the allocator hands out lies past the shortened end
    Mutant("sglang_mamba_no_dummy_slot",
           ("verify engine sglang --tp 2 --dtype bf16 --assume page_size=1 unified=off",),
           expect="in_bounds"),
    # at tp 2 a Qwen3-Next conv slot holds half of each sub-block: the transfer steps twice its stride
    Mutant("sglang_conv_item_merged_segments",
           ("verify engine sglang --recipe qwen3-next-80b-a3b --tp 2 --dtype bf16 --assume page_size=1 "
            "unified=off",),
           expect="consumer_stride"),
    # Qwen3-Next has 2 KV heads: decode at tp 4 holds one per rank, and prefill at tp 2 would send it none
    Mutant("sglang_pd_kv_heads_no_floor",
           ("verify engine sglang --recipe qwen3-next-80b-a3b --tp 2 4 --dtype bf16 --assume page_size=64 "
            "unified=off",),
           expect="pd_head_split"),
    # prefill at tp 4 into decode at tp 2: prefill ranks 2 and 3 write a decode slot of two shards at shards 2, 3
    Mutant("sglang_pd_state_writer_unwrapped",
           ("verify engine sglang --recipe qwen3-next-80b-a3b --tp 2 4 --dtype bf16 --assume page_size=64 "
            "unified=off",),
           expect="pd_state_slice"),
    # Qwen3-Next at tp 4 on an H100 with SGLang's own speculative choice (3 steps, 4 draft tokens): 48 requests'
    # intermediate states become 144 more, gigabytes past the price (engines/sglang/sizing.py)
    Mutant("sglang_spec_state_decode_prealloc",
           ("verify engine sglang --recipe qwen3-next-80b-a3b --tp 4 --dtype auto --assume page_size=1 "
            "unified=off device=h100 spec=auto",), expect="priced_covers_allocated"),
    # the same launch: 98 more slots' intermediate states priced, none allocated
    Mutant("sglang_spec_state_priced_prealloc",
           ("verify engine sglang --recipe qwen3-next-80b-a3b --tp 4 --dtype auto --assume page_size=1 "
            "unified=off device=h100 spec=auto",), expect="priced_covers_allocated"),
    *unified_mutants.MUTANTS,
    # at page 128 a scale buffer's first axis counts pages: the pool's last page lies past the shortened end
    Mutant("sglang_mxfp8_scales_no_padding_page",
           ("verify engine sglang --recipe qwen3-next-80b-a3b --tp 2 --dtype mxfp8 --assume page_size=128",),
           expect="in_bounds"),
)
