"""The named properties of a cache plan, each defined once.

Every predicate here is written with +, *, comparisons and division or remainder by a packing,
so the same definition evaluates on Python ints (the packer's boot check, `verify check`, the
tests) and builds a z3 term (the prover). Nothing here knows how a plan was made.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

# A page id is an int32 in every engine's page table.
PAGE_ID_MAX = 2**31 - 1
# Byte offsets are int64 in every kernel's address arithmetic.
BYTES_MAX = 2**63 - 1

PROPERTIES: dict[str, str] = {
    "exact_stride": "an exact-stride field's page stride equals its payload bytes "
    "(MLA decode walks pages by an implicit payload-sized stride)",
    "padding_bound": "each group's padding (parent / K - raw) / raw stays within the bound",
    "partition": "every packing K divides the parent bytes; every plane is a multiple of its alignment; "
    "every plane slab starts on the plan's alignment",
    "no_overlap": "two distinct pages of a group never share a byte of a plane; "
    "the fields of one page never overlap",
    "field_alignment": "every field's offset in its page is a multiple of its element size "
    "(a misaligned state tensor crashes or silently misreads in the kernel)",
    "in_bounds": "every byte of every valid page lies inside its plane slab and the arena "
    "(the engine's arena_bytes when given; arena bytes <= 2^63 - 1)",
    "page_id_limit": "N * K <= 2^31 - 1 for the largest parent count N the plan allows",
    "null_page": "page 0 of every group lies in parent 0, the null parent that is never handed out",
    "kernel_page": "every kernel that reads a field's pages is handed pages of a multiple of its token block, "
    "within its tokens-per-page limit (and a power of two where its source requires one), that tile the field's "
    "page exactly (limits from the kernels' own sources)",
    "consumer_stride": "every recorded reader of a field's pages that walks them by payload, or by an item length it "
    "is given, finds page p where the plan puts it: the page's payload (its fields on the plane), or that item "
    "length, equals the stride",
    "entry_alignment": "every field that states its layout's alignments has a stride (its entry) that is a multiple "
    "of the entry alignment, and an offset and a payload (its row, so every part offset and layer stride) that are "
    "multiples of the row alignment",
    "fronts_never_cross": "in a buffer two allocators share from its two ends, the farthest an end's allocations "
    "reach, with the other end at any watermark the other's allocations reach, leaves the two ends' byte ranges "
    "disjoint (the end growing up stops at or below the end growing down)",
    "sink_page": "every end of a shared buffer keeps page 0 as a sink: its allocator never hands out a page below "
    "min_page >= 1, its page 0 lies in the sink at the bottom of the buffer, the sink inside the buffer, and its first "
    "page handed out past the sink",
}

# The longest name: the width of the property column where verdicts are listed one per line.
NAME_WIDTH = max(map(len, PROPERTIES))

# Properties over what a plan declares of its fields' readers (an engine's export names them);
# a plan that declares none holds them vacuously, and the prover says so rather than "proved".
DECLARED_BY: dict[str, str] = {"kernel_page": "kernels", "consumer_stride": "readers", "entry_alignment": "aligned",
                               "fronts_never_cross": "end", "sink_page": "end"}

# A property of an engine's memory sizing, not of a plan: checked on the bytes a sizing priced for a pool
# and the bytes the pool then allocated (SGLang's sizing, engines/sglang/sizing.py).
PRICED_COVERS_ALLOCATED = "priced_covers_allocated"
SIZING: dict[str, str] = {
    PRICED_COVERS_ALLOCATED: "a pool allocates no more bytes than the sizing priced for it (the sizing never "
    "promises memory the pools do not have), and the sizing over-prices it by at most the stated bound",
}

Num = Any  # an int or a z3 ArithRef


def _div(a: Num, b: Num) -> Num:
    """Floor division for non-negative ints and z3 Int terms alike (z3's Int `/` floors for b > 0)."""
    return a // b if isinstance(a, int) and isinstance(b, int) else a / b


def exact_stride(page_stride_bytes: Num, payload_bytes: Num) -> Any:
    return page_stride_bytes == payload_bytes


def padding_within(parent_bytes: Num, packing: Num, raw_bytes: Num, bound: Fraction) -> Any:
    """(parent / K - raw) / raw <= bound, cleared of division: parent <= (1 + bound) * K * raw."""
    return parent_bytes * bound.denominator <= (bound.denominator + bound.numerator) * packing * raw_bytes


def padding(parent_bytes: int, packing: int, raw_bytes: int) -> Fraction:
    return Fraction(parent_bytes, packing * raw_bytes) - 1


def divides(divisor: Num, value: Num) -> Any:
    return value % divisor == 0


def field_aligned(offset_bytes: Num, itemsize: Num) -> Any:
    """Item a: a field starts on a multiple of its element size within its page."""
    return divides(itemsize, offset_bytes)


def kernel_block_multiple(kernel_tokens: Num, block: Num) -> Any:
    """A kernel reads pages of `block`-token tiles: its page must be a whole number of them."""
    return divides(block, kernel_tokens)


def within_page_limit(kernel_tokens: Num, max_tokens: Num) -> Any:
    """A kernel compiled for pages of at most `max_tokens` tokens (FlashMLA: exactly 64)."""
    return kernel_tokens <= max_tokens


def power_of_two_page(kernel_tokens: int) -> bool:
    """A kernel compiled or keyed by log2 of its page (FlashInfer's trtllm-gen and XQA): a power of two.
    Concrete only: kernels are declared by engine exports, which the plan checker reads."""
    return kernel_tokens > 0 and kernel_tokens & (kernel_tokens - 1) == 0


def tiles_page(kernel_tokens: Num, page_tokens: Num) -> Any:
    """An engine that hands a kernel smaller pages than its own splits each page into kernel
    pages; they must cover it exactly, or a kernel page straddles two of the engine's pages."""
    return divides(kernel_tokens, page_tokens)


def page_ids_fit(num_parents: Num, packing: Num) -> Any:
    return num_parents * packing <= PAGE_ID_MAX


def page_offset(plane_offset_bytes: Num, plane_bytes: Num, page_stride_bytes: Num, page: Num,
                field_offset_bytes: Num) -> Num:
    """Byte offset of a field of page `page`. Page 0 is the last slot of the null parent."""
    return plane_offset_bytes + plane_bytes - page_stride_bytes + page * page_stride_bytes + field_offset_bytes


def parent_of(page: Num, packing: Num) -> Num:
    return _div(page + packing - 1, packing)


def null_page(page_start: Num, page_end: Num, plane_bytes: Num) -> Any:
    """Page 0's bytes [page_start, page_end) of a plane slab lie in parent 0, the slab's first
    plane_bytes. Page 0 is concrete in every plan, so this is only ever evaluated on ints."""
    return page_start >= 0 and page_end <= plane_bytes


def max_parents(parent_bytes: int, packings: list[int]) -> int:
    """The most parents a plan can bind: page ids stay int32 and the arena stays int64.

    The arena holds N + 1 parents (the null parent is one of them).
    """
    return min(PAGE_ID_MAX // max(packings), BYTES_MAX // parent_bytes - 1)


def priced_covers_allocated(priced_bytes: int, allocated_bytes: int, bound_bytes: int) -> bool:
    """allocated <= priced <= allocated + bound. Concrete only: a sizing is a computation, not a plan."""
    return allocated_bytes <= priced_bytes <= allocated_bytes + bound_bytes


def up_front(watermark: Num, page_bytes: Num) -> Num:
    """The byte past the last page of an end growing up: its pages are [min_page, watermark)."""
    return watermark * page_bytes


def down_front(watermark: Num, page_bytes: Num) -> Num:
    """The first byte of an end growing down: its pages are (watermark, pages)."""
    return (watermark + 1) * page_bytes


def fronts(grows: str, watermark: Num, page_bytes: Num, other_watermark: Num, other_page_bytes: Num) -> tuple[Num, Num]:
    """(the up front, the down front) of an end growing `grows` at `watermark` and the other end, growing the
    other way, at `other_watermark`."""
    if grows == "up":
        return up_front(watermark, page_bytes), down_front(other_watermark, other_page_bytes)
    return up_front(other_watermark, other_page_bytes), down_front(watermark, page_bytes)


def fronts_apart(up_front_bytes: Num, down_front_bytes: Num) -> Any:
    """The two ends' byte ranges are disjoint: the end growing up stops at or below the end growing down."""
    return up_front_bytes <= down_front_bytes


def within(end_bytes: Num, limit_bytes: Num) -> Any:
    """A byte range from 0 to `end_bytes` lies in one from 0 to `limit_bytes` (page 0 in the sink, the sink in the
    buffer); with a page's first byte for `limit_bytes`, the range ends before that page starts."""
    return end_bytes <= limit_bytes


def never_handed_out(page: Num, min_page: Num) -> Any:
    """An allocator that hands out pages from min_page on never hands out `page`."""
    return page < min_page
