"""`store_latent`: scatter new tokens' 576-wide latent rows into MLA cache pages.

Token t of request r = seq_ids[t] at position p = positions[t] goes to row p % 128 of page
page_table[r, p // 128]. Values are sanitized before they are rounded to the cache dtype:
NaN -> 0, and +-inf (or anything beyond the dtype's range) -> +- its largest finite value, so
one bad activation cannot poison every later attention over the page. fp8 is a direct e4m3
cast with no scale.

Padding tokens (position < 0) and tokens whose page table entry is 0 are skipped: page 0 is the
null page, never handed out, and never written.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kvproof.impl import faults
from kvproof.kernels.latent_format import (
    BF16_MAX,
    FP8_MAX,
    PAGE_TOKENS,
    STORAGE,
    WIDTH,
    cache_rows,
    encode_bf16,
    encode_fp8,
    page_int32,
    page_offset,
)

faults.declare({
    "store_latent_no_sanitize": "store_latent writes NaN and +-inf latents unsanitized",
})


@triton.jit
def _store_latent_kernel(
    cache_ptr, latent_ptr, table_ptr, seq_ptr, pos_ptr,
    latent_stride, table_stride, page_stride, row_stride,
    FP8: tl.constexpr, SANITIZE: tl.constexpr, PAGE_INT32: tl.constexpr,
    MAX_VALUE: tl.constexpr, PAGE: tl.constexpr, WIDTH: tl.constexpr, BLOCK: tl.constexpr,
):
    t = tl.program_id(0)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    seq = tl.load(seq_ptr + t).to(tl.int64)
    page = tl.load(table_ptr + seq * table_stride + pos // PAGE, mask=pos >= 0, other=0)
    cols = tl.arange(0, BLOCK)
    # Broadcast the page id before comparing: the interpreter mistypes vector & scalar-bool.
    page = tl.zeros([BLOCK], tl.int64) + page
    mask = (cols < WIDTH) & (page > 0)
    x = tl.load(latent_ptr + t.to(tl.int64) * latent_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if SANITIZE:
        x = tl.where(x != x, 0.0, x)
        x = tl.minimum(tl.maximum(x, -MAX_VALUE), MAX_VALUE)
    raw = encode_fp8(x) if FP8 else encode_bf16(x)
    row = page_offset(page, page_stride, PAGE_INT32) + (pos % PAGE) * row_stride
    tl.store(cache_ptr + row + cols, raw, mask=mask)


def store_latent(
    cache: torch.Tensor,
    latent: torch.Tensor,
    page_table: torch.Tensor,
    seq_ids: torch.Tensor,
    positions: torch.Tensor,
    cache_dtype: str,
) -> None:
    """Write latent [tokens, 576] (fp32 or bf16) into `cache` in place.

    cache: one layer's latent cache, [pages, 128, 576] or the field view [pages, 128, 1, 576],
    any page stride; uint8 for cache_dtype "fp8", bfloat16 for "bf16". page_table: int32
    [requests, max_pages]. seq_ids, positions: int32 or int64 [tokens]. Two tokens must not
    address the same row.
    """
    if cache_dtype not in STORAGE or cache.dtype != STORAGE[cache_dtype]:
        raise ValueError(f"cache_dtype {cache_dtype!r} does not match a {cache.dtype} cache")
    rows, fp8 = cache_rows(cache)
    raw = rows if fp8 else rows.view(torch.int16)  # written as bit patterns
    tokens = latent.shape[0]
    if latent.shape != (tokens, WIDTH) or latent.stride(1) != 1:
        raise ValueError(f"latent must be [tokens, {WIDTH}] with contiguous rows, got {tuple(latent.shape)}")
    if seq_ids.shape != (tokens,) or positions.shape != (tokens,) or page_table.stride(1) != 1:
        raise ValueError("seq_ids and positions need one entry per token; page_table rows contiguous")
    if tokens == 0:
        return
    _store_latent_kernel[(tokens,)](
        raw, latent, page_table, seq_ids, positions,
        latent.stride(0), page_table.stride(0), raw.stride(0), raw.stride(1),
        FP8=fp8, SANITIZE=not faults.active("store_latent_no_sanitize"), PAGE_INT32=page_int32(),
        MAX_VALUE=FP8_MAX if fp8 else BF16_MAX, PAGE=PAGE_TOKENS, WIDTH=WIDTH,
        BLOCK=triton.next_power_of_2(WIDTH),
    )
