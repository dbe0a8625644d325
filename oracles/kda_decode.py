"""Float64 NumPy oracle of one KDA decode step (kvproof.kernels.kda_decode restated plainly).

The oracle knows nothing about arenas or plans: it takes the states of the requests the step
touches, gathered by the caller, and returns the new states. Everything is float64 except the
one rounding the cache itself performs: the conv state is stored as bf16, so the new state is
the shifted window rounded to bf16 (round to nearest even from the fp32 input), while the conv
output uses the unrounded input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LOWER_BOUND = -5.0
L2_EPS = 1e-6


@dataclass(frozen=True)
class KdaStep:
    o: np.ndarray  # [R, H, D]
    conv_state: np.ndarray  # [R, 3·H·D, W], values exactly representable in bf16
    recurrent_state: np.ndarray  # [R, H, D, D], S[k, v] per head


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (nearest, ties to even), returned as float64. Finite input only."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def gate(f: np.ndarray, A_log: np.ndarray, dt_bias: np.ndarray) -> np.ndarray:
    """Log-decay g[r, h, d] = −5 · σ(exp(A_log[h]) · (f[r, h, d] + dt_bias[h, d]))."""
    return LOWER_BOUND * sigmoid(np.exp(A_log)[:, None] * (f + dt_bias))


def l2_normalize(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).sum(axis=-1, keepdims=True) + L2_EPS)


def short_conv(conv_state: np.ndarray, x: np.ndarray, conv_weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SiLU(causal depthwise conv) of this token, and the conv state shifted by one column.

    conv_state [R, C, W] holds each channel's last W inputs, oldest first; conv_weight [C, W + 1].
    """
    window = np.concatenate([conv_state, x[:, :, None]], axis=2)
    y = (window * conv_weight[None]).sum(axis=2)
    return y * sigmoid(y), round_bf16(window[:, :, 1:])


def recurrent_step(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, state: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The delta rule with per-channel decay on prepared inputs (q already scaled).

    q, k, v, g [R, H, D]; beta [R, H]; state [R, H, D, D]. Returns (o, new state).
    """
    s = state * np.exp(g)[..., :, None]
    u = v - np.einsum("rhkv,rhk->rhv", s, k)
    s = s + beta[..., None, None] * k[..., :, None] * u[..., None, :]
    return np.einsum("rhkv,rhk->rhv", s, q), s


def kda_decode(
    conv_state: np.ndarray,
    recurrent_state: np.ndarray,
    x: np.ndarray,
    conv_weight: np.ndarray,
    f: np.ndarray,
    b: np.ndarray,
    A_log: np.ndarray,
    dt_bias: np.ndarray,
) -> KdaStep:
    """One decode step for R requests. Shapes as the kernel's, with the arena and page table
    replaced by the gathered states: conv_state [R, 3·H·D, W], recurrent_state [R, H, D, D]."""
    conv_state, recurrent_state, x, conv_weight, f, b, A_log, dt_bias = (
        np.asarray(a, dtype=np.float64) for a in (conv_state, recurrent_state, x, conv_weight, f, b, A_log, dt_bias)
    )
    requests, heads, dim = f.shape
    y, new_conv = short_conv(conv_state, x, conv_weight)
    q, k, v = y.reshape(requests, 3, heads, dim).transpose(1, 0, 2, 3)
    q = l2_normalize(q) * dim**-0.5
    k = l2_normalize(k)
    o, new_state = recurrent_step(q, k, v, gate(f, A_log, dt_bias), sigmoid(b), recurrent_state)
    return KdaStep(o, new_conv, new_state)
