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
    "stride_in_elements": "a field's page stride is computed in elements, not bytes",
    "allocator_hands_out_null_page": "the allocator numbers a parent's pages from (P-1)K, one too low, so parent 1 hands out page 0",
    "allocator_shares_parent": "the allocator takes a parent without removing it from the free list, so two groups own it",
    "allocator_double_free_parent": "freeing several pages of one parent returns the parent to the free list once per page",
    "allocator_reuses_live_page": "the allocator leaves a handed-out page on its free list, so it is handed out again while live",
    "arena_dense_page_stride": "the arena's field views walk pages by payload bytes instead of the plan's stride",
    "capacity_largest_packing": "token capacity uses the largest packing of any group, state groups included",
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
