"""How the MLA latent cache is laid out and encoded, shared by the kernels that write and read it.

A latent cache is [pages, 128, 576]: 128 token rows per page, 512 latent values then 64 rope
values per row; fp8 e4m3 caches are stored as raw bytes (uint8), bf16 caches as bf16.

Writing rounds fp32 to the cache dtype with integer bit arithmetic on the raw patterns (uint8,
int16), because Triton's CPU interpreter rounds fp32 -> fp8 and fp32 -> bf16 casts wrongly and a
bit-exact encoding behaves the same on every backend. Reading upcasts with the ordinary
conversion, which is exact everywhere except that the interpreter decodes the two fp8 NaN bytes
(0x7F, 0xFF) as +-480; the encoder never produces them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kvproof.impl import faults

faults.declare({
    "mla_page_stride_int32": "the latent kernels compute page x stride in int32 (wraps past 2^31)",
})

PAGE_TOKENS = 128
LATENT = 512
ROPE = 64
WIDTH = LATENT + ROPE
# Largest finite value of each cache dtype: where +-inf (and anything beyond) saturates.
FP8_MAX = 448.0
BF16_MAX = float(torch.finfo(torch.bfloat16).max)
STORAGE = {"fp8": torch.uint8, "bf16": torch.bfloat16}


def cache_rows(cache: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """The cache as the kernels address it, [pages, 128, 576], and whether it is fp8.

    Accepts the dense view ([pages, 128, 576], kernels.views.latent_cache) or a field view
    ([pages, 128, 1, 576], kernels.views.field_pages) with any page stride.
    """
    if cache.dim() == 4 and cache.shape[2] == 1:
        cache = cache.squeeze(2)
    if cache.dim() != 3 or tuple(cache.shape[1:]) != (PAGE_TOKENS, WIDTH) or cache.stride(2) != 1:
        raise ValueError(f"latent cache must be [pages, {PAGE_TOKENS}, {WIDTH}] with contiguous rows")
    if cache.dtype not in (torch.uint8, torch.bfloat16):
        raise ValueError(f"latent cache dtype {cache.dtype} is neither uint8 (fp8 e4m3) nor bfloat16")
    return cache, cache.dtype == torch.uint8


def page_int32() -> bool:
    return faults.active("mla_page_stride_int32")


@triton.jit
def page_offset(page, page_stride, INT32: tl.constexpr):
    """Element offset of a page. int64: page ids reach 2^31 - 1 and strides 10^5 elements."""
    offset = page.to(tl.int64) * page_stride
    if INT32:
        offset = (page.to(tl.int32) * page_stride.to(tl.int32)).to(tl.int64)
    return offset


@triton.jit
def encode_fp8(x):
    """fp32 in [-448, 448] -> e4m3fn byte, round to nearest even."""
    neg = x.to(tl.int32, bitcast=True) < 0
    a = tl.abs(x)
    bits = a.to(tl.int32, bitcast=True)
    # Normal range: keep 3 of fp32's 23 mantissa bits, rebias the exponent from 127 to 7.
    r = (bits + 0x7FFFF + ((bits >> 20) & 1)) & 0x7FF00000
    normal = (((r >> 23) - 120) << 3) | ((r >> 20) & 7)
    # Subnormal range (|x| < 2^-6): multiples of 2^-9; the byte is the multiple (8 = 2^-6).
    y = a * 512.0
    q = y.to(tl.int32)
    frac = y - q.to(tl.float32)
    q += ((frac > 0.5) | ((frac == 0.5) & ((q & 1) == 1))).to(tl.int32)
    byte = tl.where(a < 0.015625, q, normal)
    return (byte | tl.where(neg, 0x80, 0)).to(tl.uint8)


@triton.jit
def encode_bf16(x):
    """finite fp32 -> bf16 bit pattern (int16), round to nearest even."""
    bits = x.to(tl.int32, bitcast=True)
    r = bits + 0x7FFF + ((bits >> 16) & 1)
    return (r >> 16).to(tl.int16)


@triton.jit
def _page_offsets_kernel(pages_ptr, out_ptr, n, page_stride, INT32: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    page = tl.load(pages_ptr + i, mask=mask, other=0)
    tl.store(out_ptr + i, page_offset(page, page_stride, INT32).to(tl.int64), mask=mask)


def page_offsets(pages: torch.Tensor, page_stride: int) -> torch.Tensor:
    """Element offsets of int32 page ids, computed by the kernels' own address helper (so the
    address arithmetic can be tested at page ids whose arena would not fit in memory)."""
    out = torch.empty(pages.shape, dtype=torch.int64, device=pages.device)
    block = 128
    _page_offsets_kernel[(triton.cdiv(pages.numel(), block),)](
        pages, out, pages.numel(), page_stride, INT32=page_int32(), BLOCK=block
    )
    return out
