"""Seeded bugs in SGLang's unified memory pool, each replacing one function of unified_memory_pool.py for the
planning call (engines/sglang/mutants.py applies them as it does the others), each killed by one of the
properties the unified pool's documents declare."""

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
    "sglang_unified_full_entry_overrounded": "SGLang's MHA sub-pool rounds its host bytes plus one up to the 32 B "
    "entry alignment, an entry 32 B too large wherever the bytes were already aligned: its real effect is 32 B "
    "wasted per entry. It is killed only through the grow-down end's backstop in _extend_watermark "
    "(allocator/unified_sub_pool.py:918-928), which counts the other front in whole pages of its own, rounded down: "
    "the pages no longer tile the Mamba end's, so the backstop admits a crossing the available_size() gate "
    "(725-738) keeps any allocation from reaching",
    "sglang_unified_sink_smallest_entry": "SGLang's reserved sink is sized by the smallest sub-pool entry, not the "
    "largest (_reserved_floor_bytes), so the Mamba end's slot 0, where every dummy state write lands, reaches past "
    "the sink into the full-attention end's pages",
})


def _entry_slack(original: Callable[[Any], int]) -> Callable[[Any], int]:
    """MambaSubPoolSpec.entry_bytes, unfused, with 4 B more."""
    def broken(self: Any) -> int:
        return original(self) + (4 if self.draft_region is None else 0)
    return broken


def _overrounded(original: Callable[[Any], int]) -> Callable[[Any], int]:
    """MHASubPoolSpec.entry_bytes, unfused, as align_entry_bytes(host + 1) (token_major.py's rounding)."""
    def broken(self: Any) -> int:
        if self.draft_region is not None:
            return original(self)
        return int(importlib.import_module(unified.POOL).align_entry_bytes(self.host_entry_bytes() + 1))
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
    "sglang_unified_full_entry_overrounded": (unified.POOL, "MHASubPoolSpec.entry_bytes", _overrounded),
    "sglang_unified_sink_smallest_entry": (unified.POOL, "_reserved_floor_bytes", _smallest_entry),
}

# Qwen3-Next at tp 2 and one-token pages: a 38,633,472 B Mamba entry, a 12,288 B full-attention entry that
# divides it, so the fronts hold and the sink is one Mamba entry there without a fault
CHECK = "verify engine sglang --recipe qwen3-next-80b-a3b --tp 2 --dtype bf16 --assume page_size=1 unified=on"
MUTANTS: tuple[Mutant, ...] = (
    Mutant("sglang_unified_mamba_entry_slack", (CHECK,), expect="entry_alignment"),
    Mutant("sglang_unified_full_entry_overrounded", (CHECK,), expect="fronts_never_cross"),
    Mutant("sglang_unified_sink_smallest_entry", (CHECK,), expect="sink_page"),
)
