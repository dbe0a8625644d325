"""Float64 oracle of kernels.merge_state, with the same empty-partition convention:
a side with s = -inf contributes nothing (its v is ignored); both empty -> v = 0, s = -inf."""

from __future__ import annotations

import numpy as np


def merge_state(
    v_a: np.ndarray,
    s_a: np.ndarray,
    v_b: np.ndarray,
    s_b: np.ndarray,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    v_a, v_b = np.asarray(v_a, np.float64), np.asarray(v_b, np.float64)
    s_a, s_b = np.asarray(s_a, np.float64), np.asarray(s_b, np.float64)
    m = np.maximum(s_a, s_b)
    empty = m == -np.inf
    m = np.where(empty, 0.0, m)
    w_a, w_b = np.exp(s_a - m), np.exp(s_b - m)
    total = np.where(empty, 1.0, w_a + w_b)
    part_a = np.where((w_a > 0)[..., None], w_a[..., None] * v_a, 0.0)
    part_b = np.where((w_b > 0)[..., None], w_b[..., None] * v_b, 0.0)
    v = (part_a + part_b) / total[..., None]
    with np.errstate(divide="ignore"):
        s = np.where(empty, -np.inf, m + np.log(total))
    if out is None:
        return v, s
    out[0][...], out[1][...] = v, s
    return out
