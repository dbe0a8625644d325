"""Seeded bugs in SGLang's unified memory pool, each replacing one function of unified_memory_pool.py or of its
allocators for the planning call (engines/sglang/mutants.py applies them as it does the others), each killed by
one of the properties the unified pool's documents declare."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from kvproof.engines.interface import Mutant
from kvproof.engines.sglang import unified
from kvproof.impl import faults

faults.declare({
    "sglang_unified_mamba_entry_slack": "SGLang's unfused Mamba sub-pool entry keeps one float32 (4 B) of per-slot "
    "bookkeeping past the raw state, left unrounded as the unfused entry is (unified_memory_pool.py:363-366), so "
    "every slot after the first starts off the 32 B entry alignment",
    "sglang_unified_gap_rounded_up": "SGLang's available_size() gate counts the free gap between the two fronts in "
    "whole pages rounded up, not down (MultiEndedAllocator._available_tokens, allocator/unified_sub_pool.py:725-738), "
    "so an end is promised a page the gap only partly holds; the grow-down end's backstop in _extend_watermark "
    "(918-928), which rounds the other front down, lets that allocation through",
    "sglang_unified_end_opaque_lost": "SGLang's end pools report themselves transparent to the chain's frontier walk, "
    "as only an empty float middle may (MultiEndedAllocator._is_frontier_transparent, 665-668), so each end's gate "
    "and backstop look through the other end to the far end of the buffer",
    "sglang_unified_sink_smallest_entry": "SGLang's reserved sink is sized by the smallest sub-pool entry, not the "
    "largest (_reserved_floor_bytes), so the Mamba end's slot 0, where every dummy state write lands, reaches past "
    "the sink into the full-attention end's pages",
})


def _entry_slack(original: Callable[[Any], int]) -> Callable[[Any], int]:
    """MambaSubPoolSpec.entry_bytes, unfused, with 4 B more."""
    def broken(self: Any) -> int:
        return original(self) + (4 if self.draft_region is None else 0)
    return broken


def over_admitting(pages: int) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """MultiEndedAllocator._available_tokens promising `pages` more pages wherever the gap between the fronts ends
    part way into a page and the end's index space has room for them."""
    def factory(original: Callable[..., int]) -> Callable[..., int]:
        def broken(self: Any, extra_gap_bytes: int = 0) -> int:
            tokens = original(self, extra_gap_bytes)
            gap_bytes = self._current_gap_bytes() + extra_gap_bytes
            whole, part = divmod(gap_bytes, self.entry_bytes_per_page)
            room = self.num_pages - self.min_page_index - self._allocated_pages() - whole
            partial = part != 0
            return tokens + (pages * self.page_size if partial and room >= pages else 0)
        return broken
    return factory


def _opaque_lost(original: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """MultiEndedAllocator._is_frontier_transparent true for an end pool."""
    def broken(self: Any) -> bool:
        return True
    return broken


def _smallest_entry(original: Callable[..., int]) -> Callable[..., int]:
    """_reserved_floor_bytes taking min where it takes max over the sub-pools' entries."""
    def broken(sub_pool_specs: list[Any], page_size: int) -> int:
        mamba = importlib.import_module(unified.POOL).MambaSubPoolSpec
        return max([min(s.entry_bytes() for s in sub_pool_specs)]
                   + [page_size * s.entry_bytes() for s in sub_pool_specs if not isinstance(s, mamba)])
    return broken


# fault name -> (module, attribute, replacement factory), as mutants.PATCHES
PATCHES: dict[str, tuple[str, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = {
    "sglang_unified_mamba_entry_slack": (unified.POOL, "MambaSubPoolSpec.entry_bytes", _entry_slack),
    "sglang_unified_gap_rounded_up": (unified.ALLOCATOR, "MultiEndedAllocator._available_tokens",
                                      over_admitting(1)),
    "sglang_unified_end_opaque_lost": (unified.ALLOCATOR, "MultiEndedAllocator._is_frontier_transparent",
                                       _opaque_lost),
    "sglang_unified_sink_smallest_entry": (unified.POOL, "_reserved_floor_bytes", _smallest_entry),
}

# Qwen3-Next at tp 2 and one-token pages: a 38,633,472 B Mamba entry, a 12,288 B full-attention entry that
# divides it, so the fronts hold and the sink is one Mamba entry there without a fault
CHECK = "verify engine sglang --recipe qwen3-next-80b-a3b --tp 2 --dtype bf16 --assume page_size=1 unified=on"
# the same at 64-token pages: 786,432 B full-attention pages, which do not divide the Mamba entry, so a gap between
# the fronts can hold part of a page
PARTIAL = CHECK.replace("page_size=1", "page_size=64")
MUTANTS: tuple[Mutant, ...] = (
    Mutant("sglang_unified_mamba_entry_slack", (CHECK,), expect="entry_alignment"),
    Mutant("sglang_unified_gap_rounded_up", (PARTIAL,), expect="fronts_never_cross"),
    Mutant("sglang_unified_end_opaque_lost", (CHECK,), expect="fronts_never_cross"),
    Mutant("sglang_unified_sink_smallest_entry", (CHECK,), expect="sink_page"),
)
