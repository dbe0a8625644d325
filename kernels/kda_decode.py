"""One KDA (Kimi Delta Attention) decode step for one layer, with each request's state in the arena.

    kda_decode(arena, binding, layer, page_table, x, conv_weight, f, b, A_log, dt_bias,
               *, out=None, validate=True) -> o

    arena        uint8 [binding.arena_bytes]    the bound arena (any device)
    binding      kvproof.impl.packer.Binding    gives the plan's runtime page strides
    layer        int                            1-based KDA layer: fields layer.{layer}.conv_state
                                                (3·H·D, W) bf16 and layer.{layer}.recurrent_state
                                                (H, D, D) fp32, W = conv kernel − 1
    page_table   int32/int64 [R]                each request's state page: distinct, in 1..pages−1
    x            fp32 [R, 3·H·D]                this token's q|k|v projections, channel
                                                c = part·H·D + head·D + d, part 0 q, 1 k, 2 v
    conv_weight  fp32 [3·H·D, W + 1]            depthwise taps; column W multiplies x
    f            fp32 [R, H, D]                 the token's gate input
    b            fp32 [R, H]                    the token's β logits
    A_log        fp32 [H]                       per head
    dt_bias      fp32 [H, D]                    per head and key channel
    out          fp32 [R, H, D] or None         written in full, returned
    o            fp32 [R, H, D]                 H = heads per rank, D = head_dim

Per request and head (the semantics the NumPy oracle in kvproof.oracles.kda_decode restates):
  window = [conv_state[c, 0..W−1], x[c]] (oldest first); y = SiLU(window · conv_weight[c]);
  the new conv state is window[1..W] rounded to bf16 (round to nearest even); the conv output
  uses the unrounded fp32 x.
  q, k, v = the three parts of y for the head; q ← q / √(Σq² + 1e−6) · D^−½;
  k ← k / √(Σk² + 1e−6); β = σ(b); g = −5 · σ(exp(A_log) · (f + dt_bias)); α = exp(g).
  S ← Diag(α) S; S ← S + β k (v − Sᵀk)ᵀ; o = Sᵀ q. S is [K, V] = [D, D] per head, fp32.

One program handles one (request, head): the heads own disjoint conv channels and states, so no
two programs touch the same byte. Page × stride is int64. A page id outside 1..pages−1 is never
dereferenced: the program leaves the arena alone and writes NaN into that request's output, so a
bad page table cannot corrupt page 0 even with `validate=False` (the benchmarking path, which
skips the host-side check and its device sync). Two requests on one page are a race the
validation rejects and the kernel cannot detect.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kvproof.impl import faults
from kvproof.impl.packer import Binding
from kvproof.kernels.views import field_pages

faults.declare({
    "kda_conv_shift_wrong_way": "kda_decode shifts the conv state the wrong way: the new input lands oldest",
    "kda_gate_sign": "kda_decode uses g = +5·σ(...) instead of −5·σ(...), so the state grows",
    "kda_beta_no_sigmoid": "kda_decode uses the β logit as β, without the sigmoid",
    "kda_dense_state_stride": "kda_decode walks state pages by the payload size, not the plan's stride",
    "kda_no_page_guard": "kda_decode dereferences page ids outside 1..pages−1 when unvalidated",
})

LOWER_BOUND = -5.0  # g = LOWER_BOUND · σ(...): the decay per step stays within [e^−5, 1]
L2_EPS = 1e-6


@triton.jit
def _kda_decode_kernel(
    conv_ptr, rec_ptr, table_ptr, x_ptr, w_ptr, f_ptr, b_ptr, a_log_ptr, dt_bias_ptr, out_ptr,
    conv_page_stride, rec_page_stride, page_count, scale, lower_bound, eps,
    H: tl.constexpr, D: tl.constexpr, W: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_W: tl.constexpr,
    SHIFT_WRONG_WAY: tl.constexpr, BETA_SIGMOID: tl.constexpr, GUARD_PAGES: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    page = tl.load(table_ptr + r).to(tl.int64)
    valid = (page > 0) & (page < page_count)
    if not GUARD_PAGES:
        valid = page == page
    d = tl.arange(0, BLOCK_D)
    in_d = d < D
    # Not `in_d & valid`: the 3.9 interpreter turns vector & scalar bools into int32 masks.
    m = d < tl.where(valid, D, 0)

    q, k, v = _short_conv(
        conv_ptr + page * conv_page_stride, x_ptr + r * (3 * H * D), w_ptr, h * D + d, m,
        H * D, W, BLOCK_W, SHIFT_WRONG_WAY,
    )
    q = q / tl.sqrt(tl.sum(q * q, axis=0) + eps) * scale
    k = k / tl.sqrt(tl.sum(k * k, axis=0) + eps)

    beta = tl.load(b_ptr + r * H + h).to(tl.float32)
    if BETA_SIGMOID:
        beta = tl.sigmoid(beta)
    a = tl.exp(tl.load(a_log_ptr + h).to(tl.float32))
    f = tl.load(f_ptr + (r * H + h) * D + d, mask=in_d, other=0.0).to(tl.float32)
    bias = tl.load(dt_bias_ptr + h * D + d, mask=in_d, other=0.0).to(tl.float32)
    alpha = tl.exp(lower_bound * tl.sigmoid(a * (f + bias)))

    # Reductions instead of tl.dot: a matrix-vector product gains nothing from tensor cores, and
    # this keeps fp32 exact (no TF32) on the GPU and in the interpreter alike.
    s_ptrs = rec_ptr + page * rec_page_stride + h * D * D + d[:, None] * D + d[None, :]
    s_mask = m[:, None] & m[None, :]
    s = tl.load(s_ptrs, mask=s_mask, other=0.0) * alpha[:, None]
    u = v - tl.sum(s * k[:, None], axis=0)
    s = s + beta * k[:, None] * u[None, :]
    o = tl.sum(s * q[:, None], axis=0)
    tl.store(s_ptrs, s, mask=s_mask)
    o = tl.where(valid, o, float("nan"))
    tl.store(out_ptr + (r * H + h) * D + d, o, mask=in_d)


@triton.jit
def _short_conv(conv_page, x_row, w_ptr, channel, m, HD: tl.constexpr, W: tl.constexpr, BLOCK_W: tl.constexpr,
                SHIFT_WRONG_WAY: tl.constexpr):
    """SiLU of the causal conv of one head's q, k and v channels; shifts their conv state.

    One [part, channel, window] tile: parts q, k, v and a padding row; window columns are the
    W stored inputs, oldest first, then this token's input.
    """
    part = tl.arange(0, 4)[:, None]
    c = part * HD + channel[None, :]
    cm = (part < 3) & m[None, :]
    w = tl.arange(0, BLOCK_W)[None, None, :]
    c3, cm3 = c[:, :, None], cm[:, :, None]
    state = conv_page + c3 * W
    x = tl.load(x_row + c, mask=cm, other=0.0).to(tl.float32)
    window = tl.load(state + w, mask=cm3 & (w < W), other=0.0).to(tl.float32)
    window = tl.where(w == W, x[:, :, None], window)
    taps = tl.load(w_ptr + c3 * (W + 1) + w, mask=cm3 & (w <= W), other=0.0).to(tl.float32)
    y = tl.sum(window * taps, axis=2)
    y = y * tl.sigmoid(y)

    if SHIFT_WRONG_WAY:
        src, newest = w - 1, 0
    else:
        src, newest = w + 1, W - 1
    shifted = tl.load(state + src, mask=cm3 & (src >= 0) & (src < W), other=0.0)
    shifted = tl.where(w == newest, _to_bf16(x)[:, :, None], shifted)
    # Every thread has read the old state before any overwrites it (a column moves to another
    # thread's slot).
    tl.debug_barrier()
    tl.store(state + w, shifted, mask=cm3 & (w < W))
    q = tl.sum(tl.where(part == 0, y, 0.0), axis=0)
    k = tl.sum(tl.where(part == 1, y, 0.0), axis=0)
    v = tl.sum(tl.where(part == 2, y, 0.0), axis=0)
    return q, k, v


@triton.jit
def _to_bf16(x):
    """Finite fp32 → bf16, round to nearest even, by bits. A cast would do on the GPU, but the 3.9
    interpreter truncates (and its explicit rtne rounds ties up and drops the exponent carry)."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)


