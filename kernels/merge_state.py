"""`merge_state`: combine two attention partial results over disjoint key sets.

For each token and head, with m = max(s_a, s_b) and w = exp(s - m):
v = (w_a v_a + w_b v_b) / (w_a + w_b) and s = m + log(w_a + w_b), s being the natural-log
LSE of each partial.

Empty partitions: a side with s = -inf holds no keys. It gets weight 0 and its v is never
read into the result, so the other side passes through exactly (even if the empty side's v
is garbage); both sides empty give v = 0, s = -inf (an empty partition again).

Each program takes a bounded block of heads (BLOCK_H) of one token, 16 threads per head, so the
launch never depends on the head count: one block holding every head breaks past 64 heads
(96 x 16 threads > 1024, the crash an engine once shipped).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kvproof.impl import faults

faults.declare({
    "merge_state_single_block": "merge_state puts every head of a token in one block (fails at 96 heads)",
    "merge_state_empty_nan": "merge_state has no guard for two empty partitions (0/0 = NaN)",
})

BLOCK_H = 16
BLOCK_D = 128
# A CUDA thread block holds at most this many threads.
MAX_THREADS = 1024
THREADS_PER_HEAD = 16


@dataclass(frozen=True)
class Launch:
    """How one token's heads are covered: `programs` blocks of `block_h` heads each."""

    heads: int
    programs: int
    block_h: int

    @property
    def threads(self) -> int:
        return min(self.heads, self.block_h) * THREADS_PER_HEAD

    @property
    def num_warps(self) -> int:
        return triton.next_power_of_2(triton.cdiv(self.threads, 32))


def launch_config(heads: int) -> Launch:
    block_h = BLOCK_H
    if faults.active("merge_state_single_block"):
        block_h = triton.next_power_of_2(heads)  # the historical launch: one block holds every head
    return Launch(heads, triton.cdiv(heads, block_h), block_h)


@triton.jit
def _merge_state_kernel(
    va_ptr, sa_ptr, vb_ptr, sb_ptr, vo_ptr, so_ptr, H,
    D: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, EMPTY_GUARD: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = heads < H
    s_off = t * H + heads
    s_a = tl.load(sa_ptr + s_off, mask=hmask, other=float("-inf"))
    s_b = tl.load(sb_ptr + s_off, mask=hmask, other=float("-inf"))
    m = tl.maximum(s_a, s_b)
    empty = m == float("-inf")
    if EMPTY_GUARD:
        m = tl.where(empty, 0.0, m)
    w_a = tl.exp(s_a - m)
    w_b = tl.exp(s_b - m)
    total = w_a + w_b
    if EMPTY_GUARD:
        total = tl.where(empty, 1.0, total)
    s = m + tl.log(total)
    if EMPTY_GUARD:
        s = tl.where(empty, float("-inf"), s)
    tl.store(so_ptr + s_off, s, mask=hmask)
    row = (s_off * D)[:, None]
    for d0 in tl.static_range(0, D, BLOCK_D):
        cols = d0 + tl.arange(0, BLOCK_D)[None, :]
        mask = hmask[:, None] & (cols < D)
        v_a = tl.load(va_ptr + row + cols, mask=mask, other=0.0)
        v_b = tl.load(vb_ptr + row + cols, mask=mask, other=0.0)
        # An empty side's v is not data: select it away rather than multiply it by 0 (NaN * 0).
        if EMPTY_GUARD:
            v_a = tl.where((w_a > 0)[:, None], w_a[:, None] * v_a, 0.0)
            v_b = tl.where((w_b > 0)[:, None], w_b[:, None] * v_b, 0.0)
        else:
            v_a = w_a[:, None] * v_a
            v_b = w_b[:, None] * v_b
        tl.store(vo_ptr + row + cols, (v_a + v_b) / total[:, None], mask=mask)


def merge_state(
    v_a: torch.Tensor,
    s_a: torch.Tensor,
    v_b: torch.Tensor,
    s_b: torch.Tensor,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """v: contiguous fp32 [tokens, heads, D]; s: contiguous fp32 [tokens, heads] (natural-log LSE).

    `out` = (v, s) to write into; either may be the corresponding input (in-place merge).
    """
    tokens, heads, d = v_a.shape
    for name, x, shape in (("v_a", v_a, (tokens, heads, d)), ("v_b", v_b, (tokens, heads, d)),
                           ("s_a", s_a, (tokens, heads)), ("s_b", s_b, (tokens, heads))):
        if tuple(x.shape) != shape or x.dtype != torch.float32 or not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous float32 {shape}, got {x.dtype} {tuple(x.shape)}")
    v_out, s_out = out if out is not None else (torch.empty_like(v_a), torch.empty_like(s_a))
    if v_out.shape != v_a.shape or s_out.shape != s_a.shape or not (v_out.is_contiguous() and s_out.is_contiguous()):
        raise ValueError("out must match the inputs' shapes and be contiguous")
    if not (tokens and heads):
        return v_out, s_out
    launch = launch_config(heads)
    if launch.threads > MAX_THREADS:
        # What a CUDA launch of this block would report; the CPU interpreter has no such limit.
        raise RuntimeError(
            f"too many resources requested for launch: {launch.threads} threads > {MAX_THREADS} per block"
        )
    _merge_state_kernel[(tokens, launch.programs)](
        v_a, s_a, v_b, s_b, v_out, s_out, heads,
        D=d, BLOCK_H=launch.block_h, BLOCK_D=min(BLOCK_D, triton.next_power_of_2(d)),
        EMPTY_GUARD=not faults.active("merge_state_empty_nan"), num_warps=launch.num_warps,
    )
    return v_out, s_out
