"""`mla_decode`: one decode step of MLA attention over a paged latent cache, in absorbed form.

Per request b, head h and cached token t < seq_lens[b] (row t % 128 of page
page_table[b, t // 128]):
    s(t) = scale * (q_lat[b, h] . c_t[:512] + q_rope[b, h] . c_t[512:])
    o[b, h] = softmax(s) . c_t[:512],  lse[b, h] = log sum_t exp(s(t))  (natural log)
The softmax scale is always passed explicitly: absorbed MLA scales by the pre-absorption head
dim (192 for DeepSeek/K3), not by the 576 the kernel sees, so no default could be right.

The cache is addressed through its tensor strides, so it is read exactly as the caller lays it
out. Production MLA kernels take the dense [pages, 128, 576] view (kernels.views.latent_cache),
whose page stride is the payload; a plan whose stride differs then reads the wrong bytes.

Split-KV: each request's pages are cut into `num_splits` contiguous partitions computed in
parallel and combined with merge_state; a partition with no tokens has o = 0, lse = -inf, and
so does a request with no tokens. Everything is computed in fp32; fp32 dots use IEEE precision
(not TF32) so the GPU agrees with the interpreter and the oracle to fp32 rounding.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from kvproof.impl import faults
from kvproof.kernels.latent_format import (
    LATENT,
    PAGE_TOKENS,
    ROPE,
    cache_rows,
    page_int32,
    page_offset,
)
from kvproof.kernels.merge_state import merge_state

faults.declare({
    "mla_decode_lse_log2": "mla_decode returns its LSE in base 2 instead of the natural log",
})

BLOCK_H = 16  # tl.dot needs at least 16 rows; heads beyond the count are masked
# Tokens per step; divides the page so a step never straddles two pages. The interpreter pays
# per operation, not per element, so there a step takes a whole page.
BLOCK_N = PAGE_TOKENS if os.environ.get("TRITON_INTERPRET") == "1" else 32
LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _mla_decode_kernel(
    q_lat_ptr, q_rope_ptr, cache_ptr, table_ptr, lens_ptr, o_ptr, lse_ptr,
    scale, H, q_lat_sb, q_lat_sh, q_rope_sb, q_rope_sh, table_sb, page_stride, row_stride,
    o_ss, o_sb, o_sh, lse_ss, lse_sb,
    NUM_SPLITS: tl.constexpr, LSE_LOG2: tl.constexpr, PAGE_INT32: tl.constexpr,
    PAGE: tl.constexpr, D_LAT: tl.constexpr, D_ROPE: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    heads = tl.program_id(2) * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = heads < H
    lat = tl.arange(0, D_LAT)
    rope = tl.arange(0, D_ROPE)

    seq_len = tl.load(lens_ptr + b)
    per_split = tl.cdiv(tl.cdiv(seq_len, PAGE), NUM_SPLITS) * PAGE
    start = split * per_split
    end = tl.minimum(start + per_split, seq_len)

    q_lat = tl.load(q_lat_ptr + b * q_lat_sb + heads[:, None] * q_lat_sh + lat[None, :],
                    mask=hmask[:, None], other=0.0).to(tl.float32)
    q_rope = tl.load(q_rope_ptr + b * q_rope_sb + heads[:, None] * q_rope_sh + rope[None, :],
                     mask=hmask[:, None], other=0.0).to(tl.float32)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, D_LAT], tl.float32)
    qk_scale = scale * LOG2E  # work in base 2: exp2 is the fast path

    for tok0 in range(start, end, BLOCK_N):
        toks = tok0 + tl.arange(0, BLOCK_N)
        tmask = toks < end
        page = tl.load(table_ptr + b * table_sb + toks // PAGE, mask=tmask, other=0)
        rows = page_offset(page, page_stride, PAGE_INT32) + (toks % PAGE) * row_stride
        c_lat = tl.load(cache_ptr + rows[:, None] + lat[None, :], mask=tmask[:, None], other=0.0).to(tl.float32)
        c_rope = tl.load(cache_ptr + rows[:, None] + D_LAT + rope[None, :], mask=tmask[:, None],
                         other=0.0).to(tl.float32)
        s = tl.dot(q_lat, tl.trans(c_lat), input_precision="ieee")
        s += tl.dot(q_rope, tl.trans(c_rope), input_precision="ieee")
        s = tl.where(tmask[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, c_lat, input_precision="ieee")
        m_i = m_new

    empty = l_i == 0.0
    o = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse2 = m_i + tl.log2(tl.where(empty, 1.0, l_i))
    lse = lse2 if LSE_LOG2 else lse2 * LN2
    lse = tl.where(empty, float("-inf"), lse)
    out = split * o_ss + b * o_sb + heads * o_sh
    tl.store(o_ptr + out[:, None] + lat[None, :], o, mask=hmask[:, None])
    tl.store(lse_ptr + split * lse_ss + b * lse_sb + heads, lse, mask=hmask)


def mla_decode(
    q_lat: torch.Tensor,
    q_rope: torch.Tensor,
    cache: torch.Tensor,
    page_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    *,
    num_splits: int = 1,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q_lat [B, H, 512], q_rope [B, H, 64] (fp32 or bf16, last dim contiguous); cache: uint8
    (fp8 e4m3) or bfloat16, [pages, 128, 576] or [pages, 128, 1, 576]; page_table int32
    [B, max_pages]; seq_lens int32 [B]. Returns (o fp32 [B, H, 512], lse fp32 [B, H]), written
    into `out` when given.
    """
    rows, fp8 = cache_rows(cache)
    if fp8:
        rows = rows.view(torch.float8_e4m3fn)
    batch, heads, _ = q_lat.shape
    if q_lat.shape != (batch, heads, LATENT) or q_rope.shape != (batch, heads, ROPE):
        raise ValueError(f"q_lat must be [B, H, {LATENT}] and q_rope [B, H, {ROPE}]")
    if q_lat.stride(2) != 1 or q_rope.stride(2) != 1 or page_table.stride(1) != 1:
        raise ValueError("q_lat, q_rope and page_table need a contiguous last dimension")
    if seq_lens.shape != (batch,) or page_table.shape[0] != batch or num_splits < 1:
        raise ValueError("seq_lens and page_table need one row per request; num_splits >= 1")
    o, lse = out if out is not None else (
        torch.empty(batch, heads, LATENT, dtype=torch.float32, device=q_lat.device),
        torch.empty(batch, heads, dtype=torch.float32, device=q_lat.device),
    )
    if o.shape != (batch, heads, LATENT) or lse.shape != (batch, heads):
        raise ValueError("out must be (o [B, H, 512], lse [B, H])")
    if batch == 0 or heads == 0:
        return o, lse
    if num_splits == 1:
        part_o, part_lse = o, lse
        o_ss, lse_ss = 0, 0
    else:
        part_o = torch.empty(num_splits, batch, heads, LATENT, dtype=torch.float32, device=q_lat.device)
        part_lse = torch.empty(num_splits, batch, heads, dtype=torch.float32, device=q_lat.device)
        o_ss, lse_ss = part_o.stride(0), part_lse.stride(0)
    o_sb, o_sh = part_o.stride(-3), part_o.stride(-2)
    lse_sb = part_lse.stride(-2)
    if part_o.stride(-1) != 1 or part_lse.stride(-1) != 1:
        raise ValueError("out tensors need a contiguous last dimension")
    _mla_decode_kernel[(batch, num_splits, triton.cdiv(heads, BLOCK_H))](
        q_lat, q_rope, rows, page_table, seq_lens, part_o, part_lse,
        float(scale), heads, q_lat.stride(0), q_lat.stride(1), q_rope.stride(0), q_rope.stride(1),
        page_table.stride(0), rows.stride(0), rows.stride(1),
        o_ss, o_sb, o_sh, lse_ss, lse_sb,
        NUM_SPLITS=num_splits, LSE_LOG2=faults.active("mla_decode_lse_log2"),
        PAGE_INT32=page_int32(), PAGE=PAGE_TOKENS, D_LAT=LATENT, D_ROPE=ROPE,
        BLOCK_H=BLOCK_H, BLOCK_N=BLOCK_N, num_warps=8,
    )
    if num_splits > 1:
        merge_state(part_o[0], part_lse[0], part_o[1], part_lse[1], out=(o, lse))
        for i in range(2, num_splits):
            merge_state(o, lse, part_o[i], part_lse[i], out=(o, lse))
    return o, lse