def kda_decode(
    arena: torch.Tensor,
    binding: Binding,
    layer: int,
    page_table: torch.Tensor,
    x: torch.Tensor,
    conv_weight: torch.Tensor,
    f: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    validate: bool = True,
) -> torch.Tensor:
    """One decode step of KDA layer `layer` for every request in `page_table`; see the module
    docstring for shapes and semantics. Updates the requests' conv and recurrent states in place."""
    conv = field_pages(arena, binding, f"layer.{layer}.conv_state")
    rec = field_pages(arena, binding, f"layer.{layer}.recurrent_state")
    pages, heads, dim, _ = rec.shape
    width = conv.shape[2]
    requests = page_table.shape[0]
    shapes = {
        "x": (x, (requests, 3 * heads * dim)),
        "conv_weight": (conv_weight, (3 * heads * dim, width + 1)),
        "f": (f, (requests, heads, dim)),
        "b": (b, (requests, heads)),
        "A_log": (A_log, (heads,)),
        "dt_bias": (dt_bias, (heads, dim)),
    }
    if out is None:
        out = torch.empty((requests, heads, dim), dtype=torch.float32, device=arena.device)
    shapes["out"] = (out, (requests, heads, dim))
    for name, (t, shape) in shapes.items():
        if tuple(t.shape) != shape or t.dtype != torch.float32 or not t.is_contiguous():
            raise ValueError(f"{name}: need contiguous float32 {shape}, got {t.dtype} {tuple(t.shape)}")
    if page_table.dtype not in (torch.int32, torch.int64) or page_table.dim() != 1:
        raise ValueError(f"page_table: need a 1-d int32/int64 tensor, got {page_table.dtype} {tuple(page_table.shape)}")
    if validate and requests:
        _check_pages(page_table, pages)
    if requests == 0:
        return out

    conv_stride, rec_stride = conv.stride(0), rec.stride(0)
    if faults.active("kda_dense_state_stride"):
        conv_stride, rec_stride = conv[0].numel(), rec[0].numel()
    _kda_decode_kernel[(requests, heads)](
        conv, rec, page_table.contiguous(), x, conv_weight, f, b, A_log, dt_bias, out,
        conv_stride, rec_stride, pages, dim**-0.5,
        -LOWER_BOUND if faults.active("kda_gate_sign") else LOWER_BOUND, L2_EPS,
        H=heads, D=dim, W=width, BLOCK_D=triton.next_power_of_2(dim), BLOCK_W=triton.next_power_of_2(width + 1),
        SHIFT_WRONG_WAY=faults.active("kda_conv_shift_wrong_way"),
        BETA_SIGMOID=not faults.active("kda_beta_no_sigmoid"),
        GUARD_PAGES=not faults.active("kda_no_page_guard"),
        num_warps=8 if dim >= 128 else 4,
    )
    return out


def _check_pages(page_table: torch.Tensor, pages: int) -> None:
    """The engine's contract: every request owns one distinct, handed-out state page."""
    lo, hi = int(page_table.min()), int(page_table.max())
    if lo < 1 or hi >= pages:
        raise ValueError(
            f"page_table: state pages must lie in 1..{pages - 1} (page 0 is the null slot), got {lo}..{hi}"
        )
    if torch.unique(page_table).numel() != page_table.numel():
        raise ValueError("page_table: two requests share a state page")
